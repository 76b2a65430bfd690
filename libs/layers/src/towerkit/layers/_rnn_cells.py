"""Recurrent cells (BasicRNNCell, GRUCell, BasicLSTMCell, LSTMCell) with TensorFlow 1's variables."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from towerkit.layers._rnn_nest import LSTMStateTuple, describe, flatten, pack_as, same_structure
from towerkit.towers.compat import tf1


def cell_label(cell: Any) -> str:
    """How error messages name `cell`: its class and, once called, its variable scope."""
    scope = getattr(cell, "_scope", None)
    where = f" {scope.name!r}" if scope is not None else ""
    return f"{type(cell).__name__}{where}"


def static_shape(t: Any) -> str:
    """The static shape of a tensor as ``[3, ?, 4]`` (for error messages)."""
    if t.shape.rank is None:
        return "<unknown rank>"
    return "[" + ", ".join("?" if d is None else str(d) for d in t.shape.as_list()) + "]"


def check_state(cell: Any, state: Any, what: str = "state", batch: int | None = None) -> None:
    """Raise unless `state` nests as ``cell.state_size`` with matching last dimensions.

    With `batch`, each tensor's first dimension, when known, must be it too.

    Raises:
        ValueError: the structure or a size differs; the message names the cell and
            shows the expected sizes and the shapes received.
    """
    expected = cell.state_size
    sizes = flatten(expected)
    leaves = flatten(state)
    ok = same_structure(expected, state) or (len(sizes) == len(leaves) == 1)
    rows_wrong = False  # every size fits, but a tensor's rows are not the inputs' batch
    if ok:
        for size, t in zip(sizes, leaves, strict=True):
            shape = getattr(t, "shape", None)
            if shape is None or shape.rank is None:
                continue
            dims = shape.as_list()
            if len(dims) != 2 or dims[1] not in (None, size):
                ok = rows_wrong = False
                break
            if batch is not None and dims[0] not in (None, batch):
                ok, rows_wrong = False, True
    if not ok:
        rows = str(batch) if rows_wrong else "batch"
        whose = " (the inputs' batch size)" if rows_wrong else ""
        msg = (
            f"{cell_label(cell)}: the {what} must be shaped "
            f"{describe(expected, lambda n: f'[{rows}, {n}]')}{whose}; got "
            f"{describe(state, lambda t: static_shape(t) if hasattr(t, 'shape') else repr(t))}"
        )
        raise ValueError(msg)


class RNNCell:
    """The base of the recurrent cells: ``output, new_state = cell(inputs, state)``.

    A cell creates its variables on its first call, in a variable scope named after
    the cell (``lstm_cell``, made unique in the enclosing scope as TensorFlow 1 does,
    or ``name``), and reuses them on every later call. Subclasses give `state_size`,
    `output_size` and `call`.

    .. versionadded:: 0.2
    """

    default_name = "rnn_cell"

    def __init__(
        self, name: str | None = None, dtype: Any = None, reuse: bool | None = None
    ) -> None:
        self._name = name
        self._dtype = dtype
        self._reuse = reuse
        self._scope: Any = None
        self._built = False
        self._variables: list[Any] = []

    @property
    def state_size(self) -> Any:
        """The size (or nested sizes) of the state, without the batch axis."""
        raise NotImplementedError  # abstract: each cell defines it

    @property
    def output_size(self) -> Any:
        """The size of the output, without the batch axis."""
        raise NotImplementedError  # abstract: each cell defines it

    @property
    def name(self) -> str | None:
        """The full name of the cell's variable scope once called, else the name given."""
        return self._scope.name if self._scope is not None else self._name

    @property
    def variables(self) -> list[Any]:
        """The variables the cell created or reused on its first call."""
        return list(self._variables)

    @property
    def trainable_variables(self) -> list[Any]:
        """The trainable ones of `variables`."""
        trainable = set(tf1.trainable_variables())
        return [v for v in self._variables if v in trainable]

    def zero_state(self, batch_size: Any, dtype: Any) -> Any:
        """A state of zeros for `batch_size` examples (an int or a scalar tensor)."""
        with tf1.name_scope(f"{type(self).__name__}ZeroState"):
            return zeros_like_sizes(self.state_size, batch_size, dtype)

    def get_variable(self, name: str, shape: list[int], **kwargs: Any) -> Any:
        """A variable of the cell (``tf.compat.v1.get_variable`` in the cell's scope)."""
        v = tf1.get_variable(name, shape=shape, **kwargs)
        self._variables.append(v)
        return v

    def build(self, input_depth: int, dtype: Any) -> None:
        """Create the variables for inputs of `input_depth` features (once)."""

    def call(self, inputs: Any, state: Any) -> tuple[Any, Any]:
        """One step: the output and the new state."""
        raise NotImplementedError  # abstract: each cell defines it

    def _check_inputs(self, inputs: Any) -> int:
        if inputs.shape.rank != 2 or inputs.shape.as_list()[-1] is None:
            msg = (
                f"{cell_label(self)}: the inputs of one step must be [batch, depth] "
                f"with a known depth; got shape {static_shape(inputs)}"
            )
            raise ValueError(msg)
        return int(inputs.shape.as_list()[-1])

    def _capture_scope(self, scope: Any) -> None:
        if self._scope is not None:
            return
        base = self._name or self.default_name
        if self._reuse:
            with tf1.variable_scope(scope if scope is not None else base) as captured:
                self._scope = captured
        else:
            with tf1.variable_scope(scope, default_name=base) as captured:
                self._scope = captured

    @contextlib.contextmanager
    def scoped(self, scope: Any = None) -> Iterator[None]:
        """Enter the cell's variable scope (made on the first use, as a call makes it).

        Variables made inside are the cell's own; once the cell is built, they are
        reused.

        .. versionadded:: 0.2
        """
        self._capture_scope(scope)
        reuse = True if self._built else self._reuse
        short = self._scope.name.split("/")[-1]
        with (
            tf1.variable_scope(self._scope, reuse=reuse, auxiliary_name_scope=False),
            tf1.name_scope(short),
        ):
            yield

    def ensure_built(self, input_depth: int, dtype: Any, scope: Any = None) -> None:
        """Create the variables as the first call would, without running a step.

        .. versionadded:: 0.2
        """
        with self.scoped(scope):
            if not self._built:
                self.build(input_depth, dtype)
                self._built = True

    def __call__(self, inputs: Any, state: Any, scope: Any = None) -> tuple[Any, Any]:
        """Run one step in the cell's variable scope (created on the first call).

        Raises:
            ValueError: `inputs` is not ``[batch, depth]``, or `state` is not shaped
                as `state_size`.
        """
        inputs = tf1.convert_to_tensor(inputs)
        self._capture_scope(scope)
        depth = self._check_inputs(inputs)
        check_state(self, state)
        with self.scoped(scope):
            if not self._built:
                self.build(depth, self._dtype or inputs.dtype.base_dtype)
                self._built = True
            return self.call(inputs, state)


