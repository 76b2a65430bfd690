"""Recurrent cells and loops: variable names, NumPy references, masking, towers and bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.layers import rnn
from towerkit.layers._rnn_nest import (
    derived_seed,
    describe,
    flatten,
    map_structure,
    pack_as,
    same_structure,
    undropped,
)
from towerkit.towers import TowerContext
from towerkit.towers.compat import tf1

F32 = tf1.float32


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def reuse():
    """The current variable scope, reusing its variables."""
    return tf1.variable_scope(tf1.get_variable_scope(), reuse=True)


def names_shapes(variables=None):
    """``{name: shape}`` of the graph's global variables."""
    return {v.op.name: v.shape.as_list() for v in (variables or tf1.global_variables())}


def load(sess, seed=0, scale=0.5):
    """Give every global variable a random value; return them by name."""
    rng = np.random.default_rng(seed)
    values = {}
    for v in tf1.global_variables():
        val = (rng.standard_normal(v.shape.as_list()) * scale).astype(np.float32)
        v.load(val, sess)
        values[v.op.name] = val
    return values


# -- pure helpers ------------------------------------------------------------------------

leaves = st.integers(-5, 5)
structures = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(tuple),
        st.lists(inner, max_size=3),
        st.tuples(inner, inner).map(lambda t: rnn.LSTMStateTuple(*t)),
    ),
    max_leaves=10,
)


class TestNest:
    """flatten, pack_as, map_structure, same_structure, describe, undropped, derived_seed."""

    @given(structures)
    def test_pack_inverts_flatten(self, s):
        """Packing the leaves of a structure rebuilds it, named tuples included."""
        assert pack_as(s, flatten(s)) == s
        assert type(pack_as(s, flatten(s))) is type(s)

    @given(structures)
    def test_map_keeps_structure(self, s):
        """map_structure maps every leaf and keeps the nesting."""
        out = map_structure(lambda a, b: a - b, s, s)
        assert same_structure(out, s)
        assert flatten(out) == [0] * len(flatten(s))

    @given(structures)
    def test_undropped_marks_cell_states(self, s):
        """undropped has the state's structure; its True leaves are exactly the LSTM ``c``s."""
        marks = undropped(s)
        assert same_structure(marks, s)

        def cs(x):
            if isinstance(x, rnn.LSTMStateTuple):
                return len(flatten(x.c)) + cs(x.h)
            if isinstance(x, (tuple, list)):
                return sum(cs(y) for y in x)
            return 0

        assert sum(flatten(marks)) == cs(s)

    @given(structures)
    def test_describe_lists_leaves(self, s):
        """describe writes each leaf once, in order."""
        text = describe(s, lambda n: f"<{n}>")
        assert re.findall(r"<(-?\d+)>", text) == [str(n) for n in flatten(s)]

    @given(st.integers(0, 2**40), st.text(max_size=5), st.integers(0, 100))
    def test_derived_seed(self, seed, salt, index):
        """Seeds are deterministic, in [0, 2**31), and differ between the first two indices."""
        a = derived_seed(seed, salt, index)
        assert a == derived_seed(seed, salt, index)
        assert a is not None
        assert 0 <= a < 2**31
        assert derived_seed(None, salt, index) is None

    def test_pack_fail(self):
        """Too few leaves are refused with both counts."""
        with pytest.raises(ValueError, match=r"has 2 leaves; got 1"):
            pack_as((1, 2), [1])

    def test_map_fail(self):
        """A second structure of another shape is refused with both."""
        with pytest.raises(
            ValueError, match=r"expected the structure \(1, 2\); got \(1, \(2, 3\)\)"
        ):
            map_structure(lambda a, b: a, (1, 2), (1, (2, 3)))

    def test_repr(self):
        """LSTMStateTuple prints its fields, c first."""
        assert repr(rnn.LSTMStateTuple(c=1, h=2)) == "LSTMStateTuple(c=1, h=2)"


# -- names and shapes --------------------------------------------------------------------


