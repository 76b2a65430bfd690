"""Cells made of cells: MultiRNNCell (stacked layers), DropoutWrapper, ResidualWrapper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from towerkit.layers._rnn_cells import RNNCell, cell_label
from towerkit.layers._rnn_nest import derived_seed, flatten, map_structure, pack_as, undropped
from towerkit.towers import get_current_tower_context
from towerkit.towers.compat import tf1


def _is_cell(cell: Any) -> bool:
    return callable(cell) and hasattr(cell, "state_size") and hasattr(cell, "output_size")


def _require_cell(owner: str, cell: Any) -> None:
    if not _is_cell(cell):
        msg = (
            f"{owner}: expected a recurrent cell (callable, with state_size and output_size); "
            f"got {type(cell).__name__}"
        )
        raise TypeError(msg)


class MultiRNNCell(RNNCell):
    """Cells stacked in layers: the output of ``cells[k]`` is the input of ``cells[k+1]``.

    Cell ``k`` runs in variable scope ``multi_rnn_cell/cell_k`` (so a 2-layer LSTM
    under ``dynamic_rnn`` has ``rnn/multi_rnn_cell/cell_0/lstm_cell/kernel``). The
    state is the tuple of the cells' states, or their concatenation when not
    `state_is_tuple`.

    Raises:
        ValueError: `cells` is empty.
        TypeError: an entry of `cells` is not a cell.

    .. versionadded:: 0.2
    """

    default_name = "multi_rnn_cell"

    def __init__(self, cells: Sequence[Any], state_is_tuple: bool = True) -> None:
        super().__init__()
        if not isinstance(cells, (list, tuple)) or not cells:
            msg = f"MultiRNNCell: 'cells' must be a non-empty list of cells; got {cells!r}"
            raise ValueError(msg)
        for k, cell in enumerate(cells):
            _require_cell(f"MultiRNNCell: cells[{k}]", cell)
        if not state_is_tuple:
            nested = [k for k, c in enumerate(cells) if len(flatten(c.state_size)) > 1]
            if nested:
                msg = (
                    "MultiRNNCell: with state_is_tuple=False every cell's state must be one "
                    f"tensor; cells {nested} have nested states (give them state_is_tuple=False)"
                )
                raise ValueError(msg)
        self._cells = tuple(cells)
        self._state_is_tuple = state_is_tuple

    @property
    def state_size(self) -> Any:
        if self._state_is_tuple:
            return tuple(c.state_size for c in self._cells)
        return sum(int(c.state_size) for c in self._cells)

    @property
    def output_size(self) -> Any:
        return self._cells[-1].output_size

    def zero_state(self, batch_size: Any, dtype: Any) -> Any:
        if not self._state_is_tuple:
            return super().zero_state(batch_size, dtype)
        with tf1.name_scope(f"{type(self).__name__}ZeroState"):
            return tuple(c.zero_state(batch_size, dtype) for c in self._cells)

    def _check_inputs(self, inputs: Any) -> int:
        return 0

    def call(self, inputs: Any, state: Any) -> tuple[Any, Any]:
        out = inputs
        new_states = []
        start = 0
        for k, cell in enumerate(self._cells):
            with tf1.variable_scope(f"cell_{k}"):
                if self._state_is_tuple:
                    sub = state[k]
                else:
                    size = int(cell.state_size)
                    sub = state[:, start : start + size]
                    start += size
                out, new = cell(out, sub)
                new_states.append(new)
        if self._state_is_tuple:
            return out, tuple(new_states)
        return out, tf1.concat(new_states, 1)


class _Wrapper:
    """A cell around a cell: same sizes and zero state, no variable scope of its own."""

    def __init__(self, cell: Any) -> None:
        _require_cell(type(self).__name__, cell)
        self._cell = cell

    @property
    def cell(self) -> Any:
        """The wrapped cell."""
        return self._cell

    @property
    def state_size(self) -> Any:
        return self._cell.state_size

    @property
    def output_size(self) -> Any:
        return self._cell.output_size

    @property
    def _scope(self) -> Any:
        return getattr(self._cell, "_scope", None)

    @property
    def variables(self) -> list[Any]:
        """The wrapped cell's variables."""
        return list(getattr(self._cell, "variables", []))

    def zero_state(self, batch_size: Any, dtype: Any) -> Any:
        """The wrapped cell's zero state."""
        with tf1.name_scope(f"{type(self).__name__}ZeroState"):
            return self._cell.zero_state(batch_size, dtype)


