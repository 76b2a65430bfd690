"""towerkit.trainers: the training loop, trainers, inputs, gradient processors, optimizers and configs.

`Trainer` runs the loop that `towerkit.callbacks.loop_events` describes, over a session
it creates, driving callbacks and monitors; `TowerTrainer` and `SingleCostTrainer`
build the training graph from a tower function, and the multi-device, distributed and
Horovod trainers replicate it. `TrainConfig` (or `AutoResumeTrainConfig`) with
`launch_train_with_config` is the one-call way to train a `ModelDesc`. Inputs
(`InputSource` and its kinds) feed the towers; gradient processors (`GlobalNormClip`,
`chain`, ...) are records with a pure ``process`` composed into an optimizer by
`apply_grad_processors`. `StopTraining`, raised by a callback, lives in
`towerkit.callbacks`; tensorpack documents it as ``tensorpack.train.StopTraining``, so
it is importable from here too, as the same class.
"""

# -- documented in tensorpack.train, whose home is towerkit.callbacks (the same object) --
from towerkit.callbacks import StopTraining

# -- trainers, configs, the loop, resuming --
from towerkit.trainers._base import Trainer
from towerkit.trainers._config import AutoResumeTrainConfig, TrainConfig
from towerkit.trainers._defaults import DEFAULT_CALLBACKS, DEFAULT_MONITORS
from towerkit.trainers._errors import (
    LogdirLockedError,
    LogdirNotEmptyError,
    TrainerStateError,
    UnregisteredInputError,
)
from towerkit.trainers._launch import launch_train_with_config
from towerkit.trainers._lock import (
    LOCK_FILENAME,
    LockOwner,
    LogdirLock,
    format_lock,
    lock_verdict,
    parse_lock,
)
from towerkit.trainers._loop_end import loop_outcome
from towerkit.trainers._model import ModelDesc, ModelDescBase
from towerkit.trainers._preempt import (
    PREEMPTED_EXIT_STATUS,
    PreemptionPolicy,
    TrainingPreempted,
)
from towerkit.trainers._resume import (
    LOGDIR_ACTIONS,
    LogdirSnapshot,
    ResumePlan,
    plan_logdir,
    resumable_position,
    resume_plan,
)
from towerkit.trainers._resume_checks import position_fault
from towerkit.trainers._seams import DatasetFactory, OptimizerFactory
from towerkit.trainers._tower import SingleCostTrainer, TowerTrainer
from towerkit.trainers._trainers import NoOpTrainer, SimpleTrainer

# -- end of trainers, configs, the loop, resuming --
# isort: split
# -- inputs, gradient processors, optimizers, sessions, utilities --
from towerkit.trainers._ema import EMAOptimizer, ema_decay
from towerkit.trainers._errors import (
    InputDataError,
    InputProducerError,
    InputTimeoutError,
    LossScaleError,
    XlaCompileError,
)
from towerkit.trainers._gradproc import (
    Chain,
    CheckGradient,
    FilterNoneGrad,
    GlobalNormClip,
    GradientProcessor,
    MapGradient,
    PrintGradient,
    ScaleGradient,
    SummaryGradient,
    chain,
)
from towerkit.trainers._optimizer import (
    AccumGradOptimizer,
    PostProcessOptimizer,
    ProxyOptimizer,
    VariableAssignmentOptimizer,
    apply_grad_processors,
)
from towerkit.trainers._precision import (
    LossScaleMonitor,
    LossScaleOptimizer,
    LossScaleSchedule,
    next_loss_scale,
)
from towerkit.trainers._sesscreate import (
    NewSessionCreator,
    ReuseSessionCreator,
    SessionCreatorAdapter,
)
from towerkit.trainers._tfutils import (
    get_default_sess_config,
    get_global_step_value,
    get_global_step_var,
    get_tf_version_tuple,
)
from towerkit.trainers.inputs._base import InputSignatureError, InputSizeUnknownError, InputSource
from towerkit.trainers.inputs._python import DummyConstantInput, FeedInput, IterableInput
from towerkit.trainers.inputs._sources import NumpyInput, TFDatasetInput
from towerkit.trainers.inputs._staging import StagingInput, apply_default_prefetch
from towerkit.trainers.inputs._tensor import TensorInput

