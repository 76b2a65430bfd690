"""towerkit.export: compact frozen graphs, SavedModels and offline predictors."""

from towerkit.export._build import InferenceGraph, build_inference_graph
from towerkit.export._config import PredictConfig, PredictSpec
from towerkit.export._errors import InferenceOptimizationError, UnknownTensorError
from towerkit.export._export import ModelExporter
from towerkit.export._freeze import (
    STATEFUL_OPS,
    freeze_session_graph,
    optimize_graph_def,
    reachable,
    stateful_nodes,
    unused_inputs,
)
from towerkit.export._names import (
    check_input_names,
    check_output_names,
    close_names,
    op_name,
    signature_key,
)
from towerkit.export._predictor import OfflinePredictor
from towerkit.export._version import __version__

__all__ = [
    "__version__",
    # configuration
    "PredictConfig",
    "PredictSpec",
    # prediction
    "OfflinePredictor",
    "InferenceGraph",
    "build_inference_graph",
    # export
    "ModelExporter",
    "freeze_session_graph",
    "optimize_graph_def",
    "STATEFUL_OPS",
    # names and graphs (pure)
    "check_input_names",
    "check_output_names",
    "close_names",
    "op_name",
    "signature_key",
    "reachable",
    "unused_inputs",
    "stateful_nodes",
    # errors
    "UnknownTensorError",
    "InferenceOptimizationError",
]
