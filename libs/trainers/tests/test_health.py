"""Liveness of a cluster's tasks: the bounds record, the pure decisions, the watch on real sockets."""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import prefork
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.towers.compat import tf1
from towerkit.trainers import (
    ClusterTimeouts,
    CollectiveError,
    DistributedTrainerParameterServer,
    DistributedTrainerReplicated,
    TaskAddress,
    TaskLostError,
    serve_parameters,
)
from towerkit.trainers.parallel._cluster import _done_queue, hello_value
from towerkit.trainers.parallel._health import (
    ClusterWatch,
    LivenessState,
    Prober,
    dead_tasks,
    is_up,
    known_alive,
    observe,
    probe,
    task_addresses,
)
from towerkit.trainers.parallel._health_core import Health, Reach

tasks = st.builds(
    TaskAddress,
    job=st.sampled_from(["ps", "worker"]),
    index=st.integers(0, 5),
    address=st.just("127.0.0.1:1"),
)
seconds = st.floats(0.01, 1000, allow_nan=False)


class TestClusterTimeouts:
    """The bounds record."""

    def test_repr(self):
        """The repr shows every bound, in seconds."""
        assert repr(ClusterTimeouts()) == (
            "ClusterTimeouts(check_every=2.0, dead_after=20.0, start_within=600.0, "
            "operation_seconds=300.0, close_seconds=10.0)"
        )

    def test_fail(self):
        """Non-positive bounds and non-numbers are refused at construction."""
        with pytest.raises(ValueError, match=r"'dead_after' must be > 0: -1\.0"):
            ClusterTimeouts(dead_after=-1)
        with pytest.raises(ValueError, match=r"'close_seconds' must be >= 0: -0\.5"):
            ClusterTimeouts(close_seconds=-0.5)
        with pytest.raises(TypeError, match=r"expected a number of seconds; got str '5'"):
            ClusterTimeouts(check_every="5")

    @given(seconds)
    def test_operation_timeout_ms(self, value):
        """The session deadline is operation_seconds in whole milliseconds, at least 1."""
        ms = ClusterTimeouts(operation_seconds=value).operation_timeout_ms
        assert ms == max(1, int(value * 1000))


class TestTaskAddresses:
    """Tasks of a cluster, from ClusterSpec.as_dict()."""

    def test_str(self):
        """A task prints as job, index and address."""
        assert str(TaskAddress(job="ps", index=1, address="h:2")) == "job 'ps' task 1 (h:2)"

    def test_fail(self):
        """An unknown job is named with those the cluster has."""
        with pytest.raises(ValueError, match=r"the cluster has no job 'chief'; it has \['ps'\]"):
            task_addresses({"ps": ["h:1"]}, ["chief"])

    @given(
        st.lists(st.integers(1000, 2000), min_size=1, max_size=4),
        st.lists(st.integers(1000, 2000), min_size=1, max_size=4),
        st.sets(st.integers(0, 3)),
        st.booleans(),
    )
    def test_order_and_skip(self, ps, workers, skip, sparse):
        """Every task of the jobs, in job then index order, but the skipped ones."""
        spec = {
            "ps": [f"h:{p}" for p in ps],
            "worker": (
                {i: f"h:{p}" for i, p in reversed(list(enumerate(workers)))}
                if sparse
                else [f"h:{p}" for p in workers]
            ),
        }
        got = task_addresses(spec, ["ps", "worker"], skip=[("worker", i) for i in skip])
        want = [("ps", i, f"h:{p}") for i, p in enumerate(ps)] + [
            ("worker", i, f"h:{p}") for i, p in enumerate(workers) if i not in skip
        ]
        assert [(t.job, t.index, t.address) for t in got] == want