# -- end of inputs, gradient processors, optimizers, sessions, utilities --
# isort: split
# -- data-parallel trainers: multi-device, distributed, horovod --
from towerkit.trainers._errors import CollectiveError, TaskLostError, TowerVariableMismatchError
from towerkit.trainers.parallel._builder import (
    DataParallelBuilder,
    LeastLoadedDeviceSetter,
    session_creator_for_devices,
)
from towerkit.trainers.parallel._dataparallel import (
    ALLREDUCE_MODES,
    AllReduceChoice,
    choose_allreduce_mode,
    match_tower_variables,
)
from towerkit.trainers.parallel._distributed import (
    DistributedTrainerBase,
    DistributedTrainerParameterServer,
    DistributedTrainerReplicated,
    serve_parameters,
)
from towerkit.trainers.parallel._grad_sync import (
    aggregate_grads,
    allreduce_grads,
    make_replicas_local,
    sync_replicas_op,
)
from towerkit.trainers.parallel._health import ClusterTimeouts, TaskAddress
from towerkit.trainers.parallel._horovod import HorovodTrainer
from towerkit.trainers.parallel._hvdrun import HorovodJob, RankFailure, launch_horovod_job
from towerkit.trainers.parallel._multigpu import (
    AsyncMultiGPUTrainer,
    SyncMultiGPUTrainer,
    SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated,
)
from towerkit.trainers.parallel._placed import cluster_placement, cluster_server
from towerkit.trainers.parallel._placement import (
    ClusterPlacement,
    exit_is_retryable,
    tf_config_placement,
)
from towerkit.trainers.parallel._slurm import (
    SlurmStep,
    expand_hostlist,
    expand_tasks_per_node,
    slurm_placement,
    slurm_step,
)

# -- end of data-parallel trainers: multi-device, distributed, horovod --
# isort: split
from towerkit.trainers._version import __version__

__all__ = [
    "ClusterPlacement",
    "exit_is_retryable",
    "tf_config_placement",
    "SlurmStep",
    "expand_hostlist",
    "expand_tasks_per_node",
    "slurm_placement",
    "slurm_step",
    "cluster_placement",
    "cluster_server",
    "__version__",
    # -- trainers, configs, the loop, resuming --
    "Trainer",
    "TowerTrainer",
    "SingleCostTrainer",
    "SimpleTrainer",
    "NoOpTrainer",
    "ModelDescBase",
    "ModelDesc",
    "OptimizerFactory",
    "DatasetFactory",
    "TrainConfig",
    "AutoResumeTrainConfig",
    "launch_train_with_config",
    "StopTraining",
    "DEFAULT_CALLBACKS",
    "DEFAULT_MONITORS",
    "LOGDIR_ACTIONS",
    "LogdirSnapshot",
    "ResumePlan",
    "plan_logdir",
    "resume_plan",
    "resumable_position",
    "position_fault",
    "loop_outcome",
    "PREEMPTED_EXIT_STATUS",
    "PreemptionPolicy",
    "TrainingPreempted",
    "LogdirNotEmptyError",
    "LogdirLockedError",
    "LOCK_FILENAME",
    "LockOwner",
    "LogdirLock",
    "format_lock",
    "lock_verdict",
    "parse_lock",
    "TrainerStateError",
    "UnregisteredInputError",
    # -- end of trainers, configs, the loop, resuming --
    # -- inputs, gradient processors, optimizers, sessions, utilities --
    "InputSource",
    "TFDatasetInput",
    "IterableInput",
    "NumpyInput",
    "DummyConstantInput",
    "FeedInput",
    "StagingInput",
    "apply_default_prefetch",
    "InputSizeUnknownError",
    "InputSignatureError",
    "InputDataError",
    "InputProducerError",
    "InputTimeoutError",
    "GradientProcessor",
    "FilterNoneGrad",
    "GlobalNormClip",
    "MapGradient",
    "SummaryGradient",
    "PrintGradient",
    "CheckGradient",
    "ScaleGradient",
    "Chain",
    "chain",
    "apply_grad_processors",
    "ProxyOptimizer",
    "PostProcessOptimizer",
    "VariableAssignmentOptimizer",
    "AccumGradOptimizer",
    "EMAOptimizer",
    "ema_decay",
    "LossScaleOptimizer",
    "LossScaleSchedule",
    "LossScaleMonitor",
    "LossScaleError",
    "XlaCompileError",
    "next_loss_scale",
    "NewSessionCreator",
    "ReuseSessionCreator",
    "SessionCreatorAdapter",
    "get_default_sess_config",
    "get_global_step_var",
    "get_global_step_value",
    "get_tf_version_tuple",
    # -- end of inputs, gradient processors, optimizers, sessions, utilities --
    # -- data-parallel trainers: multi-device, distributed, horovod --
    "SyncMultiGPUTrainer",
    "SyncMultiGPUTrainerReplicated",
    "SyncMultiGPUTrainerParameterServer",
    "AsyncMultiGPUTrainer",
    "DistributedTrainerBase",
    "DistributedTrainerParameterServer",
    "DistributedTrainerReplicated",
    "serve_parameters",
    "ClusterTimeouts",
    "TaskAddress",
    "TaskLostError",
    "TensorInput",
    "HorovodTrainer",
    "HorovodJob",
    "RankFailure",
    "launch_horovod_job",
    "DataParallelBuilder",
    "LeastLoadedDeviceSetter",
    "aggregate_grads",
    "allreduce_grads",
    "make_replicas_local",
    "sync_replicas_op",
    "session_creator_for_devices",
    "ALLREDUCE_MODES",
    "AllReduceChoice",
    "choose_allreduce_mode",
    "match_tower_variables",
    "TowerVariableMismatchError",
    "CollectiveError",
    # -- end of data-parallel trainers: multi-device, distributed, horovod --
]
