"""The fused loop: the same variables, outputs, states and gradients as the cells' loop.

LSTM and GRU stacks, with `DropoutWrapper` (seeded: the same masks as the cells' loop
draws), with `sequence_length`, and forward-only in inference towers.
"""

from __future__ import annotations

import collections
import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.layers import _rnn_fused, _rnn_fused_cells, _rnn_loops, rnn
from towerkit.layers._rnn_fused import _loop, fusable_layers
from towerkit.layers._rnn_fused_cells import BACK_READS, record_widths, write_widths
from towerkit.layers._rnn_fused_plan import (
    KINDS,
    dropout_seeds,
    dropped_leaf,
    dropping_keep,
    fused_plan,
    state_leaves,
)
from towerkit.layers._rnn_nest import derived_seed, flatten
from towerkit.towers import TowerContext
from towerkit.towers.compat import tf1

F32 = tf1.float32
X = np.random.default_rng(7).standard_normal([3, 5, 4]).astype(np.float32)


def fused_ops(graph) -> int:
    """How many ops of the graph the fused loop made."""
    return sum("fused_rnn" in op.name for op in graph.get_operations())


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
    "gru": lambda: rnn.GRUCell(5),
    "mixed": lambda: rnn.MultiRNNCell([rnn.GRUCell(4), rnn.LSTMBlockCell(3), rnn.GRUCell(6)]),
    "dropout kept": lambda: rnn.DropoutWrapper(rnn.BasicLSTMCell(4), 1.0, 1.0, 1.0),
    "dropout": lambda: rnn.MultiRNNCell(
        [
            rnn.DropoutWrapper(rnn.LSTMCell(4), 0.7, 0.8, 0.6, seed=3),
            rnn.DropoutWrapper(rnn.GRUCell(3), 1.0, 0.5, 0.75, seed=5),
            rnn.DropoutWrapper(rnn.BasicLSTMCell(5), input_keep_prob=0.9, seed=3),
        ]
    ),
    "variational": lambda: rnn.MultiRNNCell(
        [
            rnn.DropoutWrapper(
                rnn.LSTMCell(4), 0.7, 0.8, 0.6, True, input_size=4, dtype=F32, seed=2
            ),
            rnn.DropoutWrapper(rnn.GRUCell(3), 1.0, 0.5, 0.75, True, dtype=F32, seed=4),
            rnn.DropoutWrapper(
                rnn.GRUCell(2), 0.6, variational_recurrent=True, input_size=3, dtype=F32, seed=6
            ),
        ]
    ),
    "dropout tensor keep": lambda: rnn.DropoutWrapper(
        rnn.GRUCell(4), tf1.constant(0.6), state_keep_prob=tf1.constant(0.7), seed=11
    ),
}


def build(make, x, time_major, initial, lengths=None):
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
        cell,
        inputs,
        sequence_length=lengths,
        initial_state=state,
        dtype=F32,
        time_major=time_major,
        # in step order: with parallel iterations, the cells' loop may draw the first
        # layer's input masks (which wait for nothing) out of order
        parallel_iterations=1,
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


@pytest.mark.parametrize("transpose_from", [0, 1 << 62])
@pytest.mark.parametrize("stack", ["multi", "gru", "mixed"])
def test_kernels_transposed_before_the_loop_or_not(monkeypatch, stack, transpose_from):
    """The backward step's products with the kernels, each transposed before the loops (as
    large kernels are) or multiplied transposed (small ones): the cells' loop's gradients."""
    monkeypatch.setattr(_rnn_fused_cells, "TRANSPOSE_FROM", transpose_from)

    def run(graph, sess):
        leaves, grads = build(STACKS[stack], tf1.constant(X), False, True)
        transposes = sum(
            op.type == "Transpose" and "fused_rnn" in op.name for op in graph.get_operations()
        )
        load(sess)
        return transposes, sess.run([leaves, grads])

    (transposes, fused), (_, cells) = both_loops(monkeypatch, run)
    assert (transposes > 0) == (transpose_from == 0)
    assert_same(fused, cells)


