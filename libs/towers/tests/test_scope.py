"""Scope utilities: auto reuse, cached name scopes, function-named scopes."""

from __future__ import annotations

import logging

import pytest
import tensorflow as tf
from hypothesis import given, settings
from towers_strategies import scope_segment

from towerkit.towers import (
    auto_reuse_variable_scope,
    cached_name_scope,
    under_name_scope,
    under_variable_scope,
)
from towerkit.towers.compat import tf1


class TestAutoReuseVariableScope:
    """The documented reuse pattern of `auto_reuse_variable_scope`."""

    def test_documented_pattern(self, graph):
        """First call per scope creates, later calls in that scope reuse."""

        @auto_reuse_variable_scope
        def myfunc(x):
            w = tf1.get_variable("W", [3, 2])
            return tf.matmul(x, w)

        x = tf1.placeholder(tf.float32, [None, 3])
        myfunc(x)
        myfunc(x)
        with tf1.variable_scope("newscope"):
            myfunc(x)
            myfunc(x)
        assert [v.name for v in tf1.global_variables()] == ["W:0", "newscope/W:0"]

    def test_inherits_parent_reuse(self, graph):
        """The first call inherits the parent's reuse flag (reusing needs the variable)."""

        @auto_reuse_variable_scope
        def make():
            return tf1.get_variable("v", [1])

        v = tf1.get_variable("v", [1])
        with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
            assert make() is v

    def test_name_scope_untouched(self, graph):
        """Ops keep the caller's name scope."""

        @auto_reuse_variable_scope
        def op():
            return tf.constant(1.0, name="c")

        with tf1.name_scope("outer"):
            assert op().name == "outer/c:0"


class TestCachedNameScope:
    """`cached_name_scope` re-enters exactly the same scope."""

    def test_top_level_reentered(self, graph):
        """The scope is top-level and identical on every entry."""
        with tf1.name_scope("a"), cached_name_scope("summaries") as first:
            x = tf.constant(1.0, name="x")
        with tf1.name_scope("b"), cached_name_scope("summaries") as second:
            y = tf.constant(1.0, name="y")
        assert first == second == "summaries/"
        assert (x.name, y.name) == ("summaries/x:0", "summaries/y:0")

    def test_taken_name(self, graph):
        """A top-level name already used gets a fresh scope, which is then re-entered."""
        tf.constant(0.0, name="s")
        with cached_name_scope("s") as first:
            pass
        with cached_name_scope("s") as second:
            pass
        assert first == second == "s_1/"

    def test_nested(self, graph):
        """Without top_level the scope lives under the caller's scope, cached per caller scope."""
        with tf1.name_scope("outer"):
            with cached_name_scope("inner", top_level=False) as a:
                pass
            with cached_name_scope("inner", top_level=False) as b:
                pass
        assert a == b == "outer/inner/"

    def test_fail(self, graph):
        """Empty and nested names are rejected."""
        with (
            pytest.raises(ValueError, match="single non-empty scope name; got 'a/b'"),
            cached_name_scope("a/b"),
        ):
            pass

    @settings(max_examples=20, deadline=None)
    @given(scope_segment)
    def test_any_name(self, name):
        """Any valid name is re-entered identically."""
        with tf1.Graph().as_default():
            with cached_name_scope(name) as a:
                pass
            with cached_name_scope(name) as b:
                pass
        assert a == b == f"{name}/"


class TestUnderNameScope:
    """The documented naming of `under_name_scope`."""

    def test_documented_naming(self, graph):
        """Default: the function's name; ``name_scope=`` overrides; decorator argument in between."""

        @under_name_scope()
        def rms(x):
            return tf.sqrt(tf.reduce_mean(tf.square(x)), name="out")

        @under_name_scope("norm")
        def l2(x):
            return tf.identity(tf.norm(x), name="out")

        x = tf.constant([3.0, 4.0])
        assert rms(x).name == "rms/out:0"
        assert rms(x, name_scope="scope").name == "scope/out:0"
        assert l2(x).name == "norm/out:0"
        assert rms(x).name == "rms_1/out:0"

    def test_bare_decorator(self, graph):
        """``@under_name_scope`` without parentheses works too."""

        @under_name_scope
        def double(x):
            return tf.identity(2 * x, name="out")

        assert double(tf.constant(1.0)).name == "double/out:0"

    def test_warns_when_taken(self, graph, caplog):
        """Asking explicitly for a name in use logs a warning."""

        @under_name_scope()
        def f():
            return tf.constant(1.0, name="c")

        f(name_scope="used")
        with caplog.at_level(logging.WARNING, logger="towerkit.towers"):
            assert f(name_scope="used").name == "used_1/c:0"
        assert "'used' is already in use" in caplog.text


class TestUnderVariableScope:
    """`under_variable_scope` names the variable scope after the function."""

    def test_scope_named_after_function(self, graph):
        """Variables go under the function's name."""

        @under_variable_scope()
        def head():
            return tf1.get_variable("W", [1])

        assert head().name == "head/W:0"
