"""Checkpoints moved aside from a checkpoint directory (never deleted), and put back."""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Collection, Sequence

from towerkit.sessinit._atomic import atomic_write_bytes
from towerkit.sessinit._paths import STATE_FILENAME

logger = logging.getLogger("towerkit.sessinit")

ASIDE_PREFIX = "superseded-"
"""How the folder that `move_checkpoints_aside` makes inside a checkpoint directory starts."""

_ASIDE = re.compile(re.escape(ASIDE_PREFIX) + r"\d{8}-\d{6}(-\d+)?")
_FILE = re.compile(r"\.(index|meta|data-\d+-of-\d+)")


def is_aside_name(name: str) -> bool:
    """Whether `name` is a folder name `move_checkpoints_aside` makes.

    Examples:
        >>> is_aside_name("superseded-20260102-030405"), is_aside_name("model-10.index")
        (True, False)
    """
    return _ASIDE.fullmatch(name) is not None


def move_checkpoints_aside(directory: str, bases: Sequence[str]) -> str | None:
    """Move the files of checkpoints `bases` into a new ``superseded-<timestamp>`` folder of `directory`.

    Nothing is deleted: each checkpoint's ``.index`` goes first (so it stops being
    complete in `directory` before any data file leaves), then its data and meta files;
    the directory's state file is copied along, so the folder is a checkpoint directory
    of its own (``SmartInit(folder)`` loads its newest checkpoint).

    Args:
        directory: the checkpoint directory.
        bases: the checkpoints' base names (``"model-30"``).

    Returns:
        The folder, or None when none of `bases` had a file to move.
    """
    moves = []
    names = sorted(os.listdir(directory))
    for base in bases:
        files = [n for n in names if n.startswith(base) and _FILE.fullmatch(n[len(base) :])]
        moves += sorted(files, key=lambda n: not n.endswith(".index"))
    if not moves:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = os.path.join(directory, ASIDE_PREFIX + stamp)
    n = 1
    while os.path.exists(aside):
        n += 1
        aside = os.path.join(directory, f"{ASIDE_PREFIX}{stamp}-{n}")
    os.makedirs(aside)
    state = os.path.join(directory, STATE_FILENAME)
    if os.path.isfile(state):
        shutil.copy2(state, os.path.join(aside, STATE_FILENAME))
    for name in moves:
        os.rename(os.path.join(directory, name), os.path.join(aside, name))
    return aside


def put_back_aside(directory: str, aside: str) -> list[str]:
    """Undo `move_checkpoints_aside`: move the folder's files back, its state file included.

    A file of the same name that reappeared in `directory` meanwhile is left in the
    folder (nothing is overwritten but the state file, which the folder holds as the
    directory had it). The folder is removed when it ends up empty.

    Returns:
        The names moved back.
    """
    back = []
    names = sorted(os.listdir(aside), key=lambda n: n.endswith(".index"))  # .index last
    for name in names:
        src, dst = os.path.join(aside, name), os.path.join(directory, name)
        if name == STATE_FILENAME:
            os.replace(src, dst)
        elif os.path.lexists(dst):
            continue
        else:
            os.rename(src, dst)
        back.append(name)
    if not os.listdir(aside):
        os.rmdir(aside)
    return back


def backup_name(taken: Collection[str], name: str) -> str:
    """The name to keep an old copy of file `name` under: ``<name>.bak``, or the first free ``.bak-<n>``.

    An earlier backup is never overwritten.

    Args:
        taken: the names already in the directory.
        name: the file's name.

    Examples:
        >>> backup_name([], "stats.json")
        'stats.json.bak'
        >>> backup_name(["stats.json.bak", "stats.json.bak-2"], "stats.json")
        'stats.json.bak-3'
    """
    if name + ".bak" not in taken:
        return name + ".bak"
    n = 2
    while f"{name}.bak-{n}" in taken:
        n += 1
    return f"{name}.bak-{n}"


def back_up_file(path: str) -> str:
    """Copy file `path` atomically to a free `backup_name` beside it; return the copy's path."""
    directory, name = os.path.split(os.path.abspath(path))
    target = os.path.join(directory, backup_name(set(os.listdir(directory)), name))
    with open(path, "rb") as f:
        atomic_write_bytes(target, f.read())
    return target
