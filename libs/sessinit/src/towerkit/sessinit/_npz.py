"""npz files: list entries from their headers, read arrays straight into memory, write atomically."""

from __future__ import annotations

import functools
import io
import os
import struct
import zipfile
import zlib
from collections.abc import Iterable, Mapping

import attrs
import numpy as np

from towerkit.sessinit._atomic import atomic_path
from towerkit.sessinit._errors import CheckpointNotFoundError, NotACheckpointError
from towerkit.sessinit._plan import VarInfo, normalize_name

_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_LOCAL_MAGIC = b"PK\x03\x04"


@attrs.frozen(kw_only=True)
class _Member:
    info: VarInfo
    member: str
    np_dtype: np.dtype
    fortran: bool
    data_offset: int | None
    """Where the raw array bytes start in the file; None for compressed members."""
    member_offset: int | None
    """Where the member's bytes (the ``.npy`` header, then the array) start; None if compressed."""
    crc: int
    """The CRC-32 the zip directory holds for the member's bytes."""


def _not_npz(path: str, why: str) -> NotACheckpointError:
    msg = f"{path!r} is not an npz file of arrays: {why}"
    return NotACheckpointError(msg)


def _read_members(path: str) -> list[_Member]:
    if not os.path.exists(path):
        msg = f"npz file {path!r} does not exist"
        raise CheckpointNotFoundError(msg)
    try:
        with open(path, "rb") as f, zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
            bad = [i.filename for i in infos if not i.filename.endswith(".npy")]
            if bad:
                raise _not_npz(path, f"members {bad} are not '.npy' arrays")
            size = os.fstat(f.fileno()).st_size
            return [_read_member(path, f, zf, info, size) for info in infos]
    except (zipfile.BadZipFile, zlib.error, EOFError) as err:
        raise _not_npz(path, f"not a zip archive ({err})") from None
    except IsADirectoryError:
        raise _not_npz(path, "it is a directory") from None


