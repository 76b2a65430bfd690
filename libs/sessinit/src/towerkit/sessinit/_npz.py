"""npz files: index and list their entries from the headers (checked, no value read), write atomically."""

from __future__ import annotations

import functools
import os
import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import BinaryIO

import attrs
import numpy as np

from towerkit.sessinit._atomic import atomic_path
from towerkit.sessinit._errors import CheckpointNotFoundError
from towerkit.sessinit._npy import (
    check_member,
    check_npy_header,
    corrupt_entry,
    not_npz,
    read_npy_header,
)
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
    header_crc: int
    """The CRC-32 of the member's ``.npy`` header, where the sum over its values starts."""
    header_bytes: int
    """The length of the ``.npy`` header."""
    nbytes: int
    """The length of the values."""


def _read_members(path: str) -> list[_Member]:
    if not os.path.exists(path):
        msg = f"npz file {path!r} does not exist"
        raise CheckpointNotFoundError(msg)
    try:
        with open(path, "rb") as f, zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
            bad = [i.filename for i in infos if not i.filename.endswith(".npy")]
            if bad:
                raise not_npz(path, f"members {bad} are not '.npy' arrays")
            names = [check_member(path, i) for i in infos]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise not_npz(path, f"entries {twice} appear more than once")
            size = os.fstat(f.fileno()).st_size
            return [_read_member(path, f, zf, info, size) for info in infos]
    except (zipfile.BadZipFile, zlib.error, EOFError) as err:
        raise not_npz(path, f"not a zip archive ({err})") from None
    except IsADirectoryError:
        raise not_npz(path, "it is a directory") from None


def _read_member(
    path: str, f: BinaryIO, zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int
) -> _Member:
    """The member's header, checked against its size; no value is read."""
    name = normalize_name(info.filename.removesuffix(".npy"))
    start: int | None = None
    if info.compress_type == zipfile.ZIP_STORED:
        if not 0 <= info.header_offset <= size - _LOCAL_HEADER.size:
            raise not_npz(path, f"member {info.filename!r} lies outside the file (truncated?)")
        f.seek(info.header_offset)
        header = f.read(_LOCAL_HEADER.size)
        fields = _LOCAL_HEADER.unpack(header) if len(header) == _LOCAL_HEADER.size else None
        if fields is None or fields[0] != _LOCAL_MAGIC:
            raise not_npz(path, f"member {info.filename!r} has a broken zip header")
        start = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
        if start + info.file_size > size:
            why = f"member {info.filename!r} ends past the end of the file (truncated?)"
            raise not_npz(path, why)
        f.seek(start)
        shape, fortran, dtype, header_len = read_npy_header(path, info.filename, f)
        f.seek(start)
        header_crc = zlib.crc32(f.read(header_len))
    else:
        try:
            with zf.open(info) as member:
                shape, fortran, dtype, header_len = read_npy_header(path, info.filename, member)
            header_crc = 0  # zipfile sums a compressed member as it inflates it
        except zipfile.BadZipFile as err:
            if "CRC" in str(err):  # a small member is inflated whole with its header
                raise corrupt_entry(path, name, info.CRC, None) from None
            raise not_npz(path, f"member {info.filename!r} cannot be read ({err})") from None
    shape = check_npy_header(
        path,
        info.filename,
        shape,
        dtype,
        header_bytes=header_len,
        member_bytes=info.file_size,
    )
    return _Member(
        info=VarInfo(name=name, shape=shape, dtype=dtype),
        member=info.filename,
        np_dtype=dtype,
        fortran=fortran,
        data_offset=None if start is None else start + header_len,
        member_offset=start,
        crc=info.CRC,
        header_crc=header_crc,
        header_bytes=header_len,
        nbytes=info.file_size - header_len,
    )


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
