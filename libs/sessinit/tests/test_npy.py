"""npz members: forged headers refused, zip bombs never inflated to list, one checked pass to load."""

from __future__ import annotations

import io
import itertools
import os
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from npzfiles import header, npy_bytes, write_bomb, write_npz

from towerkit.sessinit import (
    NotACheckpointError,
    SmartInit,
    _npz_read,
    list_npz_vars,
    load_npz,
    save_checkpoint_vars,
    verify_npz,
)
from towerkit.sessinit._npy import (
    DEFLATE_MAX_RATIO,
    MAX_DIMS,
    check_member,
    check_npy_header,
    crc32_combine,
    read_npy_header,
)

_STAMPS = itertools.count(10**18)
"""Modification times, in ns, that no file of the tests had before."""

dtypes = st.sampled_from(["float16", "float32", "float64", "int8", "int64", "bool", "S3"])


def _bytes_read() -> int | None:
    """Bytes this process has read through system calls so far (Linux), else None."""
    try:
        with open("/proc/self/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
    except OSError:
        return None
    return int(fields["rchar"])


class TestCrc32Combine:
    """Sums of parts join into the sum of the whole."""

    @given(st.binary(max_size=300), st.binary(max_size=300))
    def test_matches_zlib(self, a, b):
        """crc32_combine(crc(a), crc(b), len(b)) == crc(a + b)."""
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)

    @given(st.integers(0, 2**32 - 1), st.integers(0, 2**40))
    def test_zeros_of_any_length(self, crc, n):
        """Joining with an empty part changes nothing; the result is a 32-bit sum."""
        assert crc32_combine(crc, 0, 0) == crc
        assert 0 <= crc32_combine(crc, crc, n) < 2**32

    def test_fail(self):
        """A negative length is refused."""
        with pytest.raises(ValueError, match=r"'len2' is -1: expected a length >= 0"):
            crc32_combine(0, 0, -1)


class TestCheckNpyHeader:
    """The declared shape and dtype must describe exactly the bytes after the header."""

    @given(
        hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6),
        dtypes,
        st.integers(64, 4096),
    )
    def test_exact_size_accepted(self, shape, dtype, head):
        """A header that declares exactly the bytes its member holds passes, as NumPy sizes it."""
        dt = np.dtype(dtype)
        nbytes = np.empty(shape, dt).nbytes
        got = check_npy_header(
            "p.npz", "w.npy", shape, dt, header_bytes=head, member_bytes=head + nbytes
        )
        assert got == shape

    @given(
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
        dtypes,
        st.integers(-100, 100).filter(bool),
    )
    def test_other_size_refused(self, shape, dtype, delta):
        """More or fewer bytes than declared: one message naming file, member and shape."""
        dt = np.dtype(dtype)
        nbytes = np.empty(shape, dt).nbytes
        with pytest.raises(NotACheckpointError) as err:
            check_npy_header(
                "p.npz", "w.npy", shape, dt, header_bytes=128, member_bytes=128 + nbytes + delta
            )
        text = str(err.value)
        assert "'p.npz'" in text
        assert "member 'w.npy' declares shape" in text
        assert "\n" not in text

    @given(
        st.lists(st.integers(-(2**70), 2**70), max_size=70).map(tuple),
        dtypes,
        st.integers(0, 2**40),
    )
    def test_total(self, shape, dtype, held):
        """Any declared shape either passes with a size NumPy can allocate, or is one error line."""
        dt = np.dtype(dtype)
        try:
            got = check_npy_header(
                "p.npz", "w.npy", shape, dt, header_bytes=128, member_bytes=128 + held
            )
        except NotACheckpointError as err:
            message = str(err)
        else:
            message = None
        if message is not None:
            assert "\n" not in message
            return
        assert len(got) <= MAX_DIMS
        assert min(got, default=0) >= 0
        assert int(np.prod(got, dtype=object)) * dt.itemsize == held
        np.empty(tuple(d if d == 0 else 1 for d in got), dt)  # a valid shape for NumPy

    @pytest.mark.parametrize(
        ("shape", "dtype", "match"),
        [
            (
                (10**12,),
                "float32",
                r"declares shape \(1000000000000,\) of float32 \(4000000000000 bytes",
            ),
            ((-3, 2), "float32", r"declares shape \(-3, 2\): negative sizes \[-3\]"),
            (
                (0, 2**62),
                "float32",
                r"declares shape \(0, 4611686018427387904\) of float32: larger than any",
            ),
            ((1,) * 65, "int8", r"more than 64 dimensions"),
            ((2,), "O", r"entry 'w' holds Python objects"),
            ([2], "float32", r"declares shape \[2\]: expected a tuple of ints"),
        ],
    )
    def test_fail(self, shape, dtype, match):
        """Absurd shapes and object arrays are refused, naming the file and the member."""
        with pytest.raises(
            NotACheckpointError, match=r"^'p\.npz' is not an npz file of arrays: .*" + match
        ):
            check_npy_header(
                "p.npz", "w.npy", shape, np.dtype(dtype), header_bytes=128, member_bytes=136
            )


