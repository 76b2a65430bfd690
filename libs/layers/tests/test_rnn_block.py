"""tf.contrib.rnn's block cells: LSTMBlockCell, LSTMBlockFusedCell, GRUBlockCell, GRUBlockCellV2.

Each is compared with the cell it computes as (`LSTMCell`, `GRUCell`, `dynamic_rnn`
over `LSTMBlockCell`) given the same weights, copied by position: outputs, final
states and gradients. A checkpoint written under TensorFlow 1's names restores.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from layers_session import initialize

from towerkit.layers import rnn
from towerkit.layers._rnn_block import block_cell_clip
from towerkit.towers import TowerContext
from towerkit.towers.compat import tf1

BATCH, TIME, DEPTH = 3, 4, 5


def build(make_outputs):
    """A graph: `make_outputs(x)` on a ``[BATCH, TIME, DEPTH]`` input, a loss and its gradients."""
    g = tf1.Graph()
    with g.as_default():
        x = tf1.placeholder(tf1.float32, [BATCH, TIME, DEPTH], name="x")
        flat = tf1.nest.flatten(make_outputs(x))
        weights = tf1.constant(np.linspace(-1, 1, 7), tf1.float32)
        loss = tf1.add_n([tf1.reduce_sum(t * weights[k % 7]) for k, t in enumerate(flat)])
        variables = tf1.global_variables()
        grads = tf1.gradients(loss, [x, *variables])
    return g, x, flat, variables, grads


def run(built, values, x):
    """Outputs and gradients with the variables set to `values` (in creation order)."""
    g, xt, flat, variables, grads = built
    assert [v.shape.as_list() for v in variables] == [list(v.shape) for v in values]
    with tf1.Session(graph=g) as sess:
        for v, value in zip(variables, values, strict=True):
            v.load(value, sess)
        return sess.run([flat, grads], {xt: x})


def random_values(built, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(v.shape.as_list()) * 0.5).astype(np.float32) for v in built[3]]


def assert_same(a, b):
    for u, v in zip(a[0] + a[1], b[0] + b[1], strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def names(built):
    return [(v.op.name, v.shape.as_list()) for v in built[3]]


def lengths():
    return tf1.constant([TIME, 2, 0])


class TestLSTMBlockCell:
    """LSTMBlockCell: contrib's arguments and names, LSTMCell's values."""

    def test_char_rnn_form(self):
        """tensorpack's char-rnn: MultiRNNCell of LSTMBlockCell(num_units=...) under static_rnn."""

        def model(x):
            cell = rnn.MultiRNNCell([rnn.LSTMBlockCell(num_units=6) for _ in range(2)])
            zeros = tf1.zeros([BATCH, 6])
            initial = (rnn.LSTMStateTuple(zeros, zeros), rnn.LSTMStateTuple(zeros, zeros))
            outputs, last = rnn.static_rnn(cell, tf1.unstack(x, axis=1), initial, scope="rnnlm")
            return outputs, tf1.identity(last, "last_state")

        built = build(model)
        prefix = "rnnlm/multi_rnn_cell/cell_"
        assert names(built) == [
            (f"{prefix}0/lstm_cell/kernel", [DEPTH + 6, 24]),
            (f"{prefix}0/lstm_cell/bias", [24]),
            (f"{prefix}1/lstm_cell/kernel", [12, 24]),
            (f"{prefix}1/lstm_cell/bias", [24]),
        ]
        assert built[2][-1].shape.as_list() == [2, 2, BATCH, 6]

    @pytest.mark.parametrize(
        ("block", "plain"),
        [
            (dict(forget_bias=0.5), dict(forget_bias=0.5)),
            (
                dict(use_peephole=True, cell_clip=0.4, forget_bias=0.2),
                dict(use_peepholes=True, cell_clip=0.4, forget_bias=0.2),
            ),
            (dict(cell_clip=-1), dict()),
        ],
        ids=["plain", "peephole-clip", "clip-off"],
    )
    @pytest.mark.parametrize("loop", ["static", "dynamic"])
    def test_same_as_lstm_cell(self, block, plain, loop):
        """Outputs, states and gradients are LSTMCell's for the same weights (with lengths)."""

        def model(make):
            def outputs(x):
                if loop == "static":
                    return rnn.static_rnn(
                        make(), tf1.unstack(x, axis=1), dtype=tf1.float32, sequence_length=lengths()
                    )
                return rnn.dynamic_rnn(make(), x, lengths(), dtype=tf1.float32)

            return outputs

        got = build(model(lambda: rnn.LSTMBlockCell(6, **block)))
        ref = build(model(lambda: rnn.LSTMCell(6, **plain)))
        got_names = [n for n, _ in names(got)]
        assert got_names[:2] == ["rnn/lstm_cell/kernel", "rnn/lstm_cell/bias"]
        if block.get("use_peephole"):
            assert got_names[2:] == [f"rnn/lstm_cell/w_{g}_diag" for g in "ifo"]
        values = random_values(got)
        by_name = dict(zip(got_names, values, strict=True))
        ref_names = [n for n, _ in names(ref)]
        x = np.random.default_rng(1).standard_normal([BATCH, TIME, DEPTH]).astype(np.float32)
        ref_out, ref_grads = run(ref, [by_name[n] for n in ref_names], x)
        # LSTMCell makes its peepholes in another order: its gradients are put in the block's
        ref_grads = [ref_grads[0], *(ref_grads[1 + ref_names.index(n)] for n in got_names)]
        assert_same(run(got, values, x), (ref_out, ref_grads))

    def test_fused_loop(self):
        """A plain LSTMBlockCell stack trains through the fused loop, with the cells' values."""

        def fused(x):
            with TowerContext("", is_training=True):
                cell = rnn.MultiRNNCell([rnn.LSTMBlockCell(5), rnn.LSTMBlockCell(4)])
                return rnn.dynamic_rnn(cell, x, dtype=tf1.float32)

        def stepped(x):
            with TowerContext("", is_training=True):
                cell = rnn.MultiRNNCell([rnn.LSTMBlockCell(5), rnn.LSTMBlockCell(4)])
                steps, state = rnn.static_rnn(cell, tf1.unstack(x, axis=1), dtype=tf1.float32)
                return tf1.stack(steps, 1), state

        got, ref = build(fused), build(stepped)
        assert any("fused_rnn" in op.name for op in got[0].get_operations())
        assert not any("fused_rnn" in op.name for op in ref[0].get_operations())
        values = random_values(got)
        x = np.random.default_rng(2).standard_normal([BATCH, TIME, DEPTH]).astype(np.float32)
        assert_same(run(got, values, x), run(ref, values, x))

    def test_peephole_not_fused(self):
        """A peephole block cell runs each step through its own call."""
        got = build(
            lambda x: rnn.dynamic_rnn(rnn.LSTMBlockCell(3, use_peephole=True), x, dtype=tf1.float32)
        )
        assert not any("fused_rnn" in op.name for op in got[0].get_operations())

    @given(st.one_of(st.none(), st.floats(-5, 5, allow_nan=False), st.integers(-5, 5)))
    def test_block_cell_clip(self, value):
        """A positive clip is kept (as a float); None, zero and below clip nothing."""
        result = block_cell_clip(value)
        if value is not None and value > 0:
            assert result == float(value)
        else:
            assert result is None

    def test_fail(self):
        """A clip that is not a number, and a bad num_units, say what was expected."""
        with pytest.raises(
            TypeError, match=r"LSTMBlockCell: 'cell_clip' must be a number or None; got 'x'"
        ):
            rnn.LSTMBlockCell(3, cell_clip="x")
        with pytest.raises(ValueError, match=r"LSTMBlockCell: 'num_units' must be a positive int"):
            rnn.LSTMBlockCell(0)


