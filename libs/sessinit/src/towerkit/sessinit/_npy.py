"""The ``.npy`` members of npz files: their names, headers and sizes checked, and CRC-32 sums joined."""

from __future__ import annotations

import math
import zipfile
from collections.abc import Sequence
from tokenize import TokenError
from typing import Any

import numpy as np

from towerkit.sessinit._errors import NotACheckpointError
from towerkit.sessinit._plan import normalize_name

MAX_DIMS = 64
"""The most dimensions a NumPy array may have."""

DEFLATE_MAX_RATIO = 1032
"""The most bytes deflate can expand one compressed byte into (runs of one byte)."""

_MAX_BYTES = 2**63 - 1
"""The largest array NumPy can describe, in bytes."""

_POLY = 0xEDB88320
"""The CRC-32 polynomial of zip files, bit-reversed."""


def not_npz(path: str, why: str) -> NotACheckpointError:
    """The error for a file that is not an npz file of arrays, saying why.

    Examples:
        >>> str(not_npz("p.npz", "it is a directory"))
        "'p.npz' is not an npz file of arrays: it is a directory"
    """
    msg = f"{path!r} is not an npz file of arrays: {why}"
    return NotACheckpointError(msg)


def corrupt_entry(path: str, name: str, stored: int, computed: int | None) -> NotACheckpointError:
    """The error for an entry whose bytes do not match the CRC-32 the zip directory holds.

    Examples:
        >>> str(corrupt_entry("p.npz", "w", 1, None))[:64]
        "npz file 'p.npz' is corrupt: the bytes of entry 'w' do not match"
    """
    got = "" if computed is None else f", computed {computed:#010x}"
    msg = (
        f"npz file {path!r} is corrupt: the bytes of entry {name!r} do not match their "
        f"CRC-32 (stored {stored:#010x}{got}); the file was damaged after it was written: "
        "restore it from a copy"
    )
    return NotACheckpointError(msg)


def check_member(path: str, info: zipfile.ZipInfo) -> str:
    """Check what the zip directory says of a member; return the entry's name.

    The member must be named ``<entry>.npy`` with a non-empty entry name, be stored or
    deflated (what ``np.savez`` and ``np.savez_compressed`` write), and declare no more
    uncompressed bytes than its compressed bytes can hold (a stored member holds as
    many, a deflated one at most `DEFLATE_MAX_RATIO` times as many).

    Raises:
        NotACheckpointError: One of these does not hold; the message names the file
            and the member.

    Examples:
        >>> info = zipfile.ZipInfo("fc/W.npy")
        >>> info.compress_size = info.file_size = 200
        >>> check_member("p.npz", info)
        'fc/W'
        >>> info.file_size = 10**9
        >>> check_member("p.npz", info)
        Traceback (most recent call last):
        ...
        towerkit.sessinit.NotACheckpointError: 'p.npz' is not an npz file of arrays: member 'fc/W.npy' is stored with 200 bytes but declares 1000000000 uncompressed bytes
    """
    member = info.filename
    name = normalize_name(member.removesuffix(".npy"))
    if not name:
        raise not_npz(path, f"member {member!r} has an empty name: expected '<variable>.npy'")
    stored, size = info.compress_size, info.file_size
    if info.compress_type == zipfile.ZIP_STORED:
        if stored != size:
            why = f"is stored with {stored} bytes but declares {size} uncompressed bytes"
            raise not_npz(path, f"member {member!r} {why}")
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        if size > DEFLATE_MAX_RATIO * stored + 1024:
            why = (
                f"declares {size} uncompressed bytes from {stored} compressed bytes, more than "
                f"deflate can expand them to ({DEFLATE_MAX_RATIO}:1)"
            )
            raise not_npz(path, f"member {member!r} {why}")
    else:
        why = (
            f"is compressed with zip method {info.compress_type}: expected stored (0) or "
            "deflated (8), as np.savez and np.savez_compressed write"
        )
        raise not_npz(path, f"member {member!r} {why}")
    return name


def npy_nbytes(shape: Sequence[int], dtype: np.dtype) -> int:
    """The bytes the values of an array of `shape` and `dtype` take.

    Examples:
        >>> npy_nbytes((3, 4), np.dtype("float32")), npy_nbytes((), np.dtype("int64"))
        (48, 8)
    """
    return math.prod(shape) * dtype.itemsize


