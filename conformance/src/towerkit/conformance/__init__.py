"""towerkit.conformance: the documented semantics of trainers as an executable, reusable suite."""

from towerkit.conformance._entries import (
    CAPABILITY_NAMES,
    Capabilities,
    TrainerEntry,
    capabilities_of,
    entries_from,
    parse_target,
    select_entries,
    takes_model,
)
from towerkit.conformance._errors import ConformanceError, EntryError, LaunchError
from towerkit.conformance._factories import (
    BUILTIN_ENTRIES,
    builtin_entries,
    missing_builtin_entries,
)
from towerkit.conformance._model import SuiteModel, sgd_step
from towerkit.conformance._report import GROUPS, render_table
from towerkit.conformance._result import RunResult
from towerkit.conformance._scenario import (
    AutoResumeSpec,
    BestSaverSpec,
    CallbackSpec,
    EnableIfSpec,
    FuncSpec,
    LoopSpec,
    MarkerSpec,
    PeriodicCallbackSpec,
    PeriodicTriggerSpec,
    ProbeSpec,
    SaverSpec,
    Scenario,
    ScheduleSpec,
    StatMonitorSpec,
    StatSpec,
    TowersSpec,
    VariablesSpec,
    scenario_from_data,
    scenario_to_data,
)
from towerkit.conformance._trace import TraceEvent, trace_of
from towerkit.conformance._version import __version__

__all__ = [
    "__version__",
    # -- trainer rows --
    "TrainerEntry",
    "Capabilities",
    "CAPABILITY_NAMES",
    "BUILTIN_ENTRIES",
    "builtin_entries",
    "missing_builtin_entries",
    "capabilities_of",
    "entries_from",
    "parse_target",
    "select_entries",
    "takes_model",
    "SuiteModel",
    "sgd_step",
    # -- scenarios and traces --
    "Scenario",
    "LoopSpec",
    "CallbackSpec",
    "ProbeSpec",
    "PeriodicTriggerSpec",
    "PeriodicCallbackSpec",
    "EnableIfSpec",
    "ScheduleSpec",
    "FuncSpec",
    "StatSpec",
    "StatMonitorSpec",
    "SaverSpec",
    "BestSaverSpec",
    "MarkerSpec",
    "VariablesSpec",
    "TowersSpec",
    "AutoResumeSpec",
    "scenario_to_data",
    "scenario_from_data",
    "TraceEvent",
    "trace_of",
    "RunResult",
    # -- reports and errors --
    "GROUPS",
    "render_table",
    "ConformanceError",
    "EntryError",
    "LaunchError",
]
