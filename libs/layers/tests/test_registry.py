"""layer_register: scopes, argscope, the registry, VariableHolder, shape logging, renaming."""

from __future__ import annotations

import logging

import hypothesis.strategies as st
import pytest
from hypothesis import given

from towerkit.layers import (
    Conv2D,
    VariableHolder,
    get_registered_layer,
    layer_register,
    rename_tflayer_get_variable,
)
from towerkit.layers._registry import split_scope_name
from towerkit.towers import TowerContext, argscope
from towerkit.towers.compat import tf1


@layer_register(log_shape=True)
def AddBias(x, init=1.0):
    """A test layer: ``x + b``."""
    b = tf1.get_variable("b", [], initializer=tf1.constant_initializer(init))
    return tf1.add(x, b, name="output")


@layer_register(use_scope=None)
def Scale(x, factor=2.0):
    """A test layer without a required scope."""
    return x * factor


class TestLayerRegister:
    """A registered layer."""

    def test_scope_and_variables(self, graph, sess):
        """The first argument names the variable scope."""
        y = AddBias("add", tf1.zeros([2]), init=3.0)
        assert y.name == "add/output:0"
        assert [v.op.name for v in tf1.global_variables()] == ["add/b"]
        sess.run(tf1.global_variables_initializer())
        assert sess.run(y).tolist() == [3.0, 3.0]

    def test_argscope(self, graph, sess):
        """The layer reads argscope defaults by its name; the call's keywords and positionals win."""
        x = tf1.zeros([1])
        with argscope(AddBias, init=5.0):
            a = AddBias("a", x)
            b = AddBias("b", x, init=6.0)
            c = AddBias("c", x, 7.0)
        sess.run(tf1.global_variables_initializer())
        assert sess.run([a, b, c]) == [[5.0], [6.0], [7.0]]

    def test_optional_scope(self, graph):
        """With ``use_scope=None`` a name opens a scope and no name opens none."""
        x = tf1.ones([1])
        assert Scale(x).op.name == "mul"
        assert Scale("s", x).op.name == "s/mul"
        assert get_registered_layer("Scale").use_scope is None
        assert AddBias.use_scope is True

    def test_tower_reuse(self, graph):
        """Two training towers share the layer's variables."""
        x = tf1.zeros([1])
        with TowerContext("tower0", is_training=True, index=0, total=2):
            AddBias("add", x)
        with TowerContext("tower1", is_training=True, index=1, total=2):
            y = AddBias("add", x)
        assert y.name == "tower1/add/output:0"
        assert [v.op.name for v in tf1.global_variables()] == ["add/b"]

    def test_registry(self):
        """Layers are found by name; an unknown name gives None."""
        assert get_registered_layer("Conv2D") is Conv2D
        assert get_registered_layer("AddBias") is AddBias
        assert get_registered_layer("NoSuchLayer") is None

    def test_registered_twice(self):
        """Two different layers of one name make the name unusable."""

        @layer_register()
        def Twice(x):
            return x

        first = Twice

        @layer_register()
        def Twice(x):
            return x * 2

        assert first is not Twice
        with pytest.raises(
            KeyError, match="layer 'Twice' is registered with @layer_register more than once"
        ):
            get_registered_layer("Twice")

    def test_log_shape(self, graph, caplog):
        """Shapes are logged once per layer name (not again in another tower)."""
        caplog.set_level(logging.INFO, logger="towerkit.layers")
        with TowerContext("tower0", is_training=True, index=0, total=2):
            AddBias("logged", tf1.zeros([3, 2]))
        with TowerContext("tower1", is_training=True, index=1, total=2):
            AddBias("logged", tf1.zeros([3, 2]))
        lines = [r.getMessage() for r in caplog.records if "'logged'" in r.getMessage()]
        assert lines == ["'logged': [3, 2] --> [3, 2]"]

    def test_fail(self, graph):
        """A bad ``use_scope``, ``log_shape`` without a scope, the name 'tf', a non-tensor input."""
        with pytest.raises(TypeError, match="'use_scope' must be True, False or None; got 1"):
            layer_register(use_scope=1)
        with pytest.raises(ValueError, match="'log_shape' needs use_scope=True"):
            layer_register(log_shape=True, use_scope=None)
        with pytest.raises(ValueError, match="a layer cannot be named 'tf'"):

            @layer_register()
            def tf(x):
                return x

        with pytest.raises(
            TypeError, match="AddBias: the input must be a tensor or a list of tensors; got list"
        ):
            AddBias("a", [1.0])
        with pytest.raises(TypeError, match="AddBias needs an input; called with no positional"):
            AddBias()
        with pytest.raises(
            TypeError, match=r"AddBias\('a', \.\.\.\) needs an input after the name"
        ):
            AddBias("a")


