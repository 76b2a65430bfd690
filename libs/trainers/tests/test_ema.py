"""EMAOptimizer: moving averages of the weights updated inside the step, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import Callback, ModelSaver, SwapEMAWeights
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AutoResumeTrainConfig,
    EMAOptimizer,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    ema_decay,
    launch_train_with_config,
)

SPE = 8


def regression(n=SPE * 8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + 0.3).astype(np.float32)
    return [x, y]


class Linear(ModelDesc):
    """y = x W + b, squared error, SGD in an EMAOptimizer."""

    def __init__(self, decay=0.8, warmup=False):
        self.decay, self.warmup = decay, warmup

    def inputs(self):
        return [tf.TensorSpec([None, 4], tf.float32, "x"), tf.TensorSpec([None], tf.float32, "y")]

    def build_graph(self, x, y):
        w = tf1.get_variable("W", [4, 1], initializer=tf1.constant_initializer(0.1))
        b = tf1.get_variable("b", [], initializer=tf1.zeros_initializer())
        pred = tf.identity(tf.squeeze(tf.matmul(x, w), 1) + b, name="pred")
        return tf.reduce_mean(
            tf.square(tf.cast(pred, tf.float32) - tf.cast(y, tf.float32)), name="cost"
        )

    def optimizer(self):
        return EMAOptimizer(tf1.train.GradientDescentOptimizer(0.05), self.decay, self.warmup)


class RecordWeights(Callback):
    """The weights after every step (K = 1), and their averages at the end."""

    def __init__(self):
        self.seen = []

    def _setup_graph(self):
        by_name = {v.op.name: v for v in tf1.global_variables()}
        self.vars = [by_name["W"], by_name["b"]]

    def _before_train(self):
        self.seen.append(self.trainer.sess.run(self.vars))

    def _trigger_step(self):
        self.seen.append(self.trainer.sess.run(self.vars))


def train(logdir, *, k=1, epochs=2, model=None, callbacks=(), resume=False, precision="float32"):
    kind = AutoResumeTrainConfig if resume else TrainConfig
    config = kind(
        model=model or Linear(),
        data=NumpyInput(regression(), batch_size=8, shuffle=False),
        callbacks=[*callbacks, ModelSaver(max_to_keep=0)],
        monitors=[],
        steps_per_epoch=SPE,
        max_epoch=epochs,
        logdir=str(logdir),
        steps_per_execution=k,
        precision=precision,
    )
    with tf.Graph().as_default():
        tf1.set_random_seed(0)
        launch_train_with_config(config, SimpleTrainer())
    return tf.train.load_checkpoint(tf1.train.latest_checkpoint(str(logdir)))


def numpy_ema(seen, decay, warmup, applied=None):
    """The averages of the weights after each step, from the initial weights (only the
    steps `applied` says were applied, when given)."""
    shadow = [np.array(v, np.float64) for v in seen[0]]
    n = 0
    for i, weights in enumerate(seen[1:]):
        if applied is not None and not applied[i]:
            continue
        d = ema_decay(decay, n, warmup=warmup)
        shadow = [d * s + (1 - d) * w for s, w in zip(shadow, weights)]
        n += 1
    return shadow


class TestEmaDecay:
    """The pure decay rule."""

    @given(st.floats(0, 0.9999), st.integers(0, 10**6))
    def test_rule(self, decay, n):
        """Without warm-up the decay; with it never above the decay, never decreasing in n."""
        assert ema_decay(decay, n, warmup=False) == decay
        d = ema_decay(decay, n, warmup=True)
        assert d == min(decay, (1 + n) / (10 + n))
        assert 0 <= d <= decay
        assert ema_decay(decay, n + 1, warmup=True) >= d

    @pytest.mark.parametrize(
        ("decay", "error", "match"),
        [
            (1.0, ValueError, r"'decay' must be a number in \[0, 1\); got 1.0"),
            (-0.1, ValueError, r"got -0.1"),
            (float("nan"), ValueError, r"got nan"),
            ("0.9", TypeError, r"got str '0.9'"),
        ],
    )
    def test_fail(self, decay, error, match):
        """A decay outside [0, 1) is refused, by the rule and by the optimizer."""
        with pytest.raises(error, match=match):
            ema_decay(decay, 0, warmup=False)
        with pytest.raises(error, match=match):
            EMAOptimizer(tf1.train.GradientDescentOptimizer(0.1), decay)

    def test_repr(self):
        """The repr names the wrapped optimizer, the decay and the warm-up."""
        opt = EMAOptimizer(tf1.train.GradientDescentOptimizer(0.1), 0.9, warmup=True)
        assert repr(opt).startswith("EMAOptimizer(<tensorflow")
        assert repr(opt).endswith("decay=0.9, warmup=True)")


class TestAgainstNumpy:
    """The averages equal a NumPy computation over the weights seen after each step."""

    @pytest.mark.parametrize("warmup", [False, True])
    def test_values(self, tmp_path, warmup):
        """W and b's averages after 16 steps, with and without warm-up; the counter counts steps."""
        rec = RecordWeights()
        reader = train(tmp_path, model=Linear(0.8, warmup), callbacks=[rec])
        assert len(rec.seen) == 2 * SPE + 1
        want = numpy_ema(rec.seen, 0.8, warmup)
        np.testing.assert_allclose(
            reader.get_tensor("W/ExponentialMovingAverage"), want[0], rtol=1e-5
        )
        np.testing.assert_allclose(
            reader.get_tensor("b/ExponentialMovingAverage"), want[1], rtol=1e-5
        )
        np.testing.assert_allclose(reader.get_tensor("W"), rec.seen[-1][0])
        assert not np.allclose(want[0], rec.seen[-1][0])  # the average lags the weights
        if warmup:
            assert reader.get_tensor("EMAOptimizer/num_updates") == 2 * SPE

    def test_k_steps_per_call(self, tmp_path):
        """K = 4 steps per session call update the averages 4 times: the same values as K = 1."""
        one = train(tmp_path / "k1", model=Linear(0.8, True))
        four = train(tmp_path / "k4", k=4, model=Linear(0.8, True))
        for name in ("W/ExponentialMovingAverage", "b/ExponentialMovingAverage", "W"):
            np.testing.assert_allclose(four.get_tensor(name), one.get_tensor(name), rtol=1e-5)
        assert four.get_tensor("EMAOptimizer/num_updates") == 2 * SPE

    def test_mixed_precision(self, tmp_path):
        """Under mixed float16 (loss scaling: the update inside its cond) the averages follow NumPy."""
        rec = RecordWeights()
        reader = train(tmp_path, callbacks=[rec], precision="mixed_float16")
        # a step with non-finite gradients (the scale too high) applies nothing, the average neither
        applied = [not np.array_equal(a[0], b[0]) for a, b in zip(rec.seen, rec.seen[1:])]
        assert 0 < sum(applied) < len(applied)
        want = numpy_ema(rec.seen, 0.8, False, applied)
        np.testing.assert_allclose(
            reader.get_tensor("W/ExponentialMovingAverage"), want[0], rtol=1e-4
        )

    def test_resume_exactly(self, tmp_path):
        """Two epochs in one run equal one epoch, then a resumed one: averages and counter."""
        whole = train(tmp_path / "whole", model=Linear(0.8, True))
        train(tmp_path / "part", epochs=1, model=Linear(0.8, True))
        rec = RecordWeights()
        resumed = train(tmp_path / "part", model=Linear(0.8, True), resume=True, callbacks=[rec])
        assert len(rec.seen) == SPE + 1  # it resumed: only the second epoch ran
        for name in (
            "W/ExponentialMovingAverage",
            "b/ExponentialMovingAverage",
            "EMAOptimizer/num_updates",
        ):
            np.testing.assert_array_equal(resumed.get_tensor(name), whole.get_tensor(name))


