"""The fused LSTM loop: the same variables, outputs, states and gradients as the cells' loop."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.layers import _rnn_loops, rnn
from towerkit.layers._rnn_fused import fusable_layers
from towerkit.layers._rnn_nest import flatten
from towerkit.towers import TowerContext
from towerkit.towers.compat import tf1

F32 = tf1.float32
X = np.random.default_rng(7).standard_normal([3, 5, 4]).astype(np.float32)


def fused_ops(graph) -> int:
    """How many ops of the graph the fused loop made."""
    return sum("fused_lstm" in op.name for op in graph.get_operations())


def differentiated(monkeypatch):
    """Make dynamic_rnn use the cells' own loop (differentiated by TensorFlow)."""
    monkeypatch.setattr(_rnn_loops, "fused_applies", lambda *a: None)


def load(sess, seed=0, scale=0.5):
    """Random values into every global variable."""
    rng = np.random.default_rng(seed)
    for v in tf1.global_variables():
        v.load((rng.standard_normal(v.shape.as_list()) * scale).astype(np.float32), sess)


STACKS = {
    "basic": lambda: rnn.BasicLSTMCell(4),
    "lstm": lambda: rnn.LSTMCell(5, forget_bias=0.0),
    "multi": lambda: rnn.MultiRNNCell(
        [rnn.BasicLSTMCell(4), rnn.LSTMCell(3, forget_bias=2.5), rnn.LSTMCell(6)]
    ),
}


def build(make, x, time_major, initial):
    """Outputs, final state and the gradients of a loss over both, for one cell stack."""
    rng = np.random.default_rng(1)  # the same weights and states in both graphs
    cell = make()
    inputs = tf1.transpose(x, [1, 0, 2]) if time_major else x
    state = None
    if initial:
        state = tf1.nest.map_structure(
            lambda n: tf1.constant(rng.standard_normal([3, n]).astype(np.float32)),
            cell.state_size,
        )
    out, final = rnn.dynamic_rnn(
        cell, inputs, initial_state=state, dtype=F32, time_major=time_major
    )
    leaves = [out, *flatten(final)]
    weights = [tf1.constant(rng.standard_normal(t.shape.as_list()), F32) for t in leaves]
    loss = tf1.add_n([tf1.reduce_sum(w * t) for w, t in zip(weights, leaves, strict=True)])
    wrt = [*tf1.trainable_variables(), x, *([] if state is None else flatten(state))]
    return leaves, tf1.gradients(loss, wrt)


def both_loops(monkeypatch, run):
    """`run(graph, sess)` in a fresh graph with the fused loop, then with the cells' loop.

    Returns what each returned, fused first.
    """
    results = []
    for fused in (True, False):
        graph = tf1.Graph()
        with graph.as_default(), tf1.Session(graph=graph) as sess:
            if not fused:
                differentiated(monkeypatch)
            results.append(run(graph, sess))
            assert (fused_ops(graph) > 0) == fused
    return results


