"""Pure decisions about a log directory: what to do when it is not empty, and how to resume."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs
from attrs.validators import ge, instance_of, optional

from towerkit.callbacks import StatsFileError, dumps_stats, read_stats_file
from towerkit.callbacks.plumbing import SavedPosition, read_positions
from towerkit.sessinit import atomic_write_text, back_up_file
from towerkit.trainers._errors import LogdirNotEmptyError
from towerkit.trainers._resume_checks import data_skip, position_fault

logger = logging.getLogger("towerkit.trainers")

LogdirAction = Literal["error", "overwrite", "keep"]
LOGDIR_ACTIONS: tuple[str, ...] = ("error", "overwrite", "keep")
"""What to do with a log directory that already holds files:

- ``"error"``: refuse to start (the default for a fresh run);
- ``"overwrite"``: move the old directory aside, renamed ``<logdir>.old-<timestamp>``
  in one atomic rename (nothing is deleted), and start in an empty one;
- ``"keep"``: write into it as it is (what resuming does).
"""

SHOWN_ENTRIES = 3
"""How many of a non-empty logdir's entries `plan_logdir`'s error names (the rest are counted)."""

STATS_FILENAME = "stats.json"
"""The JSON statistics file that monitors keep in the log directory."""


def plan_logdir(
    entries: Sequence[str] | None, action: str, path: str | None = None
) -> Literal["create", "use", "move"]:
    """What to do with a log directory that holds `entries` (None: it does not exist).

    Args:
        entries: the names in the directory, or None when there is no directory.
        action: one of `LOGDIR_ACTIONS`.
        path: the directory, named in the error (None: "the logdir").

    Returns:
        ``"create"`` (make the directory), ``"use"`` (write into it as is) or
        ``"move"`` (rename it aside, then create a fresh one).

    Raises:
        ValueError: an unknown `action`.
        LogdirNotEmptyError: the directory holds files and `action` is ``"error"``;
            the message names the directory, its first 3 entries and how many more,
            and the options that start the run anyway: short enough for one screen.

    Examples:
        >>> plan_logdir(None, "error")
        'create'
        >>> plan_logdir([], "error")
        'use'
        >>> plan_logdir(["stats.json"], "overwrite")
        'move'
        >>> plan_logdir(["stats.json"], "keep")
        'use'
        >>> plan_logdir(["stats.json", "checkpoint"], "error", path="train_log/run")
        Traceback (most recent call last):
        ...
        towerkit.trainers.LogdirNotEmptyError: the logdir 'train_log/run' is not empty (it holds 'checkpoint', 'stats.json'): pass logdir_action='overwrite' to move it aside to 'train_log/run.old-<timestamp>' and start afresh, 'keep' to write into it, use AutoResumeTrainConfig to resume from it, or choose another logdir

    .. versionchanged:: 0.2
        `path`; the message shows 3 entries (was 20) and puts ``'overwrite'`` first.
    """
    if action not in LOGDIR_ACTIONS:
        msg = f"'logdir_action' must be one of {LOGDIR_ACTIONS}; got {action!r}"
        raise ValueError(msg)
    if entries is None:
        return "create"
    if not entries:
        return "use"
    if action == "keep":
        return "use"
    if action == "overwrite":
        return "move"
    shown = ", ".join(repr(e) for e in sorted(entries)[:SHOWN_ENTRIES])
    more = f" and {len(entries) - SHOWN_ENTRIES} more" if len(entries) > SHOWN_ENTRIES else ""
    named = "the logdir" if path is None else f"the logdir {path!r}"
    aside = "<logdir>" if path is None else path
    msg = (
        f"{named} is not empty (it holds {shown}{more}): pass logdir_action='overwrite' to "
        f"move it aside to '{aside}.old-<timestamp>' and start afresh, 'keep' to write into "
        "it, use AutoResumeTrainConfig to resume from it, or choose another logdir"
    )
    raise LogdirNotEmptyError(msg)


def old_copies(logdir_name: str, siblings: Iterable[str]) -> list[str]:
    """The names among `siblings` that ``logdir_action="overwrite"`` gave to earlier copies of a logdir.

    Each overwrite renames the logdir to ``<logdir>.old-<timestamp>`` next to it; nothing
    removes them. Sorted, oldest first.

    Args:
        logdir_name: the logdir's own name (its last path component).
        siblings: the names in the folder that holds it.

    Examples:
        >>> old_copies("digits", ["digits", "digits.old-20260101-120000", "gan.old-1", "digits.old-20250101-090000"])
        ['digits.old-20250101-090000', 'digits.old-20260101-120000']

    .. versionadded:: 0.2
    """
    prefix = f"{logdir_name}.old-"
    return sorted(n for n in siblings if n.startswith(prefix) and len(n) > len(prefix))


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _pairs(value: Iterable[Sequence[Any]]) -> tuple[tuple[Any, Any], ...]:
    return tuple((a, b) for a, b in value)


def _positions(value: Iterable[SavedPosition]) -> tuple[SavedPosition, ...]:
    return tuple(value)


def _check_checkpoints(
    _inst: object,
    _attr: attrs.Attribute[tuple[tuple[str, int], ...]],
    value: tuple[tuple[str, int], ...],
) -> None:
    bad = [f"{p!r}" for p, s in value if not isinstance(p, str) or not isinstance(s, int) or s < 0]
    if bad:
        msg = f"'checkpoints' must hold (path, step >= 0) pairs; entries at fault: {', '.join(bad)}"
        raise ValueError(msg)


def _check_epochs(
    _inst: object,
    _attr: attrs.Attribute[tuple[tuple[int, int], ...]],
    value: tuple[tuple[int, int], ...],
) -> None:
    bad = [
        f"({e!r}, {s!r})"
        for e, s in value
        if not isinstance(e, int) or not isinstance(s, int) or e < 0 or s < 0
    ]
    if bad:
        msg = (
            "'epochs' must hold (epoch_num >= 0, global_step >= 0) pairs; "
            f"entries at fault: {', '.join(bad)}"
        )
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class LogdirSnapshot:
    """What an earlier run left in a log directory, as far as resuming cares.

    Attributes:
        checkpoints: ``(path, step)`` of each complete checkpoint, any order; ``step``
            is the global step (``hooked_sess.run`` calls) at which it was saved.
        epochs: ``(epoch_num, global_step)`` of each record of the statistics file, in
            file order (1-based epochs; the global step when the record was written).
        positions: where in the loop each checkpoint was saved (`ModelSaver`'s
            ``positions.json``), for those that have a record.

    Examples:
        >>> LogdirSnapshot(checkpoints=[("d/model-20", 20)], epochs=[(1, 10), (2, 20)])
        LogdirSnapshot(checkpoints=(('d/model-20', 20),), epochs=((1, 10), (2, 20)), positions=())
    """

    checkpoints: tuple[tuple[str, int], ...] = attrs.field(
        default=(), converter=_pairs, validator=_check_checkpoints
    )
    epochs: tuple[tuple[int, int], ...] = attrs.field(
        default=(), converter=_pairs, validator=_check_epochs
    )
    positions: tuple[SavedPosition, ...] = attrs.field(default=(), converter=_positions)

    def epoch_ends(self) -> dict[int, int]:
        """The last recorded global step of each epoch, ``{global_step: epoch_num}``.

        Examples:
            >>> LogdirSnapshot(epochs=[(1, 5), (1, 10), (2, 20)]).epoch_ends()
            {10: 1, 20: 2}
        """
        last: dict[int, int] = {}
        for epoch, step in self.epochs:
            last[epoch] = max(step, last.get(epoch, step))
        return {step: epoch for epoch, step in last.items()}


@attrs.frozen(kw_only=True)
class ResumePlan:
    """How a run continues from its log directory.

    Attributes:
        checkpoint: the checkpoint to restore, or None to use the user's ``session_init``.
        checkpoint_step: the global step saved in `checkpoint` (0 without one).
        starting_epoch: the first epoch to run (1-based).
        keep_stats_until_step: drop the statistics records written after this global
            step (they describe training the restored model never saw), or None to keep
            them all.
        reason: one sentence for the log.
        ignored: the checkpoints of the logdir passed over when none could be resumed
            from exactly (all saved within an epoch, or not recorded in the statistics).
        starting_step: the steps of ``starting_epoch`` done already (0: it starts at its
            beginning; more when the checkpoint was saved inside that epoch).
        data_steps: the global steps whose data the input had produced at the
            checkpoint, which the resumed input skips (in steps of this run's batch
            size); None when unknown (the input then starts from its first datapoint).
        notes: one line per thing the log directory and this run disagree on, and
            what the resume does about it (logged as warnings).

            .. versionadded:: 0.2
    """

    checkpoint: str | None = attrs.field(validator=optional(instance_of(str)))
    checkpoint_step: int = attrs.field(default=0, validator=[instance_of(int), ge(0)])
    starting_epoch: int = attrs.field(validator=[instance_of(int), ge(1)])
    keep_stats_until_step: int | None = attrs.field(
        default=None, validator=optional([instance_of(int), ge(0)])
    )
    reason: str = attrs.field(default="", validator=instance_of(str))
    ignored: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    starting_step: int = attrs.field(default=0, validator=[instance_of(int), ge(0)])
    data_steps: int | None = attrs.field(
        default=None, validator=optional([instance_of(int), ge(0)])
    )
    notes: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    @property
    def resumes(self) -> bool:
        """Whether a checkpoint is restored."""
        return self.checkpoint is not None


def resumable_position(
    position: SavedPosition,
    ends: Mapping[int, int],
    *,
    steps_per_epoch: int,
    writes_stats: bool,
) -> bool:
    """Whether a checkpoint saved at `position` can be resumed from exactly.

    It must lie strictly inside an epoch of this run's `steps_per_epoch` (the last
    step's statistics are recorded with the epoch's end: a checkpoint saved there
    counts once the statistics recorded that end), and, when the run writes
    statistics, the statistics must have recorded the end of the epoch before it at
    the step that epoch ended (``step - done``), unless it is the first epoch its input
    ran (``data_steps == done``): so a checkpoint of an abandoned lineage, whose
    earlier epochs the statistics no longer hold, is never resumed from.

    Args:
        position: the checkpoint's `SavedPosition`.
        ends: ``{global_step: epoch_num}`` of the epoch ends the statistics recorded.
        steps_per_epoch: this run's steps per epoch.
        writes_stats: whether the run writes ``stats.json``.

    Examples:
        >>> p = SavedPosition(step=23, epoch=3, done=3, data_steps=23)
        >>> resumable_position(p, {10: 1, 20: 2}, steps_per_epoch=10, writes_stats=True)
        True
        >>> resumable_position(p, {10: 1}, steps_per_epoch=10, writes_stats=True)
        False
        >>> resumable_position(p, {10: 1, 20: 2}, steps_per_epoch=2, writes_stats=True)
        False
    """
    if not 0 < position.done < steps_per_epoch:
        return False  # an epoch's end counts once the statistics recorded it
    if not writes_stats:
        return True
    if position.data_steps is not None and position.data_steps == position.done:
        return True
    return ends.get(position.step - position.done) == position.epoch - 1


def resume_plan(
    snapshot: LogdirSnapshot,
    *,
    steps_per_epoch: int,
    starting_epoch: int = 1,
    user_session_init: bool = False,
    user_starting_epoch: bool = False,
    always_resume: bool = True,
    writes_stats: bool = False,
    batch_size: int | None = None,
) -> ResumePlan:
    """Decide which checkpoint to restore, and the epoch and step to start at, from a log directory.

    A run resumes from the newest checkpoint it can continue from exactly, so that it
    ends at exactly the global step of an uninterrupted run, having run each step
    once, whatever the schedule of the saves:

    - a checkpoint whose step ends an epoch in the statistics file: the run continues
      with the epoch after it;
    - a checkpoint whose position (``positions.json``, written by `ModelSaver`) says it
      was saved inside an epoch, after a preemption signal or by a saver triggered
      every few steps, and whose epoch start the statistics recorded
      (`resumable_position`): the run continues that epoch at the step after it;
    - when the statistics record no checkpoint and the run does not write statistics
      (`writes_stats` False), the newest checkpoint whose step is a multiple of
      `steps_per_epoch` (its epoch is ``step // steps_per_epoch``).

    The statistics records written after the chosen checkpoint are dropped. So a
    process killed at any point (mid-epoch, between saving and writing statistics, or
    the other way round) restarts with the global step, epoch number, step in the
    epoch and statistics of one consistent moment. A checkpoint saved inside an epoch
    without a position record is never resumed from; when no checkpoint qualifies,
    training starts afresh (the plan lists the checkpoints it passed over in
    ``ignored``).

    Args:
        snapshot: what the log directory holds.
        steps_per_epoch: steps per epoch of this run (> 0).
        starting_epoch: the user's ``starting_epoch`` (1-based).
        user_session_init: whether the user gave a ``session_init``.
        user_starting_epoch: whether the user gave a ``starting_epoch``.
        always_resume: when False, the user's ``session_init`` and ``starting_epoch``
            win over the resumed ones (each one separately); when True, resuming wins.
        writes_stats: whether the run writes ``stats.json`` (a ``JSONWriter``): then a
            checkpoint counts only once the statistics recorded the end of its epoch
            (or, saved inside an epoch, of the epoch before).
        batch_size: this run's input's batch size, when known: a position saved with
            another one makes the input skip the same datapoints (`ResumePlan.notes`
            says so).

    A position that something contradicts (`position_fault`) is not resumed from:
    ``notes`` says why and which checkpoint the run resumes from instead.

    Returns:
        The `ResumePlan`.

    Examples:
        Killed in epoch 3, after the checkpoint and statistics of epoch 2:

        >>> snap = LogdirSnapshot(checkpoints=[("d/model-10", 10), ("d/model-20", 20)],
        ...                       epochs=[(1, 10), (2, 20)])
        >>> p = resume_plan(snap, steps_per_epoch=10)
        >>> (p.checkpoint, p.starting_epoch, p.starting_step, p.keep_stats_until_step)
        ('d/model-20', 3, 0, 20)

        Killed after saving epoch 3 but before its statistics were written: epoch 3 runs again.

        >>> snap = LogdirSnapshot(checkpoints=[("d/model-20", 20), ("d/model-30", 30)],
        ...                       epochs=[(1, 10), (2, 20)])
        >>> resume_plan(snap, steps_per_epoch=10).starting_epoch
        3

        Saved every step without positions, killed in epoch 3: those checkpoints are not used.

        >>> snap = LogdirSnapshot(checkpoints=[(f"d/model-{s}", s) for s in (10, 20, 21, 22)],
        ...                       epochs=[(1, 10), (2, 20)])
        >>> resume_plan(snap, steps_per_epoch=10).checkpoint
        'd/model-20'

        Stopped by SIGTERM after 4 steps of epoch 3, its position recorded: epoch 3
        continues at its fifth step, the input skipping the 24 steps' data it gave.

        >>> pos = SavedPosition(step=24, epoch=3, done=4, data_steps=24)
        >>> snap = LogdirSnapshot(checkpoints=[("d/model-20", 20), ("d/model-24", 24)],
        ...                       epochs=[(1, 10), (2, 20)], positions=[pos])
        >>> p = resume_plan(snap, steps_per_epoch=10, writes_stats=True)
        >>> (p.checkpoint, p.starting_epoch, p.starting_step, p.data_steps)
        ('d/model-24', 3, 4, 24)

        Nothing to resume from:

        >>> resume_plan(LogdirSnapshot(), steps_per_epoch=10, starting_epoch=4).starting_epoch
        4
    """
    if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
        msg = f"'steps_per_epoch' must be an int > 0; got {steps_per_epoch!r}"
        raise ValueError(msg)
    checkpoints = sorted(snapshot.checkpoints, key=lambda pair: pair[1])
    ends = snapshot.epoch_ends()
    positions = {p.step: p for p in snapshot.positions}
    # (step, path, epoch to start, steps of it done, why)
    found: list[tuple[int, str, int, int, str]] = []
    faults: dict[int, str] = {}
    for path, step in checkpoints:
        pos = positions.get(step)
        if step in ends:
            why = f"the newest checkpoint recorded in the statistics ({path!r}, epoch {ends[step]})"
            found.append((step, path, ends[step] + 1, 0, why))
            continue
        fault = None if pos is None else position_fault(pos, ends, steps_per_epoch=steps_per_epoch)
        if fault is not None:
            faults[step] = f"positions.json's entry for {path!r} is not trusted: {fault}"
        elif pos is not None and resumable_position(
            pos, ends, steps_per_epoch=steps_per_epoch, writes_stats=writes_stats
        ):
            why = (
                f"the newest checkpoint ({path!r}), saved after {pos.done} of the "
                f"{steps_per_epoch} steps of epoch {pos.epoch}"
            )
            found.append((step, path, pos.epoch, pos.done, why))
    if not any(step in ends for step, *_ in found) and not writes_stats:
        for path, step in checkpoints:
            pos = positions.get(step)
            at_end = pos is None or pos.done == steps_per_epoch
            if step % steps_per_epoch == 0 and step > 0 and at_end:
                epoch = step // steps_per_epoch
                why = f"the newest epoch-end checkpoint ({path!r}, epoch {epoch} from its step)"
                found.append((step, path, epoch + 1, 0, why))
    if not found:
        keep = 0 if snapshot.epochs else None
        ignored = tuple(p for p, _ in checkpoints)
        return ResumePlan(
            checkpoint=None,
            starting_epoch=starting_epoch,
            keep_stats_until_step=keep,
            ignored=ignored,
            reason=(
                f"no checkpoint of a finished epoch in the logdir (not resumable: {list(ignored)}): "
                if ignored
                else "no checkpoint in the logdir: "
            )
            + "training starts afresh"
            + (" and the statistics of the earlier run are dropped" if keep == 0 else ""),
            notes=tuple(faults.values()),
        )
    step, path, resumed_epoch, done, why = max(found, key=lambda f: f[0])
    pos = positions.get(step)

    use_ckpt = always_resume or not user_session_init
    instead = f"; resuming from {path!r} instead"
    notes = [f"{n}{instead}" for s, n in sorted(faults.items()) if s > step]
    data_steps, batch_note = data_skip(pos, batch_size)
    if batch_note is not None and use_ckpt:
        notes.append(batch_note)
    use_epoch = always_resume or not user_starting_epoch
    within = use_ckpt and use_epoch and done > 0
    at = f"; starting at epoch {resumed_epoch}" + (f", step {done + 1}" if within else "")
    return ResumePlan(
        checkpoint=path if use_ckpt else None,
        checkpoint_step=step if use_ckpt else 0,
        starting_epoch=resumed_epoch if use_epoch else starting_epoch,
        starting_step=done if within else 0,
        data_steps=data_steps if use_ckpt else None,
        keep_stats_until_step=step if use_ckpt else None,
        reason=(f"resuming from {why}" if use_ckpt else "the user's session_init takes priority")
        + (at if use_epoch else f"; the user's starting_epoch={starting_epoch} takes priority"),
        notes=notes,
    )


# -- the shell: reading the log directory and rewriting the statistics ---------------------


def epoch_records(stats: Sequence[Mapping[str, Any]] | None) -> list[tuple[int, int]]:
    """``(epoch_num, global_step)`` of every statistics record that has both.

    Examples:
        >>> epoch_records([{"epoch_num": 1, "global_step": 10, "loss": 0.5}, {"x": 1}])
        [(1, 10)]
        >>> epoch_records(None)
        []
    """
    out = []
    for rec in stats or ():
        epoch, step = rec.get("epoch_num"), rec.get("global_step")
        if isinstance(epoch, int) and isinstance(step, int):
            out.append((epoch, step))
    return out


def read_stats(logdir: str) -> list[dict[str, Any]] | None:
    """The records of ``<logdir>/stats.json``, or None when there is no such file.

    NaN and infinities (written as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``) are read
    back as floats (`towerkit.callbacks.read_stats_file`).

    Raises:
        StatsFileError: (a ``ValueError``) the file is damaged; the message gives the
            path, the position, what was expected, and that the run cannot resume from it.
    """
    path = os.path.join(logdir, STATS_FILENAME)
    try:
        return read_stats_file(path)
    except StatsFileError as err:
        msg = f"{err}; cannot resume from it"
        raise StatsFileError(msg) from None


def truncate_stats(logdir: str, keep_until_step: int) -> list[dict[str, Any]]:
    """Drop the records of ``<logdir>/stats.json`` written after global step `keep_until_step`.

    The file is rewritten atomically; the full old file is kept as ``stats.json.bak``
    (``stats.json.bak-2``... when that exists: an earlier backup is never overwritten).

    Returns:
        The records dropped (empty when nothing changed).
    """
    stats = read_stats(logdir)
    if not stats:
        return []
    kept = [
        r
        for r in stats
        if not isinstance(r.get("global_step"), int) or r["global_step"] <= keep_until_step
    ]
    dropped = [r for r in stats if r not in kept]
    if dropped:
        path = os.path.join(logdir, STATS_FILENAME)
        bak = back_up_file(path)
        atomic_write_text(path, dumps_stats(kept))
        logger.warning(
            "dropped %d statistics record(s) after global step %d from %s (epochs %s); "
            "the old file is kept as %s",
            len(dropped),
            keep_until_step,
            path,
            sorted({r.get("epoch_num") for r in dropped}, key=str),
            os.path.basename(bak),
        )
    return dropped


def take_snapshot(logdir: str, checkpoints: Iterable[tuple[str, int]]) -> LogdirSnapshot:
    """A `LogdirSnapshot` of `logdir`, given its checkpoints (``(path, step)`` pairs)."""
    return LogdirSnapshot(
        checkpoints=list(checkpoints),
        epochs=epoch_records(read_stats(logdir)),
        positions=read_positions(logdir),
    )
