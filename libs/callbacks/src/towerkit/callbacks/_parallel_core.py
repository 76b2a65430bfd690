"""The pure core of parallel Python input: how a source is split across workers, how they merge."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

import attrs

__all__ = [
    "SHARED_MEMORY_MIN_BYTES",
    "SPLITS",
    "START_METHODS",
    "MergeState",
    "StartLimit",
    "WorkerPlan",
    "check_worker_limits",
    "choose_split",
    "room_for_workers",
    "keeps_position",
    "merge_after_datapoint",
    "pick_start_method",
    "merge_after_end",
    "round_robin",
    "shard_indices",
    "start_merge",
    "worker_seed",
]

Split = Literal["index", "copies", "stride", "factory"]
SPLITS: tuple[Split, ...] = ("index", "copies", "stride", "factory")
"""How a source is split: by index, a copy of it per worker, every N-th datapoint, or a function."""

SHARED_MEMORY_MIN_BYTES = 1 << 20
"""Arrays of 1 MiB and more travel through shared memory by default. On 2 cores
(``bench_parallel.py``'s large-array table, two runs) a block takes 0.59x and 0.92x
the pipe's time at 1 MiB, 0.43x and 0.45x at 16 MiB; below 1 MiB where it starts to
pay moves between runs (384 KiB to 1 MiB)."""

START_METHODS = ("spawn", "forkserver", "fork")
"""The multiprocessing start methods a parallel source accepts."""


def _positive_workers(_: Any, __: attrs.Attribute[Any], workers: int) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int):
        msg = f"'workers' must be an int >= 1 (producer processes); got {type(workers).__name__}"
        raise TypeError(msg)
    if workers < 1:
        msg = (
            f"'workers' must be >= 1 (producer processes); got {workers}: give workers=1 for "
            "one producer process, or leave 'workers' out to produce in a thread of this process"
        )
        raise ValueError(msg)


def _min_bytes(_: Any, __: attrs.Attribute[Any], value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = (
            "'shared_memory_min_bytes' must be an int >= 1 (the size from which an array "
            f"goes through shared memory) or None (never); got {value!r}"
        )
        raise ValueError(msg)


def _start_method(_: Any, __: attrs.Attribute[Any], method: str) -> None:
    if method not in START_METHODS:
        msg = f"'start_method' must be one of {START_METHODS}; got {method!r}"
        raise ValueError(msg)


def _pass_length(plan: Any, _: attrs.Attribute[Any], length: int | None) -> None:
    if length is None:
        return
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        msg = f"'pass_length' must be an int >= 1 (datapoints in a pass) or None; got {length!r}"
        raise ValueError(msg)
    if plan.split != "copies":
        msg = f"'pass_length' is for the 'copies' split only; got split={plan.split!r}"
        raise ValueError(msg)


def _seed(_: Any, __: attrs.Attribute[Any], seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        msg = f"'seed' must be an int >= 0; got {seed!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class WorkerPlan:
    """How a parallel source runs: its workers, their split, merge order and seeds.

    Attributes:
        workers: producer processes, >= 1.
        split: ``"index"`` (worker k takes indices k, k+N, ...), ``"copies"`` (each
            worker iterates a copy of its own, reset and seeded for that worker),
            ``"stride"`` (each worker iterates the whole source and keeps every N-th
            datapoint: the source's work done N times) or ``"factory"`` (a user
            function builds worker k's source).
        ordered: deliver datapoints in the order one worker would produce them
            (never under ``"copies"``: its datapoints come as the copies make them).
        seed: the base of every worker's seeds (`worker_seed`), >= 0.
        start_method: the multiprocessing start method.
        capacity: datapoints each worker may have waiting, >= 1.
        shared_memory_min_bytes: the size from which an array of a datapoint travels
            through shared memory instead of the worker's pipe (None: never).
        pass_length: under ``"copies"``, the datapoints of one pass (the source's
            length: the copies run on without a break, as tensorpack's
            ``MultiProcessRunnerZMQ`` does); None: a pass is one pass of every copy.

    Examples:
        >>> WorkerPlan(workers=2, split="index")  # doctest: +NORMALIZE_WHITESPACE
        WorkerPlan(workers=2, split='index', ordered=True, seed=0, start_method='spawn',
                   capacity=8, shared_memory_min_bytes=1048576, pass_length=None)
        >>> WorkerPlan(workers=0, split="index")
        Traceback (most recent call last):
        ...
        ValueError: 'workers' must be >= 1 (producer processes); got 0: give workers=1 for one producer process, or leave 'workers' out to produce in a thread of this process
    """

    workers: int = attrs.field(validator=_positive_workers)
    split: Split = attrs.field(validator=attrs.validators.in_(SPLITS))
    ordered: bool = attrs.field(default=True, converter=bool)
    seed: int = attrs.field(default=0, validator=_seed)
    start_method: str = attrs.field(default="spawn", validator=_start_method)
    capacity: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    shared_memory_min_bytes: int | None = attrs.field(
        default=SHARED_MEMORY_MIN_BYTES, validator=_min_bytes
    )
    pass_length: int | None = attrs.field(default=None, validator=_pass_length)

    def __attrs_post_init__(self) -> None:
        if self.split == "copies" and self.ordered:
            msg = (
                "'ordered' must be False under the 'copies' split: each worker iterates a "
                "copy of its own, and their datapoints come as they are made"
            )
            raise ValueError(msg)


def pick_start_method(requested: str | None, available: Sequence[str]) -> str:
    """The start method of a pool: `requested`, else ``forkserver`` where the platform has it.

    ``forkserver`` starts one clean server process (it imports the main module once)
    and forks each worker from it: the workers copy none of the training process's
    threads or TensorFlow state, and start in milliseconds after the first. Where it
    is missing (Windows) ``spawn`` starts each worker as a fresh interpreter.

    Examples:
        >>> pick_start_method(None, ["fork", "spawn", "forkserver"])
        'forkserver'
        >>> pick_start_method(None, ["spawn"])
        'spawn'
        >>> pick_start_method("fork", ["fork", "spawn", "forkserver"])
        'fork'
    """
    if requested is not None:
        return requested
    return "forkserver" if "forkserver" in available else "spawn"


def choose_split(
    has_len: bool, has_getitem: bool, factory: bool, ordered: bool | None = None
) -> Split:
    """The split of a source: ``factory`` for a function, ``index`` when it is indexable.

    Any other iterable (a DataFlow, a generator class: its cost is in ``__iter__``) gets
    a copy per worker (``copies``), unordered, unless `ordered` is True: then every
    worker iterates it whole and keeps every N-th datapoint (``stride``), which does
    the source's work N times over; the shell warns when it chooses that.

    Examples:
        >>> choose_split(True, True, False)
        'index'
        >>> choose_split(True, False, False)
        'copies'
        >>> choose_split(False, False, False, ordered=True)
        'stride'
        >>> choose_split(False, False, True)
        'factory'
    """
    if factory:
        return "factory"
    if has_len and has_getitem:
        return "index"
    return "stride" if ordered else "copies"


@attrs.frozen(kw_only=True)
class StartLimit:
    """One limit of the machine on the worker processes a pool may start.

    Attributes:
        what: the limit, as the user would look it up (``"open files (ulimit -n 1024,
            40 open)"``).
        workers: the workers it leaves room for, >= 0.
    """

    what: str
    workers: int = attrs.field(validator=attrs.validators.ge(0))


def room_for_workers(limit: int, in_use: int, per_worker: int, reserve: int) -> int:
    """Workers that fit under `limit` with `in_use` taken, `per_worker` each, `reserve` kept.

    Examples:
        >>> room_for_workers(1024, 40, 3, 64)
        306
        >>> room_for_workers(100, 90, 2, 16)
        0
    """
    return max((limit - in_use - reserve) // max(per_worker, 1), 0)


def check_worker_limits(workers: int, limits: Sequence[StartLimit]) -> None:
    """Refuse `workers` when a limit of the machine leaves room for fewer.

    Raises:
        ValueError: naming the tightest limit and the most workers it allows.

    Examples:
        >>> check_worker_limits(4, [StartLimit(what="processes", workers=10)])
        >>> check_worker_limits(100000, [StartLimit(what="open files (ulimit -n 1024)",
        ...                                         workers=306)])
        Traceback (most recent call last):
        ...
        ValueError: 'workers' must be at most 306 on this machine (open files (ulimit -n 1024)); got 100000
    """
    if not limits:
        return
    tightest = min(limits, key=lambda limit: limit.workers)
    if workers > tightest.workers:
        msg = (
            f"'workers' must be at most {tightest.workers} on this machine "
            f"({tightest.what}); got {workers}"
        )
        raise ValueError(msg)


def shard_indices(length: int, workers: int, worker: int) -> range:
    """The indices (0-based) of a source of `length` that worker `worker` (0-based) produces.

    Worker k takes k, k + N, k + 2N, ...: the shares are disjoint, cover
    ``range(length)``, and differ in size by at most one.

    Examples:
        >>> list(shard_indices(7, 3, 1))
        [1, 4]
        >>> list(shard_indices(2, 3, 2))
        []
    """
    return range(worker, length, workers)


def keeps_position(position: int, workers: int, worker: int) -> bool:
    """Whether worker `worker` keeps the datapoint at `position` (0-based) of a pass.

    Under the ``stride`` split every worker iterates the whole source and keeps the
    datapoints at positions k, k + N, ...: the source's own work is done N times.

    Examples:
        >>> [p for p in range(7) if keeps_position(p, 3, 1)]
        [1, 4]
    """
    return position % workers == worker


def worker_seed(seed: int, worker: int, pass_number: int) -> int:
    """The seed of NumPy's and ``random``'s generators for one worker's pass (1-based).

    Distinct for every worker < 4294 and pass < 1000003 of a run, the same in every
    run with the same `seed`, and a valid NumPy legacy seed (< 2**32).

    Examples:
        >>> worker_seed(0, 0, 1) != worker_seed(0, 1, 1)
        True
        >>> worker_seed(5, 1, 2) == worker_seed(5, 1, 2)
        True
    """
    base = (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & ((1 << 64) - 1)
    base ^= base >> 31
    return (base + worker * 1_000_003 + pass_number) & 0xFFFFFFFF


def _int_tuple(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class MergeState:
    """Where an ordered merge of one pass stands.

    Attributes:
        active: the workers whose pass has not ended, in turn order (0-based ids).
        turn: the index in `active` of the worker whose datapoint comes next.
    """

    active: tuple[int, ...] = attrs.field(converter=_int_tuple)
    turn: int = 0

    @property
    def done(self) -> bool:
        """Whether every worker's pass has ended."""
        return not self.active

    @property
    def current(self) -> int:
        """The worker whose next message the merge reads."""
        return self.active[self.turn]


def start_merge(workers: int) -> MergeState:
    """The merge of a pass over `workers` workers: worker 0 first.

    Examples:
        >>> start_merge(2)
        MergeState(active=(0, 1), turn=0)
    """
    return MergeState(active=tuple(range(workers)))


def merge_after_datapoint(state: MergeState) -> MergeState:
    """The merge after the current worker gave a datapoint: the next worker's turn.

    Examples:
        >>> merge_after_datapoint(start_merge(2)).current
        1
    """
    return attrs.evolve(state, turn=(state.turn + 1) % len(state.active))


def merge_after_end(state: MergeState) -> MergeState:
    """The merge after the current worker ended its pass: it leaves the turn order.

    Examples:
        >>> merge_after_end(MergeState(active=(0, 1, 2), turn=2))
        MergeState(active=(0, 1), turn=0)
    """
    active = state.active[: state.turn] + state.active[state.turn + 1 :]
    turn = state.turn % len(active) if active else 0
    return MergeState(active=active, turn=turn)


def round_robin(counts: Sequence[int]) -> Iterator[tuple[int, int]]:
    """The ordered merge of workers giving ``counts[k]`` datapoints each in a pass.

    Yields ``(worker, j)``: the j-th (0-based) datapoint of that worker, in delivery
    order. Under the ``index`` and ``stride`` splits this is the order of one worker
    over the whole source; it is the order `start_merge`, `merge_after_datapoint`
    and `merge_after_end` walk.

    Examples:
        >>> list(round_robin([2, 1]))
        [(0, 0), (1, 0), (0, 1)]
    """
    state = start_merge(len(counts))
    taken = [0] * len(counts)
    while not state.done:
        k = state.current
        if taken[k] < counts[k]:
            yield k, taken[k]
            taken[k] += 1
            state = merge_after_datapoint(state)
        else:
            state = merge_after_end(state)
