"""The lib's version and public names."""

import ast
import importlib
import importlib.metadata
from pathlib import Path

import pytest

import towerkit.callbacks as lib


class TestVersion:
    """`__version__` matches the installed distribution."""

    def test_matches_metadata(self):
        """The module's version is the distribution's version."""
        assert lib.__version__ == importlib.metadata.version("towerkit-callbacks")


class TestAll:
    """Every name in `__all__` is importable from the lib."""

    def test_in_all(self):
        """Each `__all__` entry resolves to an attribute."""
        mod = importlib.import_module("towerkit.callbacks")
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert missing == []
        assert len(set(mod.__all__)) == len(mod.__all__)


def type_checking_imports() -> dict[str, str]:
    """``{name: module}`` for the imports under ``if TYPE_CHECKING:`` in the package's ``__init__``."""
    mod = importlib.import_module("towerkit.callbacks")
    tree = ast.parse(Path(mod.__file__).read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.unparse(stmt)
                found.update({a.name: stmt.module.rsplit(".", 1)[1] for a in stmt.names})
    return found


class TestLazyShells:
    """The shells that need TensorFlow are looked up lazily, from one explicit table."""

    def test_table_matches_type_checking_imports(self):
        """``_SHELLS`` and the ``TYPE_CHECKING`` imports name the same names and modules."""
        mod = importlib.import_module("towerkit.callbacks")
        assert type_checking_imports() == mod._SHELLS
        assert len(mod._SHELLS) > 50

    def test_all_is_core_plus_shells(self):
        """``__all__`` is the eagerly imported core plus every shell, nothing else."""
        mod = importlib.import_module("towerkit.callbacks")
        tree = ast.parse(Path(mod.__file__).read_text(encoding="utf-8"))
        eager = {
            a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names
        }
        eager -= {"TYPE_CHECKING"}
        assert set(mod.__all__) == eager | set(mod._SHELLS)
        assert not eager & set(mod._SHELLS)

    def test_shell_resolves_to_its_module(self):
        """Each shell is the object its module defines, and is cached on the package."""
        mod = importlib.import_module("towerkit.callbacks")
        for name, module in mod._SHELLS.items():
            value = getattr(mod, name)
            assert value is getattr(importlib.import_module(f"towerkit.callbacks.{module}"), name)
            assert vars(mod)[name] is value
        assert set(mod.__all__) <= set(dir(mod))

    def test_unknown_name(self):
        """An unknown attribute raises AttributeError naming the module and the name."""
        mod = importlib.import_module("towerkit.callbacks")
        with pytest.raises(
            AttributeError, match=r"module 'towerkit.callbacks' has no attribute 'Nope'"
        ):
            mod.Nope  # noqa: B018


_BEFORE_TEXT = """
    AllOf AnyOf AtLastStep BinaryClassificationStats Callback CallbackError
    CallbackFactory CallbackToHook Callbacks CheckNumerics ClassificationError
    CometMLMonitor Confusion DataParallelInferenceRunner DumpTensorAsImage DumpTensors
    EARLY_STOPPING_MODES EPOCH_ENDS_KEPT EarlyStopping EarlyStoppingState
    EnableCallbackIf EpochMultiple EstimatedTimeLeft EventKind EveryK Firing
    GPUMemoryTracker GPUUtilizationTracker GlobalStepMultiple GraphProfiler
    GraphVarParam HookToCallback HookedSession HostMemoryTracker HumanHyperParamSetter
    HyperParam HyperParamSetter HyperParamSetterWithFunc InferenceRunner
    InferenceRunnerBase Inferencer InheritedCheckpoints InjectShell JSONWriter
    LoopBounds LoopEvent LoopPosition MaxSaver MeanState MergeAllSummaries MinSaver
    MissingStatError ModelSaver MonitorBase Monitors MovingAverageSummary
    NON_FINITE_TOKENS Not ObjAttrParam OnKinds OnSchedule PeriodicCallback
    PeriodicTrigger PiecewiseSchedule ProcessTensors ProgressBar ProxyCallback PrunePlan
    RunOp RunUpdateOps ScalarPrinter ScalarStats Schedule ScheduledHyperParamSetter
    SendMonitorData SendStat SessionRunTimeout SimpleMovingAverage StartProcOrThread
    StatMonitorParamSetter StatMonitorState StatsFileError StopTraining TFEventWriter
    TFLocalCLIDebugHook Tally TensorPrinter ThroughputTracker TimelineEntry TrainerView
    Trigger VariableRow __version__ advance advance_early_stopping all_of any_of
    check_file_name check_steps_per_execution coarse_step_faults confusion_add
    count_steps decode_stat dumps_stats encode_stat epoch_line estimate_time_left
    execution_ends execution_faults file_name_problem fires firing_kinds format_stat
    format_timeline improves iter_timeline loads_stats loop_events mean_add mean_values
    negate periodic_record piecewise_schedule plan_inherited plan_pruning
    precision_recall read_stats_file schedule_point scheduled_value should_change
    should_stop stop_process_group tally_add tally_ratio timeline timeline_entry
    timeline_firings trainer_event value_at value_in_effect variable_table
"""
BEFORE = frozenset(_BEFORE_TEXT.split())
"""The public names before plumbing moved out of them (the lib's ``__all__`` before this change)."""


def unreleased_changelog() -> str:
    """The Unreleased section of the lib's CHANGELOG.md."""
    text = (Path(__file__).parents[1] / "CHANGELOG.md").read_text(encoding="utf-8")
    section = text.split("## Unreleased", 1)[1]
    return section.split("\n## ", 1)[0]


class TestPublicNames:
    """The public names change only as the changelog says; moved plumbing still resolves."""

    def test_same_as_before_but_the_changelog(self):
        """Every name added to or removed from ``__all__`` is listed in the Unreleased changes."""
        changed = set(lib.__all__) ^ BEFORE
        section = unreleased_changelog()
        unlisted = sorted(n for n in changed if f"`{n}`" not in section)
        assert unlisted == []
        assert set(lib._MOVED) <= BEFORE - set(lib.__all__)

    def test_moved_plumbing(self):
        """A moved name is plumbing's object, found at the old place with a DeprecationWarning."""
        import towerkit.callbacks.plumbing as plumbing

        for name in lib._MOVED:
            assert name in plumbing.__all__
            with pytest.warns(DeprecationWarning, match=f"towerkit.callbacks.{name} moved to "):
                old = getattr(lib, name)
            assert old is getattr(plumbing, name)
            assert name not in dir(lib)

    def test_plumbing_is_documented_as_such(self):
        """The module says whom it is for and that it promises no stability."""
        import towerkit.callbacks.plumbing as plumbing

        assert "for towerkit's own libs" in plumbing.__doc__
        assert "no stability promise" in plumbing.__doc__
        missing = [n for n in plumbing.__all__ if not hasattr(plumbing, n)]
        assert missing == []