class TestSplitScopeName:
    """The pure split of a call's scope name."""

    @given(st.text(min_size=1), st.integers())
    def test_named(self, name, value):
        """A leading str is the scope name when a scope is used or optional."""
        assert split_scope_name("L", True, (name, value)) == (name, (value,))
        assert split_scope_name("L", None, (name, value)) == (name, (value,))
        assert split_scope_name("L", None, (value,)) == (None, (value,))

    @given(st.integers())
    def test_fail(self, value):
        """A required name that is missing is reported with the fix."""
        with pytest.raises(
            TypeError, match=r"Did you forget the name, as in L\('name', x, \.\.\.\)"
        ):
            split_scope_name("L", True, (value,))


class TestVariableHolder:
    """VariableHolder."""

    def test_holds(self):
        """Variables by attribute, in order; duplicates and unknown names are refused."""
        h = VariableHolder(W=1)
        h.b = 2
        assert (h.W, h.b, h.all()) == (1, 2, [1, 2])
        with pytest.raises(ValueError, match="already holds a variable named 'W'"):
            h.W = 3
        with pytest.raises(
            AttributeError, match="the layer has no variable 'gamma'; it has \\['W', 'b'\\]"
        ):
            _ = h.gamma


class TestRenameTflayerGetVariable:
    """rename_tflayer_get_variable."""

    def test_renames(self, graph):
        """``kernel``/``bias``/``moving_mean``/``moving_variance`` get tensorpack's names."""
        with tf1.variable_scope("conv"), rename_tflayer_get_variable():
            for name in ("kernel", "bias", "moving_mean", "moving_variance", "other"):
                tf1.get_variable(name, [1])
        names = [v.op.name for v in tf1.global_variables()]
        assert names == ["conv/W", "conv/b", "conv/mean/EMA", "conv/variance/EMA", "conv/other"]


def _twice_cases():
    """(layer, positional values, keywords) of calls giving one value twice, for every layer
    with tensorpack's positional arguments or aliases."""
    import towerkit.layers as L

    cases = []
    for name in sorted(L.__all__):
        layer = getattr(L, name)
        rules = getattr(layer, "given_twice_rules", None)
        if rules is None:
            continue
        positional, aliases = rules
        for i, p in enumerate(positional):
            cases.append((name, i + 1, {p: 1}))
            cases.extend((name, i + 1, {a: 1}) for a, t in aliases.items() if t == p)
        cases.extend((name, 0, {a: 1, t: 1}) for a, t in aliases.items())
    return cases


class TestGivenTwice:
    """A value given twice in a layer call is a TypeError naming both ways, before any graph op."""

    @pytest.mark.parametrize(("layer", "n", "kwargs"), _twice_cases())
    def test_refused(self, graph, layer, n, kwargs):
        """Positional and keyword, alias and target, two names: all refused."""
        import towerkit.layers as L

        x = tf1.placeholder(tf1.float32, [None, 8, 8, 4])
        ops = len(graph.get_operations())
        fn = getattr(L, layer)  # Deconv2D is Conv2DTranspose under its old name
        with pytest.raises(
            TypeError, match=rf"{fn.__name__}: a value given twice: .*give each once"
        ):
            fn("l", x, *[2] * n, **kwargs)
        assert len(graph.get_operations()) == ops

    def test_fully_connected_issue_case(self, graph):
        """``FullyConnected('fc', x, 3, out_dim=4)`` names both ways of giving the units."""
        from towerkit.layers import FullyConnected

        x = tf1.placeholder(tf1.float32, [None, 4])
        with pytest.raises(
            TypeError,
            match=r"FullyConnected: a value given twice: positional 'units' and 'out_dim'",
        ):
            FullyConnected("fc", x, 3, out_dim=4)

    def test_argscope_default_is_no_clash(self, graph):
        """An argscope default and the call's own positional value are not a value given twice."""
        from towerkit.layers import FullyConnected
        from towerkit.towers import argscope

        x = tf1.placeholder(tf1.float32, [None, 4])
        with argscope(FullyConnected, units=7):
            assert FullyConnected("fc", x, 3).shape.as_list() == [None, 3]