def _keep_prob(name: str, value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 < value <= 1:
        msg = f"DropoutWrapper: {name!r} must be in (0, 1]; got {value!r}"
        raise ValueError(msg)
    return value


def _drops(keep: Any) -> bool:
    return not isinstance(keep, (int, float)) or keep < 1


class DropoutWrapper(_Wrapper):
    """Dropout on a cell's inputs, outputs and state, off in inference towers.

    `input_keep_prob`, `output_keep_prob` and `state_keep_prob` are probabilities to
    keep (floats in ``(0, 1]`` or scalar tensors). The state's dropout skips the
    ``c`` of an ``LSTMStateTuple``, as TensorFlow 1's. In a `TowerContext` that is
    not training, the cell runs without dropout; without a tower context, dropout
    applies. Masks are drawn anew at each step, unless `variational_recurrent`: then,
    as TensorFlow 1's, each of the input, state and output masks is drawn once per run
    of the graph, shaped ``[1, size]`` (one mask for every example and every step),
    made when the wrapper is made: `dtype` is then required, and `input_size` (the
    depth of the inputs) when the inputs are dropped.

    Raises:
        ValueError: a keep probability is outside ``(0, 1]``; `variational_recurrent`
            without `dtype`, or without `input_size` where the inputs are dropped.

    .. versionadded:: 0.2
    .. versionchanged:: 0.2 ``variational_recurrent``, ``input_size`` and ``dtype``,
       before ``seed`` as in TensorFlow 1's signature.
    """

    def __init__(
        self,
        cell: Any,
        input_keep_prob: Any = 1.0,
        output_keep_prob: Any = 1.0,
        state_keep_prob: Any = 1.0,
        variational_recurrent: bool = False,
        input_size: Any = None,
        dtype: Any = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(cell)
        self._input_keep = _keep_prob("input_keep_prob", input_keep_prob)
        self._output_keep = _keep_prob("output_keep_prob", output_keep_prob)
        self._state_keep = _keep_prob("state_keep_prob", state_keep_prob)
        self._seed = seed
        self._variational = bool(variational_recurrent)
        self._noise: dict[str, Any] = {}
        if self._variational:
            self._noise = self._variational_noise(input_size, dtype)

    def _variational_noise(self, input_size: Any, dtype: Any) -> dict[str, Any]:
        """Uniform noise ``[1, size]`` per dropped tensor, drawn once per run."""
        if dtype is None:
            msg = (
                f"DropoutWrapper around {cell_label(self._cell)}: variational_recurrent=True "
                "needs 'dtype' (the masks are made with the wrapper); got dtype=None"
            )
            raise ValueError(msg)
        if _drops(self._input_keep) and input_size is None:
            msg = (
                f"DropoutWrapper around {cell_label(self._cell)}: variational_recurrent=True "
                "with input dropout needs 'input_size' (the depth of the inputs); got None"
            )
            raise ValueError(msg)

        def noise(sizes: Any, salt: str) -> list[Any]:
            return [
                tf1.random_uniform([1, int(n)], dtype=dtype, seed=derived_seed(self._seed, salt, k))
                for k, n in enumerate(flatten(sizes))
            ]

        drawn = {}
        with tf1.name_scope("DropoutWrapperInit"):
            if _drops(self._input_keep):
                drawn["input"] = noise(input_size, "variational_input")
            if _drops(self._state_keep):
                drawn["state"] = noise(self._cell.state_size, "variational_state")
            if _drops(self._output_keep):
                drawn["output"] = noise(self._cell.output_size, "variational_output")
        return drawn

    def _variational_factors(self, salt: str, keep: Any) -> list[Any]:
        """The variational masks of `salt` (``input``, ``state``, ``output``) as factors.

        Each ``floor(keep + noise) / keep`` (0 or ``1 / keep``), ``[1, size]``.
        """
        return [tf1.floor(keep + u) / keep for u in self._noise[salt]]

    def _dropout(self, values: Any, salt: str, keep: Any, skip: Any = None) -> Any:
        flat = flatten(values)
        skipped = flatten(skip) if skip is not None else [False] * len(flat)
        if self._variational:
            # TensorFlow 1's variational dropout: value / keep * floor(keep + noise)
            noise = self._noise[salt]
            out = [
                v if s else v / keep * tf1.floor(keep + u)
                for v, s, u in zip(flat, skipped, noise, strict=True)
            ]
        else:
            out = [
                v if s else tf1.nn.dropout(v, rate=1 - keep, seed=derived_seed(self._seed, salt, k))
                for k, (v, s) in enumerate(zip(flat, skipped, strict=True))
            ]
        return pack_as(values, out)

    def __call__(self, inputs: Any, state: Any, scope: Any = None) -> tuple[Any, Any]:
        """One step of the wrapped cell with dropout (none in an inference tower)."""
        ctx = get_current_tower_context()
        active = ctx is None or ctx.is_training
        if active and _drops(self._input_keep):
            inputs = self._dropout(inputs, "input", self._input_keep)
        output, new_state = self._cell(inputs, state, scope=scope)
        if active and _drops(self._state_keep):
            new_state = self._dropout(new_state, "state", self._state_keep, undropped(new_state))
        if active and _drops(self._output_keep):
            output = self._dropout(output, "output", self._output_keep)
        return output, new_state


class ResidualWrapper(_Wrapper):
    """The wrapped cell's output plus its input (or ``residual_fn(inputs, outputs)``).

    .. versionadded:: 0.2
    """

    def __init__(self, cell: Any, residual_fn: Any = None) -> None:
        super().__init__(cell)
        self._residual_fn = residual_fn

    def __call__(self, inputs: Any, state: Any, scope: Any = None) -> tuple[Any, Any]:
        """One step of the wrapped cell, its input added to its output.

        Raises:
            ValueError: the input and the output differ in size.
        """
        output, new_state = self._cell(inputs, state, scope=scope)
        if self._residual_fn is not None:
            return self._residual_fn(inputs, output), new_state

        def add(x: Any, y: Any) -> Any:
            x = tf1.convert_to_tensor(x)
            if not x.shape.is_compatible_with(y.shape):
                msg = (
                    f"ResidualWrapper around {cell_label(self._cell)}: the input "
                    f"{x.shape} and the output {y.shape} must have the same shape"
                )
                raise ValueError(msg)
            return x + y

        return map_structure(add, inputs, output), new_state