class Peek(Callback):
    """Reads W in its trigger (every epoch)."""

    def __init__(self):
        self.inside = []

    def _trigger(self):
        (w,) = [v for v in tf1.global_variables() if v.op.name == "W"]
        self.inside.append(self.trainer.sess.run(w))


class TestSwapEMAWeights:
    """The averages in place of the weights while a callback triggers, and only then."""

    def test_swap(self, tmp_path):
        """The wrapped callback sees the averages; the checkpoints hold the trained weights."""
        peek = Peek()
        swap = SwapEMAWeights(peek)
        rec = RecordWeights()
        reader = train(tmp_path, epochs=1, callbacks=[rec, swap])
        assert swap.averaged == ("W", "b")
        np.testing.assert_allclose(peek.inside[-1], reader.get_tensor("W/ExponentialMovingAverage"))
        np.testing.assert_allclose(reader.get_tensor("W"), rec.seen[-1][0])

    def test_no_average(self, tmp_path):
        """Without EMAOptimizer the swap refuses to start, saying why."""
        from towerkit.callbacks import CallbackError

        class Plain(Linear):
            def optimizer(self):
                return tf1.train.GradientDescentOptimizer(0.05)

        with pytest.raises(CallbackError, match=r"no variable of the graph has a moving average"):
            train(tmp_path, epochs=1, model=Plain(), callbacks=[SwapEMAWeights(Peek())])