class TestDeadTasks:
    """When a task counts as dead, over the watch's state of every task."""

    @given(tasks, seconds, seconds, seconds)
    def test_seen_then_silent(self, task, seen_at, dead_after, later):
        """A task seen up is dead exactly when silent for more than dead_after."""
        timeouts = ClusterTimeouts(dead_after=dead_after)
        state = observe(LivenessState(since=0.0), task, Reach.ANSWERS, seen_at, timeouts)
        now = seen_at + later
        dead = dead_tasks(state, [task], now, timeouts)
        assert bool(dead) == (now - seen_at > dead_after)
        if dead:
            assert dead[0][0] == task
            assert dead[0][1].startswith("unreachable for ")

    @given(tasks, seconds, seconds)
    def test_never_seen(self, task, start_within, now):
        """A task never seen up is dead once start_within has passed since the watch began."""
        timeouts = ClusterTimeouts(start_within=start_within)
        state = observe(LivenessState(since=0.0), task, Reach.NOTHING, now, timeouts)
        dead = dead_tasks(state, [task], now, timeouts)
        assert bool(dead) == (now > start_within)
        if dead:
            assert dead[0][1] == f"never came up within {start_within:g} s"

    @given(st.lists(tasks, unique=True, min_size=1, max_size=4), seconds, seconds)
    def test_known_alive_at_the_start(self, group, dead_after, now):
        """Tasks a session reached are bound by dead_after from the watch's start, never
        seen by a probe or not (start_within plays no part)."""
        timeouts = ClusterTimeouts(dead_after=dead_after, start_within=1e6)
        dead = dead_tasks(known_alive(0.0, group), group, now, timeouts)
        assert [t for t, _ in dead] == (group if now > dead_after else [])

    @given(tasks, seconds, seconds, seconds, seconds)
    def test_listening_but_never_answering_then_gone(
        self, task, heard_at, dead_after, start, later
    ):
        """A task never seen up but seen accepting connections (a live server that answers
        late on a loaded machine) is dead once it has accepted none for more than
        dead_after, or once start_within has passed since the watch began."""
        timeouts = ClusterTimeouts(dead_after=dead_after, start_within=start)
        state = observe(LivenessState(since=0.0), task, Reach.ACCEPTS, heard_at, timeouts)
        assert state.health(task).alive_at is None
        assert state.health(task).accepted_at == heard_at
        now = heard_at + later
        dead = dead_tasks(state, [task], now, timeouts)
        if state.health(task).status is Health.LOST:  # already past start_within when heard
            assert heard_at > start
        else:
            assert bool(dead) == (now - heard_at > dead_after or now > start)
        if dead and now - heard_at > dead_after and state.health(task).status is not Health.LOST:
            assert dead[0][1].startswith("accepts no connection for ")
            assert dead[0][1].endswith("(it never answered in time)")

    @given(st.lists(tasks, unique=True, min_size=1, max_size=4), seconds)
    def test_latest_sighting_counts(self, group, step):
        """Seeing a task again replaces its earlier sighting; others are untouched."""
        timeouts = ClusterTimeouts()
        state = LivenessState(since=0.0)
        for t in group:
            state = observe(state, t, Reach.ANSWERS, 0.0, timeouts)
        state = observe(state, group[0], Reach.ANSWERS, step, timeouts)
        assert state.health(group[0]).alive_at == step
        assert all(state.health(t).alive_at == 0.0 for t in group[1:])
        assert len(state.healths) == len(group)


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def wait_for(condition, limit: float = 30.0) -> bool:
    end = time.monotonic() + limit
    while not condition() and time.monotonic() < end:
        time.sleep(0.05)
    return condition()


SERVER = """
import sys
import tensorflow as tf
spec = tf.train.ClusterSpec({"ps": [sys.argv[1]]})
server = tf.distribute.Server(spec, job_name="ps", task_index=0)
print("serving", flush=True)
server.join()
"""
"""A TensorFlow server alone in a process (one that can be stopped and killed)."""


