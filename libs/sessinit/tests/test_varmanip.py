"""Variables as data: checkpoints and npz files listed, loaded, saved, and sessions dumped."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

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
