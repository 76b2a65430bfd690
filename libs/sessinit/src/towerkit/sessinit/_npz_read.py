"""npz files: read arrays straight into memory, each checked against its CRC-32 as it is read."""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np

from towerkit.sessinit._npy import corrupt_entry as _corrupt
from towerkit.sessinit._npy import crc32_combine, not_npz
from towerkit.sessinit._npz import NpzIndex, _Member, index_npz
from towerkit.sessinit._plan import VarInfo, normalize_name

CHUNK_BYTES = 8 << 20
"""Values are read and summed in pieces of at most this many bytes (kept in the CPU's cache)."""

INFLATE_BYTES = 1 << 20
"""Compressed members are inflated in pieces of at most this many bytes."""

PARALLEL_BYTES = 32 << 20
"""Reads of at least this many bytes in all are spread over several threads."""

ALIGN_BYTES = 64
"""Arrays are read into memory aligned to this many bytes (what TensorFlow feeds in place)."""

MAX_THREADS = 4
"""The most threads a read uses (never more than the CPUs)."""


def _bytes_of(array: np.ndarray) -> memoryview:
    """The bytes of a contiguous array, as a writable view (any dtype)."""
    flat = array.reshape(-1, order="A")
    if not flat.dtype.itemsize:
        return memoryview(bytearray())
    return memoryview(flat.view(np.uint8))  # type: ignore[arg-type]


def _empty(m: _Member) -> np.ndarray:
    """A fresh array for a member's values, its first byte on a multiple of `ALIGN_BYTES`.

    TensorFlow feeds an array so aligned without copying it (an unaligned one is copied
    first). The pages are touched only when the values are read into them.
    """
    shape = tuple(int(d or 0) for d in m.info.shape)
    order: Literal["C", "F"] = "F" if m.fortran else "C"
    if not m.nbytes or not m.np_dtype.itemsize:
        return np.empty(shape, dtype=m.np_dtype, order=order)
    buf = np.empty(m.nbytes + ALIGN_BYTES, np.uint8)
    start = -buf.ctypes.data % ALIGN_BYTES
    return buf[start : start + m.nbytes].view(m.np_dtype).reshape(shape, order=order)


def load_npz(
    path: str | os.PathLike[str], names: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Read arrays of an npz file, straight from the file into fresh arrays.

    Each entry is checked against the CRC-32 its zip directory holds in the same pass
    that reads it: uncompressed members (what ``np.savez`` writes) are read into their
    arrays piece by piece, each piece summed while it is still in the CPU's cache, on
    several threads for large files; compressed members are inflated by ``zipfile``,
    which sums them, straight into their arrays.

    Args:
        path: The ``.npz`` file.
        names: The entries to read (with or without ``:0``); all of them when None.

    Returns:
        ``{name: array}``.

    Raises:
        CheckpointNotFoundError: `path` does not exist.
        NotACheckpointError: `path` is not an npz file of arrays, is truncated, or an
            entry's bytes do not match their CRC-32 (the message names the file and the
            entry).
        KeyError: An entry of `names` is not in the file.
    """
    return read_npz(index_npz(path), names)


def _wanted(index: NpzIndex, names: Iterable[str] | None) -> list[_Member]:
    members = {m.info.name: m for m in index.members}
    wanted = list(members) if names is None else [normalize_name(n) for n in names]
    absent = sorted(set(wanted) - set(members))
    if absent:
        msg = f"npz file {index.path!r} has no entries {absent}; it has {sorted(members)[:20]}"
        raise KeyError(msg)
    return [members[n] for n in dict.fromkeys(wanted)]


def read_npz(index: NpzIndex, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """`load_npz` from an index made earlier (re-indexed if the file changed since)."""
    if not index.is_current():
        index = index_npz(index.path)
    path = index.path
    wanted = _wanted(index, names)
    out: dict[str, np.ndarray] = {}
    stored = [m for m in wanted if m.data_offset is not None]
    for m in stored:
        out[m.info.name] = _empty(m)
    _read_stored(path, [(m, _bytes_of(out[m.info.name])) for m in stored])
    compressed = [m for m in wanted if m.data_offset is None]
    if compressed:
        with zipfile.ZipFile(path) as zf:
            for m in compressed:
                out[m.info.name] = _read_compressed(path, zf, m)
    return {m.info.name: out[m.info.name] for m in wanted}


_Piece = tuple[int, int, memoryview, "int | None"]
"""``(job, file offset, buffer, CRC-32 to start from or None)``."""


def _pieces(jobs: list[tuple[_Member, memoryview]]) -> list[_Piece]:
    """Each job's buffer in pieces of at most `CHUNK_BYTES`, in file order.

    A member's first piece starts from the CRC-32 of the member's ``.npy`` header.
    """
    out: list[_Piece] = []
    for j, (m, view) in sorted(enumerate(jobs), key=lambda jv: jv[1][0].data_offset or 0):
        start = m.data_offset or 0
        out.append((j, start, view[:CHUNK_BYTES], m.header_crc))
        for at in range(CHUNK_BYTES, len(view), CHUNK_BYTES):
            out.append((j, start + at, view[at : at + CHUNK_BYTES], None))
    return out


def _split(pieces: list[_Piece], parts: int) -> list[list[_Piece]]:
    """`pieces` cut into at most `parts` runs of about equal bytes, in order."""
    total = sum(len(p[2]) for p in pieces) or 1
    runs: list[list[_Piece]] = [[]]
    done = 0
    for piece in pieces:
        if runs[-1] and done >= total * len(runs) / parts and len(runs) < parts:
            runs.append([])
        runs[-1].append(piece)
        done += len(piece[2])
    return runs


_Sum = tuple[int, int, int, bool]
"""``(job, CRC-32, bytes, whether the sum starts at the member's start)``; CRC -1: truncated."""


def _read_run(path: str, run: list[_Piece]) -> list[_Sum]:
    """Read and sum a run of pieces, one sum per stretch of one job's bytes."""
    sums: list[_Sum] = []
    with open(path, "rb", buffering=0) as f:
        for job, offset, view, seed in run:
            f.seek(offset)
            done = 0
            while done < len(view):
                got = f.readinto(view[done:])
                if not got:
                    return [*sums, (job, -1, 0, False)]
                done += got
            if seed is not None:
                sums.append((job, zlib.crc32(view, seed), len(view), True))
            elif sums and sums[-1][0] == job:
                _, crc, n, first = sums[-1]
                sums[-1] = (job, zlib.crc32(view, crc), n + len(view), first)
            else:
                sums.append((job, zlib.crc32(view), len(view), False))
    return sums


def _cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _read_stored(path: str, jobs: list[tuple[_Member, memoryview]]) -> None:
    """Fill each job's buffer with its member's values and check the member's CRC-32.

    Large reads are cut in runs read by several threads (file reads and ``zlib.crc32``
    let go of the GIL); the sums of a member's stretches read by different threads are
    joined with `crc32_combine`.
    """
    if not jobs:
        return
    pieces = _pieces(jobs)
    total = sum(len(v) for _, v in jobs)
    threads = min(MAX_THREADS, _cpus()) if total >= PARALLEL_BYTES else 1
    runs = _split(pieces, threads)
    if len(runs) == 1:
        sums = _read_run(path, runs[0])
    else:
        with ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="npz-read") as pool:
            sums = [s for part in pool.map(lambda r: _read_run(path, r), runs) for s in part]
    crcs = [0] * len(jobs)
    for job, crc, n, first in sums:
        if crc < 0:
            raise not_npz(path, f"entry {jobs[job][0].info.name!r} is truncated")
        crcs[job] = crc if first else crc32_combine(crcs[job], crc, n)
    for (m, _), crc in zip(jobs, crcs):
        if crc != m.crc:
            raise _corrupt(path, m.info.name, m.crc, crc)


