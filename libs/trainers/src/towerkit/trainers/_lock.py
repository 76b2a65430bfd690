"""One writer per log directory: a kernel lock on a file naming the run that holds it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
import weakref
from typing import BinaryIO, Literal

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
        alive: whether `owner` still holds the lock (`LogdirLock` asks the kernel lock).

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


_HELD: weakref.WeakSet[LogdirLock] = weakref.WeakSet()
"""The locks this process holds: a child forked from it closes their files (see `_forget_in_child`)."""


def _forget_in_child() -> None:
    """In a child forked without exec: close the inherited lock files, so the lock is the parent's.

    A kernel lock lives as long as any process has its open file: a worker forked by an
    input pipeline would otherwise keep the directory locked after the run was killed.
    """
    for lock in list(_HELD):
        lock._close()


os.register_at_fork(after_in_child=_forget_in_child)


def _alive(pid: int) -> bool:
    """Whether process `pid` of this host runs (a zombie does not)."""
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


def _read_owner(f: BinaryIO) -> tuple[LockOwner | None, bool]:
    """The owner a lock file names, and whether it held anything at all (read from its start)."""
    f.seek(0)
    data = f.read(4096)
    return parse_lock(data.decode("utf-8", errors="replace")), bool(data.strip())


def _read(path: str) -> LockOwner | None:
    """The owner the lock file at `path` names (None: none, unreadable, or no file)."""
    try:
        with open(path, "rb") as f:
            return _read_owner(f)[0]
    except (FileNotFoundError, IsADirectoryError):
        return None


def _same_file(f: BinaryIO, path: str) -> bool:
    """Whether `path` still names the file `f` has open (a releasing owner removes it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(f.fileno())
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


class LogdirLock:
    """The lock of one log directory, held by this process from `acquire` to `release`.

    The lock is the kernel's (``fcntl.flock`` on ``<logdir>/.towerkit.lock``, held open
    by its owner): two processes can never both hold it, and it is released by the
    kernel when its owner ends in any way, SIGKILL included, so there is no stale lock
    to take over. The file's text names the owner (pid, host, start time) for the
    messages; a file left by a killed owner is taken with a warning naming it.

    Args:
        logdir: the log directory (it must exist).
    """

    def __init__(self, logdir: str) -> None:
        self._dir = os.path.abspath(logdir)
        self._path = os.path.join(self._dir, LOCK_FILENAME)
        self._file: BinaryIO | None = None

    @property
    def path(self) -> str:
        """The lock file."""
        return self._path

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._file is not None

    def _open(self) -> BinaryIO:
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except IsADirectoryError:
            msg = (
                f"the lock file {self._path!r} of log directory {self._dir!r} is a directory: "
                "remove it (a lock file is a regular file that training creates)"
            )
            raise LogdirLockedError(msg) from None
        return os.fdopen(fd, "r+b")

    def _refuse(self, owner: LockOwner | None, written: bool) -> LogdirLockedError:
        if owner is not None and owner.host == socket.gethostname() and not _alive(owner.pid):
            owner, written = None, False  # the file names the run before: its new owner starts
        if owner is None:
            what = (
                "its lock file names no owner (unreadable: not a lock file towerkit wrote)"
                if written
                else "its owner is just starting and has not written its name yet"
            )
            msg = (
                f"log directory {self._dir!r} is in use by another run ({what}; lock file "
                f"{self._path!r}): two runs writing one directory mix their statistics and "
                "prune each other's checkpoints; wait for it to end, or choose another logdir"
            )
            return LogdirLockedError(msg)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.since))
        mine = owner.pid == os.getpid() and owner.host == socket.gethostname()
        who = "this very process" if mine else "another run"
        msg = (
            f"log directory {self._dir!r} is in use by {who} (pid {owner.pid} on "
            f"host {owner.host!r}, since {since}; lock file {self._path!r}): two runs "
            "writing one directory mix their statistics and prune each other's "
            "checkpoints; wait for it to end, or choose another logdir (remove the "
            "lock file only if that run is gone)"
        )
        return LogdirLockedError(msg)

    def acquire(self) -> None:
        """Take the lock: the kernel lock on the lock file, then write this run's name in it.

        A file naming a run of this host that has ended (killed without releasing) is
        taken with a warning naming that run; one naming another host is refused (a
        file system shared between hosts may not carry kernel locks across them).

        Raises:
            LogdirLockedError: another live run holds the directory (or one on another
                host); the message names the directory, the owner's pid and host, and the
                lock file.
        """
        if self._file is not None:
            return
        me = LockOwner(pid=os.getpid(), host=socket.gethostname(), since=time.time())
        for _ in range(100):
            f = self._open()
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner, written = _read_owner(f)
                f.close()
                raise self._refuse(owner, written) from None
            except BaseException:
                f.close()
                raise
            if not _same_file(f, self._path):  # its owner removed it as we opened it
                f.close()
                continue
            owner, written = _read_owner(f)
            verdict = lock_verdict(owner, host=me.host, pid=me.pid, alive=False)
            if verdict == "held":  # another host's, whose kernel lock may not reach here
                f.close()
                raise self._refuse(owner, written)
            if verdict == "stale" and owner is not None:
                logger.warning(
                    "taking over the lock of %s from pid %d on %s, which has ended without "
                    "releasing it",
                    self._dir,
                    owner.pid,
                    me.host,
                )
            elif verdict == "free" and written:
                logger.warning("taking over the unreadable lock file %s", self._path)
            self._own(f, me)
            return
        msg = f"could not take the lock {self._path!r}: other runs keep taking and releasing it"
        raise LogdirLockedError(msg)

    def _own(self, f: BinaryIO, me: LockOwner) -> None:
        """Hold `f` (kernel-locked) and write `me` into it."""
        f.seek(0)
        f.truncate()
        f.write(format_lock(me).encode("utf-8"))
        f.flush()
        self._file = f
        _HELD.add(self)

    def take_over(self) -> LockOwner | None:
        """Take the lock from an owner known to be lost, whatever its file says.

        For a process that another one's loss made the directory's writer (an elastic
        job's new rank 0): a new lock file, kernel-locked and naming this process, is
        renamed over the old one in one step, so the file always names one owner.

        Returns:
            The owner the lock file named before, or None when there was none.
        """
        me = LockOwner(pid=os.getpid(), host=socket.gethostname(), since=time.time())
        before = _read(self._path)
        self._close()
        tmp = f"{self._path}.{me.pid}.tmp"
        f = os.fdopen(
            os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644), "r+b"
        )
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        self._own(f, me)
        os.replace(tmp, self._path)
        return before

    def _close(self) -> None:
        f, self._file = self._file, None
        _HELD.discard(self)
        if f is not None:
            f.close()

    def release(self) -> None:
        """Give the lock back: remove the lock file (still holding it), then close it."""
        f = self._file
        if f is None:
            return
        if _same_file(f, self._path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path)
        self._close()

    def __repr__(self) -> str:
        return f"LogdirLock({self._dir!r}, held={self.held})"
