"""The pytest plugin of the conformance suite: options, the trainer table, fixtures, the summary.

Loaded through the ``pytest11`` entry point of towerkit-conformance. It adds:

- ``--trainer MODULE:ATTR`` (repeatable): run the suite on these rows instead of
  the built-in table. ``ATTR`` is a trainer factory, a `TrainerEntry` or a list of
  them; ``--trainer builtin`` adds the built-in rows, ``--trainer NAME`` one of them.
- ``--conformance-report PATH``: write a JUnit XML report (``--junitxml``) there;
  each test case carries ``trainer``, ``group`` and ``spec`` properties.
- ``--conformance-examples N``: hypothesis examples per property check and trainer.

Importing it does not import TensorFlow: the suite's modules load when its tests run.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from towerkit.conformance._entries import TrainerEntry
    from towerkit.conformance._result import RunResult
    from towerkit.conformance._scenario import Scenario
    from towerkit.conformance._session import InProcessRunner, JobRunner
    from towerkit.conformance._suite import ConformanceSession

_STATE = pytest.StashKey["_State"]()


class _State:
    """Per-run state: the options, the selected rows, the outcomes for the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.targets: list[str] = list(config.getoption("conformance_trainers") or [])
        self.examples: int | None = config.getoption("conformance_examples")
        self.report: str | None = config.getoption("conformance_report")
        self.invocation_dir = config.invocation_params.dir
        self._entries: list[TrainerEntry] | None = None
        self.missing: list[str] = []
        self.outcomes: dict[str, dict[str, list[str]]] = {}

    def entries(self) -> list[TrainerEntry]:
        if self._entries is None:
            # MODULE:ATTR resolves as with `python -m`: from the directory pytest runs in too
            here = str(self.invocation_dir)
            if self.targets and here not in sys.path:
                sys.path.insert(0, here)
            from towerkit.conformance._entries import select_entries
            from towerkit.conformance._errors import EntryError
            from towerkit.conformance._factories import builtin_entries, missing_builtin_entries

            try:
                self._entries = select_entries(self.targets, builtin_entries())
            except EntryError as err:
                raise pytest.UsageError(str(err)) from err
            if not self.targets:
                self.missing = [e.name for e in missing_builtin_entries()]
            for entry in self._entries:
                self.outcomes.setdefault(entry.name, {})
        return self._entries


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the suite's options (``--trainer``, ``--conformance-report``, ``--conformance-examples``)."""
    group = parser.getgroup("towerkit-conformance", "towerkit conformance suite")
    group.addoption(
        "--trainer",
        action="append",
        default=[],
        dest="conformance_trainers",
        metavar="MODULE:ATTR",
        help=(
            "run the conformance suite on this trainer (repeatable): a factory, a TrainerEntry "
            "or a list of them, as MODULE:ATTR; 'builtin' adds the shipped trainers, a row's "
            "name adds that row. Default: every shipped trainer."
        ),
    )
    group.addoption(
        "--conformance-report",
        dest="conformance_report",
        metavar="PATH",
        default=None,
        help="write the conformance results as JUnit XML to PATH (same as --junitxml=PATH)",
    )
    group.addoption(
        "--conformance-examples",
        dest="conformance_examples",
        type=int,
        default=None,
        metavar="N",
        help="hypothesis examples per property check and trainer (default: 5)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, read the options, install the summary; --conformance-report sets --junitxml."""
    config.addinivalue_line(
        "markers", "conformance_group(name): the group of a conformance check in the summary"
    )
    config.addinivalue_line(  # pytest-timeout's, where it is not installed
        "markers", "timeout(seconds): the longest a test may run (pytest-timeout)"
    )
    state = _State(config)
    config.stash[_STATE] = state
    config.pluginmanager.register(_Reporter(state), "towerkit-conformance-reporter")
    if state.targets:
        state.entries()
    if state.report and not getattr(config.option, "xmlpath", None):
        path = os.path.abspath(state.report)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        config.option.xmlpath = path


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``trainer_entry`` with the selected rows of the trainer table."""
    if "trainer_entry" not in metafunc.fixturenames:
        return
    entries = metafunc.config.stash[_STATE].entries()
    metafunc.parametrize("trainer_entry", [_param(e) for e in entries])


def _param(entry: TrainerEntry) -> Any:
    """`entry` as a parameter; a multi-process trainer's checks share one ``xdist_group``.

    Under ``pytest -n N --dist loadgroup`` the checks of a group go to one worker, which
    launches the trainer's job once for all of them: each worker has runners of its
    own, so checks spread over two workers would launch the whole job twice. The check
    that launches the job waits for it, so each may take as long as a job may
    (``JOB_TIMEOUT``, then the job is stopped and reported) under pytest-timeout.
    """
    from towerkit.conformance._session import JOB_TIMEOUT

    if entry.capabilities.launcher == "inprocess":
        return pytest.param(entry, id=entry.name)
    group = pytest.mark.xdist_group(f"conformance-{entry.name}")
    limit = pytest.mark.timeout(int(JOB_TIMEOUT) + 120)  # the job's, then stop it and read
    return pytest.param(entry, id=entry.name, marks=[group, limit])


def _group(item: pytest.Item) -> str:
    marker = item.get_closest_marker("conformance_group")
    if marker is not None and marker.args:
        return str(marker.args[0])
    module = getattr(item, "module", None)
    name = getattr(module, "__name__", "").rsplit(".", 1)[-1]
    return name.removeprefix("test_") or "other"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each check the ``trainer``, ``group`` and ``spec`` properties of the report."""
    del config
    for item in items:
        callspec = getattr(item, "callspec", None)
        entry = callspec.params.get("trainer_entry") if callspec is not None else None
        if entry is None:
            continue
        doc = (getattr(item, "obj", None).__doc__ or "").strip().splitlines()
        item.user_properties.append(("trainer", entry.name))
        item.user_properties.append(("group", _group(item)))
        if doc:
            item.user_properties.append(("spec", doc[0]))


@pytest.fixture(scope="session")
def conformance_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ConformanceSession:
    """The suite's shared state: a runner per trainer, drawn examples (see `ConformanceSession`)."""
    from towerkit.conformance._suite import DEFAULT_EXAMPLES, ConformanceSession

    examples = request.config.stash[_STATE].examples or DEFAULT_EXAMPLES
    return ConformanceSession(tmp_path_factory.mktemp("conformance"), examples)


class _Runner:
    """What a check uses: ``run(scenario)`` gives one result per process of the trainer.

    A scenario that does not apply to the trainer skips the check, with the reason.
    """

    def __init__(self, entry: TrainerEntry, runner: InProcessRunner | JobRunner) -> None:
        self.entry = entry
        self._runner = runner

    @property
    def in_process(self) -> bool:
        """Whether the trainer runs in this process (else in a multi-process job)."""
        return bool(self._runner.in_process)

    def run(self, scenario: Scenario) -> list[RunResult]:
        from towerkit.conformance._suite import not_applicable

        reason = not_applicable(self.entry, scenario)
        if reason is not None:
            pytest.skip(reason)
        return self._runner.run(scenario)


@pytest.fixture
def conformance_runner(
    trainer_entry: TrainerEntry, conformance_session: ConformanceSession
) -> _Runner:
    """The runner of the test's trainer; skips horovod rows when horovod is not installed."""
    from towerkit.conformance._session import HOROVOD_SKIP, horovod_available

    if trainer_entry.capabilities.launcher == "horovod" and not horovod_available():
        pytest.skip(HOROVOD_SKIP)
    return _Runner(trainer_entry, conformance_session.runner(trainer_entry))


class _Reporter:
    """Collects the outcome of every conformance check and prints the trainer x group table."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.outcomes: dict[str, dict[str, list[str]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        trainer, group = props.get("trainer"), props.get("group")
        if not isinstance(trainer, str) or not isinstance(group, str):
            return
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            outcome = report.outcome
        elif report.when == "teardown" and report.outcome == "failed":
            outcome = "failed"
        else:
            return
        self.outcomes.setdefault(trainer, defaultdict(list))[group].append(outcome)

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, config: pytest.Config
    ) -> None:
        if not self.outcomes:
            return
        from towerkit.conformance._report import render_table

        ordered = {n: self.outcomes[n] for n in self.state.outcomes if n in self.outcomes}
        for name, per in self.outcomes.items():
            ordered.setdefault(name, per)
        terminalreporter.write_sep("=", "towerkit conformance: trainer x check group")
        terminalreporter.write_line(render_table(ordered))
        if self.state.missing:
            terminalreporter.write_line(
                "not run (the installed towerkit-trainers lacks them): "
                + ", ".join(self.state.missing)
            )
        xml = getattr(config.option, "xmlpath", None)
        if xml:
            terminalreporter.write_line(f"machine-readable report (JUnit XML): {xml}")