@pytest.mark.parametrize(
    ("stack", "widths"),
    [("lstm", [20]), ("gru", [10, 5]), ("dropout", []), ("variational", [])],
)
def test_bottom_layer_inputs_multiplied_outside_the_loops(graph, stack, widths):
    """The bottom layer's products with the inputs, forward and backward, are made for all
    steps at once outside the loops; not where its inputs are dropped (masks drawn in the loop).
    Forward, one product a kernel (a GRU's two); backward, one product (a GRU's kernels'
    rows for the inputs side by side).
    """
    build(STACKS[stack], tf1.constant(X), False, False)
    steps_by_batch = X.shape[0] * X.shape[1]
    outside = [
        op.outputs[0].shape.as_list()
        for op in graph.get_operations()
        if op.type == "MatMul" and "fused_rnn" in op.name and not op._control_flow_context
    ]
    forward = [w for rows, w in outside if rows == steps_by_batch and w in widths]
    backward = [w for rows, w in outside if rows == steps_by_batch and w == X.shape[2]]
    assert sorted(forward) == sorted(widths), outside
    assert len(backward) == min(len(widths), 1), outside


@pytest.mark.parametrize("stack", ["multi", "mixed", "dropout"])
def test_no_inputs_concatenated_with_h(stack):
    """A step multiplies its inputs and its previous h by their kernels' rows apart: the
    loops concatenate no ``[x, h]`` (nor a GRU's ``[x, r * h]``), and each layer above the
    bottom one (and a bottom one whose inputs are dropped) makes its inputs' products in
    the step, as one product (a GRU's two kernels side by side)."""
    with control_flow(v2=False), tf1.Graph().as_default() as graph:
        build(STACKS[stack], tf1.constant(X), False, False)
        plan = fused_plan(STACKS[stack]())
        depths = [X.shape[2], *[layer.units for layer in plan[:-1]]]
        in_loop = [
            op
            for op in graph.get_operations()
            if "fused_rnn" in op.name and op._control_flow_context is not None
        ]
    joined = {  # [x, h]'s widths, for the layers whose inputs reach the loop
        (d, layer.units)
        for k, (d, layer) in enumerate(zip(depths, plan, strict=True))
        if k > 0 or layer.input_keep is not None
    }
    concats = {
        tuple(t.shape.as_list()[-1] for t in op.inputs[:-1])
        for op in in_loop
        if op.type == "ConcatV2"
    }
    assert concats
    assert not joined & concats, (joined, concats)
    forward = {
        tuple(op.inputs[1].shape.as_list())
        for op in in_loop
        if op.type == "MatMul" and "_grad" not in op.name
    }
    expected = set()
    for k, (depth, layer) in enumerate(zip(depths, plan, strict=True)):
        u = layer.units
        expected |= {(u, 4 * u)} if layer.kind == "lstm" else {(u, 2 * u), (u, u)}
        if k > 0 or layer.input_keep is not None:
            expected.add((depth, (4 if layer.kind == "lstm" else 3) * u))
    assert forward == expected


