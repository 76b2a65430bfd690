"""towerkit.towers: tower functions, tower context, scope and variable utilities, summaries, devices."""

from towerkit.towers._argscope import (
    argscope,
    enable_argscope_for_function,
    enable_argscope_for_module,
    get_arg_scope,
)
from towerkit.towers._checker import check_tower_function, ensure_tower_rules
from towerkit.towers._collection import backup_collection, freeze_collection, restore_collection
from towerkit.towers._context import (
    BaseTowerContext,
    PredictTowerContext,
    TowerContext,
    TowerSpec,
    TrainTowerContext,
    get_current_tower_context,
    has_own_variables,
    is_main_training_tower,
    tower_reuse,
)
from towerkit.towers._dependency import dependency_of_fetches, dependency_of_targets
from towerkit.towers._devices import resolve_devices, session_config_for_devices, visible_gpu_count
from towerkit.towers._errors import (
    LayersUnavailableError,
    TowerCheckError,
    TowerContextError,
    TowerRuleError,
)
from towerkit.towers._layers import check_tf_keras_version, enable_tf_layers
from towerkit.towers._names import get_op_tensor_name
from towerkit.towers._precision import (
    FLOAT32,
    POLICIES,
    Precision,
    cast_inputs,
    current_precision,
    low_precision_variables,
    precision_policy,
    precision_scope,
    with_precision,
)
from towerkit.towers._predict import OnlinePredictor, handle_to_predictor
from towerkit.towers._scope import (
    auto_reuse_variable_scope,
    cached_name_scope,
    under_name_scope,
    under_variable_scope,
)
from towerkit.towers._seams import TowerFn
from towerkit.towers._summary import (
    MOVING_SUMMARY_OPS_KEY,
    add_activation_summary,
    add_moving_summary,
    add_param_summary,
    add_tensor_summary,
)
from towerkit.towers._tower import (
    TowerFunc,
    TowerTensorHandle,
    TowerTensorHandles,
    build_placeholders,
    validate_input_signature,
)
from towerkit.towers._varreplace import custom_getter_scope, freeze_variables, remap_variables
from towerkit.towers._version import __version__
from towerkit.towers._violations import Violation, format_violations

__all__ = [
    "__version__",
    # tower context
    "TowerContext",
    "BaseTowerContext",
    "TrainTowerContext",
    "PredictTowerContext",
    "TowerSpec",
    "get_current_tower_context",
    "tower_reuse",
    "is_main_training_tower",
    "has_own_variables",
    # tower functions
    "TowerFn",
    "TowerFunc",
    "TowerTensorHandle",
    "TowerTensorHandles",
    "build_placeholders",
    "validate_input_signature",
    # mixed precision
    "FLOAT32",
    "POLICIES",
    "Precision",
    "precision_policy",
    "precision_scope",
    "cast_inputs",
    "current_precision",
    "with_precision",
    "low_precision_variables",
    # prediction
    "OnlinePredictor",
    "handle_to_predictor",
    # devices
    "resolve_devices",
    "visible_gpu_count",
    "session_config_for_devices",
    # names
    "get_op_tensor_name",
    # scopes
    "auto_reuse_variable_scope",
    "cached_name_scope",
    "under_name_scope",
    "under_variable_scope",
    # variable replacement
    "custom_getter_scope",
    "freeze_variables",
    "remap_variables",
    # argscope
    "argscope",
    "get_arg_scope",
    "enable_argscope_for_function",
    "enable_argscope_for_module",
    # collections
    "backup_collection",
    "restore_collection",
    "freeze_collection",
    # dependencies
    "dependency_of_targets",
    "dependency_of_fetches",
    # tower-rule checker
    "check_tower_function",
    "ensure_tower_rules",
    "Violation",
    "format_violations",
    # summaries
    "MOVING_SUMMARY_OPS_KEY",
    "add_tensor_summary",
    "add_param_summary",
    "add_activation_summary",
    "add_moving_summary",
    # graph-mode layers (tf-keras)
    "enable_tf_layers",
    "check_tf_keras_version",
    # errors
    "LayersUnavailableError",
    "TowerContextError",
    "TowerRuleError",
    "TowerCheckError",
]
