"""Where TensorFlow 1's cells, loops and ``tf.layers`` functions go in ``towerkit.layers``."""

from __future__ import annotations

import attrs

RNN_MODULES = ("tf.contrib.rnn", "tf.nn.rnn_cell", "tf.compat.v1.nn.rnn_cell")
"""TensorFlow 1 modules of recurrent cells, each replaced by ``towerkit.layers.rnn``."""

LOOP_MODULES = ("tf.nn", "tf.compat.v1.nn", "tf.contrib.rnn")
"""Modules whose recurrent loops (`RNN_LOOPS`) move to ``towerkit.layers.rnn``."""

RNN_CELLS = frozenset(
    [
        "RNNCell",
        "BasicRNNCell",
        "BasicLSTMCell",
        "LSTMCell",
        "GRUCell",
        "MultiRNNCell",
        "DropoutWrapper",
        "ResidualWrapper",
        "LSTMStateTuple",
        "LSTMBlockCell",
        "LSTMBlockFusedCell",
        "GRUBlockCell",
        "GRUBlockCellV2",
    ]
)
"""Names of the cell modules that ``towerkit.layers.rnn`` holds."""

RNN_LOOPS = frozenset(["static_rnn", "dynamic_rnn", "bidirectional_dynamic_rnn"])
"""Recurrent loops that ``towerkit.layers.rnn`` holds."""


@attrs.frozen(kw_only=True)
class RnnMove:
    """The rewrite of one dotted name.

    Attributes:
        new: the expression written instead (``rnn.LSTMCell``).
        note: the line reported for it.
        manual: the user must finish it by hand.
        needs_rnn: the program needs ``from towerkit.layers import rnn``.
    """

    new: str
    note: str
    manual: bool = False
    needs_rnn: bool = True


def rnn_move(name: str) -> RnnMove | None:
    """How `name` (a dotted ``tf.`` name) moves to ``towerkit.layers.rnn``; None if it does not.

    A cell module itself becomes ``rnn``; its cells and the loops become ``rnn.<name>``.
    A name of ``tf.contrib.rnn`` that towerkit lacks stays, flagged for a hand edit; one
    of ``tf.nn.rnn_cell`` goes to ``tf.compat.v1.nn.rnn_cell`` (which needs tf-keras).

    Examples:
        >>> rnn_move("tf.contrib.rnn.LSTMCell").new
        'rnn.LSTMCell'
        >>> rnn_move("tf.nn.dynamic_rnn").new
        'rnn.dynamic_rnn'
        >>> rnn_move("tf.contrib.rnn.AttentionCellWrapper").manual
        True
        >>> rnn_move("tf.nn.relu") is None
        True
    """
    if name in RNN_MODULES:
        return RnnMove(new="rnn", note=f"{name} -> rnn (from towerkit.layers, no Keras)")
    module, _, last = name.rpartition(".")
    if (module in RNN_MODULES and last in RNN_CELLS) or (
        module in LOOP_MODULES and last in RNN_LOOPS
    ):
        return RnnMove(new=f"rnn.{last}", note=f"{name} -> rnn.{last} (from towerkit.layers)")
    if module == "tf.contrib.rnn":
        return RnnMove(
            new=name,
            note=f"{name}: towerkit.layers.rnn has no {last}; rewrite it with its cells",
            manual=True,
            needs_rnn=False,
        )
    if module in RNN_MODULES:
        new = f"tf.compat.v1.nn.rnn_cell.{last}"
        return RnnMove(
            new=new,
            note=f"{name} -> {new}: towerkit.layers.rnn has no {last}; this one needs tf-keras",
            manual=True,
            needs_rnn=False,
        )
    return None


LAYERS_MODULES = ("tf.layers", "tf.compat.v1.layers")
"""TensorFlow 1's functional layers modules, whose functions ``towerkit.layers.tf_layers`` holds."""

TF_LAYERS = frozenset(
    [
        "conv1d",
        "conv2d",
        "conv3d",
        "conv2d_transpose",
        "separable_conv2d",
        "dense",
        "batch_normalization",
        "dropout",
        "flatten",
        "max_pooling1d",
        "max_pooling2d",
        "average_pooling1d",
        "average_pooling2d",
    ]
)
"""The functions of ``tf.layers`` that ``towerkit.layers.tf_layers`` holds (plain ops, TensorFlow
1's variable names, no Keras)."""


def tf_layers_move(name: str) -> str | None:
    """``tf_layers.<f>`` for ``tf.layers.<f>`` or ``tf.compat.v1.layers.<f>``; None otherwise.

    Examples:
        >>> tf_layers_move("tf.layers.conv2d")
        'tf_layers.conv2d'
        >>> tf_layers_move("tf.compat.v1.layers.dense")
        'tf_layers.dense'
        >>> tf_layers_move("tf.layers.Conv2D") is None
        True
    """
    module, _, last = name.rpartition(".")
    if module in LAYERS_MODULES and last in TF_LAYERS:
        return f"tf_layers.{last}"
    return None