@pytest.mark.parametrize("stack", ["lstm", "gru", "mixed"])
def test_step_factors_one_op_each(stack):
    """The forward step makes each factor of a gate's derivative as one op (an LSTM's 2
    tanh and 3 sigmoid factors, a GRU's one of each), and a GRU's backward step splits
    nothing: its gates are kept apart."""
    with control_flow(v2=False), tf1.Graph().as_default() as graph:
        build(STACKS[stack], tf1.constant(X), False, False)
        plan = fused_plan(STACKS[stack]())
        in_loop = [
            op
            for op in graph.get_operations()
            if "fused_rnn" in op.name and op._control_flow_context is not None
        ]
    forward = collections.Counter(op.type for op in in_loop if "_grad" not in op.name)
    backward = collections.Counter(op.type for op in in_loop if "_grad" in op.name)
    lstms = sum(layer.kind == "lstm" for layer in plan)
    grus = len(plan) - lstms
    # the loop's ops: UNROLL steps an iteration (X's first step is made before it)
    steps = _rnn_fused.UNROLL
    assert forward["TanhGrad"] == steps * (2 * lstms + grus)
    assert forward["SigmoidGrad"] == steps * (3 * lstms + grus)
    # an LSTM's backward step splits nothing either; the loops' own Split ops: none
    assert backward["Split"] + backward["SplitV"] == 0, backward


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
    "GRU reset after": lambda: rnn.GRUCell(4, reset_after=True),
    "GRU relu": lambda: rnn.GRUCell(4, activation=tf1.nn.relu),
    "GRU block": lambda: rnn.GRUBlockCell(4),
    "dropout around a stack": lambda: rnn.DropoutWrapper(
        rnn.MultiRNNCell([rnn.BasicLSTMCell(4), rnn.GRUCell(4)]), 0.5
    ),
    "dropout twice": lambda: rnn.DropoutWrapper(rnn.DropoutWrapper(rnn.GRUCell(4), 0.5)),
    "dropout around peepholes": lambda: rnn.DropoutWrapper(
        rnn.LSTMCell(4, use_peepholes=True), 0.5
    ),
    "a residual layer": lambda: rnn.MultiRNNCell(
        [rnn.BasicLSTMCell(4), rnn.ResidualWrapper(rnn.GRUCell(4))]
    ),
    "subclass": lambda: type("MyLSTM", (rnn.LSTMCell,), {})(4),
}


@pytest.mark.parametrize("what", sorted(CELLS_NOT_FUSED))
def test_other_cells_run_the_cells_loop(graph, what):
    """Cells whose step differs from the plain LSTM's run through their own calls."""
    rnn.dynamic_rnn(CELLS_NOT_FUSED[what](), tf1.constant(X), dtype=F32)
    assert fused_ops(graph) == 0


LENGTHS = {"mixed": [5, 2, 1], "with a zero": [3, 0, 5], "all short": [2, 1, 2]}


@pytest.mark.parametrize("stack", ["multi", "gru", "mixed", "dropout", "variational"])
@pytest.mark.parametrize("lengths", sorted(LENGTHS))
def test_sequence_length_matches_the_cells_loop(monkeypatch, stack, lengths):
    """With sequence_length: outputs zero and states carried past each example's end, the
    loop stopped after the longest; values and every gradient equal the cells' loop's."""

    def run(graph, sess):
        leaves, grads = build(STACKS[stack], tf1.constant(X), False, True, LENGTHS[lengths])
        load(sess)
        return sess.run([leaves, grads])

    fused, cells = both_loops(monkeypatch, run)
    assert_same(fused, cells)
    out = fused[0][0]
    for b, n in enumerate(LENGTHS[lengths]):
        assert not out[b, n:].any()


def test_sequence_length_unknown_batch_and_time(monkeypatch):
    """Lengths fed at run time, with a batch and a length known then only."""

    def run(graph, sess):
        x = tf1.placeholder(F32, [None, None, 4])
        n = tf1.placeholder(tf1.int32, [None])
        out, state = rnn.dynamic_rnn(STACKS["mixed"](), x, sequence_length=n, dtype=F32)
        grads = tf1.gradients(tf1.reduce_sum(out * out), [*tf1.trainable_variables(), x])
        load(sess)
        feeds = ((3, 5, [4, 5, 1]), (2, 3, [1, 2]), (2, 1, [1, 1]))
        return [sess.run([out, state, grads], {x: X[:b, :t], n: ns}) for b, t, ns in feeds]

    assert_same(*both_loops(monkeypatch, run))


def test_dropout_without_seed_draws_per_step_masks(graph):
    """Unseeded, the fused loop drops a fraction 1 - keep, with a new mask at each step
    and on each run (the wrapper's masks are drawn per step)."""
    x = tf1.constant(np.ones([64, 6, 8], np.float32))
    cell = rnn.DropoutWrapper(rnn.GRUCell(32), output_keep_prob=0.5)
    out, _ = rnn.dynamic_rnn(cell, x, dtype=F32)
    grads = tf1.gradients(tf1.reduce_sum(out), tf1.trainable_variables())
    assert fused_ops(graph) > 0
    with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
        plain, _ = rnn.dynamic_rnn(cell.cell, x, dtype=F32)  # the same GRU, no dropout
    with tf1.Session() as sess:
        load(sess)
        first, _, whole = sess.run([out, grads, plain])
        second = sess.run(out)
    dropped = first == 0
    assert 0.45 < dropped.mean() < 0.55
    assert all((dropped[:, t] != dropped[:, 0]).any() for t in range(1, 6))
    assert ((second == 0) != dropped).any()
    # output dropout leaves the state alone: what is kept is the plain output, doubled
    np.testing.assert_allclose(first[~dropped], 2 * whole[~dropped], rtol=1e-6)


