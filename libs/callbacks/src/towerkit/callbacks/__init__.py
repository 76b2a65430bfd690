"""towerkit.callbacks: callbacks, monitors, hyper-parameter setters, schedules and triggers."""

from towerkit.callbacks._base import (
    HOOK_METHODS,
    Callback,
    CallbackFactory,
    Callbacks,
    ProxyCallback,
)
from towerkit.callbacks._errors import CallbackError, MissingStatError, StopTraining
from towerkit.callbacks._hooked import HookedSession
from towerkit.callbacks._loop import EventKind, LoopEvent, LoopPosition, count_steps, loop_events
from towerkit.callbacks._monitors import MonitorBase, Monitors
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
from towerkit.callbacks._schedules import (
    OnSchedule,
    PiecewiseSchedule,
    Schedule,
    piecewise_schedule,
    scheduled_value,
    value_at,
    value_in_effect,
)
from towerkit.callbacks._stats import StatMonitorState, advance, estimate_time_left, should_change
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
]
