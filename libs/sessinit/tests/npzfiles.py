"""Writers of forged npz files for the tests: hand-made ``.npy`` headers and a zip bomb."""

from __future__ import annotations

import struct
import zipfile
import zlib


def npy_bytes(header: str, data: bytes = b"") -> bytes:
    """A ``.npy`` member (format 1.0) with `header` as its header dict, then `data`.

    >>> npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", b"1234")[:8]
    b'\\x93NUMPY\\x01\\x00'
    """
    raw = header.encode("latin1")
    pad = -(10 + len(raw) + 1) % 64
    raw += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(raw)) + raw + data


def header(shape: str, descr: str = "<f4") -> str:
    """The header dict of a C-order array with the given shape text."""
    return f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"


def write_npz(path, members: dict[str, bytes], *, compress: bool = False) -> None:
    """Write a zip of `members` (``{member name: bytes}``), stored or deflated."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def write_bomb(path, name: str = "w.npy", mib: int = 1024) -> int:
    """Write an npz of one deflated float32 member of `mib` MiB of zeros, honestly summed.

    The deflate stream is one block of the header, then one block per MiB of zeros
    (every such block compresses to the same bytes), so it is written without ever
    holding the values. Returns the size of the file (about `mib` KiB).
    """
    head = npy_bytes(header(f"({mib * 2**18},)"))
    zeros = bytes(2**20)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = comp.compress(head) + comp.flush(zlib.Z_FULL_FLUSH)
    block = comp.compress(zeros) + comp.flush(zlib.Z_FULL_FLUSH)
    again = comp.compress(zeros) + comp.flush(zlib.Z_FULL_FLUSH)
    if block != again:  # pragma: no cover - a property of zlib the bomb relies on
        raise RuntimeError("zlib does not repeat its blocks after a full flush")
    stream = first + block * mib + comp.flush()
    crc = zlib.crc32(head)
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    size = len(head) + mib * 2**20
    encoded = name.encode()
    local = struct.pack(
        "<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 33, crc, len(stream), size, len(encoded), 0
    )
    central = struct.pack(
        "<4s6H3L5H2L",
        b"PK\x01\x02",
        20,
        20,
        0,
        8,
        0,
        33,
        crc,
        len(stream),
        size,
        len(encoded),
        0,
        0,
        0,
        0,
        0,
        0,
    )
    body = local + encoded + stream
    directory = central + encoded
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(directory), len(body), 0)
    with open(path, "wb") as f:
        f.write(body + directory + end)
    return len(body + directory + end)
