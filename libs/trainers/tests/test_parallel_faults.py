"""Parallel input on the sources users write (DataFlows), and every fault of a pool named."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import textwrap
import time

import prefork
import pytest
from parallel_script import STEPS_PER_EPOCH, Model
from parallel_sources import Blocks, EmptyFlow, Indexed, Streamed, UserFlow

from towerkit.callbacks import (
    InferenceRunner,
    ParallelIterable,
    ParallelTimeoutError,
    ParallelWorkerError,
    ScalarStats,
)
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    InputTimeoutError,
    IterableInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)

pytestmark = pytest.mark.procs

HERE = os.path.dirname(os.path.abspath(__file__))


def script_env() -> dict[str, str]:
    """This environment, with this folder (``parallel_sources``) on the import path."""
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")


def run_script(tmp_path, body: str, *wrap: str, args=(), timeout: float = 300):
    """Write `body` as a script and run it with `args` (under the `wrap` command, if any)."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    argv = [*wrap, sys.executable, str(script), *args]
    runner = prefork.run if not wrap else _plain_run
    return script, runner(argv, env=script_env(), timeout=timeout)


def _plain_run(argv, env, timeout):
    import subprocess

    return subprocess.run(argv, env=env, timeout=timeout, capture_output=True, text=True)


def train(tmp_path, data, callbacks=(), epochs=1):
    """Train the one-weight model of ``parallel_script`` on `data` in this process."""
    config = TrainConfig(
        model=Model(),
        data=data,
        callbacks=list(callbacks),
        max_epoch=epochs,
        steps_per_epoch=STEPS_PER_EPOCH,
        logdir=str(tmp_path / "log"),
    )
    with tf1.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())


class TestCopies:
    """A source without an index (a DataFlow) gets a copy per worker: its work done once."""

    def test_each_worker_iterates_its_own_copy(self):
        """The plan is ``copies``, unordered; a pass is the source's length; the copies
        are reset and shuffled their own way, and the datapoints are the source's."""
        pool = ParallelIterable(UserFlow(40, cost_s=0.002, tagged=True), 2)
        assert (pool.plan.split, pool.plan.ordered, pool.plan.pass_length) == ("copies", False, 40)
        assert len(pool) == 40
        try:
            passes = [list(pool) for _ in range(3)]
        finally:
            pool.close()
        assert [len(p) for p in passes] == [40, 40, 40]
        for p in passes:
            assert all(0 <= int(dp[0][0, 0]) < 40 for dp in p)
        by_pid: dict[int, list[int]] = {}
        for p in passes:
            for dp in p:
                by_pid.setdefault(dp[1], []).append(int(dp[0][0, 0]))
        for values in by_pid.values():
            # a copy's first pass is a permutation of the source: no repeat within it
            first = values[:40]
            assert len(set(first)) == len(first)

    def test_work_is_done_once_not_per_worker(self):
        """Fails if the source's work is done N times: the datapoints the copies made in
        all are those delivered, plus at most what the workers' queues hold."""
        workers, capacity, n = 2, 4, 30
        pool = ParallelIterable(UserFlow(n, tagged=True), workers, capacity=capacity)
        try:
            got = [dp for _ in range(4) for dp in pool]
        finally:
            pool.close()
        made: dict[int, int] = {}
        for _, pid, count in got:
            made[pid] = max(made.get(pid, 0), count)
        delivered = len(got)
        assert delivered == 4 * n
        # each worker may have made `capacity` queued datapoints and one more in hand
        assert delivered <= sum(made.values()) <= delivered + workers * (capacity + 1), made

    def test_no_split_doing_the_work_n_times_without_a_word(self, caplog):
        """``stride`` (every worker iterates all, keeps its share) is chosen only when order
        is asked for, and then with a warning naming the forms that pay, once per type."""
        with caplog.at_level(logging.WARNING):
            assert ParallelIterable(Streamed(4), 2).plan.split == "copies"
            assert ParallelIterable(UserFlow(4), 3, ordered=False).plan.split == "copies"
            assert not caplog.records
            assert ParallelIterable(Streamed(4), 2, ordered=True).plan.split == "stride"
            assert ParallelIterable(Streamed(5), 2, ordered=True).plan.split == "stride"
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) <= 1, "once per source type"
        if warned:  # an earlier test in this process may have warned for Streamed already
            assert "work is done 2 times over" in warned[0]
            assert "leave 'ordered' out" in warned[0]
            assert "__len__ and __getitem__" in warned[0]
            assert "function (worker, workers)" in warned[0]

    def test_stride_warning(self, caplog):
        """The warning itself, for a type not seen before in this process."""

        class OrderedFlow(Streamed):
            pass

        with caplog.at_level(logging.WARNING):
            ParallelIterable(OrderedFlow(4), 3, ordered=True, start_method="fork")
            ParallelIterable(OrderedFlow(4), 3, ordered=True, start_method="fork")
        (record,) = caplog.records
        assert re.search(
            r"ParallelIterable\(.*OrderedFlow, workers=3, ordered=True\): the source has no "
            r"__getitem__.*its work is done 3 times over",
            record.getMessage(),
        )

    def test_a_copy_yielding_nothing_is_named(self):
        """A copy whose pass yields no datapoint is the worker's error, not a silent spin."""
        pool = ParallelIterable(EmptyFlow(), 2, timeout=60)
        with pytest.raises(
            ParallelWorkerError, match=r"(?s)pass 1 of this worker's copy .*no datapoint"
        ):
            list(pool)
        assert pool.pids == []

    def test_training_on_a_user_flow(self, tmp_path):
        """``IterableInput(flow, workers=2)`` trains on the flow's datapoints; the input's
        size is the flow's length."""
        source = IterableInput(UserFlow(STEPS_PER_EPOCH, cost_s=0.001), workers=2)
        assert source.size() == STEPS_PER_EPOCH
        train(tmp_path, source, epochs=2)
        records = json.loads((tmp_path / "log" / "stats.json").read_text())
        assert [r["epoch_num"] for r in records] == [1, 2]
        assert source.iterable.pids == []


