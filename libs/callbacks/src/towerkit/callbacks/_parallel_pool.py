"""A `ParallelIterable`'s running pool: its workers started, their messages read, their end."""

from __future__ import annotations

import contextlib
import errno
import itertools
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any

from towerkit.callbacks._datapoints import timeout_message
from towerkit.callbacks._errors import (
    ParallelStartError,
    ParallelTimeoutError,
    ParallelWorkerError,
)
from towerkit.callbacks._parallel_core import WorkerPlan
from towerkit.callbacks._parallel_pipes import Poller
from towerkit.callbacks._parallel_shm import decode, remove_blocks, unlink_block_of
from towerkit.callbacks._parallel_worker import worker_main

__all__ = ["PoolStats", "Pool", "PoolClosed"]

_POOL_NUMBERS = itertools.count()
"""Numbers the pools of this process (in their shared memory blocks' names)."""

_POLL_S = 0.2
"""How often a wait for a worker's message checks that the workers live."""

START_GRACE_S = 300.0
"""How long a pool's `timeout` leaves out of its waits while workers start (each imports
the main module and the source's: TensorFlow, on a busy machine, takes a while)."""


# -- the pool, seen from the parent ------------------------------------------------------------


class PoolStats:
    """What a pool did since the last ``take``: datapoints, the workers' speed, queue fill."""

    def __init__(self, workers: int, capacity: int) -> None:
        self._lock = threading.Lock()
        self._capacity = capacity * workers
        self._busy = [0.0] * workers
        self._made = [0] * workers
        self._fill_sum = 0
        self._gets = 0
        self._since = time.monotonic()

    def record(self, worker: int, busy_s: float, waiting: int) -> None:
        """One datapoint from `worker`, which took it `busy_s` s; `waiting` left queued."""
        with self._lock:
            self._busy[worker] += busy_s
            self._made[worker] += 1
            self._fill_sum += waiting
            self._gets += 1

    def take(self) -> dict[str, float]:
        """The statistics since the last call (names relative to the input), then reset."""
        with self._lock:
            now = time.monotonic()
            elapsed = max(now - self._since, 1e-9)
            out = {"datapoints_per_s": sum(self._made) / elapsed}
            if self._gets:
                out["queue_fill"] = self._fill_sum / self._gets / self._capacity
            for k, (busy, made) in enumerate(zip(self._busy, self._made)):
                if busy > 0:
                    out[f"worker{k}_datapoints_per_s"] = made / busy
            self._busy = [0.0] * len(self._busy)
            self._made = [0] * len(self._made)
            self._fill_sum = self._gets = 0
            self._since = now
            return out