def test_variational_masks_are_one_per_run(graph):
    """Variational dropout (fused): one mask for every step and example, a new one each run."""
    x = tf1.constant(np.ones([16, 6, 8], np.float32))
    cell = rnn.DropoutWrapper(
        rnn.GRUCell(64), output_keep_prob=0.5, variational_recurrent=True, dtype=F32
    )
    out, _ = rnn.dynamic_rnn(cell, x, dtype=F32)
    assert fused_ops(graph) > 0
    with tf1.Session() as sess:
        load(sess)
        first, second = sess.run(out), sess.run(out)
    dropped = first == 0
    assert (dropped == dropped[:1, :1]).all()  # the same units at every step and example
    assert 0.3 < dropped.mean() < 0.7
    assert ((second == 0) != dropped).any()


@pytest.mark.parametrize(
    ("kwargs", "needs"),
    [
        ({"output_keep_prob": 0.5, "variational_recurrent": True}, "'dtype'"),
        ({"input_keep_prob": 0.5, "variational_recurrent": True, "dtype": F32}, "'input_size'"),
    ],
)
def test_variational_needs_dtype_and_input_size(graph, kwargs, needs):
    """As TensorFlow 1's: variational masks are made with the wrapper, so it needs the dtype,
    and the inputs' depth where it drops them."""
    with pytest.raises(ValueError, match=f"variational_recurrent=True.*{needs}"):
        rnn.DropoutWrapper(rnn.GRUCell(4), **kwargs)


@pytest.mark.parametrize("stack", ["multi", "mixed", "dropout", "variational"])
def test_inference_tower_runs_forward_only(monkeypatch, stack):
    """In an inference tower the fused loop runs forward only (no dropout, nothing kept
    for a gradient), with the cells' loop's values, with or without lengths."""

    def run(graph, sess):
        x = tf1.constant(X)
        with TowerContext("", is_training=False):
            out, state = rnn.dynamic_rnn(STACKS[stack](), x, dtype=F32)
            short, _ = rnn.dynamic_rnn(
                STACKS[stack](), x, sequence_length=[5, 2, 0], dtype=F32, scope="short"
            )
        load(sess)
        assert not any("dropout" in op.name for op in graph.get_operations())
        # the arrays made for values written in the loops (the outputs'; no records)
        defs = graph.as_graph_def()
        nodes = [*defs.node, *[n for f in defs.library.function for n in f.node_def]]
        arrays = sum(n.op in ("TensorListReserve", "TensorArrayV3") for n in nodes)
        return sess.run([out, state, short]), arrays

    (fused, fused_arrays), (cells, cells_arrays) = both_loops(monkeypatch, run)
    assert_same(fused, cells)
    # each of the two loops: its outputs' array, and the inputs' (the cells); the fused
    # loop reads its inputs, or their products made before the loop, by slicing them, and
    # records would add one array or more a layer
    assert cells_arrays == 2 * 2
    assert fused_arrays == 2


def test_towers_share_the_variables(graph):
    """A training tower, an inference tower and a run with lengths all run fused, on the
    same variables."""
    x = tf1.constant(X)
    with TowerContext("", is_training=True):
        rnn.dynamic_rnn(STACKS["multi"](), x, dtype=F32)
    fused = fused_ops(graph)
    count = len(tf1.global_variables())
    assert fused > 0
    with TowerContext("infer", is_training=False):
        rnn.dynamic_rnn(STACKS["multi"](), x, dtype=F32)
    assert fused_ops(graph) > fused
    fused = fused_ops(graph)
    with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
        rnn.dynamic_rnn(STACKS["multi"](), x, sequence_length=[5, 2, 1], dtype=F32)
    assert fused_ops(graph) > fused
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