def _read_member(path: str, f, zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> _Member:
    name = info.filename.removesuffix(".npy")
    if info.compress_type == zipfile.ZIP_STORED:
        if not 0 <= info.header_offset <= size - _LOCAL_HEADER.size:
            raise _not_npz(path, f"member {info.filename!r} lies outside the file (truncated?)")
        f.seek(info.header_offset)
        header = f.read(_LOCAL_HEADER.size)
        fields = _LOCAL_HEADER.unpack(header) if len(header) == _LOCAL_HEADER.size else None
        if fields is None or fields[0] != _LOCAL_MAGIC:
            raise _not_npz(path, f"member {info.filename!r} has a broken zip header")
        start: int | None = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
        f.seek(start)
        shape, fortran, dtype = _read_npy_header(path, info.filename, f)
        offset: int | None = f.tell()
    else:
        try:
            with zf.open(info) as member:
                shape, fortran, dtype = _read_npy_header(path, info.filename, member)
        except zipfile.BadZipFile as err:
            if "CRC" in str(err):
                raise _corrupt(path, name, info.CRC, None) from None
            raise
        offset = start = None
    if dtype.hasobject:
        raise _not_npz(path, f"entry {name!r} holds Python objects: expected numeric arrays")
    var = VarInfo(name=name, shape=shape, dtype=dtype)
    return _Member(
        info=var,
        member=info.filename,
        np_dtype=dtype,
        fortran=fortran,
        data_offset=offset,
        member_offset=start,
        crc=info.CRC,
    )


def _read_npy_header(path: str, member: str, f) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        return np.lib.format.read_array_header_2_0(f)
    except ValueError as err:
        raise _not_npz(path, f"member {member!r} is not a .npy array ({err})") from None


@attrs.frozen(kw_only=True)
class NpzIndex:
    """Where each array of an npz file lies, read once from the headers.

    Attributes:
        path: The file.
        stamp: ``(inode, size in bytes, modification time in ns)`` when it was indexed.
        members: One entry per array, in file order.
    """

    path: str
    stamp: tuple[int, int, int]
    members: tuple[_Member, ...]

    @property
    def infos(self) -> tuple[VarInfo, ...]:
        """The entries (names, shapes, dtypes), sorted by name."""
        return tuple(sorted((m.info for m in self.members), key=lambda v: v.name))

    def is_current(self) -> bool:
        """Whether the file is unchanged since it was indexed."""
        try:
            return _stamp(self.path) == self.stamp
        except OSError:
            return False


def _stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def index_npz(path: str | os.PathLike[str]) -> NpzIndex:
    """Index an npz file from its headers, without reading the arrays.

    Raises:
        CheckpointNotFoundError: `path` does not exist.
        NotACheckpointError: `path` is not an npz file of numeric arrays.
    """
    path = os.fspath(path)
    try:
        stamp = _stamp(path)
    except FileNotFoundError:
        msg = f"npz file {path!r} does not exist"
        raise CheckpointNotFoundError(msg) from None
    return _index(path, stamp)


@functools.lru_cache(maxsize=16)
def _index(path: str, stamp: tuple[int, int, int]) -> NpzIndex:
    """The index of an npz file, remembered while the file is unchanged."""
    return NpzIndex(path=path, stamp=stamp, members=tuple(_read_members(path)))


def list_npz_vars(path: str | os.PathLike[str]) -> tuple[VarInfo, ...]:
    """The entries of an npz file (names, shapes, dtypes), read from headers without the values.

    Args:
        path: An ``.npz`` file as written by ``np.savez`` or `save_checkpoint_vars`.

    Returns:
        One record per array, sorted by name.

    Raises:
        CheckpointNotFoundError: `path` does not exist.
        NotACheckpointError: `path` is not an npz file of numeric arrays.
    """
    return index_npz(path).infos


def _readinto(f, array: np.ndarray) -> int:
    view = memoryview(array.reshape(-1, order="A")).cast("B")  # type: ignore[arg-type]
    done = 0
    while done < len(view):
        got = f.readinto(view[done:])
        if not got:
            break
        done += got
    return done


def load_npz(
    path: str | os.PathLike[str], names: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Read arrays of an npz file, straight from the file into fresh arrays.

    Uncompressed members (what ``np.savez`` writes) are read with one ``readinto`` each;
    compressed ones go through ``zipfile``.

    Args:
        path: The ``.npz`` file.
        names: The entries to read (with or without ``:0``); all of them when None.

    Returns:
        ``{name: array}``.

    Raises:
        CheckpointNotFoundError: `path` does not exist.
        NotACheckpointError: `path` is not an npz file of arrays, or is truncated.
        KeyError: An entry of `names` is not in the file.
    """
    return read_npz(index_npz(path), names)


def read_npz(index: NpzIndex, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """`load_npz` from an index made earlier (re-indexed if the file changed since)."""
    if not index.is_current():
        index = index_npz(index.path)
    path = index.path
    members = {m.info.name: m for m in index.members}
    wanted = list(members) if names is None else [normalize_name(n) for n in names]
    absent = sorted(set(wanted) - set(members))
    if absent:
        msg = f"npz file {path!r} has no entries {absent}; it has {sorted(members)[:20]}"
        raise KeyError(msg)
    out: dict[str, np.ndarray] = {}
    with open(path, "rb", buffering=0) as f:
        zf = None
        for name in wanted:
            m = members[name]
            if m.data_offset is None or m.member_offset is None:
                zf = zf or zipfile.ZipFile(path)
                out[name] = _read_compressed(path, zf, m)
                continue
            shape = tuple(int(d or 0) for d in m.info.shape)
            array = np.empty(shape, dtype=m.np_dtype, order="F" if m.fortran else "C")
            f.seek(m.member_offset)
            crc = zlib.crc32(f.read(m.data_offset - m.member_offset))
            if _readinto(f, array) != array.nbytes:
                raise _not_npz(path, f"entry {name!r} is truncated")
            crc = zlib.crc32(memoryview(array.reshape(-1, order="A")).cast("B"), crc)  # type: ignore[arg-type]
            if crc != m.crc:
                raise _corrupt(path, name, m.crc, crc)
            out[name] = array
        if zf is not None:
            zf.close()
    return out


def _corrupt(path: str, name: str, stored: int, computed: int | None) -> NotACheckpointError:
    got = "" if computed is None else f", computed {computed:#010x}"
    msg = (
        f"npz file {path!r} is corrupt: the bytes of entry {name!r} do not match their "
        f"CRC-32 (stored {stored:#010x}{got}); the file was damaged after it was written: "
        "restore it from a copy"
    )
    return NotACheckpointError(msg)


def _read_compressed(path: str, zf: zipfile.ZipFile, m: _Member) -> np.ndarray:
    """A compressed member, read whole (``zipfile`` checks its CRC-32 at the end)."""
    try:
        data = zf.read(m.member)
    except zipfile.BadZipFile as err:
        if "CRC" in str(err):
            raise _corrupt(path, m.info.name, m.crc, None) from None
        raise _not_npz(path, f"entry {m.info.name!r} cannot be read ({err})") from None
    except (zlib.error, EOFError) as err:
        raise _not_npz(path, f"entry {m.info.name!r} cannot be read ({err})") from None
    try:
        return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    except ValueError as err:
        raise _not_npz(path, f"entry {m.info.name!r} cannot be read ({err})") from None


def verify_npz(path: str | os.PathLike[str]) -> tuple[VarInfo, ...]:
    """Check that every entry of an npz file reads back as written (its CRC-32 matches).

    `load_npz` and `SmartInit` check the entries they read; this checks them all
    without keeping the values (one entry in memory at a time).

    Args:
        path: The ``.npz`` file.

    Returns:
        The entries, as `list_npz_vars` gives them.

    Raises:
        CheckpointNotFoundError: `path` does not exist.
        NotACheckpointError: `path` is not an npz file of arrays, or an entry is
            corrupt (the message names the file and the entry).
    """
    index = index_npz(path)
    for m in index.members:
        read_npz(index, [m.info.name])
    return index.infos


def save_npz(
    path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], *, fsync: bool = True
) -> None:
    """Write `arrays` to an uncompressed ``.npz`` file atomically.

    Args:
        path: The file to write; must end with ``.npz``.
        arrays: ``{name: array}``; names are stored without ``:0``.
        fsync: Flush to disk before the file appears under `path`.

    Raises:
        ValueError: `path` does not end with ``.npz``.
    """
    path = os.fspath(path)
    if not path.endswith(".npz"):
        msg = f"npz path {path!r} does not end with '.npz'"
        raise ValueError(msg)
    named = {normalize_name(k): v for k, v in arrays.items()}
    with (
        atomic_path(path, fsync=fsync) as tmp,
        zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf,
    ):
        for name, value in named.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