class TestNames:
    """TensorFlow 1's variable names, shapes and initial values."""

    def test_two_layer_lstm(self, graph):
        """A 2-layer LSTM under dynamic_rnn: rnn/multi_rnn_cell/cell_k/lstm_cell/{kernel,bias}."""
        x = tf1.placeholder(F32, [2, 5, 3])
        cell = rnn.MultiRNNCell([rnn.LSTMCell(4), rnn.LSTMCell(6)])
        rnn.dynamic_rnn(cell, x, dtype=F32)
        assert names_shapes() == {
            "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel": [7, 16],
            "rnn/multi_rnn_cell/cell_0/lstm_cell/bias": [16],
            "rnn/multi_rnn_cell/cell_1/lstm_cell/kernel": [10, 24],
            "rnn/multi_rnn_cell/cell_1/lstm_cell/bias": [24],
        }
        assert cell.name == "rnn/multi_rnn_cell"

    def test_lstm_peepholes_projection(self, graph):
        """Peepholes w_f_diag, w_i_diag, w_o_diag and projection/kernel; the kernel takes m."""
        x = tf1.placeholder(F32, [2, 3])
        cell = rnn.LSTMCell(5, use_peepholes=True, num_proj=2)
        out, state = cell(x, cell.zero_state(2, F32))
        assert names_shapes() == {
            "lstm_cell/kernel": [5, 20],
            "lstm_cell/bias": [20],
            "lstm_cell/w_f_diag": [5],
            "lstm_cell/w_i_diag": [5],
            "lstm_cell/w_o_diag": [5],
            "lstm_cell/projection/kernel": [5, 2],
        }
        assert out.shape.as_list() == [2, 2]
        assert [s.shape.as_list() for s in state] == [[2, 5], [2, 2]]

    def test_gru_basic(self, graph, sess):
        """GRU gates/candidate, basic cells; biases start at ones (GRU gates) and zeros."""
        x = tf1.placeholder(F32, [2, 3])
        for cell in (rnn.GRUCell(4), rnn.BasicRNNCell(4), rnn.BasicLSTMCell(4)):
            cell(x, cell.zero_state(2, F32))
        assert names_shapes() == {
            "gru_cell/gates/kernel": [7, 8],
            "gru_cell/gates/bias": [8],
            "gru_cell/candidate/kernel": [7, 4],
            "gru_cell/candidate/bias": [4],
            "basic_rnn_cell/kernel": [7, 4],
            "basic_rnn_cell/bias": [4],
            "basic_lstm_cell/kernel": [7, 16],
            "basic_lstm_cell/bias": [16],
        }
        sess.run(tf1.global_variables_initializer())
        got = {v.op.name: sess.run(v) for v in tf1.global_variables()}
        np.testing.assert_array_equal(got["gru_cell/gates/bias"], np.ones(8))
        for name in ("gru_cell/candidate/bias", "basic_rnn_cell/bias", "basic_lstm_cell/bias"):
            np.testing.assert_array_equal(got[name], 0)
        limit = np.sqrt(6 / (7 + 16))  # Glorot uniform
        assert 0 < np.abs(got["basic_lstm_cell/kernel"]).max() <= limit

    def test_bidirectional_and_unique(self, graph):
        """bidirectional_rnn/fw and /bw; a second cell in one scope gets a suffix, as in TF 1."""
        x = tf1.placeholder(F32, [2, 5, 3])
        rnn.bidirectional_dynamic_rnn(rnn.GRUCell(2), rnn.GRUCell(3), x, dtype=F32)
        with tf1.variable_scope("s"):
            y = tf1.placeholder(F32, [2, 3])
            a, b = rnn.BasicRNNCell(2), rnn.BasicRNNCell(2)
            a(y, a.zero_state(2, F32))
            b(y, b.zero_state(2, F32))
        names = set(names_shapes())
        assert "bidirectional_rnn/fw/gru_cell/gates/kernel" in names
        assert "bidirectional_rnn/bw/gru_cell/candidate/kernel" in names
        assert {"s/basic_rnn_cell/kernel", "s/basic_rnn_cell_1/kernel"} <= names

    def test_wrappers_add_no_scope(self, graph):
        """DropoutWrapper and ResidualWrapper keep the wrapped cell's names."""
        x = tf1.placeholder(F32, [2, 5, 4])
        cell = rnn.MultiRNNCell(
            [rnn.DropoutWrapper(rnn.LSTMCell(4), 0.5), rnn.ResidualWrapper(rnn.GRUCell(4))]
        )
        rnn.dynamic_rnn(cell, x, dtype=F32)
        assert set(names_shapes()) == {
            "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel",
            "rnn/multi_rnn_cell/cell_0/lstm_cell/bias",
            "rnn/multi_rnn_cell/cell_1/gru_cell/gates/kernel",
            "rnn/multi_rnn_cell/cell_1/gru_cell/gates/bias",
            "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/kernel",
            "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/bias",
        }


