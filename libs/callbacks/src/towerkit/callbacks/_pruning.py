"""Which checkpoints a saver prunes: a pure decision over the steps and times of its saves."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

__all__ = [
    "EPOCH_ENDS_KEPT",
    "InheritedCheckpoints",
    "PrunePlan",
    "SaverState",
    "after_save",
    "plan_inherited",
    "plan_pruning",
    "start_saver_state",
]

EPOCH_ENDS_KEPT = 2
"""How many of the newest epoch-end checkpoints `ModelSaver` never prunes."""


@attrs.frozen(kw_only=True)
class PrunePlan:
    """Which checkpoints a saver keeps, deletes and keeps for good after a save.

    Attributes:
        keep: the steps of the checkpoints still tracked, oldest first (the inherited
            ones by step, then this run's in the order it saved them).
        delete: the steps of the checkpoints to delete.
        preserve: the steps kept for good (one per ``keep_checkpoint_every_n_hours``);
            they are no longer tracked, so never deleted.
        next_preserve_time: when (seconds since the epoch) the next checkpoint to keep
            for good may have been written.
    """

    keep: tuple[int, ...]
    delete: tuple[int, ...]
    preserve: tuple[int, ...]
    next_preserve_time: float


def plan_pruning(
    saved: Sequence[tuple[int, float]],
    *,
    max_to_keep: int,
    epoch_ends: Collection[int],
    preserve_every_s: float,
    next_preserve_time: float,
    own: Sequence[int] = (),
) -> PrunePlan:
    """Decide which checkpoints to delete after a save.

    The newest `max_to_keep` checkpoints are kept (all of them when it is 0), and so
    are the newest `EPOCH_ENDS_KEPT` checkpoints saved at the end of an epoch (those
    of `epoch_ends`), whatever the schedule of the saves: a resumed run
    restarts from an epoch-end checkpoint that the statistics file has recorded, and
    the newest one may not be recorded yet. Of the others, oldest first, one written
    at or after `next_preserve_time` is kept for good and moves that time on by
    `preserve_every_s`; the rest are deleted.

    "Newest" is decided from what this run saved, never by outranking: the checkpoints
    of `saved` that are not in `own` (inherited from the directory's state file) count
    as older than every checkpoint of `own` whatever their steps, and `own` is taken in
    the order this run saved it. So the checkpoint just saved (the last of `own`) is
    always kept, and which of this run's checkpoints are deleted does not depend on
    the steps of the inherited ones.

    Args:
        saved: ``(global step, time written)`` of each tracked checkpoint.
        max_to_keep: how many recent checkpoints to keep; 0 keeps all.
        epoch_ends: the steps of the checkpoints saved at the end of an epoch.
        preserve_every_s: seconds between checkpoints kept for good.
        next_preserve_time: when the next one to keep for good may have been written.
        own: the steps this run saved, in the order it saved them (a subset of the
            steps of `saved`); empty: all of `saved` ranks by step.

    Returns:
        The `PrunePlan`.

    Examples:
        Saving every step, 3 steps per epoch, keeping 2: steps 3 and 6 end epochs.

        >>> plan = plan_pruning([(s, 0.0) for s in range(1, 9)], max_to_keep=2,
        ...                     epoch_ends={3, 6}, preserve_every_s=3600, next_preserve_time=1e9)
        >>> plan.keep, plan.delete
        ((3, 6, 7, 8), (1, 2, 4, 5))

        An inherited model-24 never outranks this run's model-4, model-8 and model-12:

        >>> plan = plan_pruning([(24, 0.0), (4, 1.0), (8, 2.0), (12, 3.0)], max_to_keep=2,
        ...                     epoch_ends=set(), preserve_every_s=3600,
        ...                     next_preserve_time=1e9, own=[4, 8, 12])
        >>> plan.keep, plan.delete
        ((8, 12), (24, 4))
    """
    written_at = dict(saved)
    mine = [s for s in dict.fromkeys(own) if s in written_at]
    ordered = [(s, written_at[s]) for s in sorted(set(written_at) - set(mine))]
    ordered += [(s, written_at[s]) for s in mine]
    steps = [s for s, _ in ordered]
    recent = set(steps if max_to_keep == 0 else steps[-max_to_keep:])
    ends = [s for s in steps if s in epoch_ends]
    protected = recent | set(ends[-EPOCH_ENDS_KEPT:])
    keep, delete, preserve = [], [], []
    for step, written in ordered:
        if step in protected:
            keep.append(step)
        elif written >= next_preserve_time:
            preserve.append(step)
            next_preserve_time = written + preserve_every_s
        else:
            delete.append(step)
    return PrunePlan(
        keep=tuple(keep),
        delete=tuple(delete),
        preserve=tuple(preserve),
        next_preserve_time=next_preserve_time,
    )


def _saved_pairs(value: Iterable[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    return tuple(sorted((int(step), float(written)) for step, written in dict(value).items()))


def _step_tuple(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(s) for s in value)


def _step_set(value: Iterable[int]) -> frozenset[int]:
    return frozenset(int(s) for s in value)


@attrs.frozen(kw_only=True)
class SaverState:
    """What `ModelSaver` tracks between saves, as one record.

    Attributes:
        saved: ``(global step, time written)`` of each tracked checkpoint, by step:
            the inherited ones and this run's, those pruned or kept for good left out.
        own: the tracked steps this run saved, in the order it saved them.
        epoch_ends: the tracked steps saved at the end of an epoch.
        next_preserve_time: when the next checkpoint to keep for good may have been written.
    """

    saved: tuple[tuple[int, float], ...] = attrs.field(default=(), converter=_saved_pairs)
    own: tuple[int, ...] = attrs.field(default=(), converter=_step_tuple)
    epoch_ends: frozenset[int] = attrs.field(default=frozenset(), converter=_step_set)
    next_preserve_time: float = attrs.field(default=0.0, converter=float)

    @property
    def written(self) -> dict[int, float]:
        """The time each tracked checkpoint was written, by step."""
        return dict(self.saved)


def start_saver_state(
    kept: Mapping[int, float],
    *,
    start_step: int,
    steps_per_epoch: int,
    next_preserve_time: float,
) -> SaverState:
    """The state of a saver at the start of a run, over the inherited checkpoints it keeps.

    The run starts at an epoch end, so an inherited checkpoint lies at an epoch end
    when it lies a whole number of epochs before the starting step.

    Examples:
        >>> start_saver_state({10: 1.0, 15: 2.0, 20: 3.0}, start_step=20, steps_per_epoch=10,
        ...                   next_preserve_time=9.0)
        SaverState(saved=((10, 1.0), (15, 2.0), (20, 3.0)), own=(), epoch_ends=frozenset({10, 20}), next_preserve_time=9.0)
    """
    spe = max(1, int(steps_per_epoch))
    return SaverState(
        saved=kept.items(),
        epoch_ends={s for s in kept if (s - start_step) % spe == 0},
        next_preserve_time=next_preserve_time,
    )


def after_save(
    state: SaverState,
    step: int,
    written: float,
    *,
    at_epoch_end: bool,
    max_to_keep: int,
    preserve_every_s: float,
) -> tuple[SaverState, PrunePlan]:
    """Track a checkpoint just saved and decide what to prune (`plan_pruning`).

    Returns the state after the pruning (the deleted and the preserved checkpoints no
    longer tracked) and the plan to carry out. Saving a step again moves it to the
    newest of this run's.

    Examples:
        >>> s = SaverState(next_preserve_time=1e9)
        >>> for step in (1, 2, 3, 4):
        ...     s, plan = after_save(s, step, float(step), at_epoch_end=step % 2 == 0,
        ...                          max_to_keep=1, preserve_every_s=3600.0)
        >>> s.own, sorted(s.epoch_ends), plan.delete
        ((2, 4), [2, 4], (3,))
    """
    written_at = {**state.written, step: float(written)}
    own = (*(s for s in state.own if s != step), step)
    ends = state.epoch_ends | {step} if at_epoch_end else state.epoch_ends - {step}
    plan = plan_pruning(
        list(written_at.items()),
        max_to_keep=max_to_keep,
        epoch_ends=ends,
        preserve_every_s=preserve_every_s,
        next_preserve_time=state.next_preserve_time,
        own=own,
    )
    gone = {*plan.delete, *plan.preserve}
    new = SaverState(
        saved=[(s, w) for s, w in written_at.items() if s not in gone],
        own=[s for s in own if s not in gone],
        epoch_ends=ends - gone,
        next_preserve_time=plan.next_preserve_time,
    )
    return new, plan


def _named_steps(value: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    return tuple((str(name), int(step)) for name, step in value)


@attrs.frozen(kw_only=True)
class InheritedCheckpoints:
    """The checkpoints a saver finds in its directory when a run starts, split by step.

    Attributes:
        kept: ``(name, step)`` of the checkpoints at or behind the run's starting
            global step, by step: the run continues after them, and they count towards
            ``max_to_keep``.
        ahead: ``(name, step)`` of those saved at a later global step than the run
            starts from (another run's, or an epoch a crash abandoned), by step: they are
            moved aside, never outranking or being overwritten by this run's.
    """

    kept: tuple[tuple[str, int], ...] = attrs.field(converter=_named_steps)
    ahead: tuple[tuple[str, int], ...] = attrs.field(converter=_named_steps)


def plan_inherited(found: Collection[tuple[str, int]], start_step: int) -> InheritedCheckpoints:
    """Split the checkpoints found in a directory at the start of a run by their step.

    Args:
        found: ``(name, global step)`` of each checkpoint the state file lists or the
            directory holds (a name may appear twice; it counts once).
        start_step: the global step the run starts from (0 afresh, the restored
            checkpoint's step when resuming).

    Returns:
        The `InheritedCheckpoints`.

    Examples:
        A run resumed from model-20 in a directory where a crash left model-25 and model-30:

        >>> plan_inherited([("model-10", 10), ("model-20", 20), ("model-30", 30),
        ...                 ("model-25", 25)], start_step=20)
        InheritedCheckpoints(kept=(('model-10', 10), ('model-20', 20)), ahead=(('model-25', 25), ('model-30', 30)))
    """
    unique = sorted(set(found), key=lambda pair: (pair[1], pair[0]))
    return InheritedCheckpoints(
        kept=tuple(p for p in unique if p[1] <= start_step),
        ahead=tuple(p for p in unique if p[1] > start_step),
    )
