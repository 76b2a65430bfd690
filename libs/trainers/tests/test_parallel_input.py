"""IterableInput(workers=N): datapoints from worker processes, in order, and every fault named."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import prefork
import pytest
from parallel_script import STEPS_PER_EPOCH, Model
from parallel_sources import (
    Augmented,
    Blocks,
    ExitsAt,
    Indexed,
    RaisesAt,
    SlowWorker,
    Streamed,
    UnpicklableAt,
    shard,
)

from towerkit.callbacks import Callback, ParallelIterable, ParallelWorkerError, WorkerPlan
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    PREEMPTED_EXIT_STATUS,
    InputProducerError,
    InputTimeoutError,
    IterableInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)

SCRIPT = os.path.join(os.path.dirname(__file__), "parallel_script.py")

pytestmark = pytest.mark.procs


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, within=10.0):
    """The pids still alive after `within` seconds (empty when all ended)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def values(pool):
    """One pass of `pool`, each datapoint's x as an int."""
    return [int(np.ravel(dp[0])[0]) for dp in pool]


class Seen(Callback):
    """Records each step's datapoint; optionally kills a worker at a step."""

    _chief_only = False

    def __init__(self, source=None, kill_worker_at=None):
        self.seen = []
        self.source = source
        self.kill_worker_at = kill_worker_at

    def _setup_graph(self):
        self.tensor = self.trainer.graph.get_tensor_by_name("seen:0")

    def _before_run(self, ctx):
        return tf1.train.SessionRunArgs(fetches=self.tensor)

    def _after_run(self, ctx, run_values):
        self.seen.append(int(run_values.results[0, 0]))
        if self.kill_worker_at == len(self.seen):
            os.kill(self.source.iterable.pids[1], signal.SIGKILL)


def train(tmp_path, source, epochs=1, seen=None):
    """Train the one-weight model on `source` in this process; the datapoints it saw."""
    seen = seen or Seen()
    config = TrainConfig(
        model=Model(),
        data=source,
        callbacks=[seen],
        max_epoch=epochs,
        steps_per_epoch=STEPS_PER_EPOCH,
        logdir=str(tmp_path / "log"),
    )
    with tf1.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    return seen.seen