KEEPS = st.one_of(st.just(1.0), st.floats(0.3, 0.95))


@settings(max_examples=6, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["lstm", "gru"]), st.integers(1, 5), KEEPS, KEEPS, KEEPS),
        min_size=1,
        max_size=3,
    ),
    st.integers(1, 4),
    st.integers(1, 5),
    st.data(),
)
def test_random_stacks_match_the_cells_loop(layers, batch, steps, data):
    """Random stacks of LSTMs and GRUs, seeded dropout, batch, steps and lengths: the
    fused loop's values and gradients equal the cells' loop's."""
    lengths = data.draw(
        st.one_of(st.none(), st.lists(st.integers(0, steps), min_size=batch, max_size=batch))
    )
    x = np.random.default_rng(batch * 10 + steps).standard_normal([batch, steps, 3])

    def make():
        cells = []
        for k, (kind, units, keep_in, keep_state, keep_out) in enumerate(layers):
            cell = rnn.BasicLSTMCell(units) if kind == "lstm" else rnn.GRUCell(units)
            cells.append(rnn.DropoutWrapper(cell, keep_in, keep_out, keep_state, seed=k))
        return rnn.MultiRNNCell(cells)

    results = []
    for fused in (True, False):
        graph = tf1.Graph()
        with graph.as_default(), tf1.Session(graph=graph) as sess:
            with pytest.MonkeyPatch.context() as mp:
                if not fused:
                    differentiated(mp)
                leaves, grads = build(make, tf1.constant(x, F32), False, False, lengths)
            assert (fused_ops(graph) > 0) == fused
            load(sess)
            results.append(sess.run([leaves, grads]))
    assert_same(*results, rtol=1e-4, atol=1e-5)


@given(st.one_of(st.none(), st.integers(0, 2**40)), st.sampled_from(KINDS))
def test_dropout_seeds_are_the_wrappers(seed, kind):
    """The fused loop's mask seeds are those the wrapper gives its ops: the input's, the
    seed of the state's dropped tensor (h, where the state is flattened), the output's."""
    leaves = state_leaves(kind)
    skipped = [True] * (leaves - 1) + [False]  # an LSTM's c is never dropped
    index = skipped.index(False)
    assert index == dropped_leaf(kind)
    assert dropout_seeds(seed, kind) == (
        derived_seed(seed, "input", 0),
        derived_seed(seed, "state", index),
        derived_seed(seed, "output", 0),
    )
    if seed is not None:
        assert len(set(dropout_seeds(seed, kind))) == 3


@given(st.one_of(st.floats(0.01, 2.0), st.integers(1, 3)))
def test_dropping_keep(keep):
    """A keep probability drops something exactly when it is under 1."""
    assert (dropping_keep(keep) is None) == (keep >= 1)


@given(st.sampled_from(KINDS), st.integers(1, 64), st.integers(1, 64))
def test_record_and_write_widths(kind, depth, units):
    """A step keeps its previous h first and its inputs last (not where their products are
    made before the loop); its gradient writes one value per gate."""
    records, writes = record_widths(kind, depth, units), write_widths(kind, units)
    assert records[0] == units
    assert records[-1] == depth
    gates = 4 if kind == "lstm" else 3  # i, j, f, o; r, u and the candidate
    assert writes == [gates * units]
    # an LSTM's c factor, forget gate and each gate's factor; a GRU's r and u, the
    # candidate's factor and the gates' factor ([r, u]'s)
    own = [units] * 6 if kind == "lstm" else [units, units, units, 2 * units]
    assert records[1:-1] == own
    # neither h nor the inputs: the weights' gradients only
    assert set(BACK_READS[kind]) == set(range(1, len(own) + 1))
    assert record_widths(kind, depth, units, projected=True) == records[:-1]


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "kind": st.sampled_from(["lstm", "gru", "gru after", "peephole"]),
                "wrap": st.booleans(),
                "keep": KEEPS,
            }
        ),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
