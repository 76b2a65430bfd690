"""Recurrent cells and loops as TensorFlow 1's ``tf.nn.rnn_cell`` / ``tf.contrib.rnn``, no Keras.

The cells create their variables with ``tf.compat.v1.get_variable`` under the names,
shapes and initializers of TensorFlow 1 (``rnn/multi_rnn_cell/cell_0/lstm_cell/kernel``),
so TensorFlow 1 and tensorpack checkpoints restore by name, and towers share them as
they share the other layers' variables.

.. versionadded:: 0.2
"""

from towerkit.layers._rnn_block import GRUBlockCell, GRUBlockCellV2, LSTMBlockCell
from towerkit.layers._rnn_block_fused import LSTMBlockFusedCell
from towerkit.layers._rnn_cells import (
    BasicLSTMCell,
    BasicRNNCell,
    GRUCell,
    LSTMCell,
    RNNCell,
)
from towerkit.layers._rnn_loops import bidirectional_dynamic_rnn, dynamic_rnn, static_rnn
from towerkit.layers._rnn_nest import LSTMStateTuple
from towerkit.layers._rnn_wrappers import DropoutWrapper, MultiRNNCell, ResidualWrapper

__all__ = [
    "RNNCell",
    "BasicRNNCell",
    "BasicLSTMCell",
    "LSTMCell",
    "GRUCell",
    "LSTMBlockCell",
    "LSTMBlockFusedCell",
    "GRUBlockCell",
    "GRUBlockCellV2",
    "MultiRNNCell",
    "DropoutWrapper",
    "ResidualWrapper",
    "LSTMStateTuple",
    "static_rnn",
    "dynamic_rnn",
    "bidirectional_dynamic_rnn",
]
