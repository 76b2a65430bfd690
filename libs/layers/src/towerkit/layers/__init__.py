"""towerkit.layers: tensorpack's layer API on tf.compat.v1 ops, with tensorpack's variable names."""

from towerkit.layers._batchnorm import BatchNorm, BatchRenorm
from towerkit.layers._conv import Conv2D, Conv2DTranspose, Deconv2D
from towerkit.layers._fc import FullyConnected
from towerkit.layers._linearwrap import LinearWrap
from towerkit.layers._nonlin import Maxout, PReLU
from towerkit.layers._norm import BNReLU, InstanceNorm, LayerNorm
from towerkit.layers._pool import (
    AvgPooling,
    BilinearUpSample,
    FixedUnPooling,
    GlobalAvgPooling,
    MaxPooling,
)
from towerkit.layers._registry import (
    VariableHolder,
    disable_layer_logging,
    get_registered_layer,
    layer_register,
    rename_tflayer_get_variable,
)
from towerkit.layers._regularize import (
    Dropout,
    L1Regularizer,
    L2Regularizer,
    l1_regularizer,
    l2_regularizer,
    regularize_cost,
    regularize_cost_from_collection,
)
from towerkit.layers._shapes import ConcatWith
from towerkit.layers._version import __version__
from towerkit.layers.rnn import (
    BasicLSTMCell,
    BasicRNNCell,
    DropoutWrapper,
    GRUBlockCell,
    GRUBlockCellV2,
    GRUCell,
    LSTMBlockCell,
    LSTMBlockFusedCell,
    LSTMCell,
    LSTMStateTuple,
    MultiRNNCell,
    ResidualWrapper,
    RNNCell,
    bidirectional_dynamic_rnn,
    dynamic_rnn,
    static_rnn,
)

__all__ = [
    "__version__",
    # registering layers
    "layer_register",
    "get_registered_layer",
    "disable_layer_logging",
    "VariableHolder",
    "rename_tflayer_get_variable",
    "LinearWrap",
    # convolutions and dense
    "Conv2D",
    "Conv2DTranspose",
    "Deconv2D",
    "FullyConnected",
    # normalization
    "BatchNorm",
    "BatchRenorm",
    "LayerNorm",
    "InstanceNorm",
    "BNReLU",
    # pooling
    "MaxPooling",
    "AvgPooling",
    "GlobalAvgPooling",
    "FixedUnPooling",
    "BilinearUpSample",
    # non-linearities and shapes
    "PReLU",
    "Maxout",
    "ConcatWith",
    "Dropout",
    # regularization
    "regularize_cost",
    "regularize_cost_from_collection",
    "l2_regularizer",
    "l1_regularizer",
    "L2Regularizer",
    "L1Regularizer",
    # recurrent cells and loops (also in towerkit.layers.rnn)
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
