"""Whether fetching targets runs an op."""

from __future__ import annotations

import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.towers import dependency_of_fetches, dependency_of_targets
from towerkit.towers._dependency import backward_closure
from towerkit.towers.compat import tf1


class TestDependencyOfTargets:
    """Data and control dependencies count; the result is memoized."""

    def test_data_and_control(self, graph):
        """Inputs and control inputs are dependencies; unrelated ops are not."""
        a = tf.constant(1.0, name="a")
        b = tf.identity(a, name="b")
        side = tf.constant(2.0, name="side")
        with tf1.control_dependencies([side]):
            c = tf.identity(b, name="c")
        other = tf.constant(3.0, name="other")
        assert dependency_of_targets([c], a)
        assert dependency_of_targets([c], side.op)
        assert dependency_of_targets((c.op,), c)
        assert not dependency_of_targets([c], other)
        assert not dependency_of_targets([], a)

    def test_variables(self, graph):
        """Variables work as targets and as the op."""
        v = tf1.get_variable("v", [1])
        y = v * 2.0
        assert dependency_of_targets([y], v)
        assert not dependency_of_targets([v], y)

    def test_fail(self, graph):
        """Things that are not graph elements are rejected."""
        with pytest.raises(
            TypeError, match=r"expected a tf\.Operation, tf\.Tensor or variable; got int"
        ):
            dependency_of_targets([tf.constant(1.0)], 3)

    @settings(max_examples=15, deadline=None)
    @given(st.integers(2, 12), st.data())
    def test_chain(self, n, data):
        """In a chain, op i depends on op j exactly when j <= i."""
        with tf1.Graph().as_default():
            ops = [tf.constant(0.0)]
            for _ in range(n - 1):
                ops.append(ops[-1] + 1.0)
            i = data.draw(st.integers(0, n - 1))
            j = data.draw(st.integers(0, n - 1))
            assert dependency_of_targets([ops[i]], ops[j]) == (j <= i)
            assert len(backward_closure([ops[i].op])) == 1 + 2 * i


class TestDependencyOfFetches:
    """Nested fetches and names are flattened."""

    def test_nested(self, graph):
        """Dicts, lists and names reach the op."""
        a = tf.constant(1.0, name="a")
        b = tf.add(a, 1.0, name="b")
        c = tf.constant(5.0, name="c")
        assert dependency_of_fetches({"x": [c, (b,)]}, a)
        assert dependency_of_fetches("b:0", a)
        assert not dependency_of_fetches({"x": [c]}, a)
        assert not dependency_of_fetches(None, a)