class TestCheckMember:
    """The zip directory's word on a member: its name, method and sizes."""

    @given(
        st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2]),
        st.integers(0, 2**34),
        st.integers(0, 2**44),
    )
    def test_sizes(self, method, compressed, size):
        """Stored members hold their size; deflated ones at most DEFLATE_MAX_RATIO times it."""
        info = zipfile.ZipInfo("w.npy")
        info.compress_type, info.compress_size, info.file_size = method, compressed, size
        ok = (method == zipfile.ZIP_STORED and compressed == size) or (
            method == zipfile.ZIP_DEFLATED and size <= DEFLATE_MAX_RATIO * compressed + 1024
        )
        if ok:
            assert check_member("p.npz", info) == "w"
        else:
            with pytest.raises(NotACheckpointError, match=r"'p\.npz' .*member 'w\.npy' "):
                check_member("p.npz", info)

    @pytest.mark.parametrize("name", [".npy", ":0.npy"])
    def test_empty_name(self, name):
        """A member named only '.npy' names no variable."""
        info = zipfile.ZipInfo(name)
        with pytest.raises(
            NotACheckpointError, match=r"has an empty name: expected '<variable>\.npy'"
        ):
            check_member("p.npz", info)


class TestReadNpyHeader:
    """Whatever bytes a member starts with, the header reader answers or raises one error."""

    @settings(max_examples=200)
    @given(st.binary(max_size=200))
    def test_any_bytes(self, blob):
        """Garbage after the magic string is NotACheckpointError, never another exception."""
        for data in (blob, b"\x93NUMPY\x01\x00" + blob, npy_bytes(blob.decode("latin1"))):
            try:
                read_npy_header("p.npz", "w.npy", io.BytesIO(data))
            except NotACheckpointError as err:
                message = str(err)
            else:
                message = "member 'w.npy'"
            assert "member 'w.npy'" in message

    @given(hnp.array_shapes(min_dims=0, max_dims=3, max_side=4), dtypes, st.booleans())
    def test_numpy_headers(self, shape, dtype, fortran):
        """What np.save writes reads back, header length included."""
        buf = io.BytesIO()
        array = np.zeros(shape, dtype, order="F" if fortran else "C")
        np.save(buf, array)
        buf.seek(0)
        got_shape, got_fortran, got_dtype, length = read_npy_header("p.npz", "w.npy", buf)
        assert (got_shape, got_dtype) == (shape, np.dtype(dtype))
        assert got_fortran == (fortran and array.ndim > 1 and not array.flags["C_CONTIGUOUS"])
        assert length == len(buf.getvalue()) - array.nbytes


FORGED = [
    (
        "huge",
        {"w.npy": npy_bytes(header("(1000000000000,)"), b"1234")},
        r"member 'w\.npy' declares shape \(1000000000000,\) of float32",
    ),
    (
        "negative",
        {"w.npy": npy_bytes(header("(-3,)"), b"")},
        r"member 'w\.npy' declares shape \(-3,\): negative sizes \[-3\]",
    ),
    (
        "empty-name",
        {".npy": npy_bytes(header("(1,)"), b"1234")},
        r"member '\.npy' has an empty name",
    ),
    (
        "trailing",
        {"w.npy": npy_bytes(header("(1,)"), b"12345678")},
        r"\(4 bytes of values\) but holds 8 bytes",
    ),
    (
        "twice",
        {
            "a.npy": npy_bytes(header("(1,)"), b"1234"),
            "a:0.npy": npy_bytes(header("(1,)"), b"1234"),
        },
        r"entries \['a'\] appear more than once",
    ),
    ("not-npy", {"w.npy": b"PK\x03\x04 plain text"}, r"member 'w\.npy' is not a \.npy array"),
    (
        "pickled",
        {"w.npy": npy_bytes(header("(1,)", "|O"), b"\x80\x04N.")},
        r"entry 'w' holds Python objects",
    ),
]