class Pool:
    """Running workers, the pipe each writes its messages into, and the messages read."""

    def __init__(self, source: Any, plan: WorkerPlan, name: str) -> None:
        self.plan = plan
        self.name = name
        self.closed = False
        ctx: Any = mp.get_context(plan.start_method)
        if plan.start_method == "forkserver":
            _preload_for(ctx, source)
        self.stats = PoolStats(plan.workers, plan.capacity)
        self.passes = 0
        gated = not plan.ordered and plan.pass_length is None
        self.started = ctx.Value("i", 0, lock=False) if gated else None
        # each worker sets its flag first thing: one that dies unflagged died starting
        self.ready = ctx.RawArray("b", plan.workers)
        self._ready_all = False
        self.created = time.monotonic()
        self.source_module = getattr(source, "__module__", None) or type(source).__module__
        shared = not plan.ordered and plan.split == "index"
        self.claim = ctx.Value("q", 0) if shared else None
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.slots: list[Any] = []
        self._next = 0  # the worker an unordered read looks at first (fair turns)
        alive_r, alive_w = ctx.Pipe(duplex=False)
        alive = None if plan.start_method == "fork" else alive_r
        self.block_prefix = f"tk{os.getpid()}_{next(_POOL_NUMBERS)}"
        self._finalizer = weakref.finalize(
            self, _terminate, self.procs, self.conns, alive_w, self.block_prefix
        )
        try:
            for k in range(plan.workers):
                self._start(ctx, source, k, alive)
        except Exception as err:  # a start fails in many ways (EOFError, OSError, ...)
            self.close()
            msg = (
                f"{name}: worker {len(self.procs)} of {plan.workers} could not start "
                f"({type(err).__name__}: {err}); the {len(self.procs)} started were stopped. "
                "The machine's process or file limits may be reached (ulimit -u, ulimit -n), "
                "or its memory: give fewer workers"
            )
            raise ParallelStartError(msg, worker=len(self.procs)) from None
        finally:
            alive_r.close()
        self._poller = Poller(self.conns)

    def _all_ready(self) -> bool:
        """Whether every worker has started (run the pool's code); cached once true."""
        if not self._ready_all:
            self._ready_all = all(self.ready)
        return self._ready_all

    def _start(self, ctx: Any, source: Any, k: int, alive: Any) -> None:
        """Start worker `k`; only a started worker is in ``procs`` (and so stopped later)."""
        if self.plan.start_method == "forkserver":
            # A fork server whose client runs out of files mid-request dies (with a
            # traceback of its own): ask it only with the files a start takes at hand.
            _check_files_at_hand(START_FILES)
        recv, send = ctx.Pipe(duplex=False)
        slots = ctx.BoundedSemaphore(self.plan.capacity)
        proc = ctx.Process(
            target=worker_main,
            args=(source, self.plan, k, send, slots, self.started, self.claim, alive),
            kwargs={"block_prefix": self.block_prefix, "ready": self.ready},
            name=f"{self.name} worker {k}",
            daemon=True,
        )
        try:
            proc.start()
        except BaseException:
            recv.close()
            raise
        finally:
            send.close()  # the worker holds the only write end: its exit reads as the end
        self.conns.append(recv)
        self.slots.append(slots)
        self.procs.append(proc)

    def waiting(self) -> int:
        """Messages sent and not yet read, all workers (0 where the platform cannot tell)."""
        try:
            return sum(self.plan.capacity - s.get_value() for s in self.slots)
        except NotImplementedError:  # macOS
            return 0

    def get(
        self, worker: int | None, timeout: float | None = None, at: tuple[int, int] = (0, 0)
    ) -> tuple[Any, ...]:
        """The next message of `worker`, or of any worker when None (in fair turns).

        Raises `PoolClosed` when the pool is closed, `ParallelWorkerError` when a worker
        died, `ParallelTimeoutError` when none came within `timeout` seconds (`at`: the
        pass and the count of datapoints before, for the message).
        """
        since = time.monotonic()
        while True:
            if self.closed:
                raise PoolClosed
            wanted = range(len(self.conns)) if worker is None else (worker,)
            wait = _POLL_S
            if timeout is not None:
                now = time.monotonic()
                if not self._all_ready() and now - self.created < START_GRACE_S:
                    since = now  # a worker still imports its modules: not the source's time
                waited = now - since
                if waited >= timeout:
                    self.check_alive()
                    said = timeout_message(self.name, waited, timeout, *at)
                    raise ParallelTimeoutError(said, worker=worker)
                wait = min(wait, timeout - waited)
            ready = self._poller.ready(wanted, wait)
            if not ready:
                self.check_alive()
                continue
            k = (
                worker
                if worker is not None
                else min(ready, key=lambda j: (j - self._next) % len(self.conns))
            )
            try:
                payload = self.conns[k].recv_bytes()
            except (EOFError, OSError):
                self._ended(k)
                continue
            self.slots[k].release()
            self._next = (k + 1) % len(self.conns)
            try:
                msg: tuple[Any, ...] = decode(payload)
            except FileNotFoundError as err:
                text = (
                    f"{self.name}: the shared memory block of worker {k}'s datapoint is gone "
                    f"({err}): was /dev/shm cleaned while the run used it?"
                )
                raise ParallelWorkerError(text, worker=k) from err
            return msg

    def _ended(self, k: int) -> None:
        """Worker `k`'s pipe closed with nothing to read: it exited; say how."""
        self.procs[k].join(2.0)
        self.check_alive(all_ended=True)
        if not self.closed:
            msg = (
                f"{self.name}: worker {k} (pid {self.procs[k].pid}) closed its pipe; training stops"
            )
            raise ParallelWorkerError(msg, worker=k)
        raise PoolClosed

    def check_alive(self, all_ended: bool = False) -> None:
        """Raise `ParallelWorkerError` naming the first worker that ended unasked.

        A worker that exited by itself (status 0) with messages left in its pipe (its
        error, sent before it ended) is named when its pipe is read, unless `all_ended`.
        """
        for k, proc in enumerate(self.procs):
            code = proc.exitcode
            if code is None or self.closed:
                continue
            if code == 0 and not all_ended and self.conns[k].poll(0):
                continue  # its last messages first, then its end (`_ended`)
            if code < 0:
                try:
                    how = f"was killed by {signal.Signals(-code).name}"
                except ValueError:
                    how = f"was killed by signal {-code}"
            else:
                how = f"exited with code {code}"
            if not self.ready[k]:
                raise ParallelStartError(self._died_starting(k, how), worker=k)
            msg = (
                f"{self.name}: worker {k} (pid {proc.pid}) {how} while producing datapoints "
                "(out of memory? killed from outside?); training stops"
            )
            raise ParallelWorkerError(msg, worker=k)

    def _died_starting(self, k: int, how: str) -> str:
        """What a worker that ended before running any of the pool's code says."""
        main = getattr(sys.modules.get("__main__"), "__file__", None)
        imports = f"the main module ({main}, as __mp_main__) and " if main else ""
        return (
            f"{self.name}: worker {k} (pid {self.procs[k].pid}) {how} before it started: "
            f"under start_method={self.plan.start_method!r} multiprocessing prepares a "
            f"worker by importing {imports}the source's module ({self.source_module}), and "
            "that failed (its traceback is printed above). A script must start training "
            'under `if __name__ == "__main__":`; or give start_method="fork"'
        )

    def close(self) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL) and close the pipes."""
        self.closed = True
        self._finalizer()


START_FILES = 8
"""Files a worker's start under ``forkserver`` opens at once: its pipe, the connection to
the server, the descriptors passed to it, the sentinel."""


def _check_files_at_hand(needed: int) -> None:
    """Raise `OSError` (EMFILE) when fewer than `needed` more files can be opened."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        return
    if in_use + needed > soft:
        msg = f"{os.strerror(errno.EMFILE)}: {in_use} open, ulimit -n {soft}"
        raise OSError(errno.EMFILE, msg)