def _read_compressed(path: str, zf: zipfile.ZipFile, m: _Member) -> np.ndarray:
    """A compressed member inflated into its array; ``zipfile`` checks its CRC-32 at the end."""
    array = _empty(m)
    for _ in _inflate(path, zf, m, _bytes_of(array)):
        pass
    return array


def _inflate(
    path: str, zf: zipfile.ZipFile, m: _Member, into: memoryview | None = None
) -> Iterator[memoryview]:
    """Inflate a member's values in pieces, into `into` or into a scratch buffer (yielded).

    The member is read to its end, so ``zipfile`` compares its CRC-32.
    """
    name = m.info.name
    scratch = None if into is not None else memoryview(bytearray(min(m.nbytes, INFLATE_BYTES)))
    try:
        with zf.open(m.member) as src:
            src.read(m.header_bytes)
            done = 0
            while done < m.nbytes:
                n = min(INFLATE_BYTES, m.nbytes - done)
                piece = into[done : done + n] if into is not None else scratch[:n]  # type: ignore[index]
                got = src.readinto(piece)  # type: ignore[attr-defined]
                if not got:
                    raise not_npz(path, f"entry {name!r} is truncated")
                done += got
                yield piece[:got]
            if src.read(1):
                raise not_npz(path, f"entry {name!r} holds more bytes than its header declares")
    except zipfile.BadZipFile as err:
        if "CRC" in str(err):
            raise _corrupt(path, name, m.crc, None) from None
        raise not_npz(path, f"entry {name!r} cannot be read ({err})") from None
    except (zlib.error, EOFError) as err:
        raise not_npz(path, f"entry {name!r} cannot be read ({err})") from None


def verify_npz(
    path: str | os.PathLike[str], names: Iterable[str] | None = None
) -> tuple[VarInfo, ...]:
    """Check that entries of an npz file read back as written (their CRC-32 matches).

    `load_npz` and `SmartInit` check the entries they read; this checks entries without
    keeping their values: it reads them through a buffer of at most `CHUNK_BYTES`, so
    memory stays small whatever sizes the file declares.

    Args:
        path: The ``.npz`` file.
        names: The entries to check (with or without ``:0``); all of them when None.

    Returns:
        The entries of the file, as `list_npz_vars` gives them.

    Raises:
        CheckpointNotFoundError: `path` does not exist.
        NotACheckpointError: `path` is not an npz file of arrays, or an entry is
            corrupt (the message names the file and the entry).
        KeyError: An entry of `names` is not in the file.
    """
    index = index_npz(path)
    path = index.path
    wanted = _wanted(index, names)
    stored = [m for m in wanted if m.data_offset is not None]
    scratch = memoryview(bytearray(min(max((m.nbytes for m in stored), default=0), CHUNK_BYTES)))
    with open(path, "rb", buffering=0) as f:
        for m in stored:
            crc, done = m.header_crc, 0
            f.seek(m.data_offset or 0)
            while done < m.nbytes:
                got = f.readinto(scratch[: min(CHUNK_BYTES, m.nbytes - done)])
                if not got:
                    raise not_npz(path, f"entry {m.info.name!r} is truncated")
                crc = zlib.crc32(scratch[:got], crc)
                done += got
            if crc != m.crc:
                raise _corrupt(path, m.info.name, m.crc, crc)
    compressed = [m for m in wanted if m.data_offset is None]
    if compressed:
        with zipfile.ZipFile(path) as zf:
            for m in compressed:
                for _ in _inflate(path, zf, m):
                    pass
    return index.infos
