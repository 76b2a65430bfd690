"""One writer per log directory: a lock file naming the run that holds it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from typing import Literal

import attrs
from attrs.validators import ge, instance_of

from towerkit.trainers._errors import LogdirLockedError

logger = logging.getLogger("towerkit.trainers")

LOCK_FILENAME = ".towerkit.lock"
"""The lock file a training run keeps in its log directory while it runs."""


@attrs.frozen(kw_only=True)
class LockOwner:
    """The run holding a log directory: its process id, host name and start time.

    Examples:
        >>> LockOwner(pid=42, host="node1", since=0.0)
        LockOwner(pid=42, host='node1', since=0.0)
    """

    pid: int = attrs.field(validator=[instance_of(int), ge(0)])
    host: str = attrs.field(validator=instance_of(str))
    since: float = attrs.field(converter=float)


def format_lock(owner: LockOwner) -> str:
    r"""The text of a lock file for `owner` (one JSON object).

    Examples:
        >>> format_lock(LockOwner(pid=42, host="node1", since=1.5))
        '{"pid": 42, "host": "node1", "since": 1.5}\n'
    """
    return json.dumps({"pid": owner.pid, "host": owner.host, "since": owner.since}) + "\n"


def parse_lock(text: str) -> LockOwner | None:
    """The owner a lock file's text names, or None when it names none (empty, half-written, garbled).

    Examples:
        >>> parse_lock('{"pid": 42, "host": "node1", "since": 1.5}')
        LockOwner(pid=42, host='node1', since=1.5)
        >>> parse_lock('{"pid": 4') is None
        True
    """
    try:
        data = json.loads(text)
        return LockOwner(pid=data["pid"], host=data["host"], since=data["since"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


LockVerdict = Literal["free", "mine", "stale", "held"]


def lock_verdict(owner: LockOwner | None, *, host: str, pid: int, alive: bool) -> LockVerdict:
    """What a run on `host` as process `pid` may do with a log directory's lock.

    Args:
        owner: the lock file's owner, or None when there is no (readable) lock file.
        host: this host's name.
        pid: this process's id.
        alive: whether `owner`'s process is running (only asked on this host).

    Returns:
        ``"free"`` (no owner: take it), ``"mine"`` (this very process holds it),
        ``"stale"`` (its owner on this host has ended: take it over, with a warning) or
        ``"held"`` (a live process, or one on another host, whose liveness cannot be
        told from here: refuse).

    Examples:
        >>> o = LockOwner(pid=42, host="node1", since=0)
        >>> [lock_verdict(o, host="node1", pid=7, alive=a) for a in (True, False)]
        ['held', 'stale']
        >>> lock_verdict(o, host="node2", pid=7, alive=False), lock_verdict(o, host="node1", pid=42, alive=True)
        ('held', 'mine')
        >>> lock_verdict(None, host="node1", pid=7, alive=False)
        'free'
    """
    if owner is None:
        return "free"
    if owner.host != host:
        return "held"
    if owner.pid == pid:
        return "mine"
    return "held" if alive else "stale"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return True


def _read(path: str) -> LockOwner | None:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_lock(f.read())
    except FileNotFoundError:
        return None


class LogdirLock:
    """The lock of one log directory, held by this process from `acquire` to `release`.

    Args:
        logdir: the log directory (it must exist).
    """

    def __init__(self, logdir: str) -> None:
        self._dir = os.path.abspath(logdir)
        self._path = os.path.join(self._dir, LOCK_FILENAME)
        self._held = False

    @property
    def path(self) -> str:
        """The lock file."""
        return self._path

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._held

    def acquire(self) -> None:
        """Take the lock: create the lock file, or take over a stale one (with a warning).

        Raises:
            LogdirLockedError: another live run holds the directory (or one on another
                host); the message names the directory, the owner's pid and host.
        """
        me = LockOwner(pid=os.getpid(), host=socket.gethostname(), since=time.time())
        for _ in range(5):
            try:
                fd = os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(format_lock(me))
                self._held = True
                return
            owner = _read(self._path)
            if owner is None:
                age = _age(self._path)
                if age is not None and age < 5.0:  # another run is writing it now
                    time.sleep(0.1)
                    continue
            alive = owner is not None and owner.host == me.host and _alive(owner.pid)
            verdict = lock_verdict(owner, host=me.host, pid=me.pid, alive=alive)
            if verdict == "held" and owner is not None:  # "held" always has an owner
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.since))
                msg = (
                    f"log directory {self._dir!r} is in use by another run (pid {owner.pid} on "
                    f"host {owner.host!r}, since {since}; lock file {self._path!r}): two runs "
                    "writing one directory mix their statistics and prune each other's "
                    "checkpoints; wait for it to end, or choose another logdir (remove the "
                    "lock file only if that run is gone)"
                )
                raise LogdirLockedError(msg)
            if verdict == "stale":
                logger.warning(
                    "taking over the lock of %s from pid %d on %s, which has ended without "
                    "releasing it",
                    self._dir,
                    owner.pid if owner else -1,
                    me.host,
                )
            elif verdict == "free":
                logger.warning("taking over the unreadable lock file %s", self._path)
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path)
        msg = f"could not take the lock {self._path!r}: other runs keep taking it"
        raise LogdirLockedError(msg)

    def take_over(self) -> LockOwner | None:
        """Take the lock from an owner known to be lost, whatever its file says.

        For a process that another one's loss made the directory's writer (an elastic
        job's new rank 0): the lock file is replaced in one step (written aside, then
        renamed over it), so it always names one owner.

        Returns:
            The owner the lock file named before, or None when there was none.
        """
        me = LockOwner(pid=os.getpid(), host=socket.gethostname(), since=time.time())
        before = _read(self._path)
        tmp = f"{self._path}.{me.pid}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(format_lock(me))
        os.replace(tmp, self._path)
        self._held = True
        return before

    def release(self) -> None:
        """Give the lock back (remove the lock file if it is still this process's)."""
        if not self._held:
            return
        self._held = False
        owner = _read(self._path)
        if owner is not None and owner.pid == os.getpid() and owner.host == socket.gethostname():
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path)

    def __repr__(self) -> str:
        return f"LogdirLock({self._dir!r}, held={self._held})"


def _age(path: str) -> float | None:
    try:
        return time.time() - os.path.getmtime(path)
    except FileNotFoundError:
        return None
