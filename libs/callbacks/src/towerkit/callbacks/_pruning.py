"""Which checkpoints a saver prunes: a pure decision over the steps and times of its saves."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs

__all__ = ["EPOCH_ENDS_KEPT", "PrunePlan", "plan_pruning"]

EPOCH_ENDS_KEPT = 2
"""How many of the newest epoch-end checkpoints `ModelSaver` never prunes."""


@attrs.frozen(kw_only=True)
class PrunePlan:
    """Which checkpoints a saver keeps, deletes and keeps for good after a save.

    Attributes:
        keep: the steps of the checkpoints still tracked, ascending.
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
) -> PrunePlan:
    """Decide which checkpoints to delete after a save.

    The newest `max_to_keep` checkpoints are kept (all of them when it is 0), and so
    are the newest `EPOCH_ENDS_KEPT` checkpoints saved at the end of an epoch (those
    of `epoch_ends`), whatever the schedule of the saves: a resumed run
    restarts from an epoch-end checkpoint that the statistics file has recorded, and
    the newest one may not be recorded yet. Of the others, oldest first, one written
    at or after `next_preserve_time` is kept for good and moves that time on by
    `preserve_every_s`; the rest are deleted.

    Args:
        saved: ``(global step, time written)`` of each tracked checkpoint.
        max_to_keep: how many recent checkpoints to keep; 0 keeps all.
        epoch_ends: the steps of the checkpoints saved at the end of an epoch.
        preserve_every_s: seconds between checkpoints kept for good.
        next_preserve_time: when the next one to keep for good may have been written.

    Returns:
        The `PrunePlan`.

    Examples:
        Saving every step, 3 steps per epoch, keeping 2: steps 3 and 6 end epochs.

        >>> plan = plan_pruning([(s, 0.0) for s in range(1, 9)], max_to_keep=2,
        ...                     epoch_ends={3, 6}, preserve_every_s=3600, next_preserve_time=1e9)
        >>> plan.keep, plan.delete
        ((3, 6, 7, 8), (1, 2, 4, 5))
    """
    ordered = sorted(saved)
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