class TestGRUBlockCell:
    """GRUBlockCell (contrib's crossed names) and GRUBlockCellV2 compute as GRUCell."""

    @pytest.mark.parametrize("kind", ["GRUBlockCell", "GRUBlockCellV2"])
    def test_same_as_gru_cell(self, kind):
        """Names as contrib's; outputs and gradients are GRUCell's for the same weights."""
        make = getattr(rnn, kind)
        got = build(lambda x: rnn.dynamic_rnn(make(num_units=4), x, lengths(), dtype=tf1.float32))
        ref = build(lambda x: rnn.dynamic_rnn(rnn.GRUCell(4), x, lengths(), dtype=tf1.float32))
        n = DEPTH + 4
        if kind == "GRUBlockCell":
            expected = [("w_c", [n, 8]), ("b_ru", [8]), ("w_ru", [n, 4]), ("b_c", [4])]
        else:
            expected = [
                ("gates/kernel", [n, 8]),
                ("gates/bias", [8]),
                ("candidate/kernel", [n, 4]),
                ("candidate/bias", [4]),
            ]
        assert names(got) == [(f"rnn/gru_cell/{name}", shape) for name, shape in expected]
        values = random_values(got)
        x = np.random.default_rng(3).standard_normal([BATCH, TIME, DEPTH]).astype(np.float32)
        assert_same(run(got, values, x), run(ref, values, x))

    def test_initial_biases(self):
        """The gates' bias starts at ones, the candidate's at zeros (as contrib's)."""
        g = tf1.Graph()
        with g.as_default():
            cell = rnn.GRUBlockCell(cell_size=3)
            cell(tf1.zeros([2, 2]), tf1.zeros([2, 3]))
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                values = {v.op.name: sess.run(v) for v in tf1.global_variables()}
        np.testing.assert_array_equal(values["gru_cell/b_ru"], np.ones(6))
        np.testing.assert_array_equal(values["gru_cell/b_c"], np.zeros(3))

    def test_fail(self):
        """Exactly one of num_units and cell_size."""
        with pytest.raises(
            ValueError, match=r"GRUBlockCell: give exactly one of 'num_units' and 'cell_size'"
        ):
            rnn.GRUBlockCell()
        with pytest.raises(ValueError, match=r"GRUBlockCellV2: give exactly one of"):
            rnn.GRUBlockCellV2(3, cell_size=3)


