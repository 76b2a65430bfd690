"""Freezing a session's graph and optimizing it for inference."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from export_strategies import dags
from hypothesis import given
from hypothesis import strategies as st

from towerkit.export import InferenceOptimizationError
from towerkit.export._freeze import (
    STATEFUL_OPS,
    freeze_session_graph,
    input_node,
    optimize_graph_def,
    reachable,
    renamed_ops,
    stateful_nodes,
    unused_inputs,
)
from towerkit.towers.compat import tf1


class TestReachable:
    """`reachable` follows inputs (data and control) from the roots."""

    @given(dags(), st.data())
    def test_closed_under_inputs(self, edges, data):
        """The result holds the roots and every input of every node in it, and nothing more."""
        roots = data.draw(st.lists(st.sampled_from(sorted(edges)), min_size=1))
        found = reachable(edges, roots)
        assert set(roots) <= found
        for node in found:
            assert {input_node(i) for i in edges[node]} <= found
        # Minimal: every node found is a root or an input of another node found.
        inputs_of_found = {input_node(i) for n in found for i in edges[n]}
        assert found <= set(roots) | inputs_of_found

    @given(dags(), st.data())
    def test_unused_inputs(self, edges, data):
        """An input is unused exactly when no output reaches it."""
        names = sorted(edges)
        inputs = data.draw(st.lists(st.sampled_from(names), unique=True))
        outputs = data.draw(st.lists(st.sampled_from(names), min_size=1))
        needed = reachable(edges, outputs)
        assert unused_inputs(edges, inputs, outputs) == [n for n in inputs if n not in needed]


class TestRenamedOps:
    """`renamed_ops` picks the nodes of one op."""

    @given(
        st.lists(
            st.tuples(st.text(min_size=1, max_size=4), st.sampled_from(["AddV2", "Add", "Mul"]))
        )
    )
    def test_only_that_op(self, nodes):
        """Exactly the nodes whose op is the old one are renamed, all to the new one."""
        renamed = renamed_ops(nodes, "AddV2", "Add")
        assert set(renamed) == {n for n, op in nodes if op == "AddV2"}
        assert set(renamed.values()) <= {"Add"}


class TestStatefulNodes:
    """`stateful_nodes` finds variable ops."""

    @given(
        st.lists(
            st.tuples(
                st.text(min_size=1, max_size=5),
                st.sampled_from(
                    [*sorted(STATEFUL_OPS), "Const", "MatMul", "Identity", "Placeholder"]
                ),
            )
        )
    )
    def test_exactly_variable_ops(self, nodes):
        """A node is listed exactly when its op holds, reads or writes variables."""
        assert stateful_nodes(nodes) == [n for n, op in nodes if op in STATEFUL_OPS]


def _affine(graph):
    """y = x @ W + b with resource variables, an unused input and a training-only Identity."""
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    tf1.placeholder(tf.float32, [None], name="unused")
    w = tf1.get_variable("W", initializer=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    b = tf1.get_variable("b", initializer=np.array([0.5, -0.5], np.float32))
    h = tf1.identity(tf1.matmul(x, w), name="h")
    return tf.identity(h + b, name="y")


class TestFreezeSessionGraph:
    """`freeze_session_graph` folds variables and keeps the inputs."""

    def test_folds_variables(self, graph, sess):
        """No variable op is left, the identity is gone, and the graph computes the same."""
        y = _affine(graph)
        sess.run(tf1.global_variables_initializer())
        frozen = freeze_session_graph(sess, ["x", "unused"], ["y"])
        ops = {n.name: n.op for n in frozen.node}
        assert stateful_nodes(ops.items()) == []
        assert "h" not in ops
        assert ops["unused"] == "Placeholder"
        feed = np.array([[1.0, 1.0]], np.float32)
        expected = sess.run(y, {"x:0": feed})
        with tf1.Graph().as_default() as g2:
            tf1.import_graph_def(frozen, name="")
            with tf1.Session(graph=g2) as s2:
                np.testing.assert_array_equal(s2.run("y:0", {"x:0": feed}), expected)


class TestOptimizeGraphDef:
    """`optimize_graph_def` runs optimize-for-inference or says why it cannot."""

    def test_unused_input(self, graph, sess):
        """An input that no output needs makes optimization impossible, and the message names it."""
        _affine(graph)
        sess.run(tf1.global_variables_initializer())
        frozen = freeze_session_graph(sess, ["x", "unused"], ["y"])
        with pytest.raises(
            InferenceOptimizationError, match=r"no output depends on the inputs \['unused'\]"
        ):
            optimize_graph_def(frozen, ["x", "unused"], ["y"], [tf.float32, tf.float32])

    def test_tf_failure_is_explained(self, graph, sess):
        """A failure inside TensorFlow's optimizer becomes an error quoting its reason."""
        _affine(graph)
        sess.run(tf1.global_variables_initializer())
        frozen = freeze_session_graph(sess, ["x"], ["y"])
        node = frozen.node.add()
        node.name = "dangling"
        node.op = "Identity"
        node.input.append("nowhere")
        with pytest.raises(
            InferenceOptimizationError,
            match=r"optimize-for-inference failed on this graph: ValueError: Input for  dangling  not found:  nowhere",
        ):
            optimize_graph_def(frozen, ["x"], ["y"], [tf.float32])

    def test_optimizes(self, graph, sess):
        """A graph it can handle comes back runnable, with the same input and output names."""
        _affine(graph)
        sess.run(tf1.global_variables_initializer())
        frozen = freeze_session_graph(sess, ["x"], ["y"])
        optimized = optimize_graph_def(frozen, ["x"], ["y"], [tf.float32])
        names = {n.name for n in optimized.node}
        assert {"x", "y"} <= names
        assert "unused" not in names
        assert {n.op for n in optimized.node if n.name == "add"} == {"AddV2"}


class TestWhileLoop:
    """A graph with a while loop (its body a function of the library) freezes and optimizes."""

    @pytest.mark.parametrize("optimize", [False, True])
    def test_loop_reading_a_variable(self, optimize):
        """The written graph keeps the loop's functions, with the variable folded inside."""
        with tf.Graph().as_default() as graph:
            x = tf1.placeholder(tf.float32, [None, 3], name="x")
            w = tf1.get_variable("w", initializer=tf1.constant([[0.5, 0.0, 0.0]] * 3))
            _, y = tf1.while_loop(
                lambda i, h: i < 4, lambda i, h: (i + 1, tf1.matmul(h, w) + 1.0), (0, x)
            )
            tf1.identity(y, name="y")
            with tf1.Session(graph=graph) as sess:
                sess.run(tf1.global_variables_initializer())
                feed = np.arange(6, dtype=np.float32).reshape(2, 3)
                want = sess.run("y:0", {"x:0": feed})
                frozen = freeze_session_graph(sess, ["x"], ["y"])
        if optimize:
            frozen = optimize_graph_def(frozen, ["x"], ["y"], [tf.float32])
        assert frozen.library.function
        with tf.Graph().as_default() as loaded:
            tf1.import_graph_def(frozen, name="")
            with tf1.Session(graph=loaded) as sess:
                np.testing.assert_allclose(sess.run("y:0", {"x:0": feed}), want)
