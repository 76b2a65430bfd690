"""Which of the best checkpoints by a statistic a saver keeps: a pure decision over a record of them."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import attrs

__all__ = [
    "BestEntry",
    "BestKPlan",
    "BestKResume",
    "BestKState",
    "best_k_json",
    "parse_best_k",
    "plan_best_k",
    "rank_entries",
    "resume_best_k",
]

Mode = Literal["min", "max"]
_MODES = ("min", "max")
BEST_K_FORMAT = 1
"""The version of the record file `best_k_json` writes."""


def _finite(instance: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if not math.isfinite(value):
        msg = (
            f"{type(instance).__name__}: {attribute.name!r} must be a finite number; got {value!r}"
        )
        raise ValueError(msg)


def _count(instance: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = f"{type(instance).__name__}: {attribute.name!r} must be an int >= 0; got {value!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class BestEntry:
    """One kept checkpoint of the best k: its name, the global step it holds, its statistic.

    Attributes:
        name: the checkpoint's base name in the directory (``min-val-error-120.tfmodel``).
        step: the global step the checkpoint holds.
        epoch: the epoch (1-based) whose statistic it is.
        value: the statistic, a finite number.
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    step: int = attrs.field(validator=_count)
    epoch: int = attrs.field(validator=_count)
    value: float = attrs.field(converter=float, validator=_finite)


def _entries(value: Iterable[BestEntry]) -> tuple[BestEntry, ...]:
    return tuple(value)


def _rank_key(entry: BestEntry, mode: Mode) -> tuple[float, int]:
    # Ties go to the earlier step: a later equal value never displaces a kept one.
    return (entry.value if mode == "min" else -entry.value, entry.step)


def rank_entries(entries: Iterable[BestEntry], mode: Mode) -> tuple[BestEntry, ...]:
    """Order entries best first: by value (lowest first for ``"min"``), then by earlier step.

    Examples:
        >>> es = [BestEntry(name=n, step=s, epoch=s, value=v) for n, s, v in
        ...       [("a", 1, 2.0), ("b", 2, 1.0), ("c", 3, 2.0)]]
        >>> [e.name for e in rank_entries(es, "min")], [e.name for e in rank_entries(es, "max")]
        (['b', 'a', 'c'], ['a', 'c', 'b'])
    """
    if mode not in _MODES:
        msg = f"'mode' must be 'min' or 'max'; got {mode!r}"
        raise ValueError(msg)
    return tuple(sorted(entries, key=lambda e: _rank_key(e, mode)))


def _check_kept(instance: BestKState, attribute: attrs.Attribute[Any], value: Any) -> None:
    del attribute
    faults = []
    if len(value) > instance.k:
        faults.append(f"{len(value)} entries for k = {instance.k}")
    for what in ("name", "step"):
        seen = [getattr(e, what) for e in value]
        twice = sorted({x for x in seen if seen.count(x) > 1})
        if twice:
            faults.append(f"{what}s kept twice: {twice}")
    if tuple(value) != rank_entries(value, instance.mode):
        faults.append("not ranked best first (see rank_entries)")
    if faults:
        msg = f"BestKState: 'kept' is inconsistent: {'; '.join(faults)}"
        raise ValueError(msg)


