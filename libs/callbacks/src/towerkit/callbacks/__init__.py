"""towerkit.callbacks: callbacks, monitors, hyper-parameter setters, schedules and triggers.

The lib has two layers. The functional core (the loop's event stream, triggers,
schedules, stat-monitor decisions, inference statistics and the timeline) needs only
attrs and NumPy: it is imported with the package, and importing it never loads
TensorFlow. The callbacks, monitors and hooks (the shells over that core) need
TensorFlow: each is imported from its module the first time it is looked up
(``towerkit.callbacks.ModelSaver``, ``from towerkit.callbacks import ModelSaver``),
so a program that uses only the core (the ``timeline`` tool) runs without TensorFlow.
Every public name is listed in ``__all__`` and imported explicitly below, for readers
and type checkers.
"""

import importlib
import warnings
from typing import TYPE_CHECKING

# The functional core: no TensorFlow.
from towerkit.callbacks._console import VariableRow, epoch_line, format_stat, variable_table
from towerkit.callbacks._errors import (
    CallbackError,
    MissingStatError,
    ParallelWorkerError,
    StatsFileError,
    StopTraining,
)
from towerkit.callbacks._inference_stats import (
    Confusion,
    MeanState,
    Tally,
    confusion_add,
    mean_add,
    mean_values,
    precision_recall,
    tally_add,
    tally_ratio,
)
from towerkit.callbacks._loop import (
    EventKind,
    LoopBounds,
    LoopEvent,
    LoopPosition,
    count_steps,
    loop_events,
)
from towerkit.callbacks._multistep import (
    execution_ends,
    execution_faults,
)
from towerkit.callbacks._parallel import ParallelIterable
from towerkit.callbacks._parallel_core import WorkerPlan
from towerkit.callbacks._paths import check_file_name, file_name_problem
from towerkit.callbacks._pruning import (
    EPOCH_ENDS_KEPT,
    InheritedCheckpoints,
    PrunePlan,
    plan_inherited,
    plan_pruning,
)
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
from towerkit.callbacks._stats import (
    EARLY_STOPPING_MODES,
    EarlyStoppingState,
    StatMonitorRule,
    StatMonitorState,
    advance,
    advance_early_stopping,
    estimate_time_left,
    improves,
    should_change,
    should_stop,
)
from towerkit.callbacks._stats_file import (
    NON_FINITE_TOKENS,
    decode_stat,
    dumps_stats,
    encode_stat,
    loads_stats,
    read_stats_file,
)
from towerkit.callbacks._timeline import (
    Firing,
    TimelineEntry,
    format_timeline,
    iter_timeline,
    timeline,
    timeline_firings,
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
)
from towerkit.callbacks._types import TrainerView
from towerkit.callbacks._version import __version__

if TYPE_CHECKING:
    # The shells, imported on first use (see `_SHELLS` and `__getattr__`).
    from towerkit.callbacks._base import (
        Callback,
        CallbackFactory,
        Callbacks,
        ProxyCallback,
    )
    from towerkit.callbacks._early_stopping import EarlyStopping
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
    from towerkit.callbacks._hyperparams import GraphVarParam, HyperParam, ObjAttrParam
    from towerkit.callbacks._inference_runners import (
        DataParallelInferenceRunner,
        InferenceRunner,
        InferenceRunnerBase,
    )
    from towerkit.callbacks._inferencers import (
        BinaryClassificationStats,
        ClassificationError,
        Inferencer,
        ScalarStats,
    )
    from towerkit.callbacks._misc import EstimatedTimeLeft, InjectShell, StartProcOrThread
    from towerkit.callbacks._monitor_hub import MonitorBase, Monitors
    from towerkit.callbacks._periodic import EnableCallbackIf, PeriodicCallback, PeriodicTrigger
    from towerkit.callbacks._profiler import GraphProfiler
    from towerkit.callbacks._savers import MaxSaver, MinSaver, ModelSaver
    from towerkit.callbacks._senders import CometMLMonitor, SendMonitorData, SendStat
    from towerkit.callbacks._setters import (
        HumanHyperParamSetter,
        HyperParamSetter,
        HyperParamSetterWithFunc,
        ScheduledHyperParamSetter,
        StatMonitorParamSetter,
    )
    from towerkit.callbacks._steps import ProgressBar, SessionRunTimeout, TensorPrinter
    from towerkit.callbacks._summaries import (
        MergeAllSummaries,
        MovingAverageSummary,
        SimpleMovingAverage,
    )
    from towerkit.callbacks._trackers import (
        GPUMemoryTracker,
        GPUUtilizationTracker,
        HostMemoryTracker,
        ThroughputTracker,
    )
    from towerkit.callbacks._writers import (
        JSONWriter,
        ScalarPrinter,
        TFEventWriter,
        describe_trainable_vars,
    )

