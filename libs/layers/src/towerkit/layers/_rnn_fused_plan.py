"""Which recurrent stacks the fused loop runs, and how: one `FusedLayer` record per layer.

The fused loop (`_rnn_fused`) runs a stack whose every layer is a plain LSTM
(`BasicLSTMCell`, `LSTMCell` or `LSTMBlockCell` computing TensorFlow 1's LSTM) or a
plain `GRUCell` (TensorFlow 1's: the reset gate before the candidate's product,
``tanh``), each alone or inside a `DropoutWrapper`, alone or in a `MultiRNNCell`.
Anything else (a subclass, a wrapper around a stack, another activation, peepholes,
a projection) runs the cells' own loop: the fused loop never computes something
the cells would not.
"""

from __future__ import annotations

from typing import Any

import attrs

from towerkit.layers._rnn_block import LSTMBlockCell
from towerkit.layers._rnn_cells import BasicLSTMCell, GRUCell, LSTMCell
from towerkit.layers._rnn_nest import derived_seed
from towerkit.layers._rnn_wrappers import DropoutWrapper, MultiRNNCell
from towerkit.towers.compat import tf1

KINDS = ("lstm", "gru")


@attrs.frozen
class FusedLayer:
    """One layer of a fused stack.

    Attributes:
        cell: the recurrent cell whose variables the layer uses.
        kind: ``"lstm"`` (state ``(c, h)``) or ``"gru"`` (state ``h``).
        units: the cell's number of units.
        forget_bias: added to an LSTM's forget gate (0.0 for a GRU).
        input_keep, state_keep, output_keep: the `DropoutWrapper`'s keep probabilities
            that drop something (a float under 1 or a scalar tensor), else None.
        seed: the wrapper's seed (None: TensorFlow picks).
        wrapper: the `DropoutWrapper` when its masks are variational (drawn once per
            run, `variational_masks`), else None.
    """

    cell: Any = attrs.field(eq=False)
    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    units: int
    forget_bias: float = 0.0
    input_keep: Any = attrs.field(default=None, eq=False)
    state_keep: Any = attrs.field(default=None, eq=False)
    output_keep: Any = attrs.field(default=None, eq=False)
    seed: int | None = None
    wrapper: Any = attrs.field(default=None, eq=False)

    @property
    def drops(self) -> bool:
        """Whether any dropout applies to the layer."""
        return any(k is not None for k in (self.input_keep, self.state_keep, self.output_keep))


def state_leaves(kind: str) -> int:
    """How many tensors a layer's state has: 2 for an LSTM (``c, h``), 1 for a GRU.

    Examples:
        >>> state_leaves("lstm"), state_leaves("gru")
        (2, 1)
    """
    return 2 if kind == "lstm" else 1


def dropped_leaf(kind: str) -> int:
    """The index of the state tensor that state dropout drops (``h``; an LSTM's ``c`` never).

    Examples:
        >>> dropped_leaf("lstm"), dropped_leaf("gru")
        (1, 0)
    """
    return state_leaves(kind) - 1


def dropout_seeds(seed: int | None, kind: str) -> tuple[int | None, int | None, int | None]:
    """The op seeds of a wrapped layer's input, state and output masks.

    The ones `DropoutWrapper` gives its own dropout ops (one input tensor, the state's
    dropped tensor at its place in the flattened state, one output), so that the
    fused loop's random draws are the cells' loop's.

    Examples:
        >>> dropout_seeds(None, "gru")
        (None, None, None)
        >>> dropout_seeds(3, "lstm")[1] == derived_seed(3, "state", 1)
        True
    """
    return (
        derived_seed(seed, "input", 0),
        derived_seed(seed, "state", dropped_leaf(kind)),
        derived_seed(seed, "output", 0),
    )


