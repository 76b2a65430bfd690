"""Where in the loop each checkpoint was saved: the record that lets a run resume mid-epoch.

`ModelSaver` writes ``<checkpoint_dir>/positions.json`` (atomically) after every save,
one entry per checkpoint it keeps; `AutoResumeTrainConfig` reads it to resume at the
step of a checkpoint saved inside an epoch, not only at an epoch end. The file is
small strict JSON::

    {"format": 1, "positions": [{"step": 25, "epoch": 3, "done": 5, "data_steps": 25,
                                 "steps_per_epoch": 10, "batch_size": 32}]}

(``steps_per_epoch`` and ``batch_size`` are left out when unknown, and files without
them still load.)

A damaged or unknown file is not an error: it only means no checkpoint can be resumed
from mid-epoch (the epoch-end rule still applies), and a warning says so.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable
from typing import Any

import attrs
from attrs.validators import ge, instance_of, optional

from towerkit.sessinit import atomic_write_text

__all__ = [
    "POSITIONS_FILENAME",
    "SavedPosition",
    "dumps_positions",
    "loads_positions",
    "merge_positions",
    "position_now",
    "read_positions",
    "write_positions",
]

logger = logging.getLogger("towerkit.callbacks")

POSITIONS_FILENAME = "positions.json"
"""The file, in a `ModelSaver`'s directory, that records where each checkpoint was saved."""

_FORMAT = 1
_INT = [instance_of(int), ge(0)]


@attrs.frozen(kw_only=True)
class SavedPosition:
    """The loop's position when a checkpoint was saved.

    Attributes:
        step: the checkpoint's global step.
        epoch: the epoch it was saved in (1-based).
        done: the steps of `epoch` finished by then (0..steps_per_epoch); a checkpoint
            saved at an epoch's end has ``done == steps_per_epoch``.
        data_steps: the global steps whose data the run's input had produced since
            it started from its first datapoint (a resumed run that skipped its
            input forward counts the skipped steps); None when the trainer does not
            track it (then a resumed input starts from its first datapoint).
        steps_per_epoch: the epoch length (in steps) of the run that saved it; None
            when not recorded. A run of another epoch length does not resume inside
            that epoch.
        batch_size: the datapoints per step of that run's input (so ``data_steps *
            batch_size`` datapoints were consumed); None when the input does not say.

    .. versionchanged:: 0.2
        `steps_per_epoch` and `batch_size`.

    Examples:
        >>> SavedPosition(step=25, epoch=3, done=5, data_steps=25, steps_per_epoch=10)
        SavedPosition(step=25, epoch=3, done=5, data_steps=25, steps_per_epoch=10, batch_size=None)
        >>> SavedPosition(step=25, epoch=0, done=5, data_steps=None)
        Traceback (most recent call last):
        ...
        ValueError: 'epoch' must be >= 1: 0
    """

    step: int = attrs.field(validator=_INT)
    epoch: int = attrs.field(validator=[instance_of(int), ge(1)])
    done: int = attrs.field(validator=_INT)
    data_steps: int | None = attrs.field(default=None, validator=optional(_INT))
    steps_per_epoch: int | None = attrs.field(
        default=None, validator=optional([instance_of(int), ge(1)])
    )
    batch_size: int | None = attrs.field(
        default=None, validator=optional([instance_of(int), ge(1)])
    )

    def to_json(self) -> dict[str, Any]:
        """The entry of the file (the fields added in 0.2 only when known)."""
        entry = attrs.asdict(self)
        for name in ("steps_per_epoch", "batch_size"):
            if entry[name] is None:
                del entry[name]
        return entry


def dumps_positions(positions: Iterable[SavedPosition]) -> str:
    """The text of a positions file, entries sorted by step.

    Examples:
        >>> print(dumps_positions([SavedPosition(step=7, epoch=2, done=2, data_steps=7)]))
        {"format": 1, "positions": [{"step": 7, "epoch": 2, "done": 2, "data_steps": 7}]}
    """
    entries = [p.to_json() for p in sorted(positions, key=lambda p: p.step)]
    return json.dumps({"format": _FORMAT, "positions": entries})