_SHELLS = {
    "Callback": "_base",
    "CallbackFactory": "_base",
    "Callbacks": "_base",
    "ProxyCallback": "_base",
    "CheckNumerics": "_graph",
    "DumpTensorAsImage": "_graph",
    "DumpTensors": "_graph",
    "ProcessTensors": "_graph",
    "RunOp": "_graph",
    "RunUpdateOps": "_graph",
    "HookedSession": "_hooked",
    "CallbackToHook": "_hooks",
    "HookToCallback": "_hooks",
    "TFLocalCLIDebugHook": "_hooks",
    "GraphVarParam": "_hyperparams",
    "HyperParam": "_hyperparams",
    "ObjAttrParam": "_hyperparams",
    "DataParallelInferenceRunner": "_inference_runners",
    "InferenceRunner": "_inference_runners",
    "InferenceRunnerBase": "_inference_runners",
    "BinaryClassificationStats": "_inferencers",
    "ClassificationError": "_inferencers",
    "Inferencer": "_inferencers",
    "ScalarStats": "_inferencers",
    "EstimatedTimeLeft": "_misc",
    "InjectShell": "_misc",
    "StartProcOrThread": "_misc",
    "MonitorBase": "_monitor_hub",
    "Monitors": "_monitor_hub",
    "EnableCallbackIf": "_periodic",
    "PeriodicCallback": "_periodic",
    "PeriodicTrigger": "_periodic",
    "GraphProfiler": "_profiler",
    "MaxSaver": "_savers",
    "MinSaver": "_savers",
    "EarlyStopping": "_early_stopping",
    "ModelSaver": "_savers",
    "CometMLMonitor": "_senders",
    "SendMonitorData": "_senders",
    "SendStat": "_senders",
    "HumanHyperParamSetter": "_setters",
    "HyperParamSetter": "_setters",
    "HyperParamSetterWithFunc": "_setters",
    "ScheduledHyperParamSetter": "_setters",
    "StatMonitorParamSetter": "_setters",
    "ProgressBar": "_steps",
    "SessionRunTimeout": "_steps",
    "TensorPrinter": "_steps",
    "MergeAllSummaries": "_summaries",
    "MovingAverageSummary": "_summaries",
    "SimpleMovingAverage": "_summaries",
    "GPUMemoryTracker": "_trackers",
    "GPUUtilizationTracker": "_trackers",
    "HostMemoryTracker": "_trackers",
    "ThroughputTracker": "_trackers",
    "JSONWriter": "_writers",
    "ScalarPrinter": "_writers",
    "TFEventWriter": "_writers",
    "describe_trainable_vars": "_writers",
}
"""Each public name that needs TensorFlow, and the private module that defines it."""


_MOVED = (
    "check_steps_per_execution",
    "coarse_step_faults",
    "periodic_record",
    "stop_process_group",
    "timeline_entry",
    "trainer_event",
)
"""Plumbing moved to `towerkit.callbacks.plumbing`: still found here, with a
DeprecationWarning, for one release (see CHANGELOG.md)."""


def __getattr__(name: str) -> object:
    """Import the shell `name` from its module on first use (PEP 562)."""
    if name in _MOVED:
        warnings.warn(
            f"towerkit.callbacks.{name} moved to towerkit.callbacks.plumbing (plumbing for "
            "towerkit's own libs, no stability promise); the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"{__name__}.plumbing"), name)
    module = _SHELLS.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "__version__",
    # the loop, pure
    "EventKind",
    "LoopBounds",
    "LoopEvent",
    "LoopPosition",
    "loop_events",
    "count_steps",
    "execution_ends",
    "execution_faults",
    # base
    "Callback",
    "ProxyCallback",
    "CallbackFactory",
    "Callbacks",
    "HookedSession",
    "TrainerView",
    "StopTraining",
    "CallbackError",
    "MissingStatError",
    "StatsFileError",
    # parallel Python input (no TensorFlow)
    "ParallelIterable",
    "ParallelWorkerError",
    "WorkerPlan",
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
    "StatMonitorRule",
    "StatMonitorState",
    "advance",
    "improves",
    "EARLY_STOPPING_MODES",
    "EarlyStoppingState",
    "advance_early_stopping",
    "should_stop",
    # the console, pure
    "VariableRow",
    "epoch_line",
    "format_stat",
    "variable_table",
    # stats.json and file names, pure
    "NON_FINITE_TOKENS",
    "encode_stat",
    "decode_stat",
    "describe_trainable_vars",
    "dumps_stats",
    "loads_stats",
    "read_stats_file",
    "check_file_name",
    "file_name_problem",
    # triggers
    "PeriodicTrigger",
    "PeriodicCallback",
    "EnableCallbackIf",
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
    # hyper-parameters and schedules
    "HyperParam",
    "GraphVarParam",
    "ObjAttrParam",
    "HyperParamSetter",
    "HumanHyperParamSetter",
    "ScheduledHyperParamSetter",
    "StatMonitorParamSetter",
    "HyperParamSetterWithFunc",
    "EarlyStopping",
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
    "iter_timeline",
    "timeline_firings",
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
    # steps and misc
    "EPOCH_ENDS_KEPT",
    "PrunePlan",
    "plan_pruning",
    "InheritedCheckpoints",
    "plan_inherited",
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
