"""``tf.contrib.rnn.LSTMBlockFusedCell``: an LSTM over a whole time-major sequence in one call."""

from __future__ import annotations

from typing import Any

from towerkit.layers._rnn_block import LSTMBlockCell
from towerkit.layers._rnn_cells import check_state, static_shape
from towerkit.layers._rnn_fused import fused_applies
from towerkit.layers._rnn_loops import _batch_size, _dynamic_loop, _fused_loop, _sequence_length
from towerkit.layers._rnn_nest import LSTMStateTuple
from towerkit.towers.compat import tf1

_NAME = "LSTMBlockFusedCell"


class LSTMBlockFusedCell:
    """An LSTM run over ``[time, batch, depth]`` inputs: ``outputs, state = cell(inputs, ...)``.

    As ``tf.contrib.rnn.LSTMBlockFusedCell``: the call takes the whole sequence,
    time-major (a tensor, or a list of ``[batch, depth]`` steps, which gives a list
    back), with ``initial_state=(c, h)`` or ``dtype``, and ``sequence_length``
    (``[batch]``): outputs past an example's length are zeros and its final state is
    the one after its last step. The variables are `LSTMBlockCell`'s (``kernel``,
    ``bias``, ``w_i_diag``, ``w_f_diag``, ``w_o_diag``) in ``lstm_fused_cell/`` (or
    `name`), and it computes what `LSTMBlockCell` under `dynamic_rnn` computes;
    without peepholes or clipping it runs through the fused loop (with or
    without lengths).

    .. versionadded:: 0.2
    """

    def __init__(
        self,
        num_units: int,
        forget_bias: float = 1.0,
        cell_clip: float | None = None,
        use_peephole: bool = False,
        reuse: bool | None = None,
        dtype: Any = None,
        name: str = "lstm_fused_cell",
    ) -> None:
        self._cell = LSTMBlockCell(
            num_units,
            forget_bias=forget_bias,
            cell_clip=cell_clip,
            use_peephole=use_peephole,
            dtype=dtype,
            reuse=reuse,
            name=name,
        )

    @property
    def num_units(self) -> int:
        """The number of units (the size of ``c``, ``h`` and each output)."""
        return int(self._cell._num_units)

    @property
    def name(self) -> str | None:
        """The full name of the variable scope once called, else the name given."""
        return self._cell.name

    @property
    def variables(self) -> list[Any]:
        """The variables created or reused on the first call."""
        return self._cell.variables

    @property
    def trainable_variables(self) -> list[Any]:
        """The trainable ones of `variables`."""
        return self._cell.trainable_variables

    def __call__(
        self,
        inputs: Any,
        initial_state: Any = None,
        dtype: Any = None,
        sequence_length: Any = None,
        scope: Any = None,
    ) -> tuple[Any, Any]:
        """Run the LSTM over time-major `inputs`; ``(outputs, LSTMStateTuple(c, h))``.

        Raises:
            ValueError: `inputs` is not ``[time, batch, depth]`` with a known depth,
                neither `initial_state` nor `dtype` is given, `initial_state` is not a
                pair shaped ``[batch, num_units]``, or `sequence_length` is not
                ``[batch]``.
        """
        cell = self._cell
        is_list = isinstance(inputs, (list, tuple))
        x = tf1.stack(list(inputs)) if is_list else tf1.convert_to_tensor(inputs)
        if x.shape.rank != 3 or x.shape[-1] is None:
            msg = (
                f"{_NAME}: 'inputs' must be time-major [time, batch, depth] with a known depth "
                f"(or a list of [batch, depth] steps); got shape {static_shape(x)}"
            )
            raise ValueError(msg)
        batch = _batch_size([x], 1)
        if initial_state is None:
            if dtype is None:
                msg = f"{_NAME}: give 'initial_state' or 'dtype'; got neither"
                raise ValueError(msg)
            state = cell.zero_state(batch, dtype)
        else:
            if not isinstance(initial_state, (list, tuple)) or len(initial_state) != 2:
                msg = f"{_NAME}: 'initial_state' must be a pair (c, h); got {initial_state!r}"
                raise ValueError(msg)
            state = LSTMStateTuple(*initial_state)
            check_state(cell, state, what="initial state")
        cell._capture_scope(scope)
        lengths = _sequence_length(_NAME, cell, sequence_length, batch, x)
        layers = fused_applies(cell, x, state, lengths)
        if layers is not None:
            outputs, final = _fused_loop(cell, layers, x, state, lengths, 32, False)
        else:
            outputs, final = _dynamic_loop(cell, x, state, lengths, 32, False)
        if is_list:
            outputs = tf1.unstack(outputs)
        return outputs, final
