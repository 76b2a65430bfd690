"""The log directory a run takes, and how a run failing before its first step gives it back."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import time
from collections.abc import Iterable
from typing import Any

import attrs

from towerkit.sessinit import is_aside_name, put_back_aside, require_globless
from towerkit.trainers._lock import LOCK_FILENAME, LockOwner, LogdirLock
from towerkit.trainers._resume import old_copies, plan_logdir

logger = logging.getLogger("towerkit.trainers")


@attrs.frozen(kw_only=True)
class _LogdirTaken:
    """The log directory as this run found it: what a run failing before its first step undoes."""

    path: str
    before: frozenset[str]
    """The names in the directory when the run took it (none when it was made or moved aside)."""
    made: bool
    """Whether the run created the directory."""
    moved_aside: str | None = None
    """Where ``logdir_action="overwrite"`` moved the directory the run found, if it did."""
    lock: Any = attrs.field(default=None, eq=False)
    """The `LogdirLock` this run holds on the directory, or None (a non-chief process)."""


def new_entries(before: Iterable[str], after: Iterable[str]) -> list[str]:
    """The names of `after` that are not in `before`, sorted: what a run added to a directory.

    Examples:
        >>> new_entries(["checkpoint", "model-10.index"], ["checkpoint", "events.1", "model-10.index"])
        ['events.1']
    """
    old = set(before)
    return sorted(n for n in after if n not in old)


def _discard_new_entries(taken: _LogdirTaken) -> None:
    """Remove the entries a failed run added to its log directory, and the directory if it made it.

    Only names that were not in the directory when the run took it are removed, so
    nothing that existed before the run (a resumed run's checkpoints and statistics)
    is ever touched.
    """
    if not os.path.isdir(taken.path):
        return
    added = [n for n in new_entries(taken.before, os.listdir(taken.path)) if n != LOCK_FILENAME]
    for name in added:
        full = os.path.join(taken.path, name)
        if is_aside_name(name) and os.path.isdir(full):
            back = put_back_aside(taken.path, full)
            logger.warning("moved %s back from %s", ", ".join(back) or "nothing", full)
        elif os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.remove(full)
    removed_dir = taken.made and not os.listdir(taken.path)
    if removed_dir:
        os.rmdir(taken.path)
    if added or removed_dir:
        logger.warning(
            "training failed before its first step: removed what it wrote to %s (%s)%s, "
            "so the same command can run again",
            taken.path,
            ", ".join(added) if added else "nothing",
            " and the directory" if removed_dir else "",
        )
    if removed_dir and taken.moved_aside is not None and os.path.isdir(taken.moved_aside):
        os.rename(taken.moved_aside, taken.path)
        logger.warning("moved %s back to %s", taken.moved_aside, taken.path)


def _give_back(taken: _LogdirTaken) -> None:
    """`_discard_new_entries`, logging (not raising) a failure to remove an entry; then unlock."""
    release_logdir(taken)  # first: the lock file is no entry of the run to report
    try:
        _discard_new_entries(taken)
    except OSError:
        logger.exception("could not remove what the failed run wrote to %s", taken.path)


def release_logdir(taken: _LogdirTaken | None) -> None:
    """Give back the lock a run holds on its log directory (nothing when it holds none)."""
    if taken is not None and taken.lock is not None:
        taken.lock.release()


def take_logdir(
    logdir: str | os.PathLike[str], logdir_action: str, *, lock: bool = True
) -> _LogdirTaken:
    """Take `logdir` for a run as `logdir_action` says: create it, or move the old one aside.

    With `lock`, the run takes the directory's lock (`LogdirLock`) first, so a second
    run in the same directory is refused before anything in it is touched.

    Args:
        logdir: the directory (created when missing).
        logdir_action: ``"error"``, ``"overwrite"`` or ``"keep"`` (see `Trainer.set_logdir`).
        lock: take the directory's lock (the chief process does).

    Returns:
        The directory as the run found it, for `_discard_new_entries` when the run fails.

    Raises:
        LogdirNotEmptyError: the directory holds files and the action is ``"error"``.
        NotADirectoryError: the path exists and is not a directory.
        ValueError: an unknown action.
        GlobPathError: the path holds a character TensorFlow reads as a glob pattern.
        LogdirLockedError: another run holds the directory.
    """
    path = os.path.abspath(require_globless(logdir, "logdir"))
    held: LogdirLock | None = None
    if lock and os.path.isdir(path):
        held = LogdirLock(path)
        held.acquire()
    try:
        return _take(path, logdir_action, held, lock)
    except BaseException:
        if held is not None:
            held.release()
        raise


def take_over_logdir(logdir: str) -> tuple[_LogdirTaken, LockOwner | None]:
    """Take an existing `logdir` over from a writer known to be lost, as it stands.

    Nothing in the directory is moved or removed; its lock names this process from
    here on. For an elastic job whose owner of the directory was lost.

    Returns:
        The directory as taken (a run failing later gives nothing of it back), and
        the owner its lock file named before (None when there was no lock file).
    """
    path = os.path.abspath(logdir)
    held = LogdirLock(path)
    before = held.take_over()
    taken = _LogdirTaken(path=path, before=frozenset(os.listdir(path)), made=False, lock=held)
    return taken, before


def _take(path: str, logdir_action: str, held: LogdirLock | None, lock: bool) -> _LogdirTaken:
    entries = (
        sorted(n for n in os.listdir(path) if n != LOCK_FILENAME) if os.path.isdir(path) else None
    )
    if entries is None and os.path.exists(path):
        msg = f"'logdir' {path!r} exists and is not a directory"
        raise NotADirectoryError(msg)
    action = plan_logdir(entries, logdir_action, path=path)
    aside: str | None = None
    if action == "move":
        if held is not None:
            held.release()
            held = None
        aside = f"{path}.old-{time.strftime('%Y%m%d-%H%M%S')}"
        n = 1
        while os.path.exists(aside):
            n += 1
            aside = f"{path}.old-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
        os.rename(path, aside)
        parent, name = os.path.split(path)
        copies = len(old_copies(name, os.listdir(parent)))
        logger.warning(
            "moved the existing logdir %s aside to %s; %d such cop%s sit%s next to it now "
            "(remove them with: rm -r %s.old-*)",
            path,
            aside,
            copies,
            "y" if copies == 1 else "ies",
            "s" if copies == 1 else "",
            shlex.quote(path),
        )
    made = not os.path.isdir(path)
    os.makedirs(path, exist_ok=True)
    if lock and held is None:
        held = LogdirLock(path)
        held.acquire()
    return _LogdirTaken(
        path=path,
        before=frozenset(entries or ()) if aside is None else frozenset(),
        made=made,
        moved_aside=aside,
        lock=held,
    )
