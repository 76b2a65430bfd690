"""What a resume checks in a saved position before it trusts it (pure functions)."""

from __future__ import annotations

from collections.abc import Mapping

from towerkit.callbacks.plumbing import SavedPosition

__all__ = ["data_skip", "position_fault"]


def position_fault(
    position: SavedPosition, ends: Mapping[int, int], *, steps_per_epoch: int
) -> str | None:
    """Why `position` (an entry of ``positions.json``) cannot be trusted to resume inside its epoch.

    None when nothing contradicts it. Otherwise a sentence naming what disagrees:
    fewer steps of data than steps of its epoch done, the epoch length recorded with it differs from this run's `steps_per_epoch`
    (the input's size changed, or another ``steps_per_epoch``), or the statistics
    (`ends`, ``{global_step: epoch_num}`` of the epoch ends ``stats.json`` records)
    put another epoch before it than the entry claims, or record epochs before one
    the entry calls the input's first.

    Examples:
        >>> p = SavedPosition(step=23, epoch=3, done=3, data_steps=23, steps_per_epoch=10)
        >>> position_fault(p, {10: 1, 20: 2}, steps_per_epoch=10) is None
        True
        >>> position_fault(p, {10: 1, 20: 2}, steps_per_epoch=8)
        'it was saved after 3 of the 10 steps of epoch 3, and this run has steps_per_epoch=8 (the input or steps_per_epoch changed)'
        >>> q = SavedPosition(step=23, epoch=5, done=3, data_steps=23)
        >>> position_fault(q, {10: 1, 20: 2}, steps_per_epoch=10)
        'it says epoch 5, but stats.json records the end of epoch 2 at global step 20, just before it'

    .. versionadded:: 0.2
    """
    if position.data_steps is not None and position.data_steps < position.done:
        return (
            f"it says the input gave {position.data_steps} steps of data, fewer than the "
            f"{position.done} steps of epoch {position.epoch} it says were done"
        )
    recorded = position.steps_per_epoch
    if recorded is not None and recorded != steps_per_epoch and position.done < recorded:
        return (
            f"it was saved after {position.done} of the {recorded} steps of epoch "
            f"{position.epoch}, and this run has steps_per_epoch={steps_per_epoch} (the "
            "input or steps_per_epoch changed)"
        )
    start = position.step - position.done
    before = ends.get(start)
    if before is not None and before != position.epoch - 1:
        return (
            f"it says epoch {position.epoch}, but stats.json records the end of epoch "
            f"{before} at global step {start}, just before it"
        )
    first = position.data_steps is not None and position.data_steps == position.done
    earlier = sorted(s for s in ends if s <= start)
    if before is None and first and earlier:
        return (
            f"it says epoch {position.epoch} was the input's first, but stats.json records "
            f"epoch {ends[earlier[-1]]} ending at global step {earlier[-1]}, before it"
        )
    return None


def data_skip(
    position: SavedPosition | None, batch_size: int | None
) -> tuple[int | None, str | None]:
    """The steps (of `batch_size`) the input skips for `position`, and a note when the batch size changed.

    Examples:
        >>> p = SavedPosition(step=12, epoch=2, done=2, data_steps=12, batch_size=8)
        >>> data_skip(p, 8)
        (12, None)
        >>> data_skip(p, 16)[0], data_skip(p, 5)[0]
        (6, 19)

    .. versionadded:: 0.2
    """
    if position is None or position.data_steps is None:
        return None, None
    old = position.batch_size
    if old is None or batch_size is None or old == batch_size:
        return position.data_steps, None
    datapoints = position.data_steps * old
    steps, rest = divmod(datapoints, batch_size)
    again = f"; the last {rest} of them are read again" if rest else ""
    return steps, (
        f"the checkpoint's run read batches of {old} and this run reads batches of "
        f"{batch_size}: the input skips the {datapoints} datapoints consumed as {steps} "
        f"steps of {batch_size}{again}"
    )