def assert_same(fused, cells, rtol=2e-5, atol=2e-6):
    for got, want in zip(flatten(fused), flatten(cells), strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("stack", sorted(STACKS))
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("initial", [False, True])
def test_matches_the_cells_loop(monkeypatch, stack, time_major, initial):
    """Same variables; outputs, final states and every gradient equal the cells' loop's."""

    def run(graph, sess):
        leaves, grads = build(STACKS[stack], tf1.constant(X), time_major, initial)
        names = sorted((v.op.name, v.shape.as_list()) for v in tf1.global_variables())
        load(sess)
        return names, sess.run([leaves, grads])

    (names, fused), (cell_names, cells) = both_loops(monkeypatch, run)
    assert names == cell_names
    assert_same(fused, cells)


def test_unknown_batch_and_time(monkeypatch):
    """A batch and a length known at run time only: the same as the cells' loop."""

    def run(graph, sess):
        x = tf1.placeholder(F32, [None, None, 4])
        out, state = rnn.dynamic_rnn(STACKS["multi"](), x, dtype=F32)
        assert out.shape.as_list() == [None, None, 6]
        grads = tf1.gradients(tf1.reduce_sum(out * out), [*tf1.trainable_variables(), x])
        load(sess)
        return [sess.run([out, state, grads], {x: X[:b, :t]}) for b, t in ((3, 5), (2, 1))]

    assert_same(*both_loops(monkeypatch, run))


def test_second_order(monkeypatch):
    """A gradient of a gradient (a penalty on d loss / d x) equals the cells' loop's."""

    def run(graph, sess):
        x = tf1.constant(X)
        out, _ = rnn.dynamic_rnn(STACKS["multi"](), x, dtype=F32)
        (dx,) = tf1.gradients(tf1.reduce_sum(tf1.sin(out)), [x])
        grads = tf1.gradients(tf1.reduce_sum(dx * dx), tf1.trainable_variables())
        load(sess)
        return sess.run(grads)

    with control_flow(v2=True):  # TensorFlow 1's cannot differentiate the cells' loop twice
        assert_same(*both_loops(monkeypatch, run), rtol=1e-4, atol=1e-6)


@contextlib.contextmanager
def control_flow(v2):
    """Build with TensorFlow 2's control flow or 1's (as after ``disable_v2_behavior()``,
    which a module imported in the same process may have called), then restore it.

    With 1's a TensorArray is a resource whose elements are freed on their first read
    unless made with ``clear_after_read=False``; 2's never frees.
    """
    was = tf1.control_flow_v2_enabled()
    (tf1.enable_control_flow_v2 if v2 else tf1.disable_control_flow_v2)()
    try:
        yield
    finally:
        (tf1.enable_control_flow_v2 if was else tf1.disable_control_flow_v2)()


@pytest.fixture
def tf1_control_flow():
    with control_flow(v2=False):
        yield


def second_order_grads():
    """The gradients of a penalty on d loss / d x, for every variable."""
    x = tf1.constant(X)
    out, _ = rnn.dynamic_rnn(STACKS["multi"](), x, dtype=F32)
    (dx,) = tf1.gradients(tf1.reduce_sum(tf1.sin(out)), [x])
    return tf1.gradients(tf1.reduce_sum(dx * dx), tf1.trainable_variables())


def test_second_order_with_tf1_control_flow(monkeypatch, request):
    """TensorFlow 1's control flow: the second-order gradient runs the fused gradient
    again (no second read of a freed element) and differentiates the first one's reads
    of the forward values (no contribution lost); it equals the cells' loop's under
    TensorFlow 2's (TensorFlow 1's cannot differentiate its own loop twice)."""

    def run(graph, sess):
        grads = second_order_grads()
        load(sess)
        return sess.run(grads)

    with control_flow(v2=True):
        cells = both_loops(monkeypatch, run)[1]
    monkeypatch.undo()
    request.getfixturevalue("tf1_control_flow")
    graph = tf1.Graph()
    with graph.as_default(), tf1.Session(graph=graph) as sess:
        grads = second_order_grads()
        load(sess)
        fused = [sess.run(grads) for _ in range(3)]
        assert "TensorArrayV3" in {op.type for op in graph.get_operations()}
        assert fused_ops(graph) > 0
    for got in fused:
        assert_same(got, cells, rtol=1e-4, atol=1e-6)


def test_two_gradients_in_one_run_with_tf1_control_flow(monkeypatch, tf1_control_flow):
    """Two gradients through one fused loop fetched in one run (each calls the fused
    gradient, each reads the forward arrays) equal the cells' loop's."""

    def run(graph, sess):
        x = tf1.constant(X)
        out, final = rnn.dynamic_rnn(STACKS["multi"](), x, dtype=F32)
        wrt = [*tf1.trainable_variables(), x]
        first = tf1.gradients(tf1.reduce_sum(out * out), wrt)
        second = tf1.gradients(tf1.reduce_sum(tf1.sin(final[-1].c)), wrt)
        assert "TensorArrayV3" in {op.type for op in graph.get_operations()}
        load(sess)
        return [sess.run([first, second]) for _ in range(3)]

    fused, cells = both_loops(monkeypatch, run)
    for got, want in zip(fused, cells, strict=True):
        assert_same(got, want)


CELLS_NOT_FUSED = {
    "peepholes": lambda: rnn.LSTMCell(4, use_peepholes=True),
    "projection": lambda: rnn.LSTMCell(4, num_proj=2),
    "cell clip": lambda: rnn.LSTMCell(4, cell_clip=1.0),
    "concatenated state": lambda: rnn.BasicLSTMCell(4, state_is_tuple=False),
    "relu": lambda: rnn.BasicLSTMCell(4, activation=tf1.nn.relu),
    "forget bias tensor": lambda: rnn.BasicLSTMCell(4, forget_bias=tf1.constant(1.0)),
    "dropout": lambda: rnn.DropoutWrapper(rnn.BasicLSTMCell(4), 0.5),
    "a GRU layer": lambda: rnn.MultiRNNCell([rnn.BasicLSTMCell(4), rnn.GRUCell(4)]),
    "subclass": lambda: type("MyLSTM", (rnn.LSTMCell,), {})(4),
}


@pytest.mark.parametrize("what", sorted(CELLS_NOT_FUSED))
def test_other_cells_run_the_cells_loop(graph, what):
    """Cells whose step differs from the plain LSTM's run through their own calls."""
    rnn.dynamic_rnn(CELLS_NOT_FUSED[what](), tf1.constant(X), dtype=F32)
    assert fused_ops(graph) == 0


def test_sequence_length_and_inference_towers_run_the_cells_loop(graph):
    """With sequence_length, and in an inference tower (no gradient), the cells' loop runs;
    a training tower runs fused, and all three share the variables."""
    x = tf1.constant(X)
    with TowerContext("", is_training=True):
        rnn.dynamic_rnn(STACKS["multi"](), x, dtype=F32)
    fused = fused_ops(graph)
    count = len(tf1.global_variables())
    assert fused > 0
    with TowerContext("infer", is_training=False):
        rnn.dynamic_rnn(STACKS["multi"](), x, dtype=F32)
    with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
        rnn.dynamic_rnn(STACKS["multi"](), x, sequence_length=[5, 2, 1], dtype=F32)
    assert fused_ops(graph) == fused
    assert len(tf1.global_variables()) == count


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "basic": st.booleans(),
                "peepholes": st.booleans(),
                "proj": st.booleans(),
                "clip": st.booleans(),
                "tuple": st.booleans(),
            }
        ),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
def test_fusable_exactly_the_plain_lstms(configs, multi):
    """A stack is fused exactly when every layer is a plain LSTM with a tuple state."""

    def make(c):
        if c["basic"]:
            return rnn.BasicLSTMCell(3, state_is_tuple=c["tuple"])
        return rnn.LSTMCell(
            3,
            use_peepholes=c["peepholes"],
            num_proj=2 if c["proj"] else None,
            cell_clip=1.0 if c["clip"] else None,
            state_is_tuple=c["tuple"],
        )

    cells = [make(c) for c in configs]
    plain = [
        c["tuple"] and (c["basic"] or not (c["peepholes"] or c["proj"] or c["clip"]))
        for c in configs
    ]
    if multi:
        if not all(c["tuple"] for c in configs):
            return  # MultiRNNCell refuses mixed states; tested elsewhere
        got = fusable_layers(rnn.MultiRNNCell(cells))
        assert (got is not None) == all(plain)
        assert got is None or got == cells
    else:
        got = fusable_layers(cells[0])
        assert (got is not None) == plain[0]