def check_npy_header(
    path: str,
    member: str,
    shape: Any,
    dtype: np.dtype,
    *,
    header_bytes: int,
    member_bytes: int,
) -> tuple[int, ...]:
    """Check the shape and dtype a ``.npy`` header declares against the member's size.

    Args:
        path: The npz file (for the message).
        member: The member's name in the zip (for the message).
        shape: The shape the header declares.
        dtype: The dtype the header declares.
        header_bytes: The length of the ``.npy`` header (magic string included).
        member_bytes: The member's uncompressed size, as the zip directory gives it.

    Returns:
        The shape, as a tuple of ints.

    Raises:
        NotACheckpointError: The dtype holds Python objects, or the shape has more than
            `MAX_DIMS` dimensions, a negative size or a size no array can have, or its
            values would not take exactly the bytes that follow the header. The message
            names the file, the member and the declared shape.

    Examples:
        >>> check_npy_header("p.npz", "w.npy", (2, 3), np.dtype("float32"),
        ...                  header_bytes=128, member_bytes=128 + 24)
        (2, 3)
        >>> check_npy_header("p.npz", "w.npy", (10**12,), np.dtype("float32"),
        ...                  header_bytes=128, member_bytes=128 + 24)
        Traceback (most recent call last):
        ...
        towerkit.sessinit.NotACheckpointError: 'p.npz' is not an npz file of arrays: member 'w.npy' declares shape (1000000000000,) of float32 (4000000000000 bytes of values) but holds 24 bytes after its header
    """
    if not (isinstance(shape, tuple) and all(isinstance(d, int) for d in shape)):
        raise not_npz(path, f"member {member!r} declares shape {shape!r}: expected a tuple of ints")
    dims: tuple[int, ...] = tuple(int(d) for d in shape)
    declared = f"member {member!r} declares shape {dims}"
    if dtype.hasobject:
        name = member.removesuffix(".npy")
        raise not_npz(path, f"entry {name!r} holds Python objects: expected numeric arrays")
    if len(dims) > MAX_DIMS:
        raise not_npz(path, f"{declared[:200]}...: more than {MAX_DIMS} dimensions")
    negative = [d for d in dims if d < 0]
    if negative:
        raise not_npz(path, f"{declared}: negative sizes {negative}")
    if math.prod(d for d in dims if d) * max(dtype.itemsize, 1) > _MAX_BYTES:
        raise not_npz(path, f"{declared} of {dtype}: larger than any array can be")
    nbytes = npy_nbytes(dims, dtype)
    held = member_bytes - header_bytes
    if nbytes != held:
        why = f"{declared} of {dtype} ({nbytes} bytes of values) but holds {held} bytes after its header"
        raise not_npz(path, why)
    return dims


def read_npy_header(path: str, member: str, f: Any) -> tuple[Any, bool, np.dtype, int]:
    r"""Read a ``.npy`` header from the file object `f`, positioned at the member's start.

    Returns:
        ``(shape, fortran_order, dtype, header_bytes)``; the shape is unchecked (see
        `check_npy_header`).

    Raises:
        NotACheckpointError: The bytes are not a ``.npy`` header.

    Examples:
        >>> import io
        >>> buf = io.BytesIO()
        >>> np.save(buf, np.zeros((2, 3), np.float32))
        >>> _ = buf.seek(0)
        >>> read_npy_header("p.npz", "w.npy", buf)
        ((2, 3), False, dtype('float32'), 128)
        >>> read_npy_header("p.npz", "w.npy", io.BytesIO(b"PK not npy"))
        Traceback (most recent call last):
        ...
        towerkit.sessinit.NotACheckpointError: 'p.npz' is not an npz file of arrays: member 'w.npy' is not a .npy array (the magic string is not correct; expected b'\x93NUMPY', got b'PK not')
    """
    fmt = np.lib.format
    start = f.tell()
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            # 3.0 (UTF-8 field names) has no public reader
            shape, fortran, dtype = fmt._read_array_header(f, version)  # type: ignore[attr-defined]
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError, TokenError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise not_npz(path, f"member {member!r} is not a .npy array ({why})") from None
    return shape, bool(fortran), dtype, int(f.tell() - start)


def _multmodp(a: int, b: int) -> int:
    """``a * b`` modulo the CRC-32 polynomial (bit-reversed polynomials of degree < 32)."""
    m = 1 << 31
    p = 0
    while m:
        if a & m:
            p ^= b
            if not a & (m - 1):
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _powers() -> tuple[int, ...]:
    out = [1 << 30]  # x^1
    for _ in range(31):
        out.append(_multmodp(out[-1], out[-1]))
    return tuple(out)


_X2N = _powers()
"""``x^(2^k)`` modulo the polynomial, for k = 0..31."""


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)``.

    Lets parts of one member be summed apart (on several threads) and joined.

    Examples:
        >>> import zlib
        >>> crc32_combine(zlib.crc32(b"hello "), zlib.crc32(b"world"), 5) == zlib.crc32(b"hello world")
        True
    """
    if len2 < 0:
        msg = f"'len2' is {len2}: expected a length >= 0"
        raise ValueError(msg)
    p = 1 << 31  # x^0
    n, k = len2, 3  # len2 bytes = 8 * len2 bits: x^(2^3) per byte
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return _multmodp(p, crc1) ^ crc2