class TestParallelIterable:
    """`ParallelIterable` splits, orders and seeds its workers' datapoints."""

    @pytest.mark.parametrize(
        ("make", "ordered"),
        [(lambda: Indexed(7), None), (lambda: Streamed(7), True)],
        ids=["index", "stride"],
    )
    def test_order_kept(self, make, ordered):
        """Ordered, two and three workers give one worker's order, pass after pass
        (by index by default; a source without an index only when order is asked for)."""
        for workers in (2, 3):
            pool = ParallelIterable(make(), workers, ordered=ordered)
            try:
                assert values(pool) == list(range(7))
                assert values(pool) == list(range(7))
                assert len(pool.pids) == workers
            finally:
                pool.close()
            assert pool.pids == []

    def test_unordered_workers_share_the_pass(self):
        """Unordered over an indexed source, a slow worker does not hold the pass back:
        the other takes the indices it has not reached (each index once per pass)."""
        pool = ParallelIterable(SlowWorker(40, slow=1, cost_s=0.05), 2, ordered=False)
        try:
            for _ in range(2):
                got = list(pool)
                assert sorted(int(np.ravel(dp[0])[0]) for dp in got) == list(range(40))
                by_worker = [sum(1 for dp in got if dp[1] == k) for k in (0, 1)]
                assert by_worker[0] > 2 * by_worker[1], by_worker
        finally:
            pool.close()

    def test_unordered_and_factory(self):
        """Unordered: every datapoint once per pass; a factory: worker k's own source."""
        pool = ParallelIterable(Indexed(9), 2, ordered=False)
        try:
            assert sorted(values(pool)) == list(range(9))
            assert sorted(values(pool)) == list(range(9))
        finally:
            pool.close()
        pool = ParallelIterable(shard, 2)
        try:
            assert list(pool) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (1, 3)]
        finally:
            pool.close()

    def test_seeds_differ_and_reproduce(self):
        """Augmentations differ between workers and passes, and repeat in a new pool."""
        runs = []
        for _ in range(2):
            pool = ParallelIterable(Augmented(), 2, seed=7)
            try:
                runs.append([list(pool), list(pool)])
            finally:
                pool.close()
        first, second = runs
        assert [dp[:3] for p in first for dp in p] == [dp[:3] for p in second for dp in p]
        draws = [dp[1] for dp in first[0]]
        assert len(set(draws)) == len(draws), "each worker draws its own numbers"
        assert [dp[1] for dp in first[0]] != [dp[1] for dp in first[1]], "each pass too"
        assert len({dp[3] for dp in first[0]}) == 2, "two processes produced them"

    def test_raise_names_worker_index_and_traceback(self):
        """A worker's exception ends the pass with its traceback and the datapoint's index."""
        pool = ParallelIterable(RaisesAt(8, bad=5), 2)
        got = []

        def drain():
            for dp in pool:
                got.append(int(np.ravel(dp[0])[0]))

        with pytest.raises(ParallelWorkerError) as info:
            drain()
        assert got == [0, 1, 2, 3, 4], "the datapoints before it come first"
        err = info.value
        assert (err.worker, err.index) == (1, 5)
        assert "worker 1 raised at the datapoint of index 5 (0-based)" in str(err)
        assert "ValueError: bad datapoint 5" in str(err)
        assert "parallel_sources.py" in str(err), "the worker's traceback"
        assert pool.pids == []

    @pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
    def test_worker_exiting_quietly_is_named(self, ordered):
        """A worker whose process ends without a word (``os._exit(0)`` in a library) is
        named with its exit status as soon as its pipe closes, in either order mode."""
        pool = ParallelIterable(ExitsAt(40, bad=5), 2, ordered=ordered)
        started = time.monotonic()
        with pytest.raises(ParallelWorkerError) as info:
            list(pool)
        assert time.monotonic() - started < 20
        # ordered, index 5 is worker 1's; unordered, whichever worker claimed it
        worker = info.value.worker
        assert worker == 1 if ordered else worker in (0, 1)
        assert f"worker {worker} (pid " in str(info.value)
        assert "exited with code 0 while producing datapoints" in str(info.value)
        assert pool.pids == []

    def test_queue_fill_reads_full_when_the_model_is_slow(self):
        """Each worker's pipe holds `capacity` datapoints; a slow reader sees it full."""
        pool = ParallelIterable(Indexed(200), 2, capacity=4)
        try:
            it = iter(pool)
            next(it)
            time.sleep(1.0)  # both workers fill their 4 slots meanwhile
            pool.stats()
            for _ in range(4):
                next(it)
                time.sleep(0.2)
            stats = pool.stats()
            assert stats["queue_fill"] > 0.6, stats
            assert set(stats) >= {"datapoints_per_s", "worker0_datapoints_per_s"}
        finally:
            pool.close()

    @pytest.mark.parametrize("workers", [0, -1])
    def test_refuses_no_workers(self, workers):
        """workers=0 or negative is refused when the input is built."""
        with pytest.raises(ValueError, match=rf"'workers' must be >= 1 .*got {workers}"):
            IterableInput(Indexed(3), workers=workers)

    def test_unpicklable_says_what_to_do(self):
        """A source that cannot be pickled is refused with the ways out."""
        local = [lambda: 1]
        with pytest.raises(TypeError, match=r"cannot be pickled .*start_method='fork'"):
            IterableInput(local, workers=2)
        with pytest.raises(TypeError, match=r"has its workers already"):
            IterableInput(ParallelIterable(Indexed(2), 1), workers=2)
        with pytest.raises(TypeError, match=r"iterator .*one pass only"):
            ParallelIterable(iter([1, 2]), 2)

    def test_fork_takes_unpicklable(self):
        """With start_method='fork' a source that cannot be pickled runs."""

        class Local:  # a class local to a function cannot be pickled
            def __len__(self):
                return 4

            def __getitem__(self, i):
                return i

        with pytest.raises(TypeError, match="cannot be pickled"):
            ParallelIterable(Local(), 2)
        pool = ParallelIterable(Local(), 2, start_method="fork")
        try:
            assert list(pool) == [0, 1, 2, 3]
        finally:
            pool.close()

    def test_unpicklable_datapoint(self):
        """A datapoint that cannot be pickled is the worker's error at its index."""
        pool = ParallelIterable(UnpicklableAt(), 2)
        with pytest.raises(
            ParallelWorkerError,
            match=r"(?s)worker 0 raised at the datapoint of index 2 .*pickle local object",
        ):
            list(pool)

    def test_plan(self):
        """The plan records the split and the start method chosen."""
        pool = ParallelIterable(Streamed(3), 2)
        assert pool.plan == WorkerPlan(
            workers=2, split="copies", ordered=False, start_method="forkserver"
        )
        pool = ParallelIterable(Indexed(3), 2)
        assert pool.plan == WorkerPlan(workers=2, split="index", start_method="forkserver")