def _preload_for(ctx: Any, source: Any) -> None:
    """Let the fork server (when it is not running yet) import what the workers need only.

    By default it imports the main module, which for a training script means
    TensorFlow; a source defined elsewhere needs only its own module and this one.
    """
    module = getattr(source, "__module__", None) or type(source).__module__
    if module != "__main__":
        ctx.set_forkserver_preload([__name__, module])


def _terminate(procs: list[Any], conns: list[Any], alive_w: Any, block_prefix: str) -> None:
    """Stop the started workers (SIGTERM, then SIGKILL), close the pipes, remove blocks."""
    alive_w.close()
    for proc in procs:
        if proc.exitcode is None:
            proc.terminate()
    deadline = time.monotonic() + 2.0
    for proc in procs:
        proc.join(max(deadline - time.monotonic(), 0.01))
        if proc.exitcode is None:
            proc.kill()
            proc.join(1.0)
    for conn in conns:
        _drop_unread(conn)
        conn.close()
    remove_blocks(block_prefix)


def _drop_unread(conn: Any) -> None:
    """Remove the shared memory blocks of the messages left unread in a worker's pipe."""
    with contextlib.suppress(EOFError, OSError):
        while conn.poll(0):
            unlink_block_of(conn.recv_bytes())


class PoolClosed(Exception):
    """Raised in a pass when the pool was closed under it (the end of training)."""