class TestForgedFiles:
    """Forged npz files on disk: refused when listed, loaded or verified, one line naming the fault."""

    @pytest.mark.parametrize("compress", [False, True], ids=["stored", "deflated"])
    @pytest.mark.parametrize(
        ("members", "match"), [f[1:] for f in FORGED], ids=[f[0] for f in FORGED]
    )
    def test_refused(self, tmp_path, members, match, compress):
        """list_npz_vars, load_npz, verify_npz and SmartInit give the same error."""
        path = tmp_path / "forged.npz"
        write_npz(path, members, compress=compress)
        for call in (list_npz_vars, load_npz, verify_npz, SmartInit):
            with pytest.raises(
                NotACheckpointError, match=r"forged\.npz' is not an npz file of arrays: .*" + match
            ) as err:
                call(str(path))
            assert "\n" not in str(err.value)

    def test_bzip2(self, tmp_path):
        """Members compressed otherwise than np.savez_compressed does are refused."""
        path = tmp_path / "b.npz"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as zf:
            zf.writestr("w.npy", npy_bytes(header("(1,)"), b"1234"))
        with pytest.raises(
            NotACheckpointError, match=r"member 'w\.npy' is compressed with zip method 12"
        ):
            list_npz_vars(path)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """An npz of 1 MiB holding one float32 entry of 1 GiB of zeros (CRC-32 right)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    size = write_bomb(path, mib=1024)
    assert size < 2 * 2**20
    return path


class TestZipBomb:
    """A small file that inflates to a GiB: listed from its header, verified through a small buffer."""

    def test_list(self, bomb):
        """Listing reads the header only: little memory, little I/O."""
        before = _bytes_read()
        tracemalloc.start()
        try:
            infos = list_npz_vars(bomb)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert [(v.name, v.shape, v.dtype) for v in infos] == [("w", (2**28,), "float32")]
        assert peak < 8 * 2**20, peak
        if before is not None:
            assert _bytes_read() - before < 2**20

    def test_verify(self, bomb):
        """verify_npz inflates the GiB through a small buffer, not into memory."""
        tracemalloc.start()
        try:
            verify_npz(bomb)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 32 * 2**20, peak


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of 4 KiB read by several threads from the first byte, to exercise the joins."""
    monkeypatch.setattr(_npz_read, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(_npz_read, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(_npz_read, "MAX_THREADS", 4)
    monkeypatch.setattr(_npz_read, "_cpus", lambda: 4)


class TestSinglePass:
    """Loading reads each byte once and checks it in the same pass."""

    @settings(
        max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
    )
    @given(
        sizes=st.lists(st.integers(0, 30000), min_size=1, max_size=5),
        flip=st.integers(0, 2**31),
        data=st.data(),
    )
    def test_any_flipped_byte(self, tmp_path, small_pieces, sizes, flip, data):
        """Values read in pieces over threads come back exact; one flipped value byte is named."""
        del small_pieces
        rng = np.random.default_rng(flip)
        values = {f"v{i}": rng.integers(0, 255, n, dtype=np.uint8) for i, n in enumerate(sizes)}
        path = tmp_path / "p.npz"
        save_checkpoint_vars(values, path)
        got = load_npz(path)
        assert all(np.array_equal(got[k], v) for k, v in values.items())
        victims = [k for k, v in values.items() if v.size]
        if not victims:
            return
        name = data.draw(st.sampled_from(victims))
        blob = bytearray(path.read_bytes())
        index = _npz_read.index_npz(path)
        member = next(m for m in index.members if m.info.name == name)
        at = (member.data_offset or 0) + flip % values[name].size
        blob[at] ^= 1 << (flip % 8)
        path.write_bytes(bytes(blob))
        os.utime(path, ns=(0, next(_STAMPS)))  # a stamp never seen: the file is indexed again
        with pytest.raises(
            NotACheckpointError, match=rf"p\.npz' is corrupt: the bytes of entry '{name}'"
        ):
            load_npz(path)
        with pytest.raises(NotACheckpointError, match=rf"entry '{name}'"):
            verify_npz(path)

    def test_one_read(self, tmp_path):
        """A 48 MiB file (read by several threads) is read once: the process reads ~its size."""
        values = {f"v{i}": np.full(2**21 * (i + 1), i, np.float32) for i in range(3)}
        path = tmp_path / "p.npz"
        save_checkpoint_vars(values, path)
        size = path.stat().st_size
        list_npz_vars(path)
        before = _bytes_read()
        if before is None:
            pytest.skip("no /proc/self/io on this system")
        got = load_npz(path)
        assert _bytes_read() - before < size * 1.05
        assert all(np.array_equal(got[k], v) for k, v in values.items())

    @settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        values=st.dictionaries(
            st.sampled_from(["a", "b"]),
            hnp.arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)),
            min_size=1,
        ),
        fortran=st.booleans(),
        compress=st.booleans(),
    )
    def test_aligned(self, tmp_path, values, fortran, compress):
        """Arrays come back equal and start on 64 bytes (TensorFlow feeds them without a copy)."""
        values = {k: np.asfortranarray(v) if fortran else v for k, v in values.items()}
        path = tmp_path / "p.npz"
        (np.savez_compressed if compress else np.savez)(path, **values)
        got = load_npz(path)
        for key, value in values.items():
            np.testing.assert_array_equal(got[key], value)
            assert (got[key].dtype, got[key].shape) == (value.dtype, value.shape)
            assert got[key].flags.writeable
            if got[key].nbytes:
                assert got[key].ctypes.data % _npz_read.ALIGN_BYTES == 0

    def test_compressed_flipped_byte(self, tmp_path):
        """A damaged deflated member fails in the pass that inflates it."""
        path = tmp_path / "c.npz"
        np.savez_compressed(path, w=np.arange(100000, dtype=np.int64))
        blob = bytearray(path.read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        path.write_bytes(bytes(blob))
        with pytest.raises(NotACheckpointError, match=r"c\.npz' .*entry 'w'"):
            load_npz(path)
