"""Large arrays of a parallel input through shared memory: the same values, no block left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import prefork
import pytest
from parallel_sources import Large

from towerkit.callbacks import ParallelIterable, ParallelWorkerError

pytestmark = pytest.mark.procs

SHM = "/dev/shm"
needs_dev_shm = pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm to list blocks")


def blocks_of(pid: int) -> list[str]:
    """The shared memory blocks of the pools of process `pid` still in /dev/shm."""
    return sorted(n for n in os.listdir(SHM) if n.startswith(f"tk{pid}_"))


def check(dp, i: int, nbytes: int = 1 << 20) -> None:
    big, small, side = dp
    assert big.shape == (nbytes // 4,)
    assert big.dtype == np.float32
    assert (big == i).all()
    assert small.tolist() == [i]
    assert side.flags.f_contiguous
    assert side.shape == (256, nbytes // 2048)
    assert (side == -i).all()


def wait_until(what, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.1)
    return what()


@needs_dev_shm
class TestPool:
    """Workers send large arrays through blocks; every way of stopping removes them."""

    @pytest.mark.parametrize("ordered", [True, False])
    def test_values_and_no_block_left(self, ordered):
        """Two passes of large datapoints arrive equal (in order when ordered); closing
        mid-pass, with datapoints waiting in the pipes, leaves no block."""
        pool = ParallelIterable(Large(12), 2, ordered=ordered, capacity=3)
        try:
            for _ in range(2):
                got = list(pool)
                order = [int(dp[1][0]) for dp in got]
                assert order == list(range(12)) if ordered else sorted(order) == list(range(12))
                for dp in got:
                    check(dp, int(dp[1][0]))
            it = iter(pool)
            check(next(it), 0) if ordered else next(it)
            assert wait_until(lambda: len(blocks_of(os.getpid())) > 0)
        finally:
            pool.close()
        assert blocks_of(os.getpid()) == []

    def test_disabled_uses_the_pipe(self):
        """With shared_memory_min_bytes=None no block is ever made."""
        pool = ParallelIterable(Large(6, sleep_s=0.05), 2, shared_memory_min_bytes=None)
        try:
            it = iter(pool)
            for i in range(3):
                check(next(it), i)
                assert blocks_of(os.getpid()) == []
        finally:
            pool.close()

    def test_worker_killed(self):
        """A worker SIGKILLed mid-pass is named; closing leaves no block."""
        pool = ParallelIterable(Large(40, sleep_s=0.02), 2, capacity=4)
        try:
            it = iter(pool)
            check(next(it), 0)
            os.kill(pool.pids[1], signal.SIGKILL)
            with pytest.raises(ParallelWorkerError, match="worker 1"):
                list(it)
        finally:
            pool.close()
        assert wait_until(lambda: blocks_of(os.getpid()) == [])


PARENT = """
import sys, time
sys.path.insert(0, {tests!r})
from parallel_sources import Large
from towerkit.callbacks import ParallelIterable
if __name__ == "__main__":
    pool = ParallelIterable(Large(1000), 2, capacity=4)
    it = iter(pool)
    next(it)
    print("PIDS", *pool.pids, flush=True)
    time.sleep(600)
"""


@needs_dev_shm
def test_parent_sigkilled_leaves_no_block(tmp_path):
    """The training process SIGKILLed with blocks waiting: its workers exit and the
    resource tracker removes the blocks."""
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(tests=os.path.dirname(__file__)))
    proc = prefork.popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("PIDS"), line + proc.stderr.read()
        assert wait_until(lambda: len(blocks_of(proc.pid)) >= 2)
    finally:
        proc.kill()
        proc.wait()
    workers = [int(p) for p in line.split()[1:]]
    assert wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in workers))
    assert wait_until(lambda: blocks_of(proc.pid) == [], within=20), blocks_of(proc.pid)