# -- one step against NumPy --------------------------------------------------------------


def step_once(sess, cell, x, state):
    """Run one step of `cell` on NumPy `x` and `state`; return outputs and the variables."""
    xt = tf1.constant(x)
    st_t = map_structure(tf1.constant, state)
    out, new = cell(xt, st_t)
    values = load(sess)
    return sess.run([out, new]), values


class TestOneStep:
    """One step of each cell equals a NumPy reference written from the equations."""

    rng = np.random.default_rng(1)
    x = rng.standard_normal([3, 4]).astype(np.float32)
    c = rng.standard_normal([3, 5]).astype(np.float32)
    h = rng.standard_normal([3, 5]).astype(np.float32)

    def test_basic_rnn(self, sess):
        """h' = tanh([x, h] W + b)."""
        (out, new), v = step_once(sess, rnn.BasicRNNCell(5), self.x, self.h)
        want = np.tanh(
            np.concatenate([self.x, self.h], 1) @ v["basic_rnn_cell/kernel"]
            + v["basic_rnn_cell/bias"]
        )
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new, want, rtol=1e-5, atol=1e-6)

    def test_gru(self, sess):
        """r, u gates; h' = u h + (1 - u) tanh([x, r h] Wc + bc)."""
        (out, _), v = step_once(sess, rnn.GRUCell(5), self.x, self.h)
        g = sigmoid(
            np.concatenate([self.x, self.h], 1) @ v["gru_cell/gates/kernel"]
            + v["gru_cell/gates/bias"]
        )
        r, u = g[:, :5], g[:, 5:]
        cand = np.tanh(
            np.concatenate([self.x, r * self.h], 1) @ v["gru_cell/candidate/kernel"]
            + v["gru_cell/candidate/bias"]
        )
        np.testing.assert_allclose(out, u * self.h + (1 - u) * cand, rtol=1e-5, atol=1e-6)

    def test_gru_reset_after(self, sess):
        """reset_after: h' = u h + (1 - u) tanh(x Wx + bx + r (h Wh + bh))."""
        (out, new), v = step_once(sess, rnn.GRUCell(5, reset_after=True), self.x, self.h)
        g = sigmoid(
            np.concatenate([self.x, self.h], 1) @ v["gru_cell/gates/kernel"]
            + v["gru_cell/gates/bias"]
        )
        r, u = g[:, :5], g[:, 5:]
        p = "gru_cell/candidate/"
        hidden = self.h @ v[p + "hidden_kernel"] + v[p + "hidden_bias"]
        cand = np.tanh(self.x @ v[p + "input_kernel"] + v[p + "input_bias"] + r * hidden)
        want = u * self.h + (1 - u) * cand
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new, want, rtol=1e-5, atol=1e-6)
        shapes = {k: a.shape for k, a in v.items()}
        assert shapes == {
            "gru_cell/gates/kernel": (9, 10),
            "gru_cell/gates/bias": (10,),
            p + "input_kernel": (4, 5),
            p + "input_bias": (5,),
            p + "hidden_kernel": (5, 5),
            p + "hidden_bias": (5,),
        }

    def test_gru_reset_after_refuses_a_non_bool(self):
        with pytest.raises(TypeError, match=r"GRUCell: 'reset_after' must be True or False"):
            rnn.GRUCell(5, reset_after="yes")

    @pytest.mark.parametrize("tuple_state", [True, False])
    def test_basic_lstm(self, sess, tuple_state):
        """Gates i, j, f, o; forget_bias added to f; the state (c, h) or [c, h]."""
        cell = rnn.BasicLSTMCell(5, forget_bias=0.7, state_is_tuple=tuple_state)
        state = (self.c, self.h) if tuple_state else np.concatenate([self.c, self.h], 1)
        (out, new), v = step_once(sess, cell, self.x, state)
        z = (
            np.concatenate([self.x, self.h], 1) @ v["basic_lstm_cell/kernel"]
            + v["basic_lstm_cell/bias"]
        )
        i, j, f, o = np.split(z, 4, axis=1)
        c = self.c * sigmoid(f + 0.7) + sigmoid(i) * np.tanh(j)
        h = np.tanh(c) * sigmoid(o)
        np.testing.assert_allclose(out, h, rtol=1e-5, atol=1e-6)
        got = np.concatenate(new, 1) if tuple_state else new
        np.testing.assert_allclose(got, np.concatenate([c, h], 1), rtol=1e-5, atol=1e-6)

    def test_lstm_peepholes_clip_projection(self, sess):
        """Peepholes on c, cell_clip on c, then m projected and clipped by proj_clip."""
        m = self.h[:, :2]
        cell = rnn.LSTMCell(5, use_peepholes=True, cell_clip=0.8, num_proj=2, proj_clip=0.3)
        (out, new), v = step_once(sess, cell, self.x, (self.c, m))
        p = "lstm_cell/"
        z = np.concatenate([self.x, m], 1) @ v[p + "kernel"] + v[p + "bias"]
        i, j, f, o = np.split(z, 4, axis=1)
        c = sigmoid(f + 1.0 + v[p + "w_f_diag"] * self.c) * self.c + sigmoid(
            i + v[p + "w_i_diag"] * self.c
        ) * np.tanh(j)
        c = np.clip(c, -0.8, 0.8)
        mm = np.clip(
            (sigmoid(o + v[p + "w_o_diag"] * c) * np.tanh(c)) @ v[p + "projection/kernel"],
            -0.3,
            0.3,
        )
        np.testing.assert_allclose(out, mm, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new[0], c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new[1], mm, rtol=1e-5, atol=1e-6)


