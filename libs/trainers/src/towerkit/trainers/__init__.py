"""towerkit.trainers."""

from towerkit.callbacks import StopTraining

# -- trainers, configs, the loop, resuming --
from towerkit.trainers._base import Trainer
from towerkit.trainers._config import AutoResumeTrainConfig, TrainConfig
from towerkit.trainers._defaults import DEFAULT_CALLBACKS, DEFAULT_MONITORS
from towerkit.trainers._errors import LogdirNotEmptyError, TrainerStateError
from towerkit.trainers._launch import launch_train_with_config
from towerkit.trainers._model import ModelDesc, ModelDescBase
from towerkit.trainers._resume import (
    LOGDIR_ACTIONS,
    LogdirSnapshot,
    ResumePlan,
    plan_logdir,
    resume_plan,
)
from towerkit.trainers._tower import SingleCostTrainer, TowerTrainer
from towerkit.trainers._trainers import NoOpTrainer, SimpleTrainer

# -- end of trainers, configs, the loop, resuming --
from towerkit.trainers._version import __version__

__all__ = [
    "__version__",
    # -- trainers, configs, the loop, resuming --
    "Trainer",
    "TowerTrainer",
    "SingleCostTrainer",
    "SimpleTrainer",
    "NoOpTrainer",
    "StopTraining",
    "ModelDescBase",
    "ModelDesc",
    "TrainConfig",
    "AutoResumeTrainConfig",
    "launch_train_with_config",
    "DEFAULT_CALLBACKS",
    "DEFAULT_MONITORS",
    "LOGDIR_ACTIONS",
    "LogdirSnapshot",
    "ResumePlan",
    "plan_logdir",
    "resume_plan",
    "LogdirNotEmptyError",
    "TrainerStateError",
    # -- end of trainers, configs, the loop, resuming --
]