def test_fused_plan_takes_exactly_the_plain_layers(configs, dropout):
    """A layer is fused when its cell is a plain LSTM or TensorFlow 1's GRU, wrapped in a
    DropoutWrapper or not; the plan holds its keep probabilities when dropout applies."""
    makers = {
        "lstm": lambda: rnn.LSTMCell(2),
        "gru": lambda: rnn.GRUCell(2),
        "gru after": lambda: rnn.GRUCell(2, reset_after=True),
        "peephole": lambda: rnn.LSTMCell(2, use_peepholes=True),
    }
    cells = []
    for c in configs:
        cell = makers[c["kind"]]()
        cells.append(
            rnn.DropoutWrapper(cell, output_keep_prob=c["keep"], seed=1) if c["wrap"] else cell
        )
    plan = fused_plan(rnn.MultiRNNCell(cells), dropout=dropout)
    plain = all(c["kind"] in ("lstm", "gru") for c in configs)
    assert (plan is not None) == plain
    if plan is None:
        return
    for layer, c, cell in zip(plan, configs, cells, strict=True):
        assert layer.kind == c["kind"]
        assert layer.cell is (cell.cell if c["wrap"] else cell)
        dropping = dropout and c["wrap"] and c["keep"] < 1
        assert layer.output_keep == (c["keep"] if dropping else None)
        assert layer.drops == dropping
        assert layer.seed == (1 if dropout and c["wrap"] else None)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 9), st.integers(1, 4), st.booleans(), st.booleans())
def test_unrolled_loop_makes_every_step_once_in_order(steps, unroll, down, known):
    """`_loop` makes each step once, in order, whatever the unrolling: a number of steps
    known when built (an int, its first ``steps % unroll`` made before the loop), or a
    tensor that is a multiple of `unroll`."""
    if not known:
        steps -= steps % unroll  # a tensor: `whole`, a multiple of the unrolling
    with tf1.Graph().as_default(), tf1.Session() as sess:
        count = steps if known else tf1.constant(steps)
        if down:  # from `steps` down to 0, as the backward loop walks
            start = (tf1.convert_to_tensor(count), tf1.constant(0))
            out = _loop(lambda t, _: t > 0, lambda t, acc: (t - 1, acc * 10 + t), start,
                        count, {}, unroll, whole=not known)  # fmt: skip
            want = int("0" + "".join(str(t) for t in range(steps, 0, -1)))
        else:
            start = (tf1.constant(0), tf1.constant(0))
            out = _loop(lambda t, _: t < count, lambda t, acc: (t + 1, acc * 10 + t + 1), start,
                        count, {}, unroll, whole=not known)  # fmt: skip
            want = int("0" + "".join(str(t) for t in range(1, steps + 1)))
        t, acc = sess.run(out)
    assert t == (0 if down else steps)
    assert acc == want


@pytest.mark.parametrize("stack", ["multi", "gru"])
@pytest.mark.parametrize(
    ("dtype", "rtol", "atol"), [(tf1.float16, 3e-2, 1e-2), (tf1.float64, 1e-12, 1e-13)]
)
def test_half_and_double_precision(monkeypatch, stack, dtype, rtol, atol):
    """LSTM and GRU stacks in 16 and 64 bits: outputs, final states and gradients equal the cells'
    loop's (the loops, the folded constants and the transposed kernels in that type)."""
    numpy_type = dtype.as_numpy_dtype

    def run(graph, sess):
        x = tf1.constant(X.astype(numpy_type))
        out, state = rnn.dynamic_rnn(STACKS[stack](), x, dtype=dtype)
        leaves = [out, *flatten(state)]
        loss = tf1.add_n([tf1.reduce_sum(tf1.sin(tf1.cast(t, F32))) for t in leaves])
        grads = tf1.gradients(loss, [*tf1.trainable_variables(), x])
        rng = np.random.default_rng(0)
        for v in tf1.global_variables():
            v.load((rng.standard_normal(v.shape.as_list()) * 0.5).astype(numpy_type), sess)
        return sess.run([leaves, grads])

    fused, cells = both_loops(monkeypatch, run)
    for got, want in zip(flatten(fused), flatten(cells), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(
            np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol
        )