def loads_positions(text: str) -> tuple[SavedPosition, ...]:
    """The entries of a positions file's text.

    Raises:
        ValueError: the text is not such a file (the message says what was expected).

    Examples:
        >>> loads_positions('{"format": 1, "positions": [{"step": 7, "epoch": 2, "done": 2, "data_steps": null}]}')
        (SavedPosition(step=7, epoch=2, done=2, data_steps=None, steps_per_epoch=None, batch_size=None),)
        >>> loads_positions('[]')
        Traceback (most recent call last):
        ...
        ValueError: expected {"format": 1, "positions": [...]}; got a list
    """
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        kind = (
            type(data).__name__ if not isinstance(data, dict) else f"format {data.get('format')!r}"
        )
        kind = {"list": "a list"}.get(kind, kind)
        msg = f'expected {{"format": {_FORMAT}, "positions": [...]}}; got {kind}'
        raise ValueError(msg)
    entries = data.get("positions")
    if not isinstance(entries, list):
        msg = f"'positions' must be a list of entries; got {type(entries).__name__}"
        raise ValueError(msg)
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            msg = f"each position must be an object; got {entry!r}"
            raise ValueError(msg)
        try:
            out.append(SavedPosition(**entry))
        except (TypeError, ValueError) as err:
            msg = f"position {entry!r}: {err}"
            raise ValueError(msg) from None
    return tuple(out)


def merge_positions(
    old: Iterable[SavedPosition], new: SavedPosition | None, keep: Iterable[int]
) -> tuple[SavedPosition, ...]:
    """The positions of the checkpoints in `keep`: `new` over `old` at the same step.

    Examples:
        >>> a = SavedPosition(step=5, epoch=1, done=5, data_steps=5)
        >>> b = SavedPosition(step=8, epoch=2, done=3, data_steps=8)
        >>> [p.step for p in merge_positions([a], b, keep=[8])]
        [8]
        >>> [p.step for p in merge_positions([a], b, keep=[5, 8])]
        [5, 8]
    """
    by_step = {p.step: p for p in old}
    if new is not None:
        by_step[new.step] = new
    wanted = set(keep)
    return tuple(sorted((p for s, p in by_step.items() if s in wanted), key=lambda p: p.step))


def position_now(trainer: Any) -> SavedPosition | None:
    """Where `trainer`'s loop is now, as a `SavedPosition` (None outside an epoch)."""
    if trainer.epoch_num < 1:
        return None
    data_steps = getattr(trainer, "data_steps", None)
    batch = getattr(getattr(trainer, "input_source", None), "batch_size", None)
    return SavedPosition(
        step=int(trainer.global_step),
        epoch=int(trainer.epoch_num),
        done=int(trainer.local_step) + 1,
        data_steps=None if data_steps is None else int(data_steps),
        steps_per_epoch=int(trainer.steps_per_epoch),
        batch_size=batch if isinstance(batch, int) and not isinstance(batch, bool) else None,
    )


def read_positions(directory: str) -> tuple[SavedPosition, ...]:
    """The positions recorded in `directory` (none when the file is missing or damaged)."""
    path = os.path.join(directory, POSITIONS_FILENAME)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as err:
        logger.warning("%s cannot be read (%s): no checkpoint resumes mid-epoch", path, err)
        return ()
    try:
        return loads_positions(text)
    except ValueError as err:
        logger.warning("%s is damaged (%s): no checkpoint resumes mid-epoch", path, err)
        return ()


def write_positions(directory: str, positions: Iterable[SavedPosition]) -> None:
    """Replace `directory`'s positions file atomically (removed when `positions` is empty)."""
    positions = tuple(positions)
    path = os.path.join(directory, POSITIONS_FILENAME)
    if not positions:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    atomic_write_text(path, dumps_positions(positions) + "\n")