def zeros_like_sizes(sizes: Any, batch_size: Any, dtype: Any) -> Any:
    """Zeros ``[batch_size, size]`` for each size of the nested `sizes`."""
    static = batch_size if isinstance(batch_size, int) else tf1.get_static_value(batch_size)

    def zeros(size: int) -> Any:
        z = tf1.zeros(tf1.stack([batch_size, size]), dtype=dtype)
        z.set_shape([None if static is None else int(static), size])
        return z

    return pack_as(sizes, [zeros(s) for s in flatten(sizes)])


def _positive_units(cell: str, num_units: Any, what: str = "num_units") -> int:
    if isinstance(num_units, bool) or not isinstance(num_units, int) or num_units <= 0:
        msg = f"{cell}: {what!r} must be a positive int; got {num_units!r}"
        raise ValueError(msg)
    return num_units


class BasicRNNCell(RNNCell):
    """``h' = activation(W [x, h] + b)``: variables ``basic_rnn_cell/kernel`` and ``bias``.

    The kernel has shape ``[depth + num_units, num_units]`` (the default initializer
    of ``get_variable``, Glorot uniform), the bias ``[num_units]`` (zeros).

    .. versionadded:: 0.2
    """

    default_name = "basic_rnn_cell"

    def __init__(
        self,
        num_units: int,
        activation: Callable[[Any], Any] | None = None,
        reuse: bool | None = None,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype, reuse=reuse)
        self._num_units = _positive_units(type(self).__name__, num_units)
        self._activation = activation or tf1.tanh

    @property
    def state_size(self) -> int:
        return self._num_units

    @property
    def output_size(self) -> int:
        return self._num_units

    def build(self, input_depth: int, dtype: Any) -> None:
        n = self._num_units
        self._kernel = self.get_variable("kernel", [input_depth + n, n], dtype=dtype)
        self._bias = self.get_variable(
            "bias", [n], dtype=dtype, initializer=tf1.zeros_initializer()
        )

    def call(self, inputs: Any, state: Any) -> tuple[Any, Any]:
        x = tf1.matmul(tf1.concat([inputs, state], 1), self._kernel)
        h = self._activation(tf1.nn.bias_add(x, self._bias))
        return h, h