def dropping_keep(keep: Any) -> Any:
    """`keep` when it drops something (a float under 1, or a tensor), else None.

    Examples:
        >>> dropping_keep(1.0), dropping_keep(1), dropping_keep(0.5)
        (None, None, 0.5)
    """
    if isinstance(keep, (int, float)) and not isinstance(keep, bool) and keep >= 1:
        return None
    return keep


def variational_masks(layer: FusedLayer) -> tuple[Any, Any, Any] | None:
    """A variational layer's input, state and output masks as factors, else None.

    Each a ``[1, size]`` tensor, or None where nothing is dropped; None in place of
    the three when the layer's masks are drawn per step.
    """
    if layer.wrapper is None:
        return None
    keeps = (layer.input_keep, layer.state_keep, layer.output_keep)
    salts = ("input", "state", "output")
    leaves = (0, dropped_leaf(layer.kind), 0)
    factors = [
        None if keep is None else layer.wrapper._variational_factors(salt, keep)[leaf]
        for keep, salt, leaf in zip(keeps, salts, leaves, strict=True)
    ]
    return factors[0], factors[1], factors[2]


def _plain_lstm(cell: Any) -> bool:
    """Whether `cell` is an LSTM the fused loop computes exactly (TensorFlow 1's math)."""
    kind = type(cell)
    if kind not in (BasicLSTMCell, LSTMCell, LSTMBlockCell):
        return False
    forget = cell._forget_bias
    if isinstance(forget, bool) or not isinstance(forget, (int, float)):
        return False
    plain = cell._state_is_tuple and cell._activation is tf1.tanh
    if kind is not BasicLSTMCell:
        # an LSTMBlockCell is an LSTMCell with contrib's arguments and names
        plain = plain and not cell._use_peepholes and cell._num_proj is None
        plain = plain and cell._cell_clip is None and cell._proj_clip is None
    return bool(plain)


def _plain_gru(cell: Any) -> bool:
    """Whether `cell` is TensorFlow 1's GRU (reset before the product, ``tanh``)."""
    return type(cell) is GRUCell and not cell._reset_after and cell._activation is tf1.tanh


def _layer(cell: Any, dropout: bool) -> FusedLayer | None:
    """The record of one layer (`cell` maybe in a `DropoutWrapper`), or None."""
    keeps: tuple[Any, Any, Any] = (None, None, None)
    seed, wrapper = None, None
    if type(cell) is DropoutWrapper:
        if dropout:
            keeps = (
                dropping_keep(cell._input_keep),
                dropping_keep(cell._state_keep),
                dropping_keep(cell._output_keep),
            )
            seed = cell._seed
            wrapper = cell if cell._variational and any(k is not None for k in keeps) else None
        cell = cell.cell
    if _plain_lstm(cell):
        kind, forget = "lstm", float(cell._forget_bias)
    elif _plain_gru(cell):
        kind, forget = "gru", 0.0
    else:
        return None
    return FusedLayer(cell, kind, int(cell._num_units), forget, *keeps, seed=seed, wrapper=wrapper)


def fused_plan(cell: Any, dropout: bool = True) -> tuple[FusedLayer, ...] | None:
    """The layers of `cell` when the fused loop can run it, else None.

    `cell` qualifies when it is a plain LSTM or GRU, maybe in a `DropoutWrapper`,
    or a `MultiRNNCell` with a tuple state of such layers. `dropout`: whether the
    wrappers' dropout applies (it does not in an inference tower).
    """
    if type(cell) is MultiRNNCell:
        if not cell._state_is_tuple:
            return None
        layers = [_layer(c, dropout) for c in cell._cells]
    else:
        layers = [_layer(cell, dropout)]
    if any(layer is None for layer in layers):
        return None
    return tuple(layer for layer in layers if layer is not None)


def fusable_layers(cell: Any) -> list[Any] | None:
    """The recurrent cells of `cell`'s layers when the fused loop can run it, else None."""
    plan = fused_plan(cell)
    return None if plan is None else [layer.cell for layer in plan]
