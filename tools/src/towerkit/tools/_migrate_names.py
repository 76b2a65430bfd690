"""Where each tensorpack name lives in towerkit, and what the migration keeps on tensorpack."""

from __future__ import annotations

from towerkit.tools._migrate_api import tensorpack_fates

_LIB_NAMES = {
    "sessinit": """
    ASIDE_PREFIX Assignment ChainInit CheckpointNotFoundError CheckpointVanishedError
    CorruptCheckpointError DictRestore EMA_SUFFIX GLOB_CHARACTERS GlobPathError
    JustCurrentSession NotACheckpointError NothingToRestoreError RestoreMismatchError
    RestorePlan SaverRestore SaverRestoreRelaxed SessionInit SmartInit VarInfo
    atomic_checkpoint_prefix atomic_path atomic_save_checkpoint atomic_write_bytes
    atomic_write_text back_up_file backup_name checkpoint_step describe_unused
    dump_session_params ema_sources get_all_checkpoints get_model_loader glob_characters
    is_aside_name list_checkpoint_vars list_npz_vars load_checkpoint_vars load_npz
    move_checkpoints_aside plan_restore put_back_aside remove_stale_temporaries
    require_globless resolve_checkpoint restores_nothing save_checkpoint_vars
    state_entry_inside unused_kinds verify_npz write_checkpoint_state
    """,
    "towers": """
    BaseTowerContext LayersUnavailableError MOVING_SUMMARY_OPS_KEY OnlinePredictor
    PredictTowerContext TowerCheckError TowerContext TowerContextError TowerFn TowerFunc
    TowerRuleError TowerSpec TowerTensorHandle TowerTensorHandles TrainTowerContext
    Violation add_activation_summary add_moving_summary add_param_summary
    add_tensor_summary argscope auto_reuse_variable_scope backup_collection
    build_placeholders cached_name_scope check_tf_keras_version check_tower_function
    custom_getter_scope dependency_of_fetches dependency_of_targets
    enable_argscope_for_function enable_argscope_for_module enable_tf_layers
    ensure_tower_rules format_violations freeze_collection freeze_variables
    get_arg_scope get_current_tower_context get_op_tensor_name handle_to_predictor
    has_own_variables is_main_training_tower remap_variables resolve_devices
    restore_collection session_config_for_devices tower_reuse under_name_scope
    under_variable_scope validate_input_signature visible_gpu_count
    FLOAT32 POLICIES Precision cast_inputs current_precision low_precision_variables
    precision_policy precision_scope with_precision
    """,
    "callbacks": """
    AllOf AnyOf AtLastStep BestEntry BestKPlan BestKResume BestKState
    BinaryClassificationStats Callback CallbackError CallbackFactory CallbackToHook
    Callbacks CheckNumerics ClassificationError CometMLMonitor Confusion
    DataParallelInferenceRunner DumpTensorAsImage DumpTensors EARLY_STOPPING_MODES
    EPOCH_ENDS_KEPT EarlyStopping EarlyStoppingState EnableCallbackIf EpochMultiple
    EstimatedTimeLeft EventKind EveryK Firing GPUMemoryTracker GPUUtilizationTracker
    GlobalStepMultiple GraphProfiler GraphVarParam HParamsMonitor HookToCallback
    HookedSession HostMemoryTracker HumanHyperParamSetter HyperParam HyperParamSetter
    HyperParamSetterWithFunc InferenceRunner InferenceRunnerBase Inferencer
    InheritedCheckpoints InjectShell JSONWriter LoopBounds LoopEvent LoopPosition
    MLflowMonitor MaxSaver MeanState MergeAllSummaries MinSaver MissingStatError
    ModelSaver MonitorBase Monitors MovingAverageSummary NON_FINITE_TOKENS Not
    ObjAttrParam OnKinds OnSchedule ParallelIterable ParallelStartError
    ParallelTimeoutError ParallelWorkerError PeriodicCallback PeriodicTrigger
    PiecewiseSchedule ProcessTensors ProgressBar ProxyCallback PrunePlan RunOp
    RunUpdateOps ScalarPrinter ScalarStats Schedule ScheduledHyperParamSetter
    SendMonitorData SendStat SessionRunTimeout SimpleMovingAverage StartProcOrThread
    StatMonitorParamSetter StatMonitorRule StatMonitorState StatsFileError StopTraining
    SwapEMAWeights TFEventWriter TFLocalCLIDebugHook Tally TensorPrinter
    ThroughputTracker TimedTrigger TimelineEntry TimerState TrainerView Trigger
    VariableRow WallClockInterval WandbMonitor WorkerPlan advance advance_early_stopping
    advance_timer all_of any_of check_file_name confusion_add confusion_from_partial
    confusion_partial count_steps decode_stat describe_trainable_vars dumps_stats
    encode_stat epoch_line estimate_time_left execution_ends execution_faults
    file_name_problem fires firing_kinds format_stat format_timeline improves
    iter_timeline loads_stats loop_events mean_add mean_from_partial mean_partial
    mean_values negate piecewise_schedule plan_best_k plan_inherited plan_pruning
    precision_recall rank_entries read_stats_file resume_best_k schedule_point
    scheduled_value should_change should_stop sum_partials tally_add tally_from_partial
    tally_partial tally_ratio timeline timeline_firings value_at value_in_effect
    variable_table
    """,
    "trainers": """
    ALLREDUCE_MODES AccumGradOptimizer AllReduceChoice AsyncMultiGPUTrainer
    AutoResumeTrainConfig Chain CheckGradient ClusterPlacement ClusterTimeouts
    CollectiveError DEFAULT_CALLBACKS DEFAULT_MONITORS DataParallelBuilder
    DatasetFactory DistributedTrainerBase DistributedTrainerParameterServer
    DistributedTrainerReplicated DummyConstantInput EMAOptimizer FeedInput
    FilterNoneGrad GlobalNormClip GradientProcessor HorovodJob HorovodTrainer
    InputDataError InputProducerError InputSignatureError InputSizeUnknownError
    InputSource InputTimeoutError IterableInput LOCK_FILENAME LOGDIR_ACTIONS
    LeastLoadedDeviceSetter LockOwner LogdirLock LogdirLockedError LogdirNotEmptyError
    LogdirSnapshot LossScaleError LossScaleMonitor LossScaleOptimizer LossScaleSchedule
    MapGradient ModelDesc ModelDescBase NewSessionCreator NoOpTrainer NumpyInput
    OptimizerFactory PREEMPTED_EXIT_STATUS PostProcessOptimizer PreemptionPolicy
    PrintGradient ProxyOptimizer RankFailure ResumePlan ReuseSessionCreator
    ScaleGradient SessionCreatorAdapter SimpleTrainer SingleCostTrainer SlurmStep
    StagingInput SummaryGradient SyncMultiGPUTrainer SyncMultiGPUTrainerParameterServer
    SyncMultiGPUTrainerReplicated TFDatasetInput TaskAddress TaskLostError TensorInput
    TowerTrainer TowerVariableMismatchError TrainConfig Trainer TrainerStateError
    TrainingPreempted UnregisteredInputError VariableAssignmentOptimizer XlaCompileError
    aggregate_grads
    allreduce_grads apply_default_prefetch apply_grad_processors chain
    choose_allreduce_mode cluster_placement cluster_server ema_decay exit_is_retryable
    expand_hostlist expand_tasks_per_node format_lock get_default_sess_config
    get_global_step_value get_global_step_var get_tf_version_tuple launch_horovod_job
    launch_train_with_config lock_verdict loop_outcome make_replicas_local
    match_tower_variables next_loss_scale parse_lock plan_logdir position_fault
    resumable_position resume_plan serve_parameters session_creator_for_devices
    slurm_placement slurm_step sync_replicas_op tf_config_placement
    """,
    "export": """
    FeedfreePredictor InferenceOptimizationError ModelExporter MultiTowerOfflinePredictor
    OfflinePredictor
    PredictConfig PredictSpec SimpleDatasetPredictor UnknownTensorError
    """,
    "layers": """
    AvgPooling BNReLU BatchNorm BatchRenorm BilinearUpSample ConcatWith Conv2D
    Conv2DTranspose Deconv2D Dropout FixedUnPooling FullyConnected GlobalAvgPooling
    InstanceNorm L1Regularizer L2Regularizer LayerNorm LinearWrap MaxPooling Maxout
    PReLU VariableHolder disable_layer_logging get_registered_layer l1_regularizer
    l2_regularizer layer_register regularize_cost regularize_cost_from_collection
    rename_tflayer_get_variable
    RNNCell BasicRNNCell BasicLSTMCell LSTMCell GRUCell MultiRNNCell DropoutWrapper
    ResidualWrapper LSTMStateTuple static_rnn dynamic_rnn bidirectional_dynamic_rnn
    LSTMBlockCell LSTMBlockFusedCell GRUBlockCell GRUBlockCellV2
    """,
}
"""The public names of each towerkit lib (its ``__all__``), checked against the libs by a test."""

