"""`ParallelIterable`: a Python source's datapoints produced by a pool of worker processes."""

from __future__ import annotations

import logging
import multiprocessing as mp
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from towerkit.callbacks._errors import ParallelStartError, ParallelWorkerError
from towerkit.callbacks._parallel_core import (
    SHARED_MEMORY_MIN_BYTES,
    MergeState,
    WorkerPlan,
    check_worker_limits,
    choose_split,
    merge_after_datapoint,
    merge_after_end,
    pick_start_method,
    start_merge,
)
from towerkit.callbacks._parallel_pool import Pool, PoolClosed, PoolStats
from towerkit.callbacks._parallel_start import machine_limits, unguarded_main_line

__all__ = ["ParallelIterable", "PoolStats"]

logger = logging.getLogger("towerkit.trainers")

_WARNED_STRIDE: set[str] = set()
"""The source types already warned about under the ``stride`` split (once each)."""


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
      ``source[k], source[k + N], ...`` (``index``), in order; unordered, each worker
      takes the next index no worker has taken yet, so all work until the pass's end;
    - any other iterable (a DataFlow, a generator class: its cost is in
      ``__iter__``): each worker iterates a copy of its own (``copies``), as
      tensorpack's ``MultiProcessRunnerZMQ`` does: the copy's ``reset_state()`` runs in
      the worker after it is seeded, so each shuffles and augments its own way, and
      the datapoints come **unordered**, as the copies make them. With a length a pass
      is ``len(source)`` datapoints and the copies run on between passes (a pass does
      not hold each datapoint exactly once); without one, a pass is one pass of every
      copy (N times the source's datapoints);
    - ``ordered=True`` given for such an iterable: every worker iterates the whole
      source and keeps every N-th datapoint (``stride``), which does the source's own
      work N times over; it is chosen only when asked, with a warning naming the
      forms that pay (an index, the copies, a function);
    - a function ``source(k, N)`` returning worker k's own iterable (``factory``).

    Ordered (the default where the split allows it), datapoints come in the order one
    worker would give them (``source[0], source[1], ...``; worker 0's first, worker
    1's first, ... with a factory), so runs and resumes reproduce. Each worker seeds
    NumPy's and ``random``'s global generators with ``worker_seed(seed, k, pass)``
    before each pass (and with pass 0 before ``reset_state``), so augmentations
    differ between workers and passes and repeat between runs (under ``stride`` all
    take worker 0's seeds, as every worker must make the same pass).

    The workers start at the first pass and live across passes; each has a queue of
    `capacity` datapoints (bounded: a worker waits when it is full). ``reset_state``
    and ``close`` stop them; a worker exits by itself within a second when the process
    that started it is gone (even SIGKILLed). A worker that raises ends the pass with
    `ParallelWorkerError` holding its traceback and the datapoint's index; one that dies
    is named within a fraction of a second after its turn comes (or the queue drains).
    With `timeout`, a pass that gets no datapoint for `timeout` seconds ends with
    `ParallelTimeoutError` (the message of `IterableInput`'s ``timeout``), wherever
    the pool is read (training, ``InferenceRunner``, ``SimpleDatasetPredictor``).

    The default start method is ``"forkserver"`` (``"spawn"`` where the platform
    lacks it, on Windows): a clean server process, started once per training process,
    forks the workers, so they copy none of this process's threads or TensorFlow
    state (``"fork"`` copies them mid-state; use it only for a source that cannot be
    pickled). Under ``"spawn"`` and ``"forkserver"`` the source (or factory) is
    pickled to the workers, and multiprocessing prepares each worker by importing the
    main module (the training script, as ``__mp_main__``, so what is under
    ``if __name__ == "__main__":`` does not run; its top-level imports do, TensorFlow
    included) and the module defining the source. A script that starts training
    outside that guard would train again in every worker: the pool refuses to start
    from it (`ParallelStartError`, naming the line). The server process ends with
    this process.

    Args:
        source: an iterable of datapoints, or a function ``(worker, workers)`` returning
            worker `worker`'s iterable (both 0-based counts, ``workers`` = N).
        workers: producer processes, >= 1, at most what the machine's process and file
            limits leave room for.
        ordered: keep one worker's order (True) or deliver as produced (False); None
            (the default): ordered, except a source without an index (``copies``).
        seed: the base of the workers' seeds, >= 0.
        start_method: ``"spawn"``, ``"forkserver"`` or ``"fork"``; None: see above.
        capacity: datapoints each worker may have queued, >= 1.
        shared_memory_min_bytes: arrays of a datapoint this large or larger (NumPy,
            contiguous) travel through a shared memory block instead of the worker's
            pipe: written once by the worker, copied once out of it here; None: all
            through the pipe. The default is 1 MiB, where a block pays in every run
            measured. Where ``/dev/shm`` is full, a worker sends through its pipe
            instead and says so once.
        timeout: seconds a pass may wait for one datapoint (or for its first), > 0;
            None (the default): however long it takes. The workers' start (their
            imports) is not counted, for up to 5 minutes.

    Raises:
        TypeError: `source` is neither re-iterable nor a function, or cannot be
            pickled under a start method that pickles it.
        ValueError: `workers` < 1 or more than the machine can start, or another bad
            option.

    .. versionadded:: 0.2
    """

    def __init__(
        self,
        source: Iterable[Any] | Callable[[int, int], Iterable[Any]],
        workers: int,
        *,
        ordered: bool | None = None,
        seed: int = 0,
        start_method: str | None = None,
        capacity: int = 8,
        shared_memory_min_bytes: int | None = SHARED_MEMORY_MIN_BYTES,
        timeout: float | None = None,
    ) -> None:
        factory = _is_factory(source)
        indexed = hasattr(source, "__len__") and hasattr(source, "__getitem__")
        if not (factory or indexed):
            _check_reiterable(source)
        split = choose_split(indexed, indexed, factory, ordered)
        if split == "stride":
            _warn_stride(source, workers)
        self._plan = WorkerPlan(
            workers=workers,
            split=split,
            ordered=split != "copies" if ordered is None else ordered,
            seed=seed,
            start_method=pick_start_method(start_method, mp.get_all_start_methods()),
            capacity=capacity,
            shared_memory_min_bytes=shared_memory_min_bytes,
            pass_length=_length(source) if split == "copies" else None,
        )
        check_worker_limits(workers, machine_limits())
        self._timeout = _check_timeout(timeout)
        if self._plan.start_method != "fork":
            _check_picklable(source, self._plan.start_method)
        self._source = source
        self._pool: Pool | None = None
        self._lock = threading.Lock()
        self._passes = 0

    @property
    def timeout(self) -> float | None:
        """Seconds a pass may wait for one datapoint; None: no limit."""
        return self._timeout

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
        if self._plan.split == "copies" and self._plan.pass_length is None:
            msg = f"{self}: a pass is one pass of each worker's copy, of no known length"
            raise TypeError(msg)
        return len(self._source)  # type: ignore[arg-type]

    def reseed(self, seed: int) -> None:
        """Make `seed` the base of the workers' seeds, as ``seed=`` would have, before any pass.

        ``TrainConfig(seed=...)`` calls it for an input whose seed was not given.

        Raises:
            ValueError: `seed` is not an int >= 0.
            RuntimeError: a pass has started (its workers were seeded already).
        """
        with self._lock:
            if self._pool is not None or self._passes:
                msg = f"{self}: the workers' seed is set before their first pass, not after"
                raise RuntimeError(msg)
            self._plan = attrs.evolve(self._plan, seed=seed)

    def reset_state(self) -> None:
        """Stop the workers; the next pass starts fresh ones (seeded as in a new run)."""
        self.close()

    def close(self) -> None:
        """Stop the workers now; a pass in progress in another thread ends with an error."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _running(self) -> Pool:
        with self._lock:
            if self._pool is None:
                found = unguarded_main_line(self._plan.start_method)
                if found is not None:
                    raise ParallelStartError(_unguarded_message(self, *found))
                self._pool = Pool(self._source, self._plan, str(self))
            return self._pool

    def __iter__(self) -> Iterator[Any]:
        pool = self._running()
        self._passes += 1
        try:
            if self._plan.ordered:
                yield from self._ordered_pass(pool)
            elif self._plan.pass_length is not None:
                yield from self._stream_pass(pool, self._plan.pass_length)
            else:
                yield from self._unordered_pass(pool)
        except PoolClosed:
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

    def _message(self, pool: Pool, worker: int | None, count: int) -> tuple[Any, ...]:
        msg = pool.get(worker, self._timeout, (self._passes, count))
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

    def _ordered_pass(self, pool: Pool) -> Iterator[Any]:
        state: MergeState = start_merge(self._plan.workers)
        count = 0
        while not state.done:
            msg = self._message(pool, state.current, count)
            if msg[0] == "end":
                state = merge_after_end(state)
                continue
            pool.stats.record(msg[1], msg[3], pool.waiting())
            state = merge_after_datapoint(state)
            count += 1
            yield msg[2]

    def _stream_pass(self, pool: Pool, length: int) -> Iterator[Any]:
        """`length` datapoints of the copies, as they come; they run on between passes."""
        count = 0
        while count < length:
            msg = self._message(pool, None, count)
            if msg[0] == "end":
                continue
            pool.stats.record(msg[1], msg[3], pool.waiting())
            count += 1
            yield msg[2]

    def _unordered_pass(self, pool: Pool) -> Iterator[Any]:
        pool.passes += 1
        if pool.claim is not None:
            pool.claim.value = 0  # every worker has ended the last pass: none reads it now
        pool.started.value = pool.passes  # type: ignore[union-attr]
        ended = count = 0
        while ended < self._plan.workers:
            msg = self._message(pool, None, count)
            if msg[0] == "end":
                ended += 1
                continue
            pool.stats.record(msg[1], msg[3], pool.waiting())
            count += 1
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


def _length(source: Any) -> int | None:
    """The source's length where it has a positive one (a pass of the copies), else None."""
    try:
        length = len(source)
    except TypeError:  # a DataFlow without a length raises it (or NotImplementedError)
        return None
    except NotImplementedError:
        return None
    return length if isinstance(length, int) and length > 0 else None


def _check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        msg = f"'timeout' must be a number of seconds > 0 or None; got {timeout!r}"
        raise ValueError(msg)
    if timeout == float("inf"):
        return None
    return float(timeout)


def _warn_stride(source: Any, workers: int) -> None:
    """Say once per source type that ``stride`` does the source's work `workers` times."""
    name = type(source).__qualname__
    if name in _WARNED_STRIDE:
        return
    _WARNED_STRIDE.add(name)
    logger.warning(
        "ParallelIterable(%s, workers=%d, ordered=True): the source has no __getitem__, so "
        "each worker iterates all of it (seeded alike) and keeps one datapoint in %d: its "
        "work is done %d times over and the workers gain nothing where the cost is in "
        "__iter__ (and a source shuffling from its own clock or pid is not split right). Forms "
        "that pay: leave 'ordered' out (each worker iterates a copy of its own, "
        "unordered), give the source __len__ and __getitem__ (ordered, split by index), "
        "or a function (worker, workers) returning worker k's own iterable",
        name,
        workers,
        workers,
        workers,
    )


def _unguarded_message(pool: ParallelIterable, path: str, line: int) -> str:
    return (
        f"{pool}: the main module {path} starts the workers from its top-level code "
        f'(line {line}), outside `if __name__ == "__main__":`. Under '
        f"start_method={pool.plan.start_method!r} each worker imports the main module "
        "first and would run that line again (build the model, train, start workers of "
        'its own). Put the training code under `if __name__ == "__main__":` (or in a '
        "main() called from there)"
    )
