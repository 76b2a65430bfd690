"""Mixed-precision scopes: float32 storage, cast reads, cast tower inputs; real graphs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.towers import (
    POLICIES,
    Precision,
    TowerContext,
    TowerFunc,
    cast_inputs,
    current_precision,
    custom_getter_scope,
    low_precision_variables,
    precision_policy,
    precision_scope,
    with_precision,
)
from towerkit.towers.compat import tf1


@given(st.text(max_size=20))
def test_only_the_policy_names_are_accepted(name):
    if name in POLICIES:
        assert precision_policy(name) == Precision(name, POLICIES[name])
    else:
        with pytest.raises(ValueError, match="valid: 'float32', 'mixed_bfloat16', 'mixed_float16'"):
            precision_policy(name)


def test_a_policy_that_is_not_a_name_is_refused():
    with pytest.raises(TypeError, match="'precision' must be a policy name"):
        precision_policy(16)
    assert precision_policy(Precision("mixed_float16", "float16")).loss_scaling
    assert not precision_policy("mixed_bfloat16").loss_scaling


@pytest.mark.parametrize(
    ("name", "dtype"), [("mixed_bfloat16", tf.bfloat16), ("mixed_float16", tf.float16)]
)
def test_variables_are_float32_and_read_in_the_compute_dtype(name, dtype):
    with tf.Graph().as_default():
        with precision_scope(name):
            assert current_precision().name == name
            plain = tf1.get_variable("plain", [2, 3])
            explicit = tf1.get_variable("stats", [3], tf.float32, trainable=False)
            counter = tf1.get_variable("counter", [], trainable=False)
            with tf1.variable_scope("inner"):
                nested = tf1.get_variable("W", [3])
        assert current_precision().name == "float32"
        assert plain.dtype == dtype
        assert nested.dtype == dtype
        assert explicit.dtype.base_dtype == tf.float32
        # a non-trainable state stays a variable (assignable), stored float32
        assert counter.dtype.base_dtype == tf.float32
        assert hasattr(counter, "assign")
        assert {v.op.name: v.dtype.base_dtype for v in tf1.global_variables()} == {
            "plain": tf.float32,
            "stats": tf.float32,
            "counter": tf.float32,
            "inner/W": tf.float32,
        }
        assert low_precision_variables() == []
        hand = tf1.Variable(tf.zeros([2], tf.bfloat16), name="hand")
        assert low_precision_variables() == ["hand"]
        assert low_precision_variables([hand, plain.op.inputs[0]]) == ["hand"]


def test_getters_compose_and_reuse_reads_the_same_variable():
    seen = []

    def outer(getter, name, *args, **kwargs):
        seen.append((name, kwargs["dtype"]))
        return getter(name, *args, **kwargs)

    with tf.Graph().as_default(), custom_getter_scope(outer):
        with precision_scope("mixed_bfloat16"):
            a = tf1.get_variable("w", [2], initializer=tf1.ones_initializer())
        with precision_scope("mixed_bfloat16"), tf1.variable_scope("", reuse=True):
            b = tf1.get_variable("w", [2])
        assert seen == [("w", tf.float32), ("w", tf.float32)]
        assert len(tf1.global_variables()) == 1
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            np.testing.assert_array_equal(*sess.run([a, b]))


def test_a_tower_func_casts_its_float_inputs_and_keeps_them_in_its_handle():
    def tower(x, label):
        assert label.dtype == tf.int32
        return tf.reduce_sum(x * tf1.get_variable("w", [3]), name="out")

    spec = [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "label")]
    with tf.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, 3])
        label = tf1.placeholder(tf.int32, [None])
        func = TowerFunc(tower, spec)
        with TowerContext("", is_training=True), precision_scope("mixed_bfloat16"):
            out = func(x, label)
        assert out.dtype == tf.bfloat16
        assert func.towers[0].inputs[0] is x
        with TowerContext("infer", is_training=False):
            assert func(x, label).dtype == tf.float32  # outside the scope: float32


def test_a_tower_func_bound_to_a_policy_shares_its_towers():
    """``under_precision``: the towers follow the policy outside any scope; the same towers."""

    def tower(x):
        with tf1.variable_scope("m", reuse=tf1.AUTO_REUSE):
            return tf.reduce_sum(x * tf1.get_variable("w", [3]), name="out")

    spec = [tf.TensorSpec((None, 3), tf.float32, "x")]
    with tf.Graph().as_default() as g:
        x = tf1.placeholder(tf.float32, [None, 3])
        func = TowerFunc(tower, spec)
        assert func.under_precision("float32") is func
        bound = func.under_precision("mixed_bfloat16")

        def casts():
            return sum(op.type == "Cast" for op in g.get_operations())

        with TowerContext("", is_training=True):
            out = bound(x)
        first = casts()
        assert out.dtype == tf.bfloat16
        assert current_precision().name == "float32"
        assert [v.dtype.base_dtype for v in tf1.global_variables()] == [tf.float32]
        with TowerContext("again", is_training=True), precision_scope("mixed_bfloat16"):
            assert bound(x).dtype == tf.bfloat16  # the same scope is not entered twice
        assert casts() == 2 * first  # as many casts as alone: not cast twice
        assert len(func.towers) == len(bound.towers) == 2
        assert func.towers[0].inputs[0] is x
        with TowerContext("infer", is_training=False):
            assert func(x).dtype == tf.float32  # the unbound function: float32
        assert len(bound.towers) == 3
        with TowerContext("infer2", is_training=False):
            assert bound(x).dtype == tf.float32  # inference towers: the enclosing scope's
        with TowerContext("infer3", is_training=False), precision_scope("mixed_bfloat16"):
            assert bound(x).dtype == tf.bfloat16


def test_with_precision_and_cast_inputs():
    with tf.Graph().as_default():
        x = tf1.placeholder(tf.float64, [2])
        n = tf1.placeholder(tf.int64, [2])
        assert [t.dtype for t in cast_inputs([x, n], "mixed_float16")] == [tf.float16, tf.int64]
        assert cast_inputs([x, n], "float32") == [x, n]
        fn = with_precision(
            lambda a, b: a * tf1.get_variable("v", [2], tf.float16), "mixed_float16"
        )
        assert fn(x, n).dtype == tf.float16
        assert with_precision(len, "float32") is len


def test_the_scope_is_left_on_an_error():
    with tf.Graph().as_default():
        with pytest.raises(RuntimeError), precision_scope("mixed_bfloat16"):
            raise RuntimeError("boom")
        assert current_precision().name == "float32"
        assert tf1.get_variable_scope().dtype == tf.float32


def test_a_part_marked_float32_inside_a_mixed_scope():
    """``precision_scope("float32")`` inside a mixed scope: float32 variables read uncast."""
    with tf.Graph().as_default():
        with precision_scope("mixed_bfloat16"):
            low = tf1.get_variable("low", [2])
            with precision_scope("float32"):
                assert current_precision().name == "float32"
                exact = tf1.get_variable("exact", [2])
                total = tf.reduce_sum(tf.cast(low, tf.float32) * exact)
            assert current_precision().name == "mixed_bfloat16"
            again = tf1.get_variable("again", [2])
        assert low.dtype == tf.bfloat16
        assert again.dtype == tf.bfloat16
        assert exact.dtype.base_dtype == tf.float32
        assert hasattr(exact, "assign")
        assert total.dtype == tf.float32
