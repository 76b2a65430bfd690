"""Three simulated hosts for the whole run, cleaned between tests, removed whatever happens."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from simhosts import SimulatedHosts, missing_requirements

HOSTS = 3


def _interrupt(signum, frame):
    # SIGTERM (a CI job cancelled, a timeout) becomes KeyboardInterrupt: pytest then runs
    # the fixtures' teardown, which removes the namespaces and the bridge
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def sim_hosts():
    """`HOSTS` namespaces with sshd, for the session; the test is skipped when impossible."""
    missing = missing_requirements()
    if missing:
        if os.environ.get("TOWERKIT_REQUIRE_HOSTS"):
            pytest.fail(f"simulated hosts required but missing: {', '.join(missing)}")
        pytest.skip(f"simulated hosts need {', '.join(missing)} (run nox -s hosts)")
    previous = signal.signal(signal.SIGTERM, _interrupt)
    made = SimulatedHosts(HOSTS)
    try:
        yield made
    finally:
        made.close()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def hosts(sim_hosts):
    """The session's hosts, every link up and no process but sshd left after the test."""
    yield sim_hosts
    keep = {p.pid for p in sim_hosts.sshd}
    for index in range(len(sim_hosts.names)):
        for pid in sim_hosts.pids(index):
            if pid not in keep:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        sim_hosts.reconnect(index)