LIB_OF: dict[str, str] = {n: lib for lib, names in _LIB_NAMES.items() for n in names.split()}
"""Name to the towerkit lib that holds it (``StopTraining``: its home, ``callbacks``)."""

KEPT_MODULES = ("tensorpack.dataflow", "tensorpack.utils")
"""tensorpack modules whose names stay on tensorpack (DataFlows keep working)."""

DATAFLOW_NAMES = frozenset(
    [
        "DataFlow",
        "RNGDataFlow",
        "ProxyDataFlow",
        "DataFromList",
        "DataFromGenerator",
        "DataFromIterable",
        "BatchData",
        "BatchDataByShape",
        "MapData",
        "MapDataComponent",
        "FixedSizeData",
        "RepeatedData",
        "RepeatedDataPoint",
        "PrefetchData",
        "PrefetchDataZMQ",
        "MultiProcessRunner",
        "MultiProcessRunnerZMQ",
        "MultiThreadMapData",
        "MultiProcessMapData",
        "MultiProcessMapDataZMQ",
        "MultiThreadRunner",
        "LocallyShuffleData",
        "ConcatData",
        "JoinData",
        "SelectComponent",
        "FakeData",
        "RandomMixData",
        "CacheData",
        "PrintData",
        "TestDataSpeed",
        "RandomChooseData",
        "LMDBSerializer",
        "NumpySerializer",
        "AugmentImageComponent",
        "AugmentImageComponents",
        "AugmentImageCoordinates",
        "imgaug",
        "dataset",
        "DataFlowTerminated",
        "DataFromQueue",
        "HDF5Data",
        "HDF5Serializer",
        "TFRecordSerializer",
        "SVMLightData",
        "ImageFromFile",
        "LMDBData",
        "LMDBDataDecoder",
        "CaffeLMDB",
        "MultiProcessMapAndBatchData",
        "MultiProcessMapAndBatchDataZMQ",
        "MultiProcessPrefetchData",
        "MultiThreadPrefetchData",
        "RemoteDataZMQ",
        "send_dataflow_zmq",
    ]
)
"""Names of ``tensorpack.dataflow`` that a ``from tensorpack import *`` program may use."""