class TestLSTMBlockFusedCell:
    """LSTMBlockFusedCell: the whole time-major sequence in one call."""

    @pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
    @pytest.mark.parametrize("peephole", [False, True], ids=["plain", "peephole"])
    @pytest.mark.parametrize("training", [True, False], ids=["train", "infer"])
    def test_same_as_dynamic_rnn(self, with_lengths, peephole, training):
        """Outputs (zeros past a length), final state and gradients of dynamic_rnn(LSTMBlockCell)."""
        opts = dict(use_peephole=peephole, cell_clip=0.5 if peephole else None, forget_bias=0.3)

        def fused(x):
            with TowerContext("", is_training=training):
                cell = rnn.LSTMBlockFusedCell(6, **opts)
                xt = tf1.transpose(x, [1, 0, 2])
                seq = lengths() if with_lengths else None
                return cell(xt, dtype=tf1.float32, sequence_length=seq)

        def reference(x):
            with TowerContext("", is_training=False):
                seq = lengths() if with_lengths else None
                xt = tf1.transpose(x, [1, 0, 2])
                return rnn.dynamic_rnn(
                    rnn.LSTMBlockCell(6, **opts), xt, seq, dtype=tf1.float32, time_major=True
                )

        got, ref = build(fused), build(reference)
        assert [n for n, _ in names(got)][:2] == ["lstm_fused_cell/kernel", "lstm_fused_cell/bias"]
        values = random_values(got)
        x = np.random.default_rng(4).standard_normal([BATCH, TIME, DEPTH]).astype(np.float32)
        result = run(got, values, x)
        assert_same(result, run(ref, values, x))
        if with_lengths:
            assert np.all(result[0][0][2:, 1] == 0)
            assert np.all(result[0][0][:, 2] == 0)

    def test_list_inputs_and_initial_state(self):
        """A list of steps gives a list back; an initial (c, h) pair is where it starts."""
        g = tf1.Graph()
        with g.as_default():
            steps = [tf1.ones([2, 3]) for _ in range(4)]
            cell = rnn.LSTMBlockFusedCell(5, name="fused")
            c, h = tf1.fill([2, 5], 0.5), tf1.fill([2, 5], -0.5)
            outputs, state = cell(steps, initial_state=(c, h), sequence_length=[0, 2])
            assert isinstance(outputs, list)
            assert len(outputs) == 4
            assert [v.op.name for v in cell.variables] == ["fused/kernel", "fused/bias"]
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                out, (fc, fh) = sess.run([outputs, state])
        np.testing.assert_array_equal(fc[0], np.full(5, 0.5))
        np.testing.assert_array_equal(fh[0], np.full(5, -0.5))
        np.testing.assert_array_equal(out[2][1], np.zeros(5))
        np.testing.assert_array_equal(fh[1], out[1][1])

    def test_fail(self, graph):
        """No dtype nor state, a batch-major 2-D input, a state that is not a pair."""
        cell = rnn.LSTMBlockFusedCell(4)
        with pytest.raises(
            ValueError, match=r"LSTMBlockFusedCell: give 'initial_state' or 'dtype'"
        ):
            cell(tf1.zeros([3, 2, 4]))
        with pytest.raises(
            ValueError,
            match=r"'inputs' must be time-major \[time, batch, depth\].*got shape \[2, 4\]",
        ):
            cell(tf1.zeros([2, 4]), dtype=tf1.float32)
        with pytest.raises(ValueError, match=r"'initial_state' must be a pair \(c, h\)"):
            cell(tf1.zeros([3, 2, 4]), initial_state=tf1.zeros([2, 4]))


