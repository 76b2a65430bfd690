"""Programs written the way tensorpack users write them, run on towerkit.

Each program uses only what a tensorpack program would: ``ModelDesc``, a custom
``TowerTrainer`` that registers ``input.setup(...)``, callbacks reading
``self.global_step``, ``InferenceRunner`` over a ``FeedInput``, ``MaxSaver``,
``ScheduledHyperParamSetter``, and an ``OfflinePredictor`` that feeds a tensor inside
the model. Small data, a few seconds each.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import (
    Callback,
    ClassificationError,
    InferenceRunner,
    MaxSaver,
    ModelSaver,
    ScalarStats,
    ScheduledHyperParamSetter,
)
from towerkit.export import OfflinePredictor, PredictConfig
from towerkit.sessinit import SmartInit
from towerkit.towers import TowerContext, TowerFunc, add_moving_summary
from towerkit.trainers import (
    FeedInput,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TowerTrainer,
    TrainConfig,
    launch_train_with_config,
)

pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("test_tensorpack_programs")]

tf1 = tf.compat.v1

REAL_MEAN = np.array([1.5, -1.0], np.float32)


# -- a GAN with two costs, its own trainer and a separate d/g schedule -----------------------


def fc(x, units, name, seed, activation=None):
    with tf1.variable_scope(name):
        w = tf1.get_variable(
            "W", [x.shape[-1], units], initializer=tf1.glorot_uniform_initializer(seed=seed)
        )
        b = tf1.get_variable("b", [units], initializer=tf1.zeros_initializer())
        out = tf.matmul(x, w) + b
    return activation(out) if activation else out


class GANModel(ModelDesc):
    """Real points in, noise drawn inside the graph (``z``, which a sampler may feed)."""

    def inputs(self):
        return [tf.TensorSpec((None, 2), tf.float32, "real")]

    def generator(self, z):
        with tf1.variable_scope("gen"):
            h = fc(z, 16, "fc0", 1, tf.nn.relu)
            return tf.identity(fc(h, 2, "out", 2), name="sample")

    def discriminator(self, x):
        with tf1.variable_scope("discrim", reuse=tf1.AUTO_REUSE):
            h = fc(x, 16, "fc0", 3, tf.nn.leaky_relu)
            return tf.squeeze(fc(h, 1, "out", 4), 1)

    def build_graph(self, real):
        noise = tf1.random_normal([tf.shape(real)[0], 2], seed=5)
        z = tf1.placeholder_with_default(noise, [None, 2], name="z")
        fake = self.generator(z)
        real_logit, fake_logit = self.discriminator(real), self.discriminator(fake)
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        self.d_loss = tf.add(
            tf.reduce_mean(xent(labels=tf.ones_like(real_logit), logits=real_logit)),
            tf.reduce_mean(xent(labels=tf.zeros_like(fake_logit), logits=fake_logit)),
            name="d_loss",
        )
        self.g_loss = tf.reduce_mean(
            xent(labels=tf.ones_like(fake_logit), logits=fake_logit), name="g_loss"
        )
        add_moving_summary(self.d_loss, self.g_loss)
        self.d_vars = tf1.trainable_variables("discrim")
        self.g_vars = tf1.trainable_variables("gen")

    def optimizer(self):
        d_lr = tf1.get_variable("d_lr", initializer=1e-2, trainable=False)
        g_lr = tf1.get_variable("g_lr", initializer=1e-2, trainable=False)
        return tf1.train.AdamOptimizer(d_lr, beta1=0.5), tf1.train.AdamOptimizer(g_lr, beta1=0.5)


class GANTrainer(TowerTrainer):
    """``d_steps`` discriminator runs, then one generator run."""

    def __init__(self, input, model, d_steps=2):
        super().__init__()
        signature = model.get_input_signature()
        self.register_callback(input.setup(signature))
        self.tower_func = TowerFunc(model.build_graph, signature)
        with TowerContext("", is_training=True):
            self.tower_func(*input.get_input_tensors())
        opt_d, opt_g = model.optimizer()
        with tf1.name_scope("optimize"):
            self.d_min = opt_d.minimize(model.d_loss, var_list=model.d_vars, name="d_op")
            self.g_min = opt_g.minimize(model.g_loss, var_list=model.g_vars, name="g_op")
        self.d_steps = d_steps
        self.runs = {"d": 0, "g": 0}

    def run_step(self):
        for _ in range(self.d_steps):
            self.hooked_sess.run(self.d_min)
            self.runs["d"] += 1
        self.hooked_sess.run(self.g_min)
        self.runs["g"] += 1


class SampleGap(Callback):
    """After each epoch, how far the generated mean is from the real one (feeds ``z``)."""

    def __init__(self):
        self.seen = []

    def _setup_graph(self):
        self.sampler = self.trainer.get_predictor(["z"], ["gen/sample"])

    def _trigger(self):
        z = np.random.default_rng(7).standard_normal((500, 2)).astype(np.float32)
        (points,) = self.sampler(z)
        gap = float(np.linalg.norm(points.mean(0) - REAL_MEAN))
        self.trainer.monitors.put_scalar("mean_gap", gap)
        self.seen.append((self.epoch_num, self.global_step, self.local_step))


def train_gan(logdir, epochs=4, steps=60):
    real = np.random.default_rng(0).normal(REAL_MEAN, 0.3, (64 * 20, 2)).astype(np.float32)
    gap = SampleGap()
    with tf.Graph().as_default():
        tf1.set_random_seed(0)
        trainer = GANTrainer(NumpyInput([real], batch_size=64, seed=0), GANModel())
        trainer.train_with_defaults(
            callbacks=[
                ModelSaver(),
                gap,
                ScheduledHyperParamSetter("d_lr", [(1, 1e-2), (3, 2e-3)]),
                ScheduledHyperParamSetter("g_lr", [(1, 2e-2), (3, 5e-3)]),
            ],
            steps_per_epoch=steps,
            max_epoch=epochs,
            logdir=logdir,
        )
    return trainer, gap


@pytest.fixture(scope="module")
def gan(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("gan"))
    trainer, gap = train_gan(logdir)
    return trainer, gap, logdir


class TestGAN:
    """A two-cost GAN trainer on TowerTrainer, with separate d and g schedules."""

    def test_steps_and_counters(self, gan):
        """Each step is 2 d runs and 1 g run; a callback reads its counters as ``self.*``."""
        trainer, gap, _ = gan
        assert trainer.runs == {"d": 480, "g": 240}
        assert trainer.global_step == 720
        assert gap.seen == [(1, 180, 59), (2, 360, 59), (3, 540, 59), (4, 720, 59)]

    def test_schedules_and_stats(self, gan):
        """Each learning rate follows its own schedule; both costs reach stats.json."""
        _, _, logdir = gan
        with open(os.path.join(logdir, "stats.json")) as f:
            records = json.load(f)
        set_at = {k: {r["epoch_num"]: r[k] for r in records if k in r} for k in ("d_lr", "g_lr")}
        # Each setter puts the value in effect in every epoch's record (float32 values).
        assert set_at == {
            "d_lr": pytest.approx({1: 1e-2, 2: 1e-2, 3: 2e-3, 4: 2e-3}, rel=1e-6),
            "g_lr": pytest.approx({1: 2e-2, 2: 2e-2, 3: 5e-3, 4: 5e-3}, rel=1e-6),
        }
        for r in records:
            assert np.isfinite(r["d_loss"])
            assert np.isfinite(r["g_loss"])
        assert records[-1]["mean_gap"] < 0.5 * np.linalg.norm(REAL_MEAN), "the generator learnt"

    def test_sampler_feeds_z(self, gan):
        """An offline sampler feeds ``z``, a tensor inside the model, from the checkpoint."""
        _, _, logdir = gan
        config = PredictConfig(
            model=GANModel(),
            input_names=["z"],
            output_names=["gen/sample"],
            session_init=SmartInit(logdir),
        )
        z = np.random.default_rng(7).standard_normal((500, 2)).astype(np.float32)
        with OfflinePredictor(config) as sampler:
            (points,) = sampler(z)
            (again,) = sampler(z)
        np.testing.assert_allclose(points, again)
        with open(os.path.join(logdir, "stats.json")) as f:
            records = json.load(f)
        gap = float(np.linalg.norm(points.mean(0) - REAL_MEAN))
        assert gap == pytest.approx(records[-1]["mean_gap"], rel=1e-4), "the trained generator"


# -- a convnet with validation, a best-model saver and a learning-rate schedule -------------------


def conv(x, channels, name, seed):
    with tf1.variable_scope(name):
        w = tf1.get_variable(
            "W",
            [3, 3, x.shape[-1], channels],
            initializer=tf1.glorot_uniform_initializer(seed=seed),
        )
        return tf.nn.relu(tf1.nn.conv2d(x, w, [1, 1, 1, 1], "SAME"))


class DigitsConvnet(ModelDesc):
    def inputs(self):
        return [
            tf.TensorSpec((None, 8, 8, 1), tf.float32, "input"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, image, label):
        h = conv(image, 8, "conv0", 1)
        h = tf1.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
        h = tf1.reshape(h, [-1, 4 * 4 * 8])
        logits = fc(h, 10, "fc", 2)
        tf.nn.softmax(logits, name="prob")
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
            name="cross_entropy_loss",
        )
        correct = tf.cast(tf1.nn.in_top_k(logits, label, 1), tf.float32, name="correct")
        accuracy = tf.reduce_mean(correct, name="accuracy")
        wrong = tf.subtract(1.0, correct, name="incorrect_vector")
        add_moving_summary(cost, tf.reduce_mean(wrong, name="train_error"))
        del accuracy
        return cost

    def optimizer(self):
        lr = tf1.get_variable("learning_rate", initializer=1e-2, trainable=False)
        return tf1.train.AdamOptimizer(lr)


def digits_batches():
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(labels))
    images, labels = images[order], labels[order]
    train = [(images[i : i + 32], labels[i : i + 32]) for i in range(0, 1397, 32)]
    test = [(images[i : i + 100], labels[i : i + 100]) for i in range(1397, 1797, 100)]
    return train, test


class TestConvnet:
    """InferenceRunner over a FeedInput, ScalarStats and ClassificationError, MaxSaver, schedule."""

    def test_trains(self, tmp_path):
        """Validation error falls; the best model is saved; the learning rate follows its schedule."""
        train, test = digits_batches()
        logdir = str(tmp_path / "digits")
        with tf.Graph().as_default():
            config = TrainConfig(
                model=DigitsConvnet(),
                dataflow=train,
                callbacks=[
                    ModelSaver(),
                    InferenceRunner(
                        FeedInput(test),
                        [ScalarStats(["cross_entropy_loss", "accuracy"]), ClassificationError()],
                    ),
                    MaxSaver("validation_accuracy"),
                    ScheduledHyperParamSetter("learning_rate", [(1, 1e-2), (3, 1e-3)]),
                ],
                max_epoch=4,
                logdir=logdir,
            )
            launch_train_with_config(config, SimpleTrainer())
        with open(os.path.join(logdir, "stats.json")) as f:
            records = json.load(f)
        errors = [r["validation_error"] for r in records]
        assert errors[-1] < 0.2
        assert errors[-1] < errors[0]
        accuracy = [r["validation_accuracy"] for r in records]
        assert accuracy == pytest.approx([1 - e for e in errors], abs=1e-6), "equal-size batches"
        set_at = {r["epoch_num"]: r["learning_rate"] for r in records if "learning_rate" in r}
        # the value in effect in every epoch's record: 1e-2, then 1e-3 from epoch 3
        assert set_at == pytest.approx({1: 1e-2, 2: 1e-2, 3: 1e-3, 4: 1e-3}, rel=1e-6)
        assert os.path.isfile(os.path.join(logdir, "max-validation_accuracy.tfmodel.index"))
        assert all(r["cross_entropy_loss"] > 0 for r in records)
