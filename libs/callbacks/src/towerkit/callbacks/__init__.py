"""towerkit.callbacks: callbacks, monitors, hyper-parameter setters, schedules and triggers."""

from towerkit.callbacks._base import (
    HOOK_METHODS,
    Callback,
    CallbackFactory,
    Callbacks,
    ProxyCallback,
)
from towerkit.callbacks._errors import CallbackError, MissingStatError, StopTraining
from towerkit.callbacks._graph import (
    CheckNumerics,
    DumpTensorAsImage,
    DumpTensors,
    ProcessTensors,
    RunOp,
    RunUpdateOps,
)
from towerkit.callbacks._hooked import HookedSession
from towerkit.callbacks._hooks import CallbackToHook, HookToCallback, TFLocalCLIDebugHook
from towerkit.callbacks._inference import (
    BinaryClassificationStats,
    ClassificationError,
    Confusion,
    DataParallelInferenceRunner,
    Inferencer,
    InferenceRunner,
    InferenceRunnerBase,
    MeanState,
    ScalarStats,
    Tally,
    confusion_add,
    mean_add,
    mean_values,
    precision_recall,
    tally_add,
    tally_ratio,
)
from towerkit.callbacks._loop import EventKind, LoopEvent, LoopPosition, count_steps, loop_events
from towerkit.callbacks._misc import EstimatedTimeLeft, InjectShell, StartProcOrThread
from towerkit.callbacks._monitors import (
    CometMLMonitor,
    JSONWriter,
    MonitorBase,
    Monitors,
    ScalarPrinter,
    SendMonitorData,
    SendStat,
    TFEventWriter,
)
from towerkit.callbacks._params import (
    GraphVarParam,
    HumanHyperParamSetter,
    HyperParam,
    HyperParamSetter,
    HyperParamSetterWithFunc,
    ObjAttrParam,
    ScheduledHyperParamSetter,
    StatMonitorParamSetter,
)
from towerkit.callbacks._periodic import (
    EnableCallbackIf,
    PeriodicCallback,
    PeriodicTrigger,
    periodic_record,
)
from towerkit.callbacks._profiler import GraphProfiler
from towerkit.callbacks._savers import MaxSaver, MinSaver, ModelSaver
from towerkit.callbacks._schedules import (
    OnSchedule,
    PiecewiseSchedule,
    Schedule,
    piecewise_schedule,
    schedule_point,
    scheduled_value,
    value_at,
    value_in_effect,
)
from towerkit.callbacks._stats import StatMonitorState, advance, estimate_time_left, should_change
from towerkit.callbacks._steps import ProgressBar, SessionRunTimeout, TensorPrinter
from towerkit.callbacks._summaries import (
    MergeAllSummaries,
    MovingAverageSummary,
    SimpleMovingAverage,
    summary_due,
)
from towerkit.callbacks._timeline import (
    Firing,
    TimelineEntry,
    format_timeline,
    timeline,
    timeline_entry,
)
from towerkit.callbacks._trackers import (
    GPUMemoryTracker,
    GPUUtilizationTracker,
    HostMemoryTracker,
    ThroughputTracker,
)
from towerkit.callbacks._triggers import (
    AllOf,
    AnyOf,
    AtLastStep,
    EpochMultiple,
    EveryK,
    GlobalStepMultiple,
    Not,
    OnKinds,
    Trigger,
    all_of,
    any_of,
    fires,
    firing_kinds,
    negate,
    trainer_event,
)
from towerkit.callbacks._types import TrainerView
from towerkit.callbacks._version import __version__

__all__ = [
    "__version__",
    # the loop, pure
    "EventKind",
    "LoopEvent",
    "LoopPosition",
    "loop_events",
    "count_steps",
    # base
    "Callback",
    "ProxyCallback",
    "CallbackFactory",
    "Callbacks",
    "HOOK_METHODS",
    "HookedSession",
    "TrainerView",
    "StopTraining",
    "CallbackError",
    "MissingStatError",
    # monitors
    "MonitorBase",
    "Monitors",
    "TFEventWriter",
    "JSONWriter",
    "ScalarPrinter",
    "SendMonitorData",
    "SendStat",
    "CometMLMonitor",
    # statistics, pure
    "estimate_time_left",
    "should_change",
    "StatMonitorState",
    "advance",
    # triggers
    "PeriodicTrigger",
    "PeriodicCallback",
    "EnableCallbackIf",
    "periodic_record",
    "Trigger",
    "EveryK",
    "GlobalStepMultiple",
    "EpochMultiple",
    "AtLastStep",
    "OnKinds",
    "AnyOf",
    "AllOf",
    "Not",
    "any_of",
    "all_of",
    "negate",
    "fires",
    "firing_kinds",
    "trainer_event",
    # hyper-parameters and schedules
    "HyperParam",
    "GraphVarParam",
    "ObjAttrParam",
    "HyperParamSetter",
    "HumanHyperParamSetter",
    "ScheduledHyperParamSetter",
    "StatMonitorParamSetter",
    "HyperParamSetterWithFunc",
    "Schedule",
    "PiecewiseSchedule",
    "piecewise_schedule",
    "value_at",
    "value_in_effect",
    "OnSchedule",
    "scheduled_value",
    "schedule_point",
    # savers
    "ModelSaver",
    "MinSaver",
    "MaxSaver",
    # timeline, pure
    "timeline",
    "timeline_entry",
    "format_timeline",
    "Firing",
    "TimelineEntry",
    # graph
    "RunOp",
    "RunUpdateOps",
    "ProcessTensors",
    "DumpTensors",
    "DumpTensorAsImage",
    "CheckNumerics",
    # hooks
    "CallbackToHook",
    "HookToCallback",
    "TFLocalCLIDebugHook",
    # inference
    "Inferencer",
    "ScalarStats",
    "ClassificationError",
    "BinaryClassificationStats",
    "InferenceRunnerBase",
    "InferenceRunner",
    "DataParallelInferenceRunner",
    # inference statistics, pure
    "MeanState",
    "mean_add",
    "mean_values",
    "Tally",
    "tally_add",
    "tally_ratio",
    "Confusion",
    "confusion_add",
    "precision_recall",
    # summaries
    "MovingAverageSummary",
    "MergeAllSummaries",
    "SimpleMovingAverage",
    "summary_due",
    # steps and misc
    "ProgressBar",
    "TensorPrinter",
    "SessionRunTimeout",
    "StartProcOrThread",
    "InjectShell",
    "EstimatedTimeLeft",
    # trackers and profiling
    "ThroughputTracker",
    "HostMemoryTracker",
    "GPUUtilizationTracker",
    "GPUMemoryTracker",
    "GraphProfiler",
]
