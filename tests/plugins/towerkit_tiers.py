"""A pytest plugin that keeps each test in its tier: a test that starts a process is ``procs``.

The noxfile loads it (``-p towerkit_tiers``) in every test run of ``nox -t ci``. An audit
hook (PEP 578) sees each process the pytest process starts (``subprocess.Popen``,
``os.fork``, ``os.posix_spawn``, ``os.exec*``); a test that starts one during its setup,
call or teardown without the ``procs`` mark fails with the command and the mark to add,
so a new test cannot land in the wrong tier. Processes started by the processes a test
starts are not seen (and need not be).

It also keeps the flake gate's own matrices out of every other run: a test marked
``flake_gate`` (a fault matrix too long for each run of ``nox -t ci``) is deselected
unless the environment sets ``TOWERKIT_FLAKE_GATE=1``, as ``nox -s flake_gate`` does.
Name such a test on the command line with that variable set to run it
(``TOWERKIT_FLAKE_GATE=1 pytest -p towerkit_tiers libs/trainers/tests/test_phase_faults.py``).

And it loads the hypothesis profile of every run: no deadline per example and no "too
slow" health check. Both measure wall time, which on a loaded 2-core CI machine says how
busy the machine is, not whether the test is right (a property test failed the health
check once at a load of 12 and passed alone). A test's own ``@settings`` still wins.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Generator
from typing import Any

import pytest

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # a run without property tests
    pass
else:
    settings.register_profile(
        "towerkit", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("towerkit")

# The standard library starts `uname -p` the first time anything asks for the processor's
# name, then keeps the answer: ask now, so the first test to reach such a call is not
# charged with a process it did not start.
platform.processor()

_EVENTS = {
    "subprocess.Popen",
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.spawn",
    "os.exec",
    "os.system",
}
_started: list[str] = []

GATE_VARIABLE = "TOWERKIT_FLAKE_GATE"
"""Set to ``1`` (by ``nox -s flake_gate``) to run the tests marked ``flake_gate``."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in _EVENTS:
        what = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:1]
        _started.append(f"{event}: {str(what)[:200]}")


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator:
    """Forget what earlier tests started (their processes are theirs)."""
    del item, nextitem
    _started.clear()
    return (yield)


def _check(item: pytest.Item, phase: str) -> None:
    if not _started or item.get_closest_marker("procs") is not None:
        return
    started = _started[:3]
    _started.clear()
    msg = (
        f"{item.nodeid} starts a process in its {phase} ({'; '.join(started)}) but is not in"
        " the process tier: mark it @pytest.mark.procs (see the noxfile's docstring)"
    )
    pytest.fail(msg, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator:
    """A fixture of the test that starts a process puts the test in the process tier."""
    result = yield
    _check(item, "setup")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator:
    """The test itself."""
    result = yield
    _check(item, "call")
    return result


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ``flake_gate`` tests unless `GATE_VARIABLE` is ``1``."""
    if os.environ.get(GATE_VARIABLE) == "1":
        return
    gated = [item for item in items if item.get_closest_marker("flake_gate") is not None]
    if gated:
        config.hook.pytest_deselected(items=gated)
        items[:] = [item for item in items if item.get_closest_marker("flake_gate") is None]
