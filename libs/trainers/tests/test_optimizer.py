"""Optimizer wrappers: proxy, gradient processors, post-update ops, gradient accumulation."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AccumGradOptimizer,
    FilterNoneGrad,
    GlobalNormClip,
    MapGradient,
    PostProcessOptimizer,
    ProxyOptimizer,
    ScaleGradient,
    VariableAssignmentOptimizer,
    apply_grad_processors,
    get_global_step_var,
)

RNG = np.random.RandomState(0)
X = RNG.randn(12, 3).astype(np.float32)
Y = RNG.randn(12).astype(np.float32)
W0 = np.array([0.1, -0.2, 0.3], np.float32)

OPTIMIZERS = {
    "sgd": lambda lr: tf1.train.GradientDescentOptimizer(lr),
    "momentum": lambda lr: tf1.train.MomentumOptimizer(lr, 0.9),
    "adam": lambda lr: tf1.train.AdamOptimizer(lr, epsilon=1e-10),
}


def linear_model():
    """Placeholders x, y; variable w; the mean squared error of x @ w against y."""
    x = tf1.placeholder(tf.float32, [None, 3], name="x")
    y = tf1.placeholder(tf.float32, [None], name="y")
    w = tf1.get_variable("w", initializer=tf.constant(W0))
    loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, w) - y))
    return x, y, w, loss


def train(make_opt, batches, runs, wrap=None):
    """Run `runs` minimize steps cycling over `batches` in a fresh graph; return w."""
    g = tf.Graph()
    with g.as_default():
        x, y, w, loss = linear_model()
        opt = make_opt()
        if wrap is not None:
            opt = wrap(opt)
        step = opt.minimize(loss)
        with tf1.Session(graph=g) as s:
            s.run(tf1.global_variables_initializer())
            for i in range(runs):
                xb, yb = batches[i % len(batches)]
                s.run(step, {x: xb, y: yb})
            return s.run(w)


class TestProxyOptimizer:
    """`ProxyOptimizer` forwards to the wrapped optimizer."""

    def test_same_result(self):
        """Training through the proxy equals training with the optimizer itself."""
        plain = train(lambda: tf1.train.MomentumOptimizer(0.1, 0.9), [(X, Y)], 3)
        proxied = train(lambda: tf1.train.MomentumOptimizer(0.1, 0.9), [(X, Y)], 3, ProxyOptimizer)
        np.testing.assert_array_equal(plain, proxied)

    def test_slots_and_variables(self, graph):
        """get_slot, get_slot_names and variables come from the wrapped optimizer."""
        _, _, w, loss = linear_model()
        inner = tf1.train.MomentumOptimizer(0.1, 0.9)
        proxy = ProxyOptimizer(inner)
        proxy.minimize(loss)
        assert proxy.get_slot_names() == ["momentum"]
        assert proxy.get_slot(w, "momentum") is inner.get_slot(w, "momentum")
        assert proxy.variables() == inner.variables()
        assert proxy.opt is inner

    def test_repr(self):
        """The repr shows the wrapped optimizer."""
        inner = tf1.train.GradientDescentOptimizer(0.1)
        assert repr(ProxyOptimizer(inner)) == f"ProxyOptimizer({inner!r})"

    def test_fail(self):
        """Only tf.compat.v1 optimizers can be wrapped."""
        with pytest.raises(
            TypeError, match=r"'opt' must be a tf\.compat\.v1\.train\.Optimizer .* got str"
        ):
            ProxyOptimizer("adam")


class TestApplyGradProcessors:
    """`apply_grad_processors` runs the processors before each update."""

    def test_processors_run(self, graph, sess):
        """A processor dropping every gradient of w leaves w unchanged; others update."""
        x, y, w, loss = linear_model()
        b = tf1.get_variable("b", initializer=tf.constant(0.0))
        loss = loss + tf.square(b - 1.0)
        opt = apply_grad_processors(
            tf1.train.GradientDescentOptimizer(0.1), [ScaleGradient(("w", 0.0), verbose=False)]
        )
        step = opt.minimize(loss)
        sess.run(tf1.global_variables_initializer())
        sess.run(step, {x: X, y: Y})
        np.testing.assert_array_equal(sess.run(w), W0)
        assert sess.run(b) == pytest.approx(0.2)

    def test_order(self, graph, sess):
        """Processors run in list order: add 1 then double gives (g + 1) * 2."""
        v = tf1.get_variable("v", initializer=tf.constant(0.0))
        opt = apply_grad_processors(
            tf1.train.GradientDescentOptimizer(1.0),
            [MapGradient(lambda g: g + 1.0), MapGradient(lambda g: g * 2.0)],
        )
        step = opt.apply_gradients([(tf.constant(3.0), v)])
        sess.run(v.initializer)
        sess.run(step)
        assert sess.run(v) == pytest.approx(-8.0)

    def test_clip_matches_manual(self):
        """GlobalNormClip through the optimizer equals clipping by hand."""
        clipped = train(
            lambda: tf1.train.GradientDescentOptimizer(0.5),
            [(X, Y)],
            1,
            lambda o: apply_grad_processors(o, [FilterNoneGrad(), GlobalNormClip(0.01)]),
        )
        residual = X @ W0 - Y
        grad = 2 * X.T @ residual / len(Y)
        grad = grad * min(1.0, 0.01 / np.linalg.norm(grad))
        np.testing.assert_allclose(clipped, W0 - 0.5 * grad, rtol=1e-5)

    def test_result(self):
        """The result is a ProxyOptimizer exposing its processors."""
        opt = apply_grad_processors(tf1.train.AdamOptimizer(), [GlobalNormClip(1)])
        assert isinstance(opt, ProxyOptimizer)
        assert opt.gradprocs == (GlobalNormClip(1),)
        assert repr(opt).startswith("apply_grad_processors(<tensorflow")

    def test_fail(self):
        """A lone processor, a non-list, or entries that are not processors are TypeErrors."""
        opt = tf1.train.GradientDescentOptimizer(0.1)
        with pytest.raises(TypeError, match="got a single GlobalNormClip: wrap it in a list"):
            apply_grad_processors(opt, GlobalNormClip(1))
        with pytest.raises(
            TypeError, match="'gradprocs' must be a list of gradient processors; got int"
        ):
            apply_grad_processors(opt, 3)
        with pytest.raises(TypeError, match="entries at fault: #1: function"):
            apply_grad_processors(opt, [GlobalNormClip(1), lambda g: g])
        with pytest.raises(TypeError, match="'opt' must be"):
            apply_grad_processors(None, [])


class TestPostProcessOptimizer:
    """`PostProcessOptimizer` runs an op per variable after each update."""

    @pytest.mark.parametrize("colocate", [True, False])
    def test_after_update(self, graph, sess, colocate):
        """The op sees the updated value: clipping after the step clips the new value."""
        v = tf1.get_variable("v", initializer=tf.constant([0.0, 0.0]))
        opt = PostProcessOptimizer(
            tf1.train.GradientDescentOptimizer(1.0),
            lambda var: tf1.assign(var, tf.clip_by_value(var, -0.5, 0.5)).op,
            colocate=colocate,
        )
        step = opt.apply_gradients([(tf.constant([2.0, -0.25]), v)])
        sess.run(v.initializer)
        sess.run(step)
        np.testing.assert_allclose(sess.run(v), [-0.5, 0.25])

    def test_none_op_and_none_grad(self, graph, sess):
        """func returning None adds nothing; variables without gradient are skipped."""
        a = tf1.get_variable("a", initializer=tf.constant(1.0))
        b = tf1.get_variable("b", initializer=tf.constant(1.0))
        seen = []
        opt = PostProcessOptimizer(
            tf1.train.GradientDescentOptimizer(1.0), lambda var: seen.append(var.op.name)
        )
        step = opt.apply_gradients([(tf.constant(1.0), a), (None, b)])
        sess.run([a.initializer, b.initializer])
        sess.run(step)
        assert seen == ["a"]
        assert sess.run([a, b]) == [0.0, 1.0]

    def test_fail(self):
        """func must be callable."""
        with pytest.raises(TypeError, match="'func' must be callable"):
            PostProcessOptimizer(tf1.train.GradientDescentOptimizer(1.0), None)


class TestVariableAssignmentOptimizer:
    """`VariableAssignmentOptimizer` assigns func(var) after each update."""

    def test_assigns(self, graph, sess):
        """The new value is computed from the updated variable; None leaves it."""
        a = tf1.get_variable("a", initializer=tf.constant(0.0))
        b = tf1.get_variable("b", initializer=tf.constant(0.0))
        opt = VariableAssignmentOptimizer(
            tf1.train.GradientDescentOptimizer(1.0),
            lambda var: tf.round(var * 2) / 2 if var.op.name == "a" else None,
        )
        step = opt.apply_gradients([(tf.constant(-0.8), a), (tf.constant(-0.8), b)])
        sess.run([a.initializer, b.initializer])
        sess.run(step)
        assert sess.run(a) == pytest.approx(1.0)
        assert sess.run(b) == pytest.approx(0.8)

    def test_fail(self):
        """func must be callable."""
        with pytest.raises(TypeError, match="'func' must be callable"):
            VariableAssignmentOptimizer(tf1.train.GradientDescentOptimizer(1.0), 1)


class TestAccumGradOptimizer:
    """`AccumGradOptimizer` sums gradients over niter runs and applies them on every niter-th."""

    @pytest.mark.parametrize("name", sorted(OPTIMIZERS))
    def test_equals_larger_batch(self, name):
        """k runs on k micro-batches == 1 run on the whole batch with the documented scaling.

        Summed gradients of mean losses are k times the big batch's mean gradient, so SGD
        and momentum need a k times larger learning rate; Adam does not see the scale.
        """
        k, cycles = 4, 3
        micro = [(X[i * 3 : (i + 1) * 3], Y[i * 3 : (i + 1) * 3]) for i in range(k)]
        big_lr = 0.05 if name == "adam" else 0.05 * k
        accum = train(
            lambda: OPTIMIZERS[name](0.05), micro, k * cycles, lambda o: AccumGradOptimizer(o, k)
        )
        plain = train(lambda: OPTIMIZERS[name](big_lr), [(X, Y)], cycles)
        np.testing.assert_allclose(accum, plain, rtol=1e-5, atol=1e-6)
        assert not np.allclose(accum, W0)

    @settings(max_examples=8, deadline=None)
    @given(st.integers(1, 4), st.integers(1, 2), st.floats(0.01, 0.2))
    def test_sgd_property(self, k, cycles, lr):
        """For any niter, cycles and learning rate, SGD accumulation equals the big batch."""
        n = 12 // k * k
        size = n // k
        micro = [(X[i * size : (i + 1) * size], Y[i * size : (i + 1) * size]) for i in range(k)]
        accum = train(
            lambda: tf1.train.GradientDescentOptimizer(lr),
            micro,
            k * cycles,
            lambda o: AccumGradOptimizer(o, k),
        )
        plain = train(lambda: tf1.train.GradientDescentOptimizer(lr * k), [(X[:n], Y[:n])], cycles)
        np.testing.assert_allclose(accum, plain, rtol=1e-5, atol=1e-6)

    def test_updates_only_every_niter(self, graph, sess):
        """The variable changes on runs niter, 2*niter, ...; accumulators reset after each."""
        v = tf1.get_variable("v", initializer=tf.constant(0.0))
        opt = AccumGradOptimizer(tf1.train.GradientDescentOptimizer(1.0), 3)
        step = opt.apply_gradients([(tf.constant(1.0), v)])
        sess.run(tf1.global_variables_initializer())
        values, accums, counts = [], [], []
        for _ in range(7):
            sess.run(step)
            values.append(sess.run(v))
            accums.append(sess.run(opt.get_slot(v, "accum_grad")))
            counts.append(sess.run(opt.counter()))
        assert values == [0, 0, -3, -3, -3, -6, -6]
        assert accums == [1, 2, 0, 1, 2, 0, 1]
        assert counts == [1, 2, 3, 4, 5, 6, 7]

    def test_slots_and_variables(self, graph):
        """Its own slot and counter and the wrapped optimizer's slots are all reachable."""
        _, _, w, loss = linear_model()
        inner = tf1.train.AdamOptimizer(0.1)
        opt = AccumGradOptimizer(inner, 2)
        opt.minimize(loss)
        assert opt.get_slot_names() == ["accum_grad", "m", "v"]
        assert opt.get_slot(w, "m") is inner.get_slot(w, "m")
        assert opt.get_slot(w, "accum_grad").shape == w.shape
        names = sorted(v.op.name for v in opt.variables())
        assert names == sorted(
            ["AccumGrad/counter", "w/AccumGrad", "beta1_power", "beta2_power", "w/Adam", "w/Adam_1"]
        )
        assert all(v not in tf1.trainable_variables() for v in opt.variables())
        assert set(opt.variables()) <= set(tf1.global_variables())

    def test_sparse_gradients(self, graph, sess):
        """IndexedSlices gradients (embedding lookups) accumulate into the right rows."""
        emb = tf1.get_variable("emb", initializer=tf.zeros([4, 2]))
        ids = tf1.placeholder(tf.int32, [None])
        loss = tf.reduce_sum(tf.gather(emb, ids))
        opt = AccumGradOptimizer(tf1.train.GradientDescentOptimizer(1.0), 2)
        step = opt.minimize(loss)
        sess.run(tf1.global_variables_initializer())
        sess.run(step, {ids: [0, 1]})
        np.testing.assert_array_equal(sess.run(emb), np.zeros([4, 2]))
        sess.run(step, {ids: [1, 3]})
        np.testing.assert_array_equal(sess.run(emb), [[-1, -1], [-2, -2], [0, 0], [-1, -1]])

    def test_global_step_every_run(self, graph, sess):
        """A global_step given to apply_gradients counts every run, not every update."""
        v = tf1.get_variable("v", initializer=tf.constant(0.0))
        gs = get_global_step_var()
        step = AccumGradOptimizer(tf1.train.GradientDescentOptimizer(1.0), 2).apply_gradients(
            [(tf.constant(1.0), v)], global_step=gs
        )
        sess.run(tf1.global_variables_initializer())
        for _ in range(3):
            sess.run(step)
        assert sess.run(gs) == 3
        assert sess.run(v) == -2.0

    def test_niter_one_is_plain(self):
        """niter=1 updates on every run, like the wrapped optimizer."""
        plain = train(lambda: tf1.train.AdamOptimizer(0.1), [(X, Y)], 3)
        accum = train(
            lambda: tf1.train.AdamOptimizer(0.1), [(X, Y)], 3, lambda o: AccumGradOptimizer(o, 1)
        )
        np.testing.assert_allclose(accum, plain, rtol=1e-6)

    def test_repr(self):
        """The repr shows the wrapped optimizer and niter."""
        inner = tf1.train.GradientDescentOptimizer(0.1)
        assert repr(AccumGradOptimizer(inner, 5)) == f"AccumGradOptimizer({inner!r}, niter=5)"
        assert AccumGradOptimizer(inner, 5).niter == 5

    def test_fail(self, graph):
        """niter must be an int >= 1; some variable must have a gradient."""
        inner = tf1.train.GradientDescentOptimizer(0.1)
        with pytest.raises(ValueError, match="'niter' must be >= 1; got 0"):
            AccumGradOptimizer(inner, 0)
        with pytest.raises(TypeError, match=r"'niter' must be an int >= 1; got float 2\.5"):
            AccumGradOptimizer(inner, 2.5)
        with pytest.raises(TypeError, match="'niter' must be an int >= 1; got bool"):
            AccumGradOptimizer(inner, True)
        v = tf1.get_variable("v", initializer=tf.constant(0.0))
        with pytest.raises(ValueError, match="no variable has a gradient"):
            AccumGradOptimizer(inner, 2).apply_gradients([(None, v)])