def test_tf1_checkpoint_restores(tmp_path):
    """A checkpoint holding TensorFlow 1's block-cell names restores into the char-rnn model."""
    rng = np.random.default_rng(5)
    prefix = "rnnlm/multi_rnn_cell/cell_"
    saved = {
        f"{prefix}0/lstm_cell/kernel": rng.standard_normal([DEPTH + 6, 24]),
        f"{prefix}0/lstm_cell/bias": rng.standard_normal([24]),
        f"{prefix}1/lstm_cell/kernel": rng.standard_normal([12, 24]),
        f"{prefix}1/lstm_cell/bias": rng.standard_normal([24]),
        "gru/gru_cell/w_c": rng.standard_normal([DEPTH + 2, 4]),
        "gru/gru_cell/b_ru": rng.standard_normal([4]),
        "gru/gru_cell/w_ru": rng.standard_normal([DEPTH + 2, 2]),
        "gru/gru_cell/b_c": rng.standard_normal([2]),
    }
    with tf1.Graph().as_default():
        for name, value in saved.items():
            tf1.get_variable(name, initializer=tf1.constant(value, tf1.float32))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            path = tf1.train.Saver().save(sess, str(tmp_path / "model"))

    inputs = rng.standard_normal([BATCH, TIME, DEPTH])

    def model(block):
        g = tf1.Graph()
        with g.as_default():
            x = tf1.constant(inputs, tf1.float32)
            make = rnn.LSTMBlockCell if block else rnn.LSTMCell
            cell = rnn.MultiRNNCell([make(num_units=6) for _ in range(2)])
            out, _ = rnn.static_rnn(cell, tf1.unstack(x, axis=1), dtype=tf1.float32, scope="rnnlm")
            gru = rnn.GRUBlockCell(2) if block else None
            extra = rnn.dynamic_rnn(gru, x, dtype=tf1.float32, scope="gru")[0] if block else None
        return g, out, extra

    g, out, extra = model(block=True)
    with g.as_default(), tf1.Session() as sess:
        tf1.train.Saver().restore(sess, path)
        restored = {v.op.name: sess.run(v) for v in tf1.global_variables()}
        got, gru_out = sess.run([out, extra])
    assert sorted(restored) == sorted(saved)
    for name, value in saved.items():
        np.testing.assert_allclose(restored[name], value, rtol=1e-6)
    assert np.all(np.isfinite(gru_out))
    g, out, _ = model(block=False)
    with g.as_default(), tf1.Session() as sess:
        # LSTMCell reads the same names: the block cell computes what it computes
        tf1.train.Saver(var_list=tf1.global_variables()).restore(sess, path)
        np.testing.assert_allclose(got, sess.run(out), rtol=1e-5, atol=1e-6)


