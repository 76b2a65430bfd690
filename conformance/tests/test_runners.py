"""Runners of multi-process jobs: ports, barriers, timeouts, failures reported, nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from towerkit.conformance import Capabilities, LaunchError, TrainerEntry
from towerkit.conformance._catalog import LOOP
from towerkit.conformance._cluster import cluster_server, file_barrier
from towerkit.conformance._session import ClusterRunner, free_ports, run_cluster_job

pytestmark = pytest.mark.slow

CLUSTER = TrainerEntry(
    name="cluster-simple",
    factory="towerkit.conformance._factories:simple_trainer",
    capabilities=Capabilities(launcher="tf-distributed", processes=2),
)


class TestFreePorts:
    """`free_ports`."""

    def test_distinct(self):
        """Ports are distinct and bindable numbers."""
        ports = free_ports(5)
        assert len(set(ports)) == 5
        assert all(1024 <= p < 65536 for p in ports)


BARRIER_CHILD = """
import sys, time
from pathlib import Path
from towerkit.conformance._cluster import file_barrier
rank, delay = int(sys.argv[2]), float(sys.argv[3])
time.sleep(delay)
file_barrier(Path(sys.argv[1]), 0, rank, 2, 60)
print(time.monotonic())
"""


@pytest.mark.procs
class TestFileBarrier:
    """`file_barrier` between real processes."""

    def test_waits_for_the_slowest(self, tmp_path):
        """Both processes leave the barrier after the slower one arrives."""
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", BARRIER_CHILD, str(tmp_path), str(r), str(d)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for r, d in ((0, 0.0), (1, 1.5))
        ]
        started = time.monotonic()
        outs = [p.communicate(timeout=60)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0]
        assert time.monotonic() - started >= 1.5
        assert sorted(os.listdir(tmp_path)) == ["0-0", "0-1"]
        assert all(out.strip() for out in outs)

    def test_timeout_names_the_missing(self, tmp_path):
        """A worker that never arrives is named."""
        with pytest.raises(
            TimeoutError, match=r"workers \[1, 2\] did not reach scenario 3 within 0.2 s"
        ):
            file_barrier(tmp_path, 3, 0, 3, 0.2)


class TestClusterServer:
    """`cluster_server` outside a cluster job."""

    def test_fail(self):
        """It says where it works."""
        with pytest.raises(RuntimeError, match="only in a worker of a conformance cluster job"):
            cluster_server()


@pytest.mark.procs
class TestClusterJob:
    """A real cluster job stopped by its timeout."""

    def test_timeout_stops_every_process(self, tmp_path):
        """Past the timeout the job reports -1 and no process of it is left."""
        job = {
            "entry": {
                "name": CLUSTER.name,
                "factory": CLUSTER.factory,
                "capabilities": {"launcher": "tf-distributed", "processes": 2},
            },
            "scenarios": [],
            "workdir": str(tmp_path / "logs"),
            "out": str(tmp_path / "out"),
            "cluster": {
                "ps": [f"127.0.0.1:{free_ports(1)[0]}"],
                "worker": [f"127.0.0.1:{p}" for p in free_ports(2)],
            },
        }
        (tmp_path / "out").mkdir()
        path = tmp_path / "job.json"
        path.write_text(json.dumps(job))
        code, output, seconds = run_cluster_job(path, workers=2, timeout=3, cwd=tmp_path)
        assert code == -1
        assert seconds < 60
        assert "--- ps0 ---" in output
        assert "--- worker1 ---" in output
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert str(path) not in ps

    def test_runner_reports_the_failure(self, tmp_path):
        """A job without results raises LaunchError naming the scenarios, every time asked."""
        runner = ClusterRunner(CLUSTER, tmp_path, lambda: [LOOP], processes=2, timeout=3)
        with pytest.raises(
            LaunchError, match=r"exited with status -1 .* scenarios without results: \['loop'\]"
        ):
            runner.run(LOOP)
        with pytest.raises(LaunchError, match="scenarios without results"):
            runner.run(LOOP)


class TestLogdirReadBy:
    """Which rank reads the shared log directory after a run."""

    def test_only_rank_0(self, tmp_path):
        """Rank 0 reports the chief's files; another rank reports none, though they are there.

        Every rank of a job shares the log directory; a rank that ends before the chief
        would read it while the chief's savers still write and delete checkpoints.
        """
        from towerkit.conformance._catalog import BEST_K
        from towerkit.conformance._execute import execute

        entry = TrainerEntry(
            name="simple", factory="towerkit.conformance._factories:simple_trainer"
        )
        scenario = BEST_K["plain"]
        chief = execute(entry, scenario, tmp_path / "a", rank=0)
        other = execute(entry, scenario, tmp_path / "b", rank=1)
        assert chief.error is None
        assert other.error is None
        assert chief.best_steps
        assert chief.saved_steps
        assert chief.checkpoint_state
        assert any(f.endswith(".index") for f in chief.files)
        assert sorted(os.listdir(tmp_path / "b" / "bestk")) == sorted(chief.files)
        assert (other.files, other.best_steps, other.saved_steps) == ((), (), ())
        assert (other.checkpoint_state, other.stats) == ((), "null")
