"""A worker's large arrays through shared memory instead of its pipe.

A message is pickled (protocol 5) with its large buffers (NumPy arrays of at least
``min_bytes``, contiguous) taken out of band: they are copied once into one shared
memory block that the worker creates, and the pipe carries the pickle, the block's
name and the buffers' sizes. The training process copies them out of the block into
arrays of its own, then unlinks it. Through a pipe the same bytes would be written
and read in 64 KiB pieces, each waking the reader.

A block is named ``<prefix><n>`` (the pool's prefix, the worker's count), so the pool
can remove the blocks of messages that were never read when it stops; the resource
tracker of the training process removes any other left by a process that died.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import pickle
import signal
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from multiprocessing import resource_tracker, shared_memory
from typing import Any

__all__ = [
    "BLOCK_MARK",
    "CREATING",
    "decode",
    "encode",
    "offsets",
    "remove_blocks",
    "unlink_block_of",
]

CREATING = threading.Lock()
"""Held while a block is made and registered with the resource tracker: a worker that
exits because its parent died takes it first, so it never leaves a block the tracker
does not know (and so would never remove)."""

BLOCK_MARK = b"S"
"""The first byte of a message whose large buffers are in a shared memory block."""

_LENGTH = struct.Struct("<I")

_FULL: list[str] = []
"""Why this process stopped making blocks (``/dev/shm`` full), once it has; empty before."""

logger = logging.getLogger("towerkit.callbacks")


def offsets(sizes: Sequence[int]) -> list[int]:
    """Where each buffer of `sizes` starts in a block holding them one after the other.

    Examples:
        >>> offsets([3, 0, 5])
        [0, 3, 3]
        >>> offsets([])
        []
    """
    return [0, *itertools.accumulate(sizes)][: len(sizes)]


def names(prefix: str) -> Iterator[str]:
    """The block names one worker uses: ``<prefix>0``, ``<prefix>1``, ..."""
    return (f"{prefix}{n}" for n in itertools.count())


def encode(message: Any, min_bytes: int | None, next_name: Callable[[], str]) -> bytes:
    """`message` pickled, its buffers of at least `min_bytes` in a new block (None: none).

    Where no block can be made (``/dev/shm`` missing), everything goes in band. A
    block's pages are reserved when it is made (``posix_fallocate``): where
    ``/dev/shm`` is full that fails at once, rather than a write into the block
    killing the worker by SIGBUS; this process then sends everything in band from
    then on, and says so once.
    """
    if _FULL:
        min_bytes = None
    large: list[memoryview] = []

    def in_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if min_bytes is None or raw.nbytes < min_bytes:
            return True
        large.append(raw)
        return False

    data = pickle.dumps(message, protocol=5, buffer_callback=in_band)
    if not large:
        return data
    sizes = [b.nbytes for b in large]
    try:
        with CREATING, _termination_held():  # a block is made and registered, or not made
            block = shared_memory.SharedMemory(
                name=next_name(), create=True, size=max(sum(sizes), 1)
            )
    except OSError:
        return pickle.dumps(message, protocol=5)
    full = _reserve(block)
    if full is not None:
        _FULL.append(full)
        logger.warning(
            "towerkit: a parallel input worker (pid %d): shared memory (/dev/shm) is full "
            "(%s); its datapoints go through its pipe from now on. Free /dev/shm (df -h "
            "/dev/shm), or turn blocks off with ParallelIterable(..., "
            "shared_memory_min_bytes=None)",
            os.getpid(),
            full,
        )
        return pickle.dumps(message, protocol=5)
    try:
        view = _view(block)
        for start, raw in zip(offsets(sizes), large, strict=True):
            view[start : start + raw.nbytes] = raw
        del view
    finally:
        block.close()
    header = pickle.dumps((block.name, sizes), protocol=5)
    return BLOCK_MARK + _LENGTH.pack(len(header)) + header + data


def _reserve(block: shared_memory.SharedMemory) -> str | None:
    """Reserve the pages of a new `block`; None, or why not (the block is then removed)."""
    fd = getattr(block, "_fd", -1)
    allocate = getattr(os, "posix_fallocate", None)
    if fd < 0 or allocate is None:
        return None
    try:
        allocate(fd, 0, block.size)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            return None  # no reservation where the file system cannot make one
        with CREATING, _termination_held():
            block.close()
            with contextlib.suppress(FileNotFoundError):
                block.unlink()
        return f"{block.size} bytes asked: {os.strerror(err.errno)}"
    return None


@contextlib.contextmanager
def _termination_held() -> Iterator[None]:
    """SIGTERM held back (where the platform can) while a block is made and registered.

    So a pool that stops its workers never finds a block the resource tracker does
    not know.
    """
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    old = mask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, old)


def _view(block: shared_memory.SharedMemory) -> memoryview:
    view = block.buf
    assert view is not None  # an open block has its mapping
    return view


def _header(payload: bytes) -> tuple[str, list[int], int]:
    (length,) = _LENGTH.unpack_from(payload, 1)
    start = 1 + _LENGTH.size
    name, sizes = pickle.loads(payload[start : start + length])
    return name, sizes, start + length


def decode(payload: bytes) -> Any:
    """The message of `payload`; its block, if any, copied out and unlinked.

    Raises:
        FileNotFoundError: the block is gone (removed under the run).
    """
    if payload[:1] != BLOCK_MARK:
        return pickle.loads(payload)
    name, sizes, start = _header(payload)
    block = shared_memory.SharedMemory(name=name)
    try:
        view = _view(block)
        buffers = [bytearray(view[s : s + n]) for s, n in zip(offsets(sizes), sizes, strict=True)]
        del view
    finally:
        block.close()
        block.unlink()
    return pickle.loads(memoryview(payload)[start:], buffers=buffers)


def unlink_block_of(payload: bytes) -> None:
    """Remove the block of a message that will not be read (if it has one)."""
    if payload[:1] == BLOCK_MARK:
        _unlink(_header(payload)[0])


def _unlink(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        block = shared_memory.SharedMemory(name=name)
        block.close()
        block.unlink()


def remove_blocks(prefix: str, directory: str = "/dev/shm") -> list[str]:
    """Remove the blocks named ``<prefix>*`` still in `directory`; the names removed.

    Only where the platform lists its blocks there (``/dev/shm`` on Linux).
    """
    try:
        left = sorted(n for n in os.listdir(directory) if n.startswith(prefix))
    except OSError:
        return []
    for name in left:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))
        with contextlib.suppress(Exception):  # the tracker may not know it
            resource_tracker.unregister(f"/{name}", "shared_memory")
    return left