class GRUCell(RNNCell):
    """A gated recurrent unit, gates ordered ``r, u``, as TensorFlow 1's ``GRUCell``.

    Variables ``gru_cell/gates/kernel`` ``[depth + n, 2n]`` and ``gates/bias`` (ones
    unless `bias_initializer`), ``gru_cell/candidate/kernel`` ``[depth + n, n]`` and
    ``candidate/bias`` (zeros unless `bias_initializer`). ``h' = u h + (1 - u) c``
    with ``c = activation(W_c [x, r h] + b_c)``.

    With ``reset_after=True`` the reset gate applies after the state's product, as
    Keras's ``GRUCell`` (its default), cuDNN's and PyTorch's GRUs compute:
    ``c = activation(x W_x + b_x + r (h W_h + b_h))``. The candidate's variables are
    then ``candidate/input_kernel`` ``[depth, n]``, ``candidate/input_bias``,
    ``candidate/hidden_kernel`` ``[n, n]`` and ``candidate/hidden_bias`` (biases zeros
    unless `bias_initializer`); the gates' are as above (one bias per gate: Keras's
    input and recurrent gate biases add up to it).

    .. versionadded:: 0.2
    .. versionchanged:: 0.2 ``reset_after``.
    """

    default_name = "gru_cell"

    def __init__(
        self,
        num_units: int,
        activation: Callable[[Any], Any] | None = None,
        reuse: bool | None = None,
        kernel_initializer: Any = None,
        bias_initializer: Any = None,
        name: str | None = None,
        dtype: Any = None,
        reset_after: bool = False,
    ) -> None:
        super().__init__(name=name, dtype=dtype, reuse=reuse)
        self._num_units = _positive_units(type(self).__name__, num_units)
        self._activation = activation or tf1.tanh
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer
        if not isinstance(reset_after, bool):
            msg = (
                f"{type(self).__name__}: 'reset_after' must be True or False (apply the reset "
                f"gate after the state's product, or before it); got {reset_after!r}"
            )
            raise TypeError(msg)
        self._reset_after = reset_after

    @property
    def state_size(self) -> int:
        return self._num_units

    @property
    def output_size(self) -> int:
        return self._num_units

    def build(self, input_depth: int, dtype: Any) -> None:
        n = self._num_units
        init = self._kernel_initializer
        bias = self._bias_initializer
        self._gate_kernel = self.get_variable(
            "gates/kernel", [input_depth + n, 2 * n], dtype=dtype, initializer=init
        )
        self._gate_bias = self.get_variable(
            "gates/bias",
            [2 * n],
            dtype=dtype,
            initializer=bias if bias is not None else tf1.constant_initializer(1.0, dtype=dtype),
        )
        zeros = bias if bias is not None else tf1.zeros_initializer()
        if self._reset_after:
            self._input_kernel = self.get_variable(
                "candidate/input_kernel", [input_depth, n], dtype=dtype, initializer=init
            )
            self._input_bias = self.get_variable(
                "candidate/input_bias", [n], dtype=dtype, initializer=zeros
            )
            self._hidden_kernel = self.get_variable(
                "candidate/hidden_kernel", [n, n], dtype=dtype, initializer=init
            )
            self._hidden_bias = self.get_variable(
                "candidate/hidden_bias", [n], dtype=dtype, initializer=zeros
            )
            return
        self._candidate_kernel = self.get_variable(
            "candidate/kernel", [input_depth + n, n], dtype=dtype, initializer=init
        )
        self._candidate_bias = self.get_variable(
            "candidate/bias", [n], dtype=dtype, initializer=zeros
        )

    def call(self, inputs: Any, state: Any) -> tuple[Any, Any]:
        gates = tf1.sigmoid(
            tf1.nn.bias_add(
                tf1.matmul(tf1.concat([inputs, state], 1), self._gate_kernel), self._gate_bias
            )
        )
        r, u = tf1.split(gates, 2, axis=1)
        if self._reset_after:
            hidden = tf1.nn.bias_add(tf1.matmul(state, self._hidden_kernel), self._hidden_bias)
            candidate = (
                tf1.nn.bias_add(tf1.matmul(inputs, self._input_kernel), self._input_bias)
                + r * hidden
            )
        else:
            candidate = tf1.nn.bias_add(
                tf1.matmul(tf1.concat([inputs, r * state], 1), self._candidate_kernel),
                self._candidate_bias,
            )
        c = self._activation(candidate)
        h = u * state + (1 - u) * c
        return h, h