DATAFLOW_NAMES |= frozenset(
    name
    for name, fate in tensorpack_fates()["tensorpack.dataflow"].items()
    if fate.kind in ("keep", "remove")
)

UTILS_NAMES = frozenset(
    [
        "get_rng",
        "fix_rng_seed",
        "get_tqdm",
        "execute_only_once",
        "change_env",
        "humanize_time_delta",
    ]
)
"""Names of ``tensorpack.utils`` that a ``from tensorpack import *`` program may use."""

UTILS_NAMES |= frozenset(
    name for name, fate in tensorpack_fates()["tensorpack.utils"].items() if fate.kind == "keep"
)

RENAMED = {"InputDesc": "tf.TensorSpec", "QueueInput": "IterableInput"} | {
    name: fate.new_name
    for names in tensorpack_fates().values()
    for name, fate in names.items()
    if fate.kind == "convert" and fate.home.startswith("towerkit.") and fate.new_name != name
}
"""tensorpack names the command rewrites into a towerkit (or TensorFlow) one: the record's
aliases (``TowerFuncWrapper`` is ``TowerFunc``) and the two whose calls change."""

GONE = {
    "BatchQueueInput": "batch the DataFlow (BatchData) and read it with IterableInput",
    "MultiThreadAsyncPredictor": "call an OfflinePredictor from your own threads",
    "FeedfreeInput": "subclass InputSource",
    "BytePSTrainer": "use HorovodTrainer (towerkit.trainers)",
    "QueueInputTrainer": "use SimpleTrainer with IterableInput",
    "ZMQInput": "read the DataFlow in the trainer's process with IterableInput(df, workers=N)",
    "PlaceholderInput": "use FeedInput or IterableInput",
    "remap_input_source": "rename the inputs in the model's inputs() instead",
    "DataParallelOfflinePredictor": "use MultiTowerOfflinePredictor (towerkit.export)",
    "DatasetPredictorBase": "use SimpleDatasetPredictor (towerkit.export)",
    "MultiProcessDatasetPredictor": "use SimpleDatasetPredictor (towerkit.export)",
    "PredictorBase": "subclass OnlinePredictor (towerkit.towers) or call an OfflinePredictor",
    "collect_env_info": "print tf.sysconfig.get_build_info() and the versions you need",
    "KerasModel": "build the model in a ModelDesc (towerkit.layers, or a tf.keras model "
    "called inside build_graph) and train it with a towerkit trainer",
    "KerasPhaseCallback": "a Keras model called in a tower reads the training phase from "
    "the tower context (TowerContext.is_training): pass training= yourself",
    "TFDatasetInput.dataflow_to_dataset": "pass the DataFlow to IterableInput",
}
GONE |= {
    name: fate.why
    for names in tensorpack_fates().values()
    for name, fate in names.items()
    if fate.kind == "report"
}
"""tensorpack names without a towerkit counterpart, and what to write instead (the record's
``report`` fates, and names of tensorpack's older releases and contrib modules)."""

