"""Variables as data: checkpoints and npz files listed, loaded, saved, and sessions dumped."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.sessinit import (
    CheckpointNotFoundError,
    NotACheckpointError,
    VarInfo,
    dump_session_params,
    list_checkpoint_vars,
    load_checkpoint_vars,
    load_npz,
    save_checkpoint_vars,
)

tf1 = tf.compat.v1


class TestLoadCheckpointVars:
    """`load_checkpoint_vars` and `list_checkpoint_vars` read plain TensorFlow checkpoints."""

    @pytest.mark.parametrize("use_resource", [True, False])
    def test_plain_tf(self, write_checkpoint, use_resource):
        """Every variable comes back with its dtype, shape and values."""
        values = {
            "conv/W": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
            "conv/b": np.array([1.5, 2.5], np.float16),
            "step": np.array(7, np.int64),
        }
        prefix = write_checkpoint(values, use_resource=use_resource)
        got = load_checkpoint_vars(prefix)
        assert sorted(got) == sorted(values)
        for name, value in values.items():
            assert got[name].dtype == value.dtype
            np.testing.assert_array_equal(got[name], value)
        assert list_checkpoint_vars(prefix + ".index") == (
            VarInfo(name="conv/W", shape=(2, 3, 4), dtype="float32"),
            VarInfo(name="conv/b", shape=(2,), dtype="float16"),
            VarInfo(name="step", shape=(), dtype="int64"),
        )

    def test_fail(self, tmp_path):
        """A missing checkpoint and a corrupt index are reported."""
        with pytest.raises(CheckpointNotFoundError, match=r"checkpoint '.*model-1' does not exist"):
            load_checkpoint_vars(tmp_path / "model-1")
        (tmp_path / "model-2.index").write_bytes(b"garbage" * 10)
        with pytest.raises(
            NotACheckpointError, match=r"'.*model-2' is not a readable TensorFlow checkpoint"
        ):
            list_checkpoint_vars(tmp_path / "model-2")


class TestSaveCheckpointVars:
    """`save_checkpoint_vars` writes npz files or checkpoints that TensorFlow reads."""

    def test_checkpoint_read_by_tensorflow(self, tmp_path):
        """A checkpoint written from a dict restores with a plain Saver."""
        values = {
            "a/W:0": np.arange(6, dtype=np.float32).reshape(2, 3),
            "n": np.array([b"x", b"yz"]),
        }
        prefix = str(tmp_path / "model-3")
        save_checkpoint_vars(values, prefix)
        g = tf.Graph()
        with g.as_default():
            w = tf1.get_variable("a/W", shape=(2, 3))
            saver = tf1.train.Saver([w])
            with tf1.Session() as s:
                saver.restore(s, prefix)
                np.testing.assert_array_equal(s.run(w), values["a/W:0"])
        assert load_checkpoint_vars(prefix)["n"].tolist() == [b"x", b"yz"]

    def test_npz(self, tmp_path):
        """An ``.npz`` path gets an npz file."""
        save_checkpoint_vars({"x": np.ones(3, np.int32)}, tmp_path / "p.npz")
        assert load_npz(tmp_path / "p.npz")["x"].tolist() == [1, 1, 1]

    def test_fail(self, tmp_path):
        """Non-mapping input, non-string keys, object values and duplicates are rejected."""
        with pytest.raises(TypeError, match=r"variable dict is a list: expected a mapping"):
            save_checkpoint_vars([1, 2], tmp_path / "p.npz")
        with pytest.raises(TypeError, match=r"variable dict has keys that are not strings: \[3\]"):
            save_checkpoint_vars({3: np.zeros(1)}, tmp_path / "p.npz")
        with pytest.raises(
            TypeError,
            match=r"values that are not numeric or string arrays: \{'a': 'dict', 'b': 'object'\}",
        ):
            save_checkpoint_vars(
                {"a": {"x": 1}, "b": object(), "c": np.zeros(1)}, tmp_path / "p.npz"
            )
        with pytest.raises(
            ValueError, match=r"names variables twice \(with and without ':0'\): \['a'\]"
        ):
            save_checkpoint_vars({"a": np.zeros(1), "a:0": np.zeros(1)}, tmp_path / "model-1")
        assert list(tmp_path.iterdir()) == []


class TestDumpSessionParams:
    """`dump_session_params` saves trainable and model variables of the default session."""

    def test_dump(self, graph, sess, tmp_path):
        """Trainable and model variables are saved; other globals are not."""
        with tf1.variable_scope("net"):
            w = tf1.get_variable("W", initializer=np.arange(4, dtype=np.float32))
            m = tf1.get_variable(
                "mean",
                initializer=2.0,
                trainable=False,
                collections=[tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES],
            )
        tf1.get_variable("opt_slot", initializer=5.0, trainable=False)
        sess.run(tf1.global_variables_initializer())
        with sess.as_default():
            dump_session_params(tmp_path / "params.npz")
        got = load_npz(tmp_path / "params.npz")
        assert sorted(got) == ["net/W", "net/mean"]
        np.testing.assert_array_equal(got["net/W"], sess.run(w))
        assert got["net/mean"] == sess.run(m)

    def test_fail(self, graph, tmp_path):
        """A path not ending in ``.npz``, or no default session, is an error."""
        assert tf1.get_default_session() is None
        with pytest.raises(ValueError, match=r"path '.*params.npy' does not end with '.npz'"):
            dump_session_params(tmp_path / "params.npy")
        with pytest.raises(RuntimeError, match=r"needs a default session"):
            dump_session_params(tmp_path / "params.npz")


def damage(prefix, how):
    """Damage checkpoint `prefix` on disk: ``zero``/``cut`` its data file, ``drop`` it, ``index``."""
    import os

    data = prefix + ".data-00000-of-00001"
    if how == "zero":
        size = os.path.getsize(data)
        with open(data, "r+b") as f:
            f.write(b"\0" * size)
    elif how == "flip":
        with open(data, "r+b") as f:
            f.seek(5)
            byte = f.read(1)
            f.seek(5)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif how == "cut":
        os.truncate(data, os.path.getsize(data) // 2)
    elif how == "drop":
        os.remove(data)
    elif how == "index":
        with open(prefix + ".index", "rb") as f:
            body = bytearray(f.read())
        body[30] ^= 0xFF  # inside the first block, which has a checksum
        with open(prefix + ".index", "wb") as f:
            f.write(bytes(body))


DAMAGE = {
    "zero": r"is corrupt: its data file '.*model-1\.data-00000-of-00001' does not hold the values "
    r"its index describes; at fault: 'a' \(checksum mismatch",
    "flip": r"is corrupt: .*at fault: 'a' \(checksum mismatch: its bytes changed after they were written\)",
    "cut": r"is truncated: its data file '.*model-1\.data-00000-of-00001' holds \d+ bytes but "
    r"its index describes at least 4048 bytes",
    "drop": r"is incomplete: its index lists 2 variables but the data file "
    r"'.*model-1\.data-00000-of-00001' does not exist",
}


@pytest.fixture
def saved(tmp_path):
    """A two-variable checkpoint ``<tmp>/model-1`` written by save_checkpoint_vars."""
    prefix = str(tmp_path / "model-1")
    save_checkpoint_vars(
        {"a": np.arange(1000, dtype=np.float32), "b": np.ones((3, 4), np.float32)}, prefix
    )
    return prefix


class TestCorruptCheckpoint:
    """Damaged checkpoint files give a CorruptCheckpointError naming the file and the fault."""

    @pytest.mark.parametrize("how", sorted(DAMAGE))
    def test_smart_init(self, saved, how):
        """SmartInit: at construction for missing or short files, at init for damaged bytes."""
        from towerkit.sessinit import CorruptCheckpointError, SmartInit

        damage(saved, how)

        def restore():
            init = SmartInit(saved)
            with tf1.Session() as s:
                s.run(tf1.global_variables_initializer())
                init.init(s)

        with tf.Graph().as_default():
            tf1.get_variable("a", [1000])
            tf1.get_variable("b", [3, 4])
            with pytest.raises(CorruptCheckpointError, match=DAMAGE[how]) as info:
                restore()
        if how in ("zero", "flip"):
            assert isinstance(info.value.__cause__, tf.errors.OpError), "chained to the read error"

    @pytest.mark.parametrize("how", ["zero", "flip"])
    def test_finalized_graph_reader(self, saved, how):
        """The reader path (a relaxed restore into a finalized graph) says the same."""
        from towerkit.sessinit import CorruptCheckpointError, SaverRestoreRelaxed

        damage(saved, how)
        with tf.Graph().as_default() as g:
            tf1.get_variable("a", [1000])
            tf1.get_variable("b", [3, 4])
            init = SaverRestoreRelaxed(saved)
            with tf1.Session() as s:
                s.run(tf1.global_variables_initializer())
                g.finalize()
                with pytest.raises(CorruptCheckpointError, match=DAMAGE[how]):
                    init.init(s)

    @pytest.mark.parametrize("how", sorted(DAMAGE))
    def test_load_checkpoint_vars(self, saved, how):
        """load_checkpoint_vars reads nothing silently wrong."""
        from towerkit.sessinit import CorruptCheckpointError

        damage(saved, how)
        with pytest.raises(CorruptCheckpointError, match=DAMAGE[how]):
            load_checkpoint_vars(saved)

    def test_damaged_index(self, saved):
        """A damaged index is not a readable checkpoint (the index names the fault)."""
        damage(saved, "index")
        with pytest.raises(
            NotACheckpointError,
            match=r"is not a readable TensorFlow checkpoint: .*checksum mismatch",
        ):
            list_checkpoint_vars(saved)

    def test_names(self, saved):
        """load_checkpoint_vars(names=...) reads those only; unknown names are a KeyError."""
        got = load_checkpoint_vars(saved, ["b"])
        assert list(got) == ["b"]
        with pytest.raises(KeyError, match=r"holds no variables \['zz'\]"):
            load_checkpoint_vars(saved, ["zz"])

    @given(st.sets(st.integers(0, 6)), st.integers(1, 7))
    def test_missing_shards(self, present, total):
        """missing_shards: the shards of 0..N-1 whose data file is absent."""
        from towerkit.sessinit._varmanip import data_file_name, missing_shards

        present = {i for i in present if i < total}
        names = ["m.index", *(data_file_name("m", i, total) for i in present)]
        got_total, missing = missing_shards(names, "m")
        if present:
            assert got_total == total
            assert missing == [i for i in range(total) if i not in present]
        else:
            assert (got_total, missing) == (1, [0])