class TestTimeouts:
    """A pool read anywhere waits at most its `timeout`, with IterableInput's words."""

    def test_pool_timeout(self):
        """A blocked worker ends the pass with `ParallelTimeoutError`; the pool stops."""
        pool = ParallelIterable(Blocks(), 2, timeout=5)
        start = time.monotonic()
        got = []

        def drain():
            for dp in pool:
                got.append(dp)

        with pytest.raises(ParallelTimeoutError) as info:
            drain()
        assert time.monotonic() - start < 60
        assert len(got) == 1
        assert re.fullmatch(
            r"ParallelIterable\(Blocks, workers=2\): the iterable gave no datapoint for "
            r"5\.\d s \(timeout=5 s\), waiting for datapoint #1 of pass 1; it is blocked "
            r"or too slow: fix the producer, or give ParallelIterable a larger 'timeout'",
            str(info.value),
        ), str(info.value)
        assert pool.pids == []

    @pytest.mark.parametrize("bad", [0, -1.0, "5", True])
    def test_fail(self, bad):
        """A timeout that is not a positive number is refused."""
        with pytest.raises(ValueError, match=r"'timeout' must be a number of seconds > 0"):
            ParallelIterable(Indexed(2), 2, timeout=bad)

    def test_inference_runner_is_bounded(self, tmp_path):
        """An ``InferenceRunner`` over a pool whose source blocks stops training within the
        pool's timeout, naming the pool; both pools' workers stop."""
        val = ParallelIterable(Blocks(), 2, timeout=2)
        data = IterableInput(Indexed(STEPS_PER_EPOCH), workers=1)
        start = time.monotonic()
        with pytest.raises(
            ParallelTimeoutError,
            match=r"ParallelIterable\(Blocks, workers=2\): the iterable gave no datapoint",
        ):
            train(tmp_path, data, [InferenceRunner(val, [ScalarStats("cost")])])
        assert time.monotonic() - start < 300
        assert val.pids == []
        assert data.iterable.pids == []

    def test_iterable_input_over_a_timed_pool(self, tmp_path):
        """Training from a pool with its own timeout fails as the input's timeout does."""
        source = IterableInput(ParallelIterable(Blocks(), 2, timeout=2))
        with pytest.raises(InputTimeoutError, match=r"gave no datapoint for .*timeout=2 s"):
            train(tmp_path, source)
        assert source.iterable.pids == []