@pytest.fixture(scope="module")
def tf_server():
    """A real TensorFlow server in a process of its own: ``(process, host:port)``."""
    sock = listening()
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    proc = prefork.popen(
        [sys.executable, "-c", SERVER, address],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "serving"
        assert wait_for(lambda: is_up(address, 1.0))
        yield proc, address
    finally:
        proc.kill()
        proc.wait()


def _readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def all_stopped(pid: int) -> bool:
    """Whether every thread of process `pid` is stopped (state ``T`` in ``/proc``)."""
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{task}/stat") as f:
            states.append(f.read().rpartition(")")[2].split()[0])
    return bool(states) and all(state in "tT" for state in states)


@contextlib.contextmanager
def frozen(proc: subprocess.Popen):
    """The process stopped (SIGSTOP) inside the block, continued after it."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        # the stop is asynchronous: wait until every thread of the process is stopped
        assert wait_for(lambda: all_stopped(proc.pid), 10.0)
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


@pytest.mark.procs
class TestWatch:
    """The watch thread, on a real TensorFlow server."""

    def test_is_up(self, tf_server):
        """A server that answers is up; stopped, it is not, though its port accepts."""
        proc, address = tf_server
        assert is_up(address, 1.0)
        with frozen(proc):
            host, _, port = address.rpartition(":")
            socket.create_connection((host, int(port)), timeout=1.0).close()
            began = time.monotonic()
            assert not is_up(address, 0.5)
            assert time.monotonic() - began < 5.0
        assert wait_for(lambda: is_up(address, 1.0))

    def test_port_that_accepts_but_never_answers(self):
        """A listening socket that answers nothing is not up; closed, it is not either.

        `probe` tells the two apart: the first accepts the connection, the second does not.
        """
        sock = listening()
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        assert not is_up(address, 0.3)
        assert probe(address, 0.3) == (False, True)
        sock.close()
        assert not is_up(address, 0.3)
        assert probe(address, 0.3) == (False, False)

    def test_probe_of_a_server(self, tf_server):
        """A TensorFlow server answers and accepts; stopped, it only accepts."""
        proc, address = tf_server
        assert probe(address, 1.0) == (True, True)
        with frozen(proc):
            assert probe(address, 0.5) == (False, True)
        assert wait_for(lambda: probe(address, 1.0) == (True, True))

    def test_reports_a_stopped_server(self, tf_server):
        """A server that stops answering is reported once, named, and dropped from the watch."""
        proc, address = tf_server
        task = TaskAddress(job="ps", index=0, address=address)
        calls = []
        timeouts = ClusterTimeouts(check_every=0.1, dead_after=0.5)
        watch = ClusterWatch([task], timeouts, on_dead=lambda t, why: calls.append((t, why)))
        watch.start()
        try:
            assert wait_for(lambda: watch.health(task).alive_at is not None)
            assert not watch.lost
            with frozen(proc):
                assert wait_for(lambda: watch.lost)
                time.sleep(0.5)
            assert [t for t, _ in watch.lost] == [task]
            assert watch.lost[0][1].startswith("unreachable for ")
            assert calls == watch.lost
            assert watch.check_now() == watch.lost[0]
        finally:
            watch.stop()

    def test_prober_reads_a_late_answer(self, tf_server):
        """A connection the server accepted but did not answer in time is kept: once the
        server runs again, its answer on that connection is read (a loaded server that
        answers late is not taken for a stopped one)."""
        proc, address = tf_server
        task = TaskAddress(job="ps", index=0, address=address)
        prober = Prober()
        try:
            assert prober.reach(task, 1.0) is Reach.ANSWERS
            assert prober.waiting() == ()
            with frozen(proc):
                assert prober.reach(task, 0.3) is Reach.ACCEPTS
                assert prober.waiting() == (task,)
                assert prober.reach(task, 0.3) is Reach.ACCEPTS  # the first one still waits
                assert prober.waiting() == (task,)
            kept = prober._open[task][0]
            assert wait_for(lambda: _readable(kept), 10.0)  # the kept connection's answer
            assert prober.reach(task, 0.3) is Reach.ANSWERS
            assert prober.waiting() == ()
            assert kept.fileno() == -1  # read, then closed
        finally:
            prober.close()

    def test_prober_keeps_one_connection(self):
        """A port that accepts and never answers: one connection is kept, the others closed."""
        server = listening()
        task = TaskAddress(job="ps", index=0, address=f"127.0.0.1:{server.getsockname()[1]}")
        prober = Prober()
        try:
            for _ in range(3):
                assert prober.reach(task, 0.1) is Reach.ACCEPTS
            accepted = [server.accept()[0] for _ in range(3)]
            for conn in accepted:
                conn.settimeout(2.0)
                assert conn.recv(24) == b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            closed = []
            for conn in accepted:
                conn.recv(9)  # the preface's SETTINGS frame
                conn.settimeout(0.5)
                try:
                    closed.append(conn.recv(1) == b"")
                except TimeoutError:
                    closed.append(False)
            assert closed == [False, True, True]
            prober.keep_only([])
            assert prober.waiting() == ()
            assert accepted[0].recv(1) == b""
        finally:
            prober.close()
            server.close()

    def test_stopped_before_any_answer(self, tf_server):
        """A task known alive by word, stopped before any probe of it was answered (its
        kernel accepts every connection, nothing answers), is lost once its first waiting
        connection is dead_after old, not once start_within has passed."""
        proc, address = tf_server
        task = TaskAddress(job="worker", index=1, address=address)
        timeouts = ClusterTimeouts(check_every=0.2, dead_after=1.0, start_within=600)
        with frozen(proc):
            began = time.monotonic()
            watch = ClusterWatch([task], timeouts, alive=True).start()
            try:
                assert wait_for(lambda: watch.lost, 20.0)
                assert time.monotonic() - began < 10.0
            finally:
                watch.stop()
        [(lost, why)] = watch.lost
        assert lost == task
        assert why.startswith("accepted a connection "), why
        assert "never answered it" in why, why

    def test_check_now(self, tf_server):
        """check_now names a watched task that does not answer, and nothing while all do."""
        proc, address = tf_server
        task = TaskAddress(job="ps", index=0, address=address)
        watch = ClusterWatch([task], ClusterTimeouts(check_every=0.5))
        assert watch.check_now() is None
        with frozen(proc):
            assert watch.check_now() == (task, "not answering")

    def test_task_that_ended_normally(self, tf_server):
        """A task that `still_needed` says is done is dropped, not reported."""
        proc, address = tf_server
        task = TaskAddress(job="worker", index=0, address=address)
        asked = threading.Event()

        def still_needed(t):
            asked.set()
            return False

        timeouts = ClusterTimeouts(check_every=0.1, dead_after=0.3)
        watch = ClusterWatch([task], timeouts, still_needed=still_needed).start()
        try:
            assert wait_for(lambda: watch.health(task).alive_at is not None)
            with frozen(proc):
                assert wait_for(asked.is_set)
                time.sleep(0.3)
            assert watch.lost == []
            assert watch.check_now() is None
        finally:
            watch.stop()


def _ps_server(*worker_addresses: str):
    ports = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    ports.append(sock.getsockname()[1])
    sock.close()
    cluster = tf1.train.ClusterSpec(
        {"ps": [f"127.0.0.1:{ports[0]}"], "worker": list(worker_addresses)}
    )
    return tf1.train.Server(cluster, job_name="ps", task_index=0)


class TestServeParameters:
    """serve_parameters never waits for a worker that is not there."""

    def test_worker_never_came_up(self):
        """A worker that never listens is dead after start_within, named with its address."""
        sock = listening()
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        sock.close()
        with tf.Graph().as_default():
            ps = _ps_server(address)
            timeouts = ClusterTimeouts(check_every=0.2, start_within=1)
            with pytest.raises(TaskLostError) as err:
                serve_parameters(ps, poll_seconds=0.2, timeouts=timeouts)
        assert str(err.value) == (
            f"ps task 0: lost job 'worker' task 0 ({address}) never came up within 1 s; "
            "the workers done: []"
        )
        assert err.value.task == TaskAddress(job="worker", index=0, address=address)
        assert isinstance(err.value, CollectiveError)

    def test_no_check_in_lost_while_polling(self):
        """Every check-in counts, however often the ps looks: none is dropped between polls.

        A dequeue cut short by its deadline could drop the element it had just taken (it
        did, about one in a hundred at a 5 ms poll): 60 workers' starts and ends, put
        from another session at random moments while the ps polls every 5 ms, must all
        be taken.
        """
        count = 100
        with tf.Graph().as_default():
            ps = _ps_server(*(f"127.0.0.1:{1 + i}" for i in range(count)))
        graph = tf.Graph()
        with graph.as_default():
            queue = _done_queue(0, count)
            value = tf1.placeholder(tf.int32, [])
            put = queue.enqueue(value)
        rng = random.Random(0)
        waits = [rng.uniform(0.0, 0.005) for _ in range(2 * count)]

        def workers() -> None:
            config = tf1.ConfigProto(device_filters=["/job:ps"])  # the workers are not up
            with tf1.Session(ps.target, graph=graph, config=config) as sess:
                for i, wait in enumerate(waits):
                    time.sleep(wait)
                    task = i // 2
                    sess.run(put, {value: hello_value(task) if i % 2 == 0 else task})

        thread = threading.Thread(target=workers, daemon=True)
        thread.start()
        timeouts = ClusterTimeouts(check_every=30, start_within=120)
        with tf.Graph().as_default():
            done = serve_parameters(ps, timeout=100, poll_seconds=0.002, timeouts=timeouts)
        thread.join(10)
        assert sorted(done) == list(range(count))

    def test_bad_timeouts(self):
        """Anything but a ClusterTimeouts is refused."""
        with tf.Graph().as_default():
            ps = _ps_server("127.0.0.1:1")
            with pytest.raises(TypeError, match="'timeouts' must be a ClusterTimeouts; got dict"):
                serve_parameters(ps, timeouts={"dead_after": 1})


class TestTrainerTimeouts:
    """The trainers take their bounds as a ClusterTimeouts."""

    def test_default_and_given(self):
        """The default bounds, or the given ones, are the trainer's."""
        ports = [listening() for _ in range(2)]
        spec = {
            "ps": [f"127.0.0.1:{ports[0].getsockname()[1]}"],
            "worker": [f"127.0.0.1:{ports[1].getsockname()[1]}"],
        }
        for s in ports:
            s.close()
        with tf.Graph().as_default():
            server = tf1.train.Server(
                tf1.train.ClusterSpec(spec), job_name="worker", task_index=0, start=False
            )
            assert DistributedTrainerReplicated(1, server).timeouts == ClusterTimeouts()
            given_ = ClusterTimeouts(dead_after=3)
            trainer = DistributedTrainerParameterServer(1, server, timeouts=given_)
            assert trainer.timeouts is given_
            with pytest.raises(TypeError, match="'timeouts' must be a ClusterTimeouts; got float"):
                DistributedTrainerReplicated(1, server, timeouts=3.0)


STUCK = """
import sys, threading, time
from towerkit.trainers import TaskLostError
from towerkit.trainers.parallel._health import ClusterTimeouts, exit_if_stuck
done = threading.Event()
t = ClusterTimeouts(check_every=0.1, dead_after=1, operation_seconds=0.5, close_seconds=0.2)
exit_if_stuck(done, t, lambda: TaskLostError("worker 0 lost a parameter server, ps 0", None))
print(f"armed at {time.monotonic()}", flush=True)
if sys.argv[1] == "finishes":
    done.set()
    time.sleep(2)
    print("finished")
else:
    time.sleep(60)  # a call with no deadline
"""


@pytest.mark.procs
@pytest.mark.parametrize("how", ["stuck", "finishes"])
def test_exit_if_stuck(how):
    """A worker still blocked past the bound after losing a ps ends (status 1) with the
    error's line; one whose loop ended in time runs on.

    The bound is counted from the watchdog's arming, which the program prints (the
    monotonic clock is the machine's): its imports may take long on a loaded machine.
    """
    done = subprocess.run(
        [sys.executable, "-c", STUCK, how], capture_output=True, text=True, timeout=200
    )
    ended = time.monotonic()
    armed = float(done.stdout.splitlines()[0].removeprefix("armed at "))
    if how == "stuck":
        assert done.returncode == 1, done.stderr
        assert ended - armed < 30
        line = "towerkit.trainers.TaskLostError: worker 0 lost a parameter server, ps 0"
        assert line in done.stderr.splitlines(), done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[1:] == ["finished"]
