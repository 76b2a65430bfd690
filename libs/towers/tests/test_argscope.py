"""Argument scopes: merging, the documented override example, functions and modules."""

from __future__ import annotations

import logging
import textwrap
import types

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from towers_strategies import kwargs_dict

from towerkit.towers import (
    TowerContext,
    argscope,
    enable_argscope_for_function,
    enable_argscope_for_module,
    get_arg_scope,
)
from towerkit.towers._argscope import ArgScope, merge_argscope
from towerkit.towers.compat import tf1

LAYERS_SOURCE = textwrap.dedent(
    '''
    """Layer functions in the style of tf.layers, creating variables with get_variable."""

    import tensorflow as tf

    tf1 = tf.compat.v1


    def dense(inputs, units, activation=None, use_bias=True, name="dense"):
        with tf1.variable_scope(name):
            w = tf1.get_variable("kernel", [inputs.shape[-1], units])
            y = tf.matmul(inputs, w)
            if use_bias:
                y = y + tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer())
            return activation(y) if activation is not None else y


    def dropout(inputs, rate=0.5, training=False, name="dropout"):
        return tf.identity(inputs, name=name) if not training else tf.nn.dropout(inputs, rate=rate, name=name)


    def _private(x):
        return x
    '''
)


@pytest.fixture
def layers():
    """A fresh module of layer functions (patching it affects this test only)."""
    module = types.ModuleType("toy_layers")
    exec(compile(LAYERS_SOURCE, "toy_layers.py", "exec"), module.__dict__)
    return module


@enable_argscope_for_function
def conv(name, x, kernel_shape=1, out_channel=8, nl=None):
    """A stand-in for a convolution that reports the arguments it got."""
    del x
    return {"name": name, "kernel_shape": kernel_shape, "out_channel": out_channel, "nl": nl}


class TestArgScopeRecord:
    """The pure record and merge."""

    def test_repr(self):
        """The record prints as tuples of pairs."""
        assert repr(ArgScope({"conv": {"k": 3}})) == "ArgScope(entries=(('conv', (('k', 3),)),))"

    def test_fail(self):
        """Anything but layer -> kwargs mappings is rejected with what was given."""
        with pytest.raises(TypeError, match=r"takes \{layer name: \{argument: value\}\}.*; got 3"):
            ArgScope(3)
        with pytest.raises(TypeError, match=r"got \{'conv': 5\}"):
            ArgScope({"conv": 5})

    @given(
        st.dictionaries(st.sampled_from(["conv", "fc", "bn"]), kwargs_dict),
        st.lists(st.sampled_from(["conv", "fc", "pool"]), min_size=1, unique=True),
        kwargs_dict,
    )
    def test_merge(self, base, layers, kwargs):
        """Merged layers get the new kwargs over the old ones; other layers stay; input unchanged."""
        scope = ArgScope(base)
        before = scope.as_dict()
        merged = merge_argscope(scope, layers, kwargs).as_dict()
        for layer in layers:
            assert merged[layer] == {**base.get(layer, {}), **kwargs}
        for layer in set(base) - set(layers):
            assert merged[layer] == base[layer]
        assert set(merged) == set(base) | set(layers)
        assert scope.as_dict() == before

    @given(kwargs_dict, kwargs_dict)
    def test_merge_associative_for_one_layer(self, a, b):
        """Two nested scopes equal one scope with the merged kwargs."""
        nested = merge_argscope(merge_argscope(ArgScope(), ["l"], a), ["l"], b)
        assert nested.defaults_for("l") == {**a, **b}


class TestArgscope:
    """The `argscope` context and the documented override example."""

    def test_documented_override(self):
        """Scope values apply; an explicit argument overrides them."""
        with argscope(conv, kernel_shape=3, nl=tf.nn.relu, out_channel=32):
            a = conv("conv0", None)
            b = conv("conv1", None)
            c = conv("conv2", None, out_channel=64)
        assert (a["kernel_shape"], a["out_channel"], a["nl"]) == (3, 32, tf.nn.relu)
        assert b["out_channel"] == 32
        assert c["out_channel"] == 64
        assert conv("conv3", None)["out_channel"] == 8

    def test_nesting_and_get(self):
        """Inner scopes override outer ones and are undone on exit; get_arg_scope is a copy."""
        with argscope([conv, "fc"], out_channel=16):
            with argscope(conv, out_channel=4, kernel_shape=5):
                assert get_arg_scope() == {
                    "conv": {"out_channel": 4, "kernel_shape": 5},
                    "fc": {"out_channel": 16},
                }
                assert conv("c", None)["out_channel"] == 4
            current = get_arg_scope()
            current["conv"]["out_channel"] = 99
            assert conv("c", None)["out_channel"] == 16
        assert get_arg_scope() == {}

    def test_fail(self):
        """Unknown arguments and non-layers are rejected when the scope opens."""
        with (
            pytest.raises(TypeError, match=r"'conv' takes no arguments \['stride'\]"),
            argscope(conv, stride=2),
        ):
            pass
        with (
            pytest.raises(TypeError, match="layers must be functions or names; got int"),
            argscope(3, k=1),
        ):
            pass


class TestEnableArgscope:
    """Decorating functions and modules."""

    def test_function_decorator(self, graph, caplog):
        """A wrapped function reads the scope and logs shapes once, in the main tower."""
        x = tf.ones([2, 3])

        def dense(inputs, units, name="dense"):
            with tf1.variable_scope(name):
                return tf.matmul(inputs, tf1.get_variable("kernel", [inputs.shape[-1], units]))

        wrapped = enable_argscope_for_function(dense)
        assert enable_argscope_for_function(wrapped) is wrapped
        with caplog.at_level(logging.INFO, logger="towerkit.towers"), argscope(dense, units=4):
            with TowerContext("tower0", True, index=0, total=2):
                y = wrapped(x, name="fc")
            with TowerContext("tower1", True, index=1, total=2):
                wrapped(x, name="fc")
        assert y.shape.as_list() == [2, 4]
        shape_logs = [r.getMessage() for r in caplog.records if "output" in r.getMessage()]
        assert shape_logs == ["tower0/fc: input (2, 3), output (2, 4)"]

    def test_module(self, graph, layers):
        """Every public function of a module reads the scope; private ones are left alone."""
        private = layers._private
        enable_argscope_for_module(layers, log_shape=False)
        assert layers._private is private
        x = tf.ones([2, 3])
        with argscope(layers.dense, activation=tf.nn.relu, use_bias=False):
            y = layers.dense(x, 5, name="fc1")
            z = layers.dense(x, 5, name="fc2", use_bias=True)
        with argscope(layers.dropout, training=True, rate=0.25):
            d = layers.dropout(y)
        assert y.op.type == "Relu"
        assert [v.name for v in tf1.global_variables()] == [
            "fc1/kernel:0",
            "fc2/kernel:0",
            "fc2/bias:0",
        ]
        assert z.op.type == "Relu"
        assert d.op.type != "Identity"

    def test_module_fail(self):
        """Only modules can be patched."""
        with pytest.raises(TypeError, match="'module' must be a module; got dict"):
            enable_argscope_for_module({})