class TestStart:
    """Workers that cannot start are refused or named, at once, with what to do."""

    def test_refuses_more_workers_than_the_machine_can_start(self):
        """100000 workers are refused when the pool is built, naming the tightest limit."""
        with pytest.raises(
            ValueError, match=r"'workers' must be at most \d+ on this machine \(.+\); got 100000"
        ):
            ParallelIterable(Indexed(4), 100000)

    @pytest.mark.parametrize("method", ["forkserver", "spawn"])
    def test_a_worker_that_cannot_start_is_one_clean_error(self, tmp_path, method):
        """Out of files while starting: one traceback, `ParallelStartError`, the workers
        started are stopped, and nothing more is printed at exit."""
        _, done = run_script(
            tmp_path,
            """
            import os, resource, sys
            from parallel_sources import Indexed
            from towerkit.callbacks import ParallelIterable

            if __name__ == "__main__":
                method = sys.argv[1]
                first = ParallelIterable(Indexed(2), 1, start_method=method)
                list(first)  # the fork server runs, with files enough
                first.close()
                pool = ParallelIterable(Indexed(8), 40, start_method=method)
                _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                in_use = len(os.listdir("/proc/self/fd"))
                # room for the first few workers' pipes, not for 40
                resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 8, hard))
                list(pool)
            """,
            args=[method],
        )
        err = done.stderr
        assert done.returncode == 1, err
        assert err.count("Traceback") == 1, err
        assert re.search(
            r"ParallelStartError: .*worker \d+ of 40 could not start \(OSError: .*Too many "
            r"open files.*\); the \d+ started were stopped",
            err,
        ), err
        assert "give fewer workers" in err
        assert "AttributeError" not in err, err
        assert "Exception ignored" not in err, err

    def test_script_without_main_guard_is_named_at_once(self, tmp_path):
        """A script starting the pool at its top level is refused before any worker
        starts (each would run the script again), naming the file, the line, the fix."""
        script, done = run_script(
            tmp_path,
            """
            print("SCRIPT RUN", flush=True)
            from parallel_sources import Indexed
            from towerkit.callbacks import ParallelIterable

            pool = ParallelIterable(Indexed(4), 2)
            print(list(pool))
            """,
        )
        assert done.returncode == 1, done.stderr
        assert done.stdout.count("SCRIPT RUN") == 1, "no worker ran the script again"
        assert (
            f"the main module {script} starts the workers from its top-level code (line 7)"
            in done.stderr
        )
        assert 'Put the training code under `if __name__ == "__main__":`' in done.stderr
        assert done.stderr.count("Traceback") == 1, done.stderr

    def test_guarded_script_runs(self, tmp_path):
        """The same script under the guard runs, and gives the datapoints."""
        _, done = run_script(
            tmp_path,
            """
            from parallel_sources import Indexed
            from towerkit.callbacks import ParallelIterable

            if __name__ == "__main__":
                pool = ParallelIterable(Indexed(4), 2)
                print([int(dp[0][0, 0]) for dp in pool])
            """,
        )
        assert done.returncode == 0, done.stderr
        assert "[0, 1, 2, 3]" in done.stdout

    def test_script_edited_while_it_runs(self, tmp_path):
        """The guard is read from the code that runs, not from the file: a script whose
        file changed since it started (lines added above the guard) still runs."""
        _, done = run_script(
            tmp_path,
            """
            from parallel_sources import Indexed
            from towerkit.callbacks import ParallelIterable

            if __name__ == "__main__":
                text = open(__file__).read()
                open(__file__, "w").write("x = 1\\n" * 40 + text)
                pool = ParallelIterable(Indexed(4), 2)
                print([int(dp[0][0, 0]) for dp in pool])
            """,
        )
        assert done.returncode == 0, done.stderr
        assert "[0, 1, 2, 3]" in done.stdout

    def test_main_module_failing_in_a_worker_is_named(self, tmp_path):
        """A worker that dies while multiprocessing imports the main module in it is named
        as such (not as "out of memory? killed from outside?")."""
        script, done = run_script(
            tmp_path,
            """
            if __name__ == "__mp_main__":
                raise RuntimeError("this script cannot be imported by a worker")
            from parallel_sources import Indexed
            from towerkit.callbacks import ParallelIterable

            if __name__ == "__main__":
                list(ParallelIterable(Indexed(4), 2))
            """,
        )
        err = done.stderr
        assert done.returncode == 1, err
        assert "ParallelStartError" in err, err
        assert re.search(r"worker \d \(pid \d+\) exited with code 1 before it started", err), err
        assert f"importing the main module ({script}, as __mp_main__)" in err
        assert "out of memory" not in err


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"
)
def test_full_dev_shm_falls_back_to_the_pipe(tmp_path):
    """/dev/shm of 1 MiB (a tmpfs in a private mount namespace) and datapoints of 8 MiB:
    the workers say once that shared memory is full and send through their pipes; every
    datapoint arrives whole, no worker dies of SIGBUS."""
    _, done = run_script(
        tmp_path,
        """
        import numpy as np
        from parallel_sources import Large
        from towerkit.callbacks import ParallelIterable

        if __name__ == "__main__":
            pool = ParallelIterable(Large(6, nbytes=4 << 20), 2)
            for _ in range(2):
                for i, (big, small, side) in enumerate(pool):
                    assert big.shape == (1 << 20,) and (big == i).all(), i
                    assert small.tolist() == [i] and (side == -i).all(), i
            pool.close()
            print("ALL WHOLE", flush=True)
        """,
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$@"',
        "sh",
    )
    if "mount:" in done.stderr and done.returncode != 0:
        pytest.skip(f"no tmpfs mount here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ALL WHOLE" in done.stdout
    assert "SIGBUS" not in done.stderr
    warned = re.findall(
        r"shared memory \(/dev/shm\) is full .*shared_memory_min_bytes=None", done.stderr
    )
    assert 1 <= len(warned) <= 2, done.stderr  # once per worker that tried a block