class TestTraining:
    """Training from `IterableInput(workers=N)` in this process."""

    def test_same_datapoints_with_one_and_two_workers(self, tmp_path):
        """The model sees the same datapoints, in the same order, with 1 and 2 workers."""
        one = train(tmp_path / "one", IterableInput(Indexed(STEPS_PER_EPOCH), workers=1), 2)
        source = IterableInput(Indexed(STEPS_PER_EPOCH), workers=2)
        two = train(tmp_path / "two", source, 2)
        assert one == two == list(range(STEPS_PER_EPOCH)) * 2
        assert source.iterable.pids == [], "the workers stop with training"
        stats = (tmp_path / "two" / "log" / "stats.json").read_text()
        for key in ("queue_fill", "datapoints_per_s", "worker0_datapoints_per_s"):
            assert f'"IterableInput/{key}"' in stats

    def test_dataflow_and_inference_runner_take_a_parallel_source(self, tmp_path):
        """``TrainConfig(dataflow=ParallelIterable(...))`` trains on the datapoints in order, and
        an ``InferenceRunner`` over a parallel source reports what it reports over the
        source itself, every epoch; both pools stop with training."""
        from towerkit.callbacks import InferenceRunner, ScalarStats

        train_pool = ParallelIterable(Indexed(STEPS_PER_EPOCH), 2)
        val_pool = ParallelIterable(Indexed(5), 2)
        seen = Seen()
        config = TrainConfig(
            model=Model(),
            dataflow=train_pool,
            callbacks=[
                seen,
                InferenceRunner(val_pool, [ScalarStats("cost", prefix="parallel")]),
                InferenceRunner(
                    [Indexed(5)[i] for i in range(5)],
                    [ScalarStats("cost", prefix="plain")],
                    tower_name="Plain",
                ),
            ],
            max_epoch=2,
            logdir=str(tmp_path / "log"),
        )
        with tf1.Graph().as_default():
            launch_train_with_config(config, SimpleTrainer())
        assert seen.seen == list(range(STEPS_PER_EPOCH)) * 2
        records = json.loads((tmp_path / "log" / "stats.json").read_text())
        assert [r["epoch_num"] for r in records] == [1, 2]
        for record in records:
            assert record["parallel_cost"] == pytest.approx(record["plain_cost"], rel=1e-6)
        assert records[0]["parallel_cost"] != records[1]["parallel_cost"], "the model trained"
        assert train_pool.pids == [], "the workers stop with training"
        assert val_pool.pids == [], "and with the inference runs"

    def test_worker_raises(self, tmp_path):
        """A raising worker stops training with its traceback and the datapoint's index."""
        with pytest.raises(InputProducerError) as info:
            train(tmp_path, IterableInput(RaisesAt(STEPS_PER_EPOCH, bad=3), workers=2))
        cause = info.value.__cause__
        assert isinstance(cause, ParallelWorkerError), repr(info.value)
        assert "worker 1 raised at the datapoint of index 3" in str(info.value)
        assert "ValueError: bad datapoint 3" in str(info.value)

    def test_worker_killed(self, tmp_path):
        """A worker killed with SIGKILL is named within seconds."""
        source = IterableInput(Indexed(STEPS_PER_EPOCH), workers=2, prefetch=1)
        seen = Seen(source, kill_worker_at=2)
        start = time.monotonic()
        with pytest.raises(InputProducerError, match=r"worker 1 \(pid \d+\) was killed by SIGKILL"):
            train(tmp_path, source, epochs=50, seen=seen)
        assert time.monotonic() - start < 60
        assert len(seen.seen) < 2 + 10, "named within a few datapoints of its death"

    def test_blocking_worker_times_out(self, tmp_path):
        """A worker that blocks is covered by the input's timeout."""
        source = IterableInput(Blocks(), workers=2, timeout=3)
        with pytest.raises(InputTimeoutError, match="gave no datapoint for"):
            train(tmp_path, source)
        assert source.iterable.pids == []


