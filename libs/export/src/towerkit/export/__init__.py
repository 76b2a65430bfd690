"""towerkit.export: compact frozen graphs, SavedModels and offline predictors."""

from towerkit.export._config import PredictConfig, PredictSpec
from towerkit.export._dataset_predictor import MultiTowerOfflinePredictor, SimpleDatasetPredictor
from towerkit.export._errors import InferenceOptimizationError, UnknownTensorError
from towerkit.export._export import ModelExporter
from towerkit.export._feedfree import FeedfreePredictor
from towerkit.export._predictor import OfflinePredictor
from towerkit.export._version import __version__

__all__ = [
    "__version__",
    # configuration
    "PredictConfig",
    "PredictSpec",
    # prediction
    "OfflinePredictor",
    "SimpleDatasetPredictor",
    "MultiTowerOfflinePredictor",
    "FeedfreePredictor",
    # export
    "ModelExporter",
    # names and graphs (pure)
    # errors
    "UnknownTensorError",
    "InferenceOptimizationError",
]