class TestAgainstBlockKernels:
    """The block cells compute what TensorFlow's own block kernels compute (``tf.raw_ops``)."""

    @staticmethod
    def values(shapes, seed):
        rng = np.random.default_rng(seed)
        return [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in shapes]

    @pytest.mark.parametrize("peephole", [False, True], ids=["plain", "peephole-clip"])
    def test_lstm_block_cell(self, sess, peephole):
        """One step of LSTMBlockCell is the LSTMBlockCell kernel's (cs, h) for its weights."""
        n, d = 4, 3
        x, c, h = (tf1.constant(v) for v in self.values([[2, d], [2, n], [2, n]], 6))
        clip = 0.3 if peephole else None
        cell = rnn.LSTMBlockCell(n, forget_bias=0.7, cell_clip=clip, use_peephole=peephole)
        out, state = cell(x, rnn.LSTMStateTuple(c, h))
        w = {v.op.name.split("/")[-1]: v for v in cell.variables}
        zero = tf1.zeros([n])
        kernel = tf1.raw_ops.LSTMBlockCell(
            x=x,
            cs_prev=c,
            h_prev=h,
            w=w["kernel"],
            wci=w.get("w_i_diag", zero),
            wcf=w.get("w_f_diag", zero),
            wco=w.get("w_o_diag", zero),
            b=w["bias"],
            forget_bias=0.7,
            cell_clip=clip or -1.0,
            use_peephole=peephole,
        )
        initialize(sess)
        for v, value in zip(
            cell.variables, self.values([v.shape for v in cell.variables], 7), strict=True
        ):
            v.load(value, sess)
        got_h, got_c, got_out, want_cs, want_h = sess.run(
            [state.h, state.c, out, kernel.cs, kernel.h]
        )
        np.testing.assert_allclose(got_c, want_cs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_h, want_h, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got_out, got_h)

    def test_gru_block_cell(self, sess):
        """One step of GRUBlockCell is the GRUBlockCell kernel's h (gates' kernel: ``w_c``)."""
        x, h = (tf1.constant(v) for v in self.values([[2, 3], [2, 4]], 8))
        cell = rnn.GRUBlockCell(4)
        out, _ = cell(x, h)
        w = {v.op.name.split("/")[-1]: v for v in cell.variables}
        kernel = tf1.raw_ops.GRUBlockCell(
            x=x, h_prev=h, w_ru=w["w_c"], w_c=w["w_ru"], b_ru=w["b_ru"], b_c=w["b_c"]
        )
        initialize(sess)
        for v, value in zip(
            cell.variables, self.values([v.shape for v in cell.variables], 9), strict=True
        ):
            v.load(value, sess)
        got, want = sess.run([out, kernel.h])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("peephole", [False, True], ids=["plain", "peephole-clip"])
    def test_lstm_block_fused_cell(self, sess, peephole):
        """LSTMBlockFusedCell over a sequence is the BlockLSTM kernel's outputs and last state."""
        n, d = 5, 3
        x, c, h = (tf1.constant(v) for v in self.values([[TIME, 2, d], [2, n], [2, n]], 10))
        clip = 0.4 if peephole else None
        with TowerContext("", is_training=True):
            cell = rnn.LSTMBlockFusedCell(n, forget_bias=0.2, cell_clip=clip, use_peephole=peephole)
            out, state = cell(x, initial_state=(c, h))
        w = {v.op.name.split("/")[-1]: v for v in cell.variables}
        zero = tf1.zeros([n])
        kernel = tf1.raw_ops.BlockLSTM(
            seq_len_max=tf1.constant(TIME, tf1.int64),
            x=x,
            cs_prev=c,
            h_prev=h,
            w=w["kernel"],
            wci=w.get("w_i_diag", zero),
            wcf=w.get("w_f_diag", zero),
            wco=w.get("w_o_diag", zero),
            b=w["bias"],
            forget_bias=0.2,
            cell_clip=clip or -1.0,
            use_peephole=peephole,
        )
        initialize(sess)
        for v, value in zip(
            cell.variables, self.values([v.shape for v in cell.variables], 11), strict=True
        ):
            v.load(value, sess)
        got_out, got_c, got_h, want_cs, want_h = sess.run(
            [out, state.c, state.h, kernel.cs, kernel.h]
        )
        np.testing.assert_allclose(got_out, want_h, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_c, want_cs[-1], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_h, want_h[-1], rtol=1e-5, atol=1e-6)