def run_script(logdir, workers, *extra, timeout=400):
    """Run parallel_script.py to its end (or its own SIGKILL); the completed process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    argv = [sys.executable, SCRIPT, str(logdir), str(workers), *extra]
    return prefork.run(argv, timeout=timeout, env=env)


def seen_in(out):
    return [int(m) for m in re.findall(r"^SEEN (\d+)$", out, re.M)]


def pids_in(out):
    found = re.search(r"^PIDS ([\d ]+)$", out, re.M)
    assert found, out
    return [int(p) for p in found.group(1).split()]


# three TensorFlow processes in turn on a shared 2-core machine
@pytest.mark.timeout(900)
def test_exact_resume_after_sigkill(tmp_path):
    """Killed mid-epoch with workers=2, then resumed: the uninterrupted run's weight.

    Also: the first datapoints are those of workers=1, and the killed run's workers
    exit by themselves when their parent is SIGKILLed.
    """
    reference = run_script(tmp_path / "ref", 1, "--resume")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    killed = run_script(tmp_path / "log", 2, "--resume", "--kill-after", str(STEPS_PER_EPOCH + 2))
    log = killed.stdout + killed.stderr
    assert killed.returncode == -signal.SIGKILL, log
    assert seen_in(killed.stdout) == seen_in(reference.stdout)[: STEPS_PER_EPOCH + 2], log
    assert wait_gone(pids_in(killed.stdout)) == [], "workers outlived their SIGKILLed parent"
    resumed = run_script(tmp_path / "log", 2, "--resume")
    log = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, log
    final = re.findall(r"^FINAL (.+)$", resumed.stdout, re.M)
    assert final == re.findall(r"^FINAL (.+)$", reference.stdout, re.M), log


# a TensorFlow process on a shared 2-core machine
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("sig", "method"),
    [(signal.SIGINT, None), (signal.SIGTERM, None), (signal.SIGTERM, "fork")],
    ids=["sigint", "sigterm", "sigterm-fork"],
)
def test_signal_leaves_no_process(tmp_path, sig, method):
    """Ctrl-C or SIGTERM mid-run: no worker is left behind.

    Ctrl-C ends training after the step (``after_train`` runs, the pool is stopped);
    SIGTERM preempts: the step finishes, ``after_train`` stops the pool, and the
    process exits with status 143. Forked workers (``start_method="fork"``) take the
    SIGTERM that stops them as their own: one preemption line, the trainer's.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    proc = prefork.popen(
        [
            sys.executable,
            SCRIPT,
            str(tmp_path / "log"),
            "2",
            "--max-epoch",
            "1000",
            "--step-sleep",
            "0.1",
            *(["--start-method", method] if method else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines = []

    def read():
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 400
        while not any(line.startswith("PIDS") for line in lines):
            assert time.monotonic() < deadline, "".join(lines)
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        pids = pids_in("".join(lines))
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    err = proc.stderr.read()
    if sig == signal.SIGINT:
        assert "FINAL" in "".join(lines), "".join(lines) + err
    else:
        assert proc.returncode == PREEMPTED_EXIT_STATUS, "".join(lines) + err
        assert err.count("SIGTERM: training saves after the session call in flight") == 1, err
    assert wait_gone(pids) == [], "workers left behind"


# a TensorFlow process on a shared 2-core machine
@pytest.mark.timeout(600)
def test_forked_workers_stopped_at_the_end_are_not_a_preemption(tmp_path):
    """Forked workers inherit the training process's signal handlers; the SIGTERM that
    stops them at the end of training is theirs: no preemption line, status 0."""
    done = run_script(tmp_path / "log", 2, "--start-method", "fork")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "FINAL" in done.stdout, log
    assert "SIGTERM" not in done.stderr, log
    assert seen_in(done.stdout) == list(range(STEPS_PER_EPOCH)) * 2, log
    assert wait_gone(pids_in(done.stdout)) == [], "workers left behind"
