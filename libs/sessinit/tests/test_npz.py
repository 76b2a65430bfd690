"""npz files: listing from headers, direct reads, atomic writes, and what is not an npz."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from towerkit.sessinit import (
    CheckpointNotFoundError,
    NotACheckpointError,
    SmartInit,
    VarInfo,
    list_npz_vars,
    load_npz,
    save_checkpoint_vars,
    verify_npz,
)

tf1 = tf.compat.v1

arrays = hnp.arrays(
    dtype=st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int64, np.bool_]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)


class TestRoundTrip:
    """What `save_checkpoint_vars` writes to ``.npz``, `load_npz` reads back exactly."""

    @settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        values=st.dictionaries(st.sampled_from(["a", "b/c", "d:0", "e/f/g"]), arrays, max_size=4)
    )
    def test_roundtrip(self, tmp_path, values):
        """Values, dtypes and shapes survive; ``:0`` is dropped from names."""
        path = tmp_path / "p.npz"
        save_checkpoint_vars(values, path)
        got = load_npz(path)
        assert sorted(got) == sorted(k.removesuffix(":0") for k in values)
        for key, value in values.items():
            back = got[key.removesuffix(":0")]
            assert back.dtype == value.dtype
            assert back.shape == value.shape
            np.testing.assert_array_equal(back, value)
        assert list_npz_vars(path) == tuple(
            sorted(
                (VarInfo(name=k, shape=v.shape, dtype=v.dtype) for k, v in values.items()),
                key=lambda v: v.name,
            )
        )

    def test_numpy_written(self, tmp_path):
        """Files written by NumPy itself, compressed or not, Fortran order included, are read."""
        f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
        np.savez(tmp_path / "plain.npz", f=f, s=np.array(b"xy"))
        np.savez_compressed(tmp_path / "zipped.npz", f=f, i=np.arange(3))
        plain = load_npz(tmp_path / "plain.npz")
        zipped = load_npz(tmp_path / "zipped.npz", names=["f:0"])
        np.testing.assert_array_equal(plain["f"], f)
        assert plain["f"].flags["F_CONTIGUOUS"]
        assert plain["s"] == b"xy"
        assert list(zipped) == ["f"]
        np.testing.assert_array_equal(zipped["f"], f)

    def test_subset(self, tmp_path):
        """Only the named entries are read."""
        save_checkpoint_vars({"a": np.zeros(2), "b": np.ones(3)}, tmp_path / "p.npz")
        assert list(load_npz(tmp_path / "p.npz", ["b"])) == ["b"]


class TestFail:
    """Paths that are not npz files of arrays are reported."""

    def test_missing(self, tmp_path):
        """A missing file is CheckpointNotFoundError."""
        with pytest.raises(CheckpointNotFoundError, match=r"npz file '.*none.npz' does not exist"):
            list_npz_vars(tmp_path / "none.npz")

    def test_not_zip(self, tmp_path):
        """A text file is not an npz file."""
        bad = tmp_path / "bad.npz"
        bad.write_text("not a zip")
        with pytest.raises(
            NotACheckpointError, match=r"'.*bad.npz' is not an npz file of arrays: not a zip"
        ):
            load_npz(bad)

    def test_foreign_members(self, tmp_path):
        """A zip of other files is not an npz file."""
        path = tmp_path / "z.npz"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("readme.txt", "hi")
            zf.writestr("notes.md", "hi")
        with pytest.raises(
            NotACheckpointError, match=r"members \['readme.txt', 'notes.md'\] are not '.npy'"
        ):
            list_npz_vars(path)

    def test_objects(self, tmp_path):
        """Arrays of Python objects are refused (they would need pickle)."""
        path = tmp_path / "o.npz"
        np.savez(path, o=np.array([{"a": 1}], dtype=object))
        with pytest.raises(NotACheckpointError, match=r"entry 'o' holds Python objects"):
            list_npz_vars(path)

    def test_truncated(self, tmp_path):
        """A file cut short is reported, not read as garbage."""
        path = tmp_path / "t.npz"
        save_checkpoint_vars({"a": np.arange(1000)}, path)
        data = path.read_bytes()
        path.write_bytes(data[:2000] + data[-200:])
        with pytest.raises(NotACheckpointError, match=r"is not an npz file of arrays"):
            load_npz(path)

    def test_unknown_name(self, tmp_path):
        """Asking for an entry the file lacks names what it has."""
        save_checkpoint_vars({"a": np.zeros(1)}, tmp_path / "p.npz")
        with pytest.raises(KeyError, match=r"has no entries \['zz'\]; it has \['a'\]"):
            load_npz(tmp_path / "p.npz", ["zz"])

    def test_bad_suffix(self, tmp_path):
        """Only a ``.npz`` path is written as npz."""
        from towerkit.sessinit._npz import save_npz

        with pytest.raises(ValueError, match=r"npz path '.*p.zip' does not end with '.npz'"):
            save_npz(tmp_path / "p.zip", {"a": np.zeros(1)})


def _corrupt_data(path, old: bytes, new: bytes) -> None:
    """Replace the first occurrence of `old` in the file by `new` (same length)."""
    with open(path, "rb") as f:
        blob = f.read()
    assert blob.count(old) == 1, "the bytes to damage must occur exactly once"
    with open(path, "wb") as f:
        f.write(blob.replace(old, new))


def _corrupt_crc(path) -> None:
    """Flip a bit of the CRC-32 that the zip's central directory holds for its first member."""
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    at = blob.index(b"PK\x01\x02") + 16
    blob[at] ^= 1
    with open(path, "wb") as f:
        f.write(bytes(blob))


