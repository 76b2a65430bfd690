"""``tf.contrib.rnn``'s block cells (LSTMBlockCell, GRUBlockCell, GRUBlockCellV2) on plain ops."""

from __future__ import annotations

from typing import Any

from towerkit.layers._rnn_cells import GRUCell, LSTMCell
from towerkit.towers.compat import tf1


def block_cell_clip(cell_clip: Any) -> float | None:
    """The `cell_clip` of contrib's block cells as `LSTMCell`'s: None, 0 or below clip nothing.

    The block ops clip the cell state only for a positive value (-1 was their "none").

    Examples:
        >>> block_cell_clip(None), block_cell_clip(-1), block_cell_clip(3)
        (None, None, 3.0)
    """
    if cell_clip is None:
        return None
    if isinstance(cell_clip, bool) or not isinstance(cell_clip, (int, float)):
        msg = f"LSTMBlockCell: 'cell_clip' must be a number or None; got {cell_clip!r}"
        raise TypeError(msg)
    return float(cell_clip) if cell_clip > 0 else None


class LSTMBlockCell(LSTMCell):
    """``tf.contrib.rnn.LSTMBlockCell``: an LSTM with optional peepholes and cell clipping.

    Computes what `LSTMCell` computes (gates ``i, j, f, o``, `forget_bias` added to
    the forget gate, peepholes on ``c``, ``c`` clipped to ``[-cell_clip, cell_clip]``
    when `cell_clip` is positive) with contrib's variables, in ``lstm_cell/``:
    ``kernel`` ``[depth + n, 4n]`` (Glorot uniform), ``bias`` ``[4n]`` (zeros) and,
    with `use_peephole`, ``w_i_diag``, ``w_f_diag``, ``w_o_diag`` ``[n]``, so
    checkpoints of TensorFlow 1's block cell (and of `LSTMCell`) restore by name.
    The state is ``LSTMStateTuple(c, h)``. Without peepholes and clipping it is a
    plain LSTM, which `dynamic_rnn` trains through its fused loop.

    .. versionadded:: 0.2
    """

    default_name = "lstm_cell"

    def __init__(
        self,
        num_units: int,
        forget_bias: float = 1.0,
        cell_clip: float | None = None,
        use_peephole: bool = False,
        dtype: Any = None,
        reuse: bool | None = None,
        name: str = "lstm_cell",
    ) -> None:
        super().__init__(
            num_units,
            use_peepholes=bool(use_peephole),
            cell_clip=block_cell_clip(cell_clip),
            forget_bias=forget_bias,
            reuse=reuse,
            name=name,
            dtype=dtype,
        )

    def build(self, input_depth: int, dtype: Any) -> None:
        n = self._num_units
        # contrib's order of creation: kernel, bias, then the peepholes i, f, o
        self._kernel = self.get_variable("kernel", [input_depth + n, 4 * n], dtype=dtype)
        self._bias = self.get_variable(
            "bias", [4 * n], dtype=dtype, initializer=tf1.zeros_initializer()
        )
        if self._use_peepholes:
            self._w_i = self.get_variable("w_i_diag", [n], dtype=dtype)
            self._w_f = self.get_variable("w_f_diag", [n], dtype=dtype)
            self._w_o = self.get_variable("w_o_diag", [n], dtype=dtype)


def _gru_units(cell: str, num_units: Any, cell_size: Any) -> int:
    if (num_units is None) == (cell_size is None):
        msg = (
            f"{cell}: give exactly one of 'num_units' and 'cell_size' (its old name); "
            f"got num_units={num_units!r}, cell_size={cell_size!r}"
        )
        raise ValueError(msg)
    return num_units if num_units is not None else cell_size  # type: ignore[no-any-return]


class GRUBlockCellV2(GRUCell):
    """``tf.contrib.rnn.GRUBlockCellV2``: `GRUCell`'s math and variable names, contrib's arguments.

    Variables in ``gru_cell/``: ``gates/kernel`` ``[depth + n, 2n]``, ``gates/bias``
    (ones), ``candidate/kernel`` ``[depth + n, n]``, ``candidate/bias`` (zeros).

    .. versionadded:: 0.2
    """

    default_name = "gru_cell"

    def __init__(
        self,
        num_units: int | None = None,
        cell_size: int | None = None,
        reuse: bool | None = None,
        name: str = "gru_cell",
    ) -> None:
        units = _gru_units(type(self).__name__, num_units, cell_size)
        super().__init__(units, reuse=reuse, name=name)


class GRUBlockCell(GRUBlockCellV2):
    """``tf.contrib.rnn.GRUBlockCell``: a GRU with contrib's (crossed) variable names.

    Computes what `GRUCell` computes (``r, u`` gates, ``h' = u h + (1 - u) c``). The
    variables in ``gru_cell/`` are named as TensorFlow 1's block cell named them: the
    gates' kernel ``w_c`` ``[depth + n, 2n]`` and bias ``b_ru`` ``[2n]`` (ones), the
    candidate's kernel ``w_ru`` ``[depth + n, n]`` and bias ``b_c`` ``[n]`` (zeros),
    so its checkpoints restore by name. Use `GRUBlockCellV2` (or `GRUCell`) for
    ``gates/kernel`` names.

    .. versionadded:: 0.2
    """

    def build(self, input_depth: int, dtype: Any) -> None:
        n = self._num_units
        self._gate_kernel = self.get_variable("w_c", [input_depth + n, 2 * n], dtype=dtype)
        self._gate_bias = self.get_variable(
            "b_ru", [2 * n], dtype=dtype, initializer=tf1.constant_initializer(1.0)
        )
        self._candidate_kernel = self.get_variable("w_ru", [input_depth + n, n], dtype=dtype)
        self._candidate_bias = self.get_variable(
            "b_c", [n], dtype=dtype, initializer=tf1.zeros_initializer()
        )