# -- loops -------------------------------------------------------------------------------


def two_layer():
    return rnn.MultiRNNCell([rnn.LSTMCell(4), rnn.GRUCell(3)])


X = np.random.default_rng(2).standard_normal([3, 6, 2]).astype(np.float32)


class TestLoops:
    """dynamic_rnn, static_rnn and bidirectional_dynamic_rnn agree with each other."""

    def test_dynamic_equals_static(self, sess):
        """dynamic_rnn and static_rnn share variable names and compute the same thing."""
        x = tf1.constant(X)
        out_d, st_d = rnn.dynamic_rnn(two_layer(), x, dtype=F32)
        with reuse():
            out_s, st_s = rnn.static_rnn(two_layer(), tf1.unstack(x, axis=1), dtype=F32)
        assert len(tf1.global_variables()) == 6  # the static loop reused the dynamic one's
        load(sess)
        d, s = sess.run([(out_d, st_d), (tf1.stack(out_s, 1), st_s)])
        for a, b in zip(flatten(d), flatten(s), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    def test_time_major(self, sess):
        """time_major=True on transposed inputs gives the transposed outputs and the same state."""
        out_b, st_b = rnn.dynamic_rnn(two_layer(), tf1.constant(X), dtype=F32)
        with reuse():
            out_t, st_t = rnn.dynamic_rnn(
                two_layer(), tf1.constant(X.transpose(1, 0, 2)), dtype=F32, time_major=True
            )
        assert out_t.shape.as_list() == [6, 3, 3]
        load(sess)
        (ob, sb), (ot, stt) = sess.run([(out_b, st_b), (out_t, st_t)])
        np.testing.assert_allclose(ob, ot.transpose(1, 0, 2), rtol=1e-5, atol=1e-6)
        for a, b in zip(flatten(sb), flatten(stt), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("loop", ["dynamic", "static"])
    def test_sequence_length(self, sess, loop):
        """Outputs are zero past each length; the state is the one after the last valid step."""
        lengths = [6, 2, 0]
        x = tf1.constant(X)
        if loop == "dynamic":
            out, state = rnn.dynamic_rnn(two_layer(), x, sequence_length=lengths, dtype=F32)
        else:
            outs, state = rnn.static_rnn(
                two_layer(), tf1.unstack(x, axis=1), sequence_length=lengths, dtype=F32
            )
            out = tf1.stack(outs, 1)
        with reuse():
            full, _ = rnn.dynamic_rnn(two_layer(), x, dtype=F32)
            cut, cut_state = rnn.dynamic_rnn(two_layer(), x[1:2, :2], dtype=F32)
        load(sess)
        o, s, f, c, cs = sess.run([out, state, full, cut, cut_state])
        np.testing.assert_allclose(o[0], f[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(o[1, :2], c[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(o[1, 2:], 0)
        np.testing.assert_array_equal(o[2], 0)
        for got, want in zip(flatten(s), flatten(cs), strict=True):
            np.testing.assert_allclose(got[1], want[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(got[2], 0)  # never stepped: the zero state

    def test_bidirectional(self, sess):
        """The backward outputs are the cell run on each sequence reversed within its length."""
        lengths = [6, 3, 1]
        x = tf1.constant(X)
        (fw, bw), (_, bw_state) = rnn.bidirectional_dynamic_rnn(
            rnn.GRUCell(3), rnn.GRUCell(3), x, sequence_length=lengths, dtype=F32
        )
        rev = tf1.constant(X[1:2, :3][:, ::-1].copy())
        with tf1.variable_scope("bidirectional_rnn", reuse=True):
            ref, ref_state = rnn.dynamic_rnn(rnn.GRUCell(3), rev, dtype=F32, scope="bw")
        load(sess)
        b, bs, r, rs = sess.run([bw, bw_state, ref, ref_state])
        np.testing.assert_allclose(b[1, :3], r[0, ::-1], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(b[1, 3:], 0)
        np.testing.assert_allclose(bs[1], rs[0], rtol=1e-5, atol=1e-6)
        assert fw.shape.as_list() == [3, 6, 3]

    def test_initial_state_unknown_batch(self, sess):
        """An initial state and a batch known only at run time are carried through."""
        x = tf1.placeholder(F32, [None, None, 2])
        cell = rnn.LSTMCell(3)
        init = rnn.LSTMStateTuple(tf1.placeholder(F32, [None, 3]), tf1.placeholder(F32, [None, 3]))
        out, state = rnn.dynamic_rnn(cell, x, initial_state=init)
        assert out.shape.as_list() == [None, None, 3]
        load(sess)
        zeros = np.zeros([3, 3], np.float32)
        o, s = sess.run([out, state], {x: X, init.c: zeros, init.h: zeros})
        o0, _ = sess.run([out, state], {x: X[:, :3], init.c: zeros, init.h: zeros})
        np.testing.assert_allclose(o[:, :3], o0, rtol=1e-5, atol=1e-6)
        assert isinstance(s, rnn.LSTMStateTuple)


# -- towers and dropout ------------------------------------------------------------------


def dropped_model(x):
    cell = rnn.MultiRNNCell(
        [rnn.DropoutWrapper(rnn.LSTMCell(8), 0.5, 0.5, 0.5, seed=3), rnn.LSTMCell(8)]
    )
    out, _ = rnn.dynamic_rnn(cell, x, dtype=F32)
    return out


class TestTowers:
    """Towers share the cells' variables; DropoutWrapper is off in inference towers."""

    def test_inference_tower(self, sess):
        """The inference tower reuses the variables, is deterministic and equals no dropout."""
        x = tf1.constant(X)
        with TowerContext("", is_training=True):
            train = dropped_model(x)
        count = len(tf1.global_variables())
        with TowerContext("infer", is_training=False):
            infer = dropped_model(x)
        with reuse():
            plain, _ = rnn.dynamic_rnn(
                rnn.MultiRNNCell([rnn.LSTMCell(8), rnn.LSTMCell(8)]), x, dtype=F32
            )
        assert len(tf1.global_variables()) == count
        load(sess)
        a, b, p = sess.run([infer, infer, plain])
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, p, rtol=1e-5, atol=1e-6)
        t = sess.run(train)
        assert not np.allclose(t, p, atol=1e-3)

    def test_no_context_drops(self, sess):
        """Without a tower context the wrapper drops (as TensorFlow 1's)."""
        x = tf1.ones([200, 4])
        cell = rnn.DropoutWrapper(rnn.BasicRNNCell(4), input_keep_prob=0.5)
        cell2 = rnn.BasicRNNCell(4, reuse=True)
        y, _ = cell(x, cell.zero_state(200, F32))
        z, _ = cell2(x, cell2.zero_state(200, F32))
        load(sess)
        a, b = sess.run([y, z])
        assert not np.allclose(a, b)


# -- bad input ---------------------------------------------------------------------------


class TestBadInput:
    """Errors name the cell and the shapes at fault."""

    def test_rank2_dynamic(self, graph):
        """A [batch, depth] input to dynamic_rnn."""
        x = tf1.placeholder(F32, [4, 3])
        with pytest.raises(
            ValueError,
            match=r"dynamic_rnn with LSTMCell: the inputs must be \[batch, time, depth\] "
            r"\(time_major=False\); got shape \[4, 3\]",
        ):
            rnn.dynamic_rnn(rnn.LSTMCell(2), x, dtype=F32)

    def test_sequence_length_mismatch(self, graph):
        """A sequence_length of another batch size."""
        x = tf1.placeholder(F32, [4, 5, 3])
        with pytest.raises(
            ValueError,
            match=r"dynamic_rnn with GRUCell: 'sequence_length' must be a vector of one length "
            r"per example, shape \[4\], for inputs of shape \[5, 4, 3\]; got shape \[3\]",
        ):
            rnn.dynamic_rnn(rnn.GRUCell(2), x, sequence_length=[1, 2, 3], dtype=F32)

    def test_sequence_length_runtime(self, sess):
        """A batch known only at run time is checked when the graph runs."""
        x = tf1.placeholder(F32, [None, 5, 3])
        lengths = tf1.placeholder(tf1.int32, [None])
        out, _ = rnn.dynamic_rnn(rnn.GRUCell(2), x, sequence_length=lengths, dtype=F32)
        sess.run(tf1.global_variables_initializer())
        with pytest.raises(tf1.errors.InvalidArgumentError, match="one length per example"):
            sess.run(out, {x: np.zeros([2, 5, 3]), lengths: [1, 2, 3]})

    def test_state_structure(self, graph):
        """A state of the wrong structure names the cell, the expected and the given shapes."""
        x = tf1.placeholder(F32, [4, 5, 3])
        wrong = tf1.zeros([4, 6])
        with pytest.raises(
            ValueError,
            match=re.escape(
                "LSTMCell: the initial state given to dynamic_rnn must be shaped "
                "LSTMStateTuple(c=[batch, 3], h=[batch, 3]); got [4, 6]"
            ),
        ):
            rnn.dynamic_rnn(rnn.LSTMCell(3), x, initial_state=wrong)

    @pytest.mark.parametrize("loop", ["dynamic_rnn", "static_rnn"])
    def test_state_of_another_batch_size(self, graph, loop):
        """An initial state of 3 rows for inputs of 4: refused when the loop is built."""
        cell = rnn.LSTMCell(3)
        init = rnn.LSTMStateTuple(tf1.zeros([3, 3]), tf1.zeros([3, 3]))
        x = tf1.placeholder(F32, [4, 5, 2])
        expected = re.escape(
            f"LSTMCell: the initial state given to {loop} must be shaped "
            "LSTMStateTuple(c=[4, 3], h=[4, 3]) (the inputs' batch size); "
            "got LSTMStateTuple(c=[3, 3], h=[3, 3])"
        )
        build = {
            "dynamic_rnn": lambda: rnn.dynamic_rnn(cell, x, initial_state=init),
            "static_rnn": lambda: rnn.static_rnn(cell, tf1.unstack(x, axis=1), initial_state=init),
        }[loop]
        with pytest.raises(ValueError, match=expected):
            build()

    def test_state_of_another_batch_size_at_run_time(self, sess):
        """A batch known only when the graph runs: the run fails naming the cell and the state."""
        x = tf1.placeholder(F32, [None, 5, 2])
        init = tf1.placeholder(F32, [None, 2])
        out, _ = rnn.dynamic_rnn(rnn.GRUCell(2), x, initial_state=init)
        sess.run(tf1.global_variables_initializer())
        with pytest.raises(
            tf1.errors.InvalidArgumentError,
            match="GRUCell: the initial state given to dynamic_rnn must have one row per example",
        ):
            sess.run(out, {x: np.zeros([4, 5, 2]), init: np.zeros([3, 2])})

    @pytest.mark.parametrize("loop", ["dynamic_rnn", "static_rnn"])
    def test_integer_inputs(self, graph, loop):
        """int32 inputs (ids not embedded): a TypeError naming the cell and the dtype."""
        x = tf1.placeholder(tf1.int32, [4, 5, 2])
        expected = (
            rf"{loop} with GRUCell: the inputs must be floating point \(float16, bfloat16, "
            r"float32 or float64\); got #0: int32"
        )
        build = {
            "dynamic_rnn": lambda: rnn.dynamic_rnn(rnn.GRUCell(2), x, dtype=F32),
            "static_rnn": lambda: rnn.static_rnn(rnn.GRUCell(2), tf1.unstack(x, axis=1), dtype=F32),
        }[loop]
        with pytest.raises(TypeError, match=expected):
            build()

    def test_state_size_in_step(self, graph):
        """A state of the right structure but the wrong size, called directly."""
        cell = rnn.MultiRNNCell([rnn.GRUCell(2), rnn.GRUCell(3)])
        with pytest.raises(
            ValueError,
            match=re.escape(
                "MultiRNNCell 'multi_rnn_cell': the state must be shaped "
                "([batch, 2], [batch, 3]); got ([4, 2], [4, 2])"
            ),
        ):
            cell(tf1.zeros([4, 1]), (tf1.zeros([4, 2]), tf1.zeros([4, 2])))

    def test_step_rank(self, graph):
        """One step of a cell given a rank-3 input."""
        cell = rnn.BasicRNNCell(2)
        with pytest.raises(
            ValueError, match=r"BasicRNNCell 'basic_rnn_cell': the inputs of one step must be"
        ):
            cell(tf1.zeros([4, 5, 1]), tf1.zeros([4, 2]))

    def test_no_dtype(self, graph):
        """No initial state and no dtype."""
        with pytest.raises(ValueError, match=r"give 'initial_state' or 'dtype'; got neither"):
            rnn.dynamic_rnn(rnn.GRUCell(2), tf1.zeros([1, 2, 3]))

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: rnn.LSTMCell(0), r"LSTMCell: 'num_units' must be a positive int; got 0"),
            (lambda: rnn.LSTMCell(3, num_proj=-1), r"'num_proj' must be a positive int; got -1"),
            (lambda: rnn.MultiRNNCell([]), r"'cells' must be a non-empty list of cells; got \[\]"),
            (
                lambda: rnn.DropoutWrapper(rnn.GRUCell(2), output_keep_prob=1.5),
                r"DropoutWrapper: 'output_keep_prob' must be in \(0, 1\]; got 1.5",
            ),
            (
                lambda: rnn.MultiRNNCell([rnn.GRUCell(2), "x"]),
                r"MultiRNNCell: cells\[1\]: expected a recurrent cell",
            ),
            (
                lambda: rnn.MultiRNNCell([rnn.LSTMCell(2)], state_is_tuple=False),
                r"cells \[0\] have nested states",
            ),
        ],
    )
    def test_constructors(self, make, message):
        """Bad constructor arguments are refused at construction."""
        with pytest.raises((ValueError, TypeError), match=message):
            make()

    def test_static_not_list(self, graph):
        """static_rnn takes a list of steps, not a tensor."""
        with pytest.raises(TypeError, match=r"static_rnn: 'inputs' must be a list"):
            rnn.static_rnn(rnn.GRUCell(2), tf1.zeros([2, 3, 4]), dtype=F32)


class TestXla:
    """The loops compile with XLA."""

    @pytest.mark.parametrize("lengths", [[6, 3, 1], None], ids=["lengths", "fused"])
    def test_jit_scope(self, sess, lengths):
        """dynamic_rnn (with lengths: the cells' loop; without: the fused LSTM loop) and its
        gradients under a jit scope equal the plain graph."""
        x = tf1.constant(X)

        def two_layer():  # an LSTM and a GRU, or two LSTMs (both fused)
            second = rnn.GRUCell(3) if lengths else rnn.BasicLSTMCell(3)
            return rnn.MultiRNNCell([rnn.LSTMCell(4), second])

        plain, _ = rnn.dynamic_rnn(two_layer(), x, sequence_length=lengths, dtype=F32)
        with (
            tf1.xla.experimental.jit_scope(compile_ops=True, separate_compiled_gradients=False),
            reuse(),
        ):
            compiled, _ = rnn.dynamic_rnn(two_layer(), x, sequence_length=lengths, dtype=F32)
            grads = tf1.gradients(tf1.reduce_sum(compiled), tf1.trainable_variables())
        plain_grads = tf1.gradients(tf1.reduce_sum(plain), tf1.trainable_variables())
        load(sess)
        meta = tf1.RunMetadata()
        options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        got, want, g, pg = sess.run(
            [compiled, plain, grads, plain_grads], options=options, run_metadata=meta
        )
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        for a, b in zip(g, pg, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        nodes = {n.node_name for d in meta.step_stats.dev_stats for n in d.node_stats}
        assert any(name.startswith("cluster_") for name in nodes), sorted(nodes)[:20]
        fused = any("fused_rnn" in op.name for op in sess.graph.get_operations())
        assert fused  # LSTM and GRU layers, with or without lengths