class BasicLSTMCell(RNNCell):
    """An LSTM without peepholes or projection, gates ordered ``i, j, f, o``.

    Variables ``basic_lstm_cell/kernel`` ``[depth + n, 4n]`` and ``bias`` ``[4n]``
    (zeros). ``forget_bias`` is added to the forget gate before its sigmoid. The state
    is ``LSTMStateTuple(c, h)``, or ``[c, h]`` concatenated when not `state_is_tuple`.

    .. versionadded:: 0.2
    """

    default_name = "basic_lstm_cell"

    def __init__(
        self,
        num_units: int,
        forget_bias: float = 1.0,
        state_is_tuple: bool = True,
        activation: Callable[[Any], Any] | None = None,
        reuse: bool | None = None,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype, reuse=reuse)
        self._num_units = _positive_units(type(self).__name__, num_units)
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = activation or tf1.tanh

    @property
    def state_size(self) -> Any:
        n = self._num_units
        return LSTMStateTuple(n, n) if self._state_is_tuple else 2 * n

    @property
    def output_size(self) -> int:
        return self._num_units

    def build(self, input_depth: int, dtype: Any) -> None:
        n = self._num_units
        self._kernel = self.get_variable("kernel", [input_depth + n, 4 * n], dtype=dtype)
        self._bias = self.get_variable(
            "bias", [4 * n], dtype=dtype, initializer=tf1.zeros_initializer()
        )

    def call(self, inputs: Any, state: Any) -> tuple[Any, Any]:
        if self._state_is_tuple:
            c, h = state
        else:
            c, h = tf1.split(state, 2, axis=1)
        z = tf1.nn.bias_add(tf1.matmul(tf1.concat([inputs, h], 1), self._kernel), self._bias)
        i, j, f, o = tf1.split(z, 4, axis=1)
        forget = tf1.cast(self._forget_bias, f.dtype)
        new_c = c * tf1.sigmoid(f + forget) + tf1.sigmoid(i) * self._activation(j)
        new_h = self._activation(new_c) * tf1.sigmoid(o)
        new_state = (
            LSTMStateTuple(new_c, new_h) if self._state_is_tuple else tf1.concat([new_c, new_h], 1)
        )
        return new_h, new_state