REMOVED = {
    name: fate.why
    for names in tensorpack_fates().values()
    for name, fate in names.items()
    if fate.kind == "remove"
}
"""Wrappers whose calls are replaced by their first argument (``PrintData(df)`` by ``df``)."""


KEEP_TENSORPACK = "pip install tensorpack==0.11"
"""The install line of the tensorpack that a program keeping its DataFlows or utilities needs."""

MODULE_HOMES = {
    "tensorpack.tfutils.optimizer": "towerkit.trainers",
    "tensorpack.tfutils.gradproc": "towerkit.trainers",
    "tensorpack.tfutils.summary": "towerkit.towers",
    "tensorpack.tfutils.tower": "towerkit.towers",
    "tensorpack.tfutils.scope_utils": "towerkit.towers",
    "tensorpack.tfutils.varreplace": "towerkit.towers",
    "tensorpack.tfutils.model_utils": "towerkit.callbacks",
    "tensorpack.tfutils.sessinit": "towerkit.sessinit",
    "tensorpack.tfutils.compat.tfv1": "tensorflow.compat.v1",
    "tensorpack.compat.tfv1": "tensorflow.compat.v1",
    "tensorpack.tfv1": "tensorflow.compat.v1",
    "tensorpack.predict": "towerkit.export",
    "tensorpack.callbacks": "towerkit.callbacks",
    "tensorpack.models": "towerkit.layers",
    "tensorpack.train": "towerkit.trainers",
    "tensorpack.input_source": "towerkit.trainers",
    "tensorpack.summary": "towerkit.towers",
    "tensorpack.tower": "towerkit.towers",
    "tensorpack.varreplace": "towerkit.towers",
    "tensorpack.optimizer": "towerkit.trainers",
    "tensorpack.gradproc": "towerkit.trainers",
    "tensorpack.sesscreate": "towerkit.trainers",
    "tensorpack.sessinit": "towerkit.sessinit",
    "tensorpack.tfutils.sesscreate": "towerkit.trainers",
}
"""tensorpack modules imported as modules (``from tensorpack.tfutils import summary``, also
``from tensorpack import summary``) and the module that holds their names after migration
(imported under the same name)."""

STAR_MODULES = {
    name.rpartition(".")[2]: home for name, home in MODULE_HOMES.items() if name.count(".") == 1
} | {"dataflow": "tensorpack.dataflow", "utils": "tensorpack.utils"}
"""Modules that ``from tensorpack import *`` binds (``summary.add_moving_summary(...)`` after
it) and their home after migration; ``dataflow`` and ``utils`` stay on tensorpack."""

STAR_ONLY = frozenset(["tfutils", "graph_builder", "compat", "libinfo", "STATICA_HACK"])
"""What else ``from tensorpack import *`` binds (besides the names towerkit maps, the
DataFlows, the utilities, ``logger`` and `GONE`): nothing towerkit has a counterpart for."""


def home_of(name: str, module: str = "tensorpack") -> str | None:
    """The module a name imported from tensorpack `module` comes from after migration.

    ``towerkit.<lib>`` for names towerkit holds, the tensorpack module itself for the
    DataFlow and utility modules, and None for a name with no home (done by hand).

    Examples:
        >>> home_of("ModelDesc")
        'towerkit.trainers'
        >>> home_of("Conv2D", "tensorpack.models")
        'towerkit.layers'
        >>> home_of("BatchData", "tensorpack.dataflow")
        'tensorpack.dataflow'
        >>> home_of("BatchData")
        'tensorpack.dataflow'
        >>> home_of("QueueInput")
        'towerkit.trainers'
        >>> home_of("NoSuchThing") is None
        True
    """
    if module.startswith(KEPT_MODULES):
        return module
    name = RENAMED.get(name, name)
    if name in LIB_OF:
        return f"towerkit.{LIB_OF[name]}"
    if name in DATAFLOW_NAMES:
        return "tensorpack.dataflow"
    if name in UTILS_NAMES:
        return "tensorpack.utils"
    return None
