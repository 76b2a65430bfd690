"""Moving averages restored as the weights: ema_sources and SaverRestore(ema=True), real checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.sessinit import EMA_SUFFIX, SaverRestore, VarInfo, ema_sources

names = st.lists(st.sampled_from(["a", "b", "c/d", "e"]), unique=True, max_size=4)


class TestEmaSources:
    """Which entry each weight reads."""

    @given(names, st.data())
    def test_properties(self, weights, data):
        """Every entry stays listed once, under its name; exactly the weights with an average
        read from it, with its shape and dtype; the averages read from themselves."""
        averaged = data.draw(
            st.lists(st.sampled_from(weights), unique=True) if weights else st.just([])
        )
        entries = [VarInfo(name=n, shape=(2,), dtype="float32") for n in weights]
        entries += [
            VarInfo(name=f"{n}/{EMA_SUFFIX}", shape=(2,), dtype="float16") for n in averaged
        ]
        out, read_from = ema_sources(entries)
        assert [e.name for e in out] == [e.name for e in entries]
        assert read_from == {n: f"{n}/{EMA_SUFFIX}" for n in averaged}
        for e in out:
            assert e.dtype == (
                "float16" if e.name in read_from or e.name.endswith(EMA_SUFFIX) else "float32"
            )

    def test_fail(self):
        """A suffix that is not one name component is refused."""
        with pytest.raises(
            ValueError, match=r"'suffix' must be a name component without '/'; got 'a/b'"
        ):
            ema_sources([], suffix="a/b")


class TestSaverRestoreEma:
    """SaverRestore(ema=True) restores x from x/ExponentialMovingAverage where there is one."""

    def values(self):
        return {
            "w": np.full((2, 2), 1.0, np.float32),
            f"w/{EMA_SUFFIX}": np.full((2, 2), 0.5, np.float32),
            "b": np.full((2,), 3.0, np.float32),
        }

    def test_weights_get_the_averages(self, make_vars, sess, write_checkpoint):
        """An inference graph (no averages): w holds the average, b (none) its own value."""
        path = write_checkpoint(self.values())
        v = make_vars({"w": ((2, 2), "float32"), "b": ((2,), "float32")})
        init = SaverRestore(path, ema=True)
        assert init.ema
        assert repr(init).endswith("ema=True)")
        init.init(sess)
        np.testing.assert_array_equal(sess.run(v["w"]), 0.5)
        np.testing.assert_array_equal(sess.run(v["b"]), 3.0)

    def test_default_restores_the_weights(self, make_vars, sess, write_checkpoint):
        """Without the switch nothing changes: w holds w."""
        path = write_checkpoint(self.values())
        v = make_vars({"w": ((2, 2), "float32")})
        SaverRestore(path).init(sess)
        np.testing.assert_array_equal(sess.run(v["w"]), 1.0)

    def test_training_graph_keeps_its_averages(self, make_vars, sess, write_checkpoint):
        """A graph that has the averages too gets them as they are."""
        path = write_checkpoint(self.values())
        v = make_vars({"w": ((2, 2), "float32"), f"w/{EMA_SUFFIX}": ((2, 2), "float32")})
        SaverRestore(path, ema=True).init(sess)
        np.testing.assert_array_equal(sess.run(v["w"]), 0.5)
        np.testing.assert_array_equal(sess.run(v[f"w/{EMA_SUFFIX}"]), 0.5)

    def test_fail(self, write_checkpoint):
        """'ema' must be a bool."""
        path = write_checkpoint(self.values())
        with pytest.raises(TypeError, match=r"'ema' must be a bool; got str 'yes'"):
            SaverRestore(path, ema="yes")
