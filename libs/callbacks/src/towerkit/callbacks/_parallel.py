"""`ParallelIterable`: a Python source's datapoints produced by a pool of worker processes."""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from towerkit.callbacks._errors import ParallelWorkerError
from towerkit.callbacks._parallel_core import (
    SHARED_MEMORY_MIN_BYTES,
    MergeState,
    WorkerPlan,
    choose_split,
    merge_after_datapoint,
    merge_after_end,
    pick_start_method,
    start_merge,
)
from towerkit.callbacks._parallel_pipes import Poller
from towerkit.callbacks._parallel_shm import (
    decode,
    remove_blocks,
    unlink_block_of,
)
from towerkit.callbacks._parallel_worker import worker_main

__all__ = ["ParallelIterable", "PoolStats"]

logger = logging.getLogger("towerkit.trainers")

_POOL_NUMBERS = itertools.count()
"""Numbers the pools of this process (in their shared memory blocks' names)."""

_POLL_S = 0.2
"""How often a wait for a worker's message checks that the workers live."""


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


class _Pool:
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
        self.started = None if plan.ordered else ctx.Value("i", 0, lock=False)
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
        for k in range(plan.workers):
            recv, send = ctx.Pipe(duplex=False)
            slots = ctx.BoundedSemaphore(plan.capacity)
            self.conns.append(recv)
            self.slots.append(slots)
            proc = ctx.Process(
                target=worker_main,
                args=(
                    source,
                    plan,
                    k,
                    send,
                    slots,
                    self.started,
                    self.claim,
                    alive,
                    self.block_prefix,
                ),
                name=f"{name} worker {k}",
                daemon=True,
            )
            self.procs.append(proc)
            proc.start()
            send.close()  # the worker holds the only write end: its exit reads as the end
        alive_r.close()
        self._poller = Poller(self.conns)

    def waiting(self) -> int:
        """Messages sent and not yet read, all workers (0 where the platform cannot tell)."""
        try:
            return sum(self.plan.capacity - s.get_value() for s in self.slots)
        except NotImplementedError:  # macOS
            return 0

    def get(self, worker: int | None) -> tuple[Any, ...]:
        """The next message of `worker`, or of any worker when None (in fair turns).

        Raises `_PoolClosed` when the pool is closed, `ParallelWorkerError` when a worker died.
        """
        while True:
            if self.closed:
                raise _PoolClosed
            wanted = range(len(self.conns)) if worker is None else (worker,)
            ready = self._poller.ready(wanted, _POLL_S)
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
        self.check_alive()
        if not self.closed:
            msg = (
                f"{self.name}: worker {k} (pid {self.procs[k].pid}) closed its pipe; training stops"
            )
            raise ParallelWorkerError(msg, worker=k)
        raise _PoolClosed

    def check_alive(self) -> None:
        """Raise `ParallelWorkerError` naming the first worker that ended unasked."""
        for k, proc in enumerate(self.procs):
            code = proc.exitcode
            if code is None or self.closed:
                continue
            if code < 0:
                try:
                    how = f"was killed by {signal.Signals(-code).name}"
                except ValueError:
                    how = f"was killed by signal {-code}"
            else:
                how = f"exited with code {code}"
            msg = (
                f"{self.name}: worker {k} (pid {proc.pid}) {how} while producing datapoints "
                "(out of memory? killed from outside?); training stops"
            )
            raise ParallelWorkerError(msg, worker=k)

    def close(self) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL) and close the pipes."""
        self.closed = True
        self._finalizer()


def _preload_for(ctx: Any, source: Any) -> None:
    """Let the fork server (when it is not running yet) import what the workers need only.

    By default it imports the main module, which for a training script means
    TensorFlow; a source defined elsewhere needs only its own module and this one.
    """
    module = getattr(source, "__module__", None) or type(source).__module__
    if module != "__main__":
        ctx.set_forkserver_preload([__name__, module])


def _terminate(procs: list[Any], conns: list[Any], alive_w: Any, block_prefix: str) -> None:
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


class _PoolClosed(Exception):
    """Raised in a pass when the pool was closed under it (the end of training)."""


def _is_factory(source: Any) -> bool:
    return callable(source) and not isinstance(source, Iterable)


def _check_reiterable(source: Any) -> None:
    if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
        msg = (
            "'source' must be a re-iterable collection of datapoints (a list, a DataFlow, an "
            "object with __len__ and __getitem__), or a function (worker, workers) returning "
            f"worker k's iterable; got {type(source).__name__}"
        )
        raise TypeError(msg)
    if isinstance(source, Iterator):
        msg = (
            f"'source' is an iterator ({type(source).__name__}), which gives one pass only and "
            "cannot be shared by worker processes: pass an object whose __iter__ starts a new "
            "pass, or a function (worker, workers) building each worker's iterable"
        )
        raise TypeError(msg)


class ParallelIterable:
    """Datapoints of a Python source produced by `workers` processes, as one re-iterable.

    Accepted wherever a DataFlow is (``TrainConfig(dataflow=...)``, `IterableInput`,
    ``InferenceRunner``, ``SimpleDatasetPredictor``); ``IterableInput(source,
    workers=N)`` builds one. Each ``iter()`` is one pass over the source.

    How the source is split (`WorkerPlan.split`):

    - a source with ``__len__`` and ``__getitem__``: worker k produces
      ``source[k], source[k + N], ...`` (``index``); unordered, each worker takes the
      next index no worker has taken yet, so all of them work until the pass's end;
    - another iterable: each worker iterates the whole source and keeps every N-th
      datapoint (``stride``): the source's own iteration runs N times over, so this
      pays only where producing a datapoint costs more than skipping it;
    - a function ``source(k, N)`` returning worker k's own iterable (``factory``).

    With `ordered` (the default) datapoints come in the order one worker would give
    them (``source[0], source[1], ...`` under ``index`` and ``stride``; worker 0's
    first, worker 1's first, ... with a factory), so runs and resumes reproduce;
    otherwise as the workers finish them. Each worker seeds NumPy's and ``random``'s
    global generators with ``worker_seed(seed, k, pass)`` before each pass, so
    augmentations differ between workers and passes and repeat between runs.

    The workers start at the first pass and live across passes; each has a queue of
    `capacity` datapoints (bounded: a worker waits when it is full). ``reset_state``
    and ``close`` stop them; a worker exits by itself within a second when the process
    that started it is gone (even SIGKILLed). A worker that raises ends the pass with
    `ParallelWorkerError` holding its traceback and the datapoint's index; one that dies
    is named within a fraction of a second after its turn comes (or the queue drains).

    The default start method is ``"forkserver"`` (``"spawn"`` where the platform
    lacks it, on Windows): a clean server process, started once per training process,
    imports the main module and forks the workers, so they copy none of this
    process's threads or TensorFlow state (``"fork"`` copies them mid-state; use it
    only for a source that cannot be pickled). Under ``"spawn"`` and
    ``"forkserver"`` the source (or factory) is pickled to the workers and the module
    defining it is imported there. The server process ends with this process.

    Args:
        source: an iterable of datapoints, or a function ``(worker, workers)`` returning
            worker `worker`'s iterable (both 0-based counts, ``workers`` = N).
        workers: producer processes, >= 1.
        ordered: keep one worker's order (True) or deliver as produced (False).
        seed: the base of the workers' seeds, >= 0.
        start_method: ``"spawn"``, ``"forkserver"`` or ``"fork"``; None: see above.
        capacity: datapoints each worker may have queued, >= 1.
        shared_memory_min_bytes: arrays of a datapoint this large or larger (NumPy,
            contiguous) travel through a shared memory block instead of the worker's
            pipe: written once by the worker, copied once out of it here; None: all
            through the pipe. The default is 1 MiB, where a block pays in every run measured.

    Raises:
        TypeError: `source` is neither re-iterable nor a function, or cannot be
            pickled under a start method that pickles it.
        ValueError: `workers` < 1, or another bad option.

    .. versionadded:: 0.2
    """

    def __init__(
        self,
        source: Iterable[Any] | Callable[[int, int], Iterable[Any]],
        workers: int,
        *,
        ordered: bool = True,
        seed: int = 0,
        start_method: str | None = None,
        capacity: int = 8,
        shared_memory_min_bytes: int | None = SHARED_MEMORY_MIN_BYTES,
    ) -> None:
        factory = _is_factory(source)
        indexed = hasattr(source, "__len__") and hasattr(source, "__getitem__")
        if not (factory or indexed):
            _check_reiterable(source)
        split = choose_split(indexed, indexed, factory)
        self._plan = WorkerPlan(
            workers=workers,
            split=split,
            ordered=ordered,
            seed=seed,
            start_method=pick_start_method(start_method, mp.get_all_start_methods()),
            capacity=capacity,
            shared_memory_min_bytes=shared_memory_min_bytes,
        )
        if self._plan.start_method != "fork":
            _check_picklable(source, self._plan.start_method)
        self._source = source
        self._pool: _Pool | None = None
        self._lock = threading.Lock()

    @property
    def plan(self) -> WorkerPlan:
        """The workers' plan (split, order, seeds, start method)."""
        return self._plan

    @property
    def source(self) -> Any:
        """The source (or the function building each worker's)."""
        return self._source

    @property
    def pids(self) -> list[int]:
        """The process ids of the running workers (empty when none run)."""
        pool = self._pool
        return [] if pool is None else [p.pid for p in pool.procs if p.pid is not None]

    def stats(self) -> dict[str, float]:
        """Queue fill (0 to 1), datapoints/s delivered and each worker's, since the last call."""
        pool = self._pool
        return {} if pool is None else pool.stats.take()

    def __len__(self) -> int:
        if self._plan.split == "factory":
            msg = f"{self}: the length of a source built by a function is not known"
            raise TypeError(msg)
        return len(self._source)  # type: ignore[arg-type]

    def reset_state(self) -> None:
        """Stop the workers; the next pass starts fresh ones (seeded as in a new run)."""
        self.close()

    def close(self) -> None:
        """Stop the workers now; a pass in progress in another thread ends with an error."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _running(self) -> _Pool:
        with self._lock:
            if self._pool is None:
                self._pool = _Pool(self._source, self._plan, str(self))
            return self._pool

    def __iter__(self) -> Iterator[Any]:
        pool = self._running()
        try:
            if self._plan.ordered:
                yield from self._ordered_pass(pool)
            else:
                yield from self._unordered_pass(pool)
        except _PoolClosed:
            msg = f"{self}: the workers were stopped during a pass"
            raise ParallelWorkerError(msg) from None
        except ParallelWorkerError:
            if self._pool is pool:
                self.close()  # a worker died or raised: the others stop too
            raise
        except GeneratorExit:
            # a pass left before its end: the workers are mid-pass, start afresh next time
            if self._pool is pool:
                self.close()
            raise

    def _message(self, pool: _Pool, worker: int | None) -> tuple[Any, ...]:
        msg = pool.get(worker)
        if msg[0] == "err":
            _, worker, index, pass_number, text = msg
            what = "index" if self._plan.split == "index" else "position"
            err = ParallelWorkerError(
                f"{self}: worker {worker} raised at the datapoint of {what} {index} (0-based) "
                f"in its pass {pass_number}:\n{text.rstrip()}",
                worker=worker,
                index=index,
            )
            self.close()
            raise err
        return msg

    def _ordered_pass(self, pool: _Pool) -> Iterator[Any]:
        state: MergeState = start_merge(self._plan.workers)
        while not state.done:
            msg = self._message(pool, state.current)
            if msg[0] == "end":
                state = merge_after_end(state)
                continue
            pool.stats.record(msg[1], msg[3], pool.waiting())
            state = merge_after_datapoint(state)
            yield msg[2]

    def _unordered_pass(self, pool: _Pool) -> Iterator[Any]:
        pool.passes += 1
        if pool.claim is not None:
            pool.claim.value = 0  # every worker has ended the last pass: none reads it now
        pool.started.value = pool.passes  # type: ignore[union-attr]
        ended = 0
        while ended < self._plan.workers:
            msg = self._message(pool, None)
            if msg[0] == "end":
                ended += 1
                continue
            pool.stats.record(msg[1], msg[3], pool.waiting())
            yield msg[2]

    def __str__(self) -> str:
        name = getattr(self._source, "__name__", type(self._source).__name__)
        return f"ParallelIterable({name}, workers={self._plan.workers})"

    def __getstate__(self) -> dict[str, Any]:
        msg = f"{self} holds running processes and cannot be pickled; pickle its source instead"
        raise TypeError(msg)


def _check_picklable(source: Any, start_method: str) -> None:
    try:
        pickle.dumps(source)
    except Exception as err:  # pickling raises many kinds
        msg = (
            f"the source of a parallel input ({type(source).__name__}) cannot be pickled to "
            f"its worker processes under start_method={start_method!r}: {type(err).__name__}: "
            f"{err}. Define the source's class (or a function `source(worker, workers)` "
            "building each worker's iterable) at the top level of an importable module, "
            "or give start_method='fork' (Linux and macOS only; it copies this process, "
            "threads excepted)"
        )
        raise TypeError(msg) from err