class LSTMCell(RNNCell):
    """An LSTM with optional peepholes, cell clipping and projection, as TensorFlow 1's.

    Variables in ``lstm_cell/``: ``kernel`` ``[depth + p, 4n]`` (``p`` is `num_proj`
    or `num_units`, initialized by `initializer`), ``bias`` ``[4n]`` (zeros); with
    `use_peepholes`, ``w_f_diag``, ``w_i_diag``, ``w_o_diag`` ``[n]``; with `num_proj`,
    ``projection/kernel`` ``[n, num_proj]``. Gates ordered ``i, j, f, o``. The state
    is ``LSTMStateTuple(c, m)`` (``m`` of size ``p``), or ``[c, m]`` concatenated.
    `cell_clip` and `proj_clip` clip ``c`` and the projected output to ``[-x, x]``.

    .. versionadded:: 0.2
    """

    default_name = "lstm_cell"

    def __init__(
        self,
        num_units: int,
        use_peepholes: bool = False,
        cell_clip: float | None = None,
        initializer: Any = None,
        num_proj: int | None = None,
        proj_clip: float | None = None,
        forget_bias: float = 1.0,
        state_is_tuple: bool = True,
        activation: Callable[[Any], Any] | None = None,
        reuse: bool | None = None,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype, reuse=reuse)
        label = type(self).__name__
        self._num_units = _positive_units(label, num_units)
        self._num_proj = None if num_proj is None else _positive_units(label, num_proj, "num_proj")
        self._use_peepholes = use_peepholes
        self._cell_clip = cell_clip
        self._proj_clip = proj_clip
        self._initializer = initializer
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = activation or tf1.tanh

    @property
    def state_size(self) -> Any:
        n, p = self._num_units, self._num_proj or self._num_units
        return LSTMStateTuple(n, p) if self._state_is_tuple else n + p

    @property
    def output_size(self) -> int:
        return self._num_proj or self._num_units

    def build(self, input_depth: int, dtype: Any) -> None:
        n, p = self._num_units, self._num_proj or self._num_units
        init = self._initializer
        self._kernel = self.get_variable(
            "kernel", [input_depth + p, 4 * n], dtype=dtype, initializer=init
        )
        self._bias = self.get_variable(
            "bias", [4 * n], dtype=dtype, initializer=tf1.zeros_initializer()
        )
        if self._use_peepholes:
            self._w_f = self.get_variable("w_f_diag", [n], dtype=dtype, initializer=init)
            self._w_i = self.get_variable("w_i_diag", [n], dtype=dtype, initializer=init)
            self._w_o = self.get_variable("w_o_diag", [n], dtype=dtype, initializer=init)
        if self._num_proj is not None:
            self._proj = self.get_variable(
                "projection/kernel", [n, self._num_proj], dtype=dtype, initializer=init
            )

    def call(self, inputs: Any, state: Any) -> tuple[Any, Any]:
        n = self._num_units
        if self._state_is_tuple:
            c_prev, m_prev = state
        else:
            c_prev, m_prev = state[:, :n], state[:, n:]
        z = tf1.nn.bias_add(tf1.matmul(tf1.concat([inputs, m_prev], 1), self._kernel), self._bias)
        i, j, f, o = tf1.split(z, 4, axis=1)
        forget = tf1.cast(self._forget_bias, f.dtype)
        act = self._activation
        if self._use_peepholes:
            c = tf1.sigmoid(f + forget + self._w_f * c_prev) * c_prev + tf1.sigmoid(
                i + self._w_i * c_prev
            ) * act(j)
        else:
            c = tf1.sigmoid(f + forget) * c_prev + tf1.sigmoid(i) * act(j)
        if self._cell_clip is not None:
            c = tf1.clip_by_value(c, -self._cell_clip, self._cell_clip)
        if self._use_peepholes:
            m = tf1.sigmoid(o + self._w_o * c) * act(c)
        else:
            m = tf1.sigmoid(o) * act(c)
        if self._num_proj is not None:
            m = tf1.matmul(m, self._proj)
            if self._proj_clip is not None:
                m = tf1.clip_by_value(m, -self._proj_clip, self._proj_clip)
        new_state = LSTMStateTuple(c, m) if self._state_is_tuple else tf1.concat([c, m], 1)
        return m, new_state