class TestCorrupt:
    """An npz whose bytes no longer match their CRC-32 fails on every read, naming file and entry."""

    def test_stored_entry(self, tmp_path):
        """The damaged entry of an uncompressed file is refused; an intact entry still reads."""
        path = tmp_path / "p.npz"
        save_checkpoint_vars({"w": np.full(3, 7, np.int64), "ok": np.arange(2)}, path)
        _corrupt_data(path, np.full(3, 7, np.int64).tobytes(), np.array([0, 7, 7]).tobytes())
        assert [v.name for v in list_npz_vars(path)] == ["ok", "w"], "headers are intact"
        with pytest.raises(NotACheckpointError, match=r"p\.npz' is corrupt: .*entry 'w'.*CRC-32"):
            load_npz(path)
        with pytest.raises(NotACheckpointError, match=r"entry 'w'"):
            load_npz(path, ["w"])
        assert load_npz(path, ["ok"])["ok"].tolist() == [0, 1]
        with pytest.raises(NotACheckpointError, match=r"entry 'w'"):
            verify_npz(path)

    def test_compressed_entry(self, tmp_path):
        """A compressed entry with a wrong CRC-32 is refused the same way."""
        path = tmp_path / "c.npz"
        np.savez_compressed(path, w=np.full(3, 7.0))
        _corrupt_crc(path)
        with pytest.raises(NotACheckpointError, match=r"c\.npz' is corrupt: .*entry 'w'.*CRC-32"):
            load_npz(path)
        with pytest.raises(NotACheckpointError, match=r"entry 'w'"):
            verify_npz(path)

    def test_smartinit(self, tmp_path, graph, sess):
        """SmartInit on a damaged npz fails before assigning anything."""
        path = tmp_path / "p.npz"
        save_checkpoint_vars({"v": np.full(3, 7.0, np.float32)}, path)
        _corrupt_data(
            path, np.full(3, 7.0, np.float32).tobytes(), np.zeros(3, np.float32).tobytes()
        )
        v = tf1.get_variable("v", initializer=np.ones(3, np.float32))
        sess.run(tf1.global_variables_initializer())
        with pytest.raises(NotACheckpointError, match=r"p\.npz' is corrupt: .*entry 'v'"):
            SmartInit(str(path)).init(sess)
        assert sess.run(v).tolist() == [1.0, 1.0, 1.0]

    @settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(values=st.dictionaries(st.sampled_from(["a", "b/c"]), arrays, min_size=1, max_size=2))
    def test_intact_verifies(self, tmp_path, values):
        """Every file written by save_checkpoint_vars or numpy verifies."""
        path = tmp_path / "p.npz"
        save_checkpoint_vars(values, path)
        assert [v.name for v in verify_npz(path)] == sorted(values)
        np.savez_compressed(
            tmp_path / "c.npz", **{k.replace("/", "_"): v for k, v in values.items()}
        )
        assert len(verify_npz(tmp_path / "c.npz")) == len(values)
