"""A real SLURM cluster on two simulated hosts, for the whole run, removed whatever happens."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "hosts"))  # simhosts: the network namespaces
sys.path.insert(0, str(HERE))

import simhosts  # noqa: E402
import slurmcluster  # noqa: E402

NODES = 2


def _interrupt(signum, frame):
    # SIGTERM (a CI job cancelled, a timeout) becomes KeyboardInterrupt: pytest then runs
    # the fixture's teardown, which stops the daemons and removes the namespaces
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def slurm():
    """munged, slurmctld and a slurmd per host on `NODES` simulated hosts; skipped when impossible."""
    missing = simhosts.missing_requirements() + slurmcluster.missing_requirements()
    if missing:
        why = f"a SLURM cluster needs {', '.join(missing)} (run nox -s slurm, as root)"
        if os.environ.get("TOWERKIT_REQUIRE_SLURM"):
            pytest.fail(why)
        pytest.skip(why)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    hosts = simhosts.SimulatedHosts(NODES)
    try:
        cluster = slurmcluster.SlurmCluster(hosts)
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        hosts.close()
        signal.signal(signal.SIGTERM, previous)
