"""Which horovod rank of this machine stopped answering: the launcher's watch over ``/proc``.

A rank whose process is stopped (SIGSTOP, a hung machine's stand-in) keeps its sockets
open and answers nothing; the other ranks wait for it in a collective until gloo's
timeout, fail, and horovod's launcher then reports one of *them* as the first failure.
`launch_horovod_job` samples the state of each rank's process on this machine while the
job runs (`local_rank_states`), folds the samples into a `RankWatchState`
(`advance_rank_watch`), kills a rank stopped for too long (`overdue_ranks`), and names
the stopped rank rather than the survivor (`stopped_ranks`). Ranks on other hosts are
not seen here: their failures are named as the launcher reports them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping

import attrs

STOPPED = "T"
"""The ``/proc/PID/stat`` state of a process stopped by a signal (SIGSTOP, SIGTSTP).

A debugger's trace stop (``t``) is not counted: a rank held at a breakpoint is the
user's own doing."""

GONE = frozenset("ZX")
"""The states of a process that has exited (a zombie not yet reaped, or dead)."""


def _int_set(values: Iterable[int]) -> frozenset[int]:
    return frozenset(values)


def _ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


def _pairs(values: Iterable[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class RankWatchState:
    """What the launcher's watch has seen of the ranks of this machine.

    Attributes:
        seen: the ranks seen alive at least once.
        stopped_since: ``(rank, time)`` for each rank stopped in the latest sample: the
            time (seconds, the watch's clock) of the first sample of its current stop.
        exited: whether a rank seen alive has since exited (its process gone).
        stopped_at_exit: the ranks that were stopped in the last sample before the
            first exit: the ones the others were waiting on.
        killed: the ranks the launcher killed for staying stopped.
    """

    seen: frozenset[int] = attrs.field(default=frozenset(), converter=_int_set)
    stopped_since: tuple[tuple[int, float], ...] = attrs.field(default=(), converter=_pairs)
    exited: bool = False
    stopped_at_exit: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    killed: tuple[int, ...] = attrs.field(default=(), converter=_ints)


def advance_rank_watch(
    state: RankWatchState, sample: Mapping[int, str], now: float
) -> RankWatchState:
    """The watch after one sample: `sample` maps each rank found to its process state.

    A rank seen before and missing from `sample` (or a zombie) has exited. The ranks
    stopped in the sample before the first exit are kept: they were stopped while every
    rank was alive, so the others' failures followed from them.

    >>> s = advance_rank_watch(RankWatchState(), {0: "S", 1: "T"}, 10.0)
    >>> s.stopped_since
    ((1, 10.0),)
    >>> s = advance_rank_watch(s, {1: "T"}, 30.0)
    >>> s.exited, s.stopped_at_exit, s.stopped_since
    (True, (1,), ((1, 10.0),))
    """
    alive = {rank: st for rank, st in sample.items() if st not in GONE}
    since = dict(state.stopped_since)
    stopped_now = tuple(
        (rank, since.get(rank, now)) for rank in sorted(alive) if alive[rank] == STOPPED
    )
    first_exit = not state.exited and bool(state.seen - alive.keys())
    return attrs.evolve(
        state,
        seen=state.seen | set(alive),
        stopped_since=stopped_now,
        exited=state.exited or first_exit,
        stopped_at_exit=tuple(sorted(since)) if first_exit else state.stopped_at_exit,
    )


def overdue_ranks(state: RankWatchState, now: float, limit: float) -> tuple[int, ...]:
    """The ranks stopped for at least `limit` seconds at `now` (not yet killed).

    >>> overdue_ranks(RankWatchState(stopped_since=((1, 10.0),)), 30.0, 20.0)
    (1,)
    >>> overdue_ranks(RankWatchState(stopped_since=((1, 10.0),)), 29.0, 20.0)
    ()
    """
    return tuple(
        rank
        for rank, since in state.stopped_since
        if now - since >= limit and rank not in state.killed
    )


def mark_killed(state: RankWatchState, ranks: tuple[int, ...]) -> RankWatchState:
    """The watch once the launcher has killed `ranks` for staying stopped.

    >>> mark_killed(RankWatchState(), (1,)).killed
    (1,)
    """
    return attrs.evolve(state, killed=tuple(sorted({*state.killed, *ranks})))


def stopped_ranks(state: RankWatchState) -> tuple[int, ...]:
    """The ranks to name as having stopped answering, lowest first.

    They are the ranks stopped when the first rank exited, and those the launcher killed
    for staying stopped.

    >>> stopped_ranks(RankWatchState(stopped_at_exit=(1,), killed=(0, 1)))
    (0, 1)
    >>> stopped_ranks(RankWatchState(stopped_since=((1, 3.0),)))
    ()
    """
    return tuple(sorted({*state.stopped_at_exit, *state.killed}))


def parse_proc_stat(text: str) -> tuple[int, str, int]:
    """``(pid, state, ppid)`` from the text of ``/proc/PID/stat``.

    The command name sits in parentheses and may itself hold spaces and parentheses,
    so the fields are read after its last ``)``.

    >>> parse_proc_stat("42 (py (x) y) T 7 42 42 0 -1")
    (42, 'T', 7)

    Raises:
        ValueError: `text` is not a ``/proc/PID/stat`` line.
    """
    head, sep, tail = text.rpartition(")")
    fields = tail.split()
    pid_text = head.partition("(")[0].strip()
    if not sep or len(fields) < 2 or not pid_text.isdigit() or not fields[1].lstrip("-").isdigit():
        msg = f"not a /proc/PID/stat line (expected 'PID (COMM) STATE PPID ...'): {text[:80]!r}"
        raise ValueError(msg)
    return int(pid_text), fields[0], int(fields[1])


def _read(path: str) -> bytes | None:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        return f.read()
    return None


def _rank_of(pid: int) -> int | None:
    environ = _read(f"/proc/{pid}/environ")
    for entry in (environ or b"").split(b"\0"):
        if entry.startswith(b"HOROVOD_RANK="):
            with contextlib.suppress(ValueError):
                return int(entry[len(b"HOROVOD_RANK=") :])
    return None


def local_rank_states(root: int) -> dict[int, tuple[int, str]]:
    """``{rank: (pid, state)}`` of each rank process among the descendants of `root`.

    A rank's process is the first descendant (nearest `root`) whose environment holds
    ``HOROVOD_RANK``; processes it starts inherit the variable and are not counted. Empty
    where ``/proc`` cannot be read (not Linux). Ranks on other hosts run under ``ssh``
    and are not seen.
    """
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            raw = _read(f"/proc/{name}/stat")
            if raw is None:
                continue
            with contextlib.suppress(ValueError):
                pid, st, ppid = parse_proc_stat(raw.decode(errors="replace"))
                states[pid] = st
                children.setdefault(ppid, []).append(pid)
    found: dict[int, tuple[int, str]] = {}
    queue: list[tuple[int, int | None]] = [(pid, None) for pid in children.get(root, [])]
    while queue:  # breadth first: a rank's own process comes before its children
        pid, parent_rank = queue.pop(0)
        rank = _rank_of(pid)
        if rank is not None and rank != parent_rank:
            found.setdefault(rank, (pid, states[pid]))
        queue += [(c, rank) for c in children.get(pid, [])]
    return found
