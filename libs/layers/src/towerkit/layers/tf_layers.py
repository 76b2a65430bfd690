"""TensorFlow 1's ``tf.layers`` (``tf.compat.v1.layers``) functions on plain ops, without Keras.

Each function builds what TensorFlow 1's functional layer built: the same variables
(``conv2d/kernel``, ``conv2d/bias``, ``dense_1/kernel``,
``batch_normalization/moving_mean``, ...) with the same shapes and default
initializers (Glorot uniform kernels, zero biases), made by
``tf.compat.v1.get_variable`` in the variable scope TensorFlow 1 opened (`name`, or
the layer's kind made unique: ``conv2d``, ``conv2d_1``), so checkpoints written by
TensorFlow 1 programs restore by name and towers share the variables. Regularizers'
losses go to ``REGULARIZATION_LOSSES``, batch normalization's updates to
``UPDATE_OPS``, and `training` is an argument (False by default), as in TensorFlow 1.
``towerkit.towers.enable_argscope_for_module(tf_layers)`` makes them read argscope.

.. versionadded:: 0.2
"""

from towerkit.layers._tf_layers_conv import (
    conv1d,
    conv2d,
    conv2d_transpose,
    conv3d,
    dense,
    separable_conv2d,
)
from towerkit.layers._tf_layers_misc import (
    average_pooling1d,
    average_pooling2d,
    batch_normalization,
    dropout,
    flatten,
    max_pooling1d,
    max_pooling2d,
)

__all__ = [
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
