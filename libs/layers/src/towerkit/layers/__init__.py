"""towerkit.layers: tensorpack's layer API on tf.compat.v1 ops, with tensorpack's variable names."""

from towerkit.layers._registry import (
    VariableHolder,
    disable_layer_logging,
    get_registered_layer,
    layer_register,
    rename_tflayer_get_variable,
)
from towerkit.layers._version import __version__

__all__ = [
    "__version__",
    # registering layers
    "layer_register",
    "get_registered_layer",
    "disable_layer_logging",
    "VariableHolder",
    "rename_tflayer_get_variable",
]