def _positive(instance: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        msg = f"{type(instance).__name__}: {attribute.name!r} must be an int > 0; got {value!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class BestKState:
    """The best k checkpoints kept so far by a statistic, best first.

    Attributes:
        k: how many to keep (> 0).
        mode: ``"min"`` keeps the lowest values, ``"max"`` the highest.
        kept: at most `k` entries, ranked best first (`rank_entries`), no step or name twice.
    """

    k: int = attrs.field(validator=_positive)
    mode: Mode = attrs.field(validator=attrs.validators.in_(_MODES))
    kept: tuple[BestEntry, ...] = attrs.field(default=(), converter=_entries, validator=_check_kept)

    @property
    def worst(self) -> BestEntry | None:
        """The entry a better candidate displaces once `k` are kept (the last one), or None."""
        return self.kept[-1] if len(self.kept) == self.k else None


@attrs.frozen(kw_only=True)
class BestKPlan:
    """What a saver does with a candidate: publish it or not, then which kept ones to prune.

    The shell publishes the candidate's checkpoint first, then writes `state` (the
    record), and only then deletes `prune`: a crash at any moment leaves a record that
    names only complete checkpoints, at most k of them.

    Attributes:
        admitted: whether the candidate joins the best k (its checkpoint is to be published).
        state: the state after the candidate (unchanged when not admitted).
        prune: the entries to delete after the record is written (empty when not admitted).
        reason: why, in words, for the log.
    """

    admitted: bool
    state: BestKState
    prune: tuple[BestEntry, ...] = attrs.field(converter=_entries)
    reason: str


def plan_best_k(state: BestKState, *, name: str, step: int, epoch: int, value: float) -> BestKPlan:
    """Decide whether a candidate joins the best k and which kept entry it displaces.

    A candidate is admitted when fewer than k are kept, or when it ranks before the
    worst kept one (a strictly better value; an equal value never displaces an earlier
    one). A value that is not finite (NaN, an infinity: a diverged epoch) is never
    admitted, and neither is a step or a name already kept.

    Args:
        state: the best k so far.
        name: the checkpoint name the candidate is published under when admitted.
        step: the global step its checkpoint holds.
        epoch: the epoch (1-based) whose statistic `value` is.
        value: the candidate's statistic.

    Returns:
        The `BestKPlan`.

    Examples:
        >>> s = BestKState(k=2, mode="min")
        >>> for step, v in [(1, 3.0), (2, 1.0), (3, 2.0), (4, float("nan")), (5, 5.0)]:
        ...     plan = plan_best_k(s, name=f"m-{step}", step=step, epoch=step, value=v)
        ...     s = plan.state
        ...     print(step, plan.admitted, [p.step for p in plan.prune], [k.step for k in s.kept])
        1 True [] [1]
        2 True [] [2, 1]
        3 True [1] [2, 3]
        4 False [] [2, 3]
        5 False [] [2, 3]
    """
    if not math.isfinite(value):
        return BestKPlan(
            admitted=False, state=state, prune=(), reason=f"{value} is not finite: not a candidate"
        )
    candidate = BestEntry(name=name, step=step, epoch=epoch, value=value)
    if any(e.step == candidate.step or e.name == candidate.name for e in state.kept):
        return BestKPlan(
            admitted=False,
            state=state,
            prune=(),
            reason=f"global step {candidate.step} is kept already",
        )
    ranked = rank_entries((*state.kept, candidate), state.mode)
    kept, dropped = ranked[: state.k], ranked[state.k :]
    if candidate in dropped:
        worst = state.kept[-1]
        return BestKPlan(
            admitted=False,
            state=state,
            prune=(),
            reason=f"not better than the worst of the best {state.k} ({worst.value:g} "
            f"at global step {worst.step})",
        )
    place = kept.index(candidate) + 1
    return BestKPlan(
        admitted=True,
        state=attrs.evolve(state, kept=kept),
        prune=dropped,
        reason=f"number {place} of the best {state.k}",
    )


@attrs.frozen(kw_only=True)
class BestKResume:
    """The best k a resumed run starts from, and what to do with the rest of the record.

    Attributes:
        state: the entries at or before the starting global step, the best k of them.
        prune: the entries at or before the start beyond the best k (k was lowered): deleted.
        ahead: the entries saved after the starting global step (an epoch a crash
            abandoned, or another run's): moved aside, never deleted.
    """

    state: BestKState
    prune: tuple[BestEntry, ...] = attrs.field(converter=_entries)
    ahead: tuple[BestEntry, ...] = attrs.field(converter=_entries)


def resume_best_k(
    entries: Sequence[BestEntry], *, k: int, mode: Mode, start_step: int
) -> BestKResume:
    """The best k of a record read back when a run starts at `start_step`.

    Examples:
        >>> es = [BestEntry(name=f"m-{s}", step=s, epoch=s // 10, value=v)
        ...       for s, v in [(10, 3.0), (20, 1.0), (30, 2.0), (40, 0.5)]]
        >>> r = resume_best_k(es, k=1, mode="min", start_step=30)
        >>> [e.step for e in r.state.kept], [e.step for e in r.prune], [e.step for e in r.ahead]
        ([20], [30, 10], [40])
    """
    ranked = rank_entries(entries, mode)
    behind = [e for e in ranked if e.step <= start_step]
    return BestKResume(
        state=BestKState(k=k, mode=mode, kept=behind[:k]),
        prune=behind[k:],
        ahead=[e for e in ranked if e.step > start_step],
    )


def best_k_json(state: BestKState, monitor_stat: str) -> str:
    """The record file's text: the statistic, the mode, k and the kept entries, best first.

    Examples:
        >>> s = BestKState(k=2, mode="max", kept=[BestEntry(name="a", step=3, epoch=1, value=0.5)])
        >>> parse_best_k(best_k_json(s, "acc"))
        ('acc', 'max', (BestEntry(name='a', step=3, epoch=1, value=0.5),))
    """
    return json.dumps(
        {
            "format": BEST_K_FORMAT,
            "monitor_stat": monitor_stat,
            "mode": state.mode,
            "k": state.k,
            "kept": [attrs.asdict(e) for e in state.kept],
        },
        indent=1,
    )


def parse_best_k(text: str) -> tuple[str, Mode, tuple[BestEntry, ...]]:
    """Read a record file's text back: ``(monitor_stat, mode, entries)``.

    Raises:
        ValueError: the text is not a record `best_k_json` writes (the message says what is wrong).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        msg = f"not JSON ({err})"
        raise ValueError(msg) from err
    if not isinstance(data, dict) or data.get("format") != BEST_K_FORMAT:
        msg = f"expected an object with 'format': {BEST_K_FORMAT}; got {str(data)[:80]!r}"
        raise ValueError(msg)
    stat, mode, kept = data.get("monitor_stat"), data.get("mode"), data.get("kept")
    if not isinstance(stat, str) or mode not in _MODES or not isinstance(kept, list):
        msg = (
            "expected 'monitor_stat' (a name), 'mode' ('min' or 'max') and 'kept' (a list); "
            f"got {stat!r}, {mode!r}, {type(kept).__name__}"
        )
        raise ValueError(msg)
    try:
        entries = tuple(BestEntry(**e) for e in kept)
    except (TypeError, ValueError) as err:
        msg = f"an entry of 'kept' is not a (name, step, epoch, finite value): {err}"
        raise ValueError(msg) from err
    return stat, mode, entries
