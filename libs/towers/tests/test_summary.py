"""Summaries inside towers: only the main training tower writes them."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.towers import (
    MOVING_SUMMARY_OPS_KEY,
    TowerContext,
    add_activation_summary,
    add_moving_summary,
    add_param_summary,
    add_tensor_summary,
)
from towerkit.towers._summary import (
    SUMMARY_TYPES,
    check_summary_lists,
    check_summary_types,
    summary_tag,
)
from towerkit.towers.compat import tf1


def tags(sess, summaries, feed=None):
    """The tags and simple values of merged summaries, run in `sess`."""
    proto = tf1.Summary()
    proto.ParseFromString(sess.run(tf1.summary.merge(summaries), feed))
    return {
        v.tag: (v.simple_value if v.WhichOneof("value") == "simple_value" else "histo")
        for v in proto.value
    }


class TestPure:
    """Validation and tag names."""

    @given(st.lists(st.sampled_from(SUMMARY_TYPES)))
    def test_known_types(self, kinds):
        """Known types pass through in order."""
        assert check_summary_types(kinds) == tuple(kinds)

    @given(st.text(min_size=1, max_size=8).filter(lambda t: t not in SUMMARY_TYPES))
    def test_unknown_type(self, kind):
        """Unknown types are listed in the error."""
        with pytest.raises(ValueError, match="unknown summary types"):
            check_summary_types(["rms", kind])

    def test_fail(self):
        """A bare string and bad pairs are rejected."""
        with pytest.raises(TypeError, match="not the string 'rms'"):
            check_summary_types("rms")
        with pytest.raises(TypeError, match="summary list 0 must be a"):
            check_summary_lists([".*"])
        with pytest.raises(ValueError, match="summary list 1 has an invalid regex '\\('"):
            check_summary_lists([(".*", ["rms"]), ("(", ["rms"])])

    @given(st.sampled_from(SUMMARY_TYPES))
    def test_tag(self, kind):
        """Tags drop the output index and add one suffix per kind (none for scalar)."""
        tag = summary_tag("a/b:0", kind)
        assert tag.startswith("a/b")
        assert (tag == "a/b") == (kind == "scalar")


class TestAddTensorSummary:
    """`add_tensor_summary` computes each kind."""

    def test_values(self, graph, sess):
        """Scalar, mean, rms and sparsity have the right values; histograms exist."""
        x = tf.constant([0.0, 3.0, 0.0, 4.0], name="x")
        s = tf.reduce_sum(x, name="s")
        ops = add_tensor_summary(x, ["histogram", "sparsity", "mean", "rms"])
        ops += add_tensor_summary(s, ["scalar"], name="total")
        got = tags(sess, ops)
        assert got["x-histogram"] == "histo"
        assert got["x-sparsity"] == pytest.approx(0.5)
        assert got["x-mean"] == pytest.approx(1.75)
        assert got["x-rms"] == pytest.approx(np.sqrt(25 / 4))
        assert got["total"] == pytest.approx(7.0)

    def test_towers(self, graph, sess):
        """Only the main training tower summarizes, under a tower-free name."""
        made = {}
        for i in range(2):
            with TowerContext(f"tower{i}", True, index=i, total=2):
                made[i] = add_tensor_summary(tf.constant(1.0, name="c"), ["scalar"])
        with TowerContext("InferenceTower", False):
            assert add_tensor_summary(tf.constant(1.0), ["scalar"]) == []
            assert add_tensor_summary(tf.constant(1.0), ["scalar"], main_tower_only=False) != []
        assert made[1] == []
        assert list(tags(sess, made[0])) == ["c"]

    def test_name_scope_in_tag(self, graph, sess):
        """A name scope around the call is part of the tag (the tower's is not)."""
        x = tf.constant([1.0, 1.0], name="x")
        with TowerContext("tower0", True), tf1.name_scope("mysummaries"):
            ops = add_tensor_summary(x, ["histogram", "rms"], name="mytensor")
        assert sorted(tags(sess, ops)) == [
            "mysummaries/mytensor-histogram",
            "mysummaries/mytensor-rms",
        ]
        with pytest.raises(ValueError, match="'scalar' needs a scalar tensor; 'x:0' has shape"):
            add_tensor_summary(x, ["scalar"])

    def test_collections(self, graph):
        """Summaries go to the collections asked for."""
        add_tensor_summary(tf.constant(1.0, name="c"), ["scalar"], collections=["mine"])
        assert len(tf1.get_collection("mine")) == 1
        assert tf1.get_collection(tf1.GraphKeys.SUMMARIES) == []


class TestActivationAndParamSummary:
    """Activation and parameter summaries use re-entered top-level scopes."""

    def test_activation(self, graph, sess):
        """Default kinds under 'activation-summary', nothing off the main tower."""
        with TowerContext("tower0", True, index=0, total=2):
            h = tf.nn.relu(tf.constant([-1.0, 2.0]), name="relu")
            ops = add_activation_summary(h)
        with TowerContext("tower1", True, index=1, total=2):
            assert add_activation_summary(h) == []
        assert sorted(tags(sess, ops)) == [
            "activation-summary/relu-histogram",
            "activation-summary/relu-rms",
            "activation-summary/relu-sparsity",
        ]

    def test_param(self, graph, sess):
        """Regexes match whole variable names."""
        tf1.get_variable("fc/W", [2], initializer=tf1.ones_initializer())
        tf1.get_variable("fc/b", [2], initializer=tf1.zeros_initializer())
        tf1.get_variable("fc/Wx", [2])
        tf1.get_variable("bn/gamma", [], initializer=tf1.constant_initializer(2.0))
        ops = add_param_summary(("fc/W", ["rms"]), (".*/b", ["mean"]), (".*/gamma", ["scalar"]))
        sess.run(tf1.global_variables_initializer())
        got = tags(sess, ops)
        assert got == {
            "param-summary/fc/W-rms": 1.0,
            "param-summary/fc/b-mean": 0.0,
            "param-summary/bn/gamma": 2.0,
        }
        with TowerContext("InferenceTower", False):
            assert add_param_summary(("fc/W", ["rms"])) == []


class TestAddMovingSummary:
    """Moving averages of scalars, main training tower only."""

    def test_average(self, graph, sess):
        """The first update sets the average; later ones move it by (1 - decay)."""
        x = tf1.placeholder(tf.float32, [])
        cost = tf.identity(x, name="cost")
        [update] = add_moving_summary(cost, decay=0.5)
        assert tf1.get_collection(MOVING_SUMMARY_OPS_KEY) == [update]
        sess.run(tf1.global_variables_initializer())
        assert sess.run(update, {x: 4.0}) == pytest.approx(4.0)
        assert sess.run(update, {x: 2.0}) == pytest.approx(3.0)
        assert sess.run(update, {x: 0.0}) == pytest.approx(1.5)
        summaries = tf1.get_collection(tf1.GraphKeys.SUMMARIES)
        # the summary is of the update's output, so it shows the average after the
        # update of its own call (fetched alone, it runs the update once: 1.5 -> 0.75)
        assert tags(sess, summaries, {x: 0.0}) == {"cost": pytest.approx(0.75)}

    def test_towers(self, graph, sess):
        """Main tower: EMA vars under EMA/, not trainable, tag without tower prefix; others: no-op."""
        outs = {}
        for i in range(2):
            with TowerContext(f"tower{i}", True, f"tower{i}", index=i, total=2):
                loss = tf.reduce_mean(tf.constant([1.0, 3.0]), name="loss")
                with tf1.name_scope("metrics"):
                    acc = tf.cast(tf.constant(1.0) > 0.0, tf.int32, name="acc")
                outs[i] = add_moving_summary(loss, acc, collection="ema", summary_collections=["s"])
        with TowerContext("InferenceTower", False):
            assert add_moving_summary(tf.constant(1.0)) == []
        assert outs[1] == []
        assert tf1.trainable_variables() == []
        assert sorted(v.op.name for v in tf1.global_variables()) == [
            "EMA/loss/average",
            "EMA/loss/started",
            "EMA/metrics/acc/average",
            "EMA/metrics/acc/started",
        ]
        sess.run(tf1.global_variables_initializer())
        sess.run(tf1.get_collection("ema"))
        assert tags(sess, tf1.get_collection("s")) == {"loss": 2.0, "metrics/acc": 1.0}

    def test_fail(self, graph):
        """No tensors, non-scalars, non-tensors and bad decays are rejected."""
        with pytest.raises(ValueError, match="at least one scalar tensor"):
            add_moving_summary()
        with pytest.raises(ValueError, match=r"takes scalar tensors; got v:0 \(2,\)"):
            add_moving_summary(tf.constant([1.0, 2.0], name="v"))
        with pytest.raises(TypeError, match="arguments at fault: 0: float"):
            add_moving_summary(1.0)
        with pytest.raises(ValueError, match=r"'decay' must be in \[0, 1\); got 1.5"):
            add_moving_summary(tf.constant(1.0), decay=1.5)
        with pytest.raises(
            TypeError, match=r"'decay' must be a number in \[0, 1\); got str '0\.9'"
        ):
            add_moving_summary(tf.constant(1.0), decay="0.9")

    def test_decay_zero_is_the_last_value(self, graph, sess):
        """decay=0 (tensorpack took it, as GAN programs write): the summary is the last value."""
        x = tf1.placeholder(tf.float32, [])
        [update] = add_moving_summary(tf.identity(x, name="d_loss"), decay=0)
        sess.run(tf1.global_variables_initializer())
        assert [sess.run(update, {x: v}) for v in (4.0, 2.0, -1.0)] == [4.0, 2.0, -1.0]

    def test_variable(self, graph, sess):
        """A scalar variable is summarized as its value (tensorpack took tf.Variable too)."""
        v = tf1.Variable(3.0, name="temperature", trainable=False)
        [update] = add_moving_summary(v)
        sess.run(tf1.global_variables_initializer())
        assert sess.run(update) == 3.0
        assert tags(sess, tf1.get_collection(tf1.GraphKeys.SUMMARIES)) == {"temperature": 3.0}
