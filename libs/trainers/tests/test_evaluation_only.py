"""Evaluation-only runs: ``steps_per_epoch=0``, the epoch's callbacks (an `InferenceRunner`) run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import EventKind, InferenceRunner, ModelSaver, ScalarStats, loop_events
from towerkit.sessinit import SmartInit
from towerkit.trainers import (
    AutoResumeTrainConfig,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)

tf1 = tf.compat.v1

RNG = np.random.default_rng(3)
X = RNG.standard_normal((48, 3)).astype(np.float32)
Y = X @ np.array([[1.0], [-2.0], [0.5]], np.float32)


class Linear(ModelDesc):
    def inputs(self):
        return [
            tf.TensorSpec((None, 3), tf.float32, "x"),
            tf.TensorSpec((None, 1), tf.float32, "y"),
        ]

    def build_graph(self, x, y):
        w = tf1.get_variable("w", (3, 1), initializer=tf1.zeros_initializer())
        return tf.reduce_mean(tf.square(tf.matmul(x, w) - y), name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.1)


def data():
    return NumpyInput([X, Y], batch_size=16)


def run(logdir, steps_per_epoch, **kwargs):
    """Train (or evaluate) Linear in a fresh graph; the trainer and the stats records."""
    with tf.Graph().as_default():
        config = TrainConfig(
            model=Linear(),
            data=data(),
            callbacks=[
                InferenceRunner(data(), [ScalarStats("cost")]),
                *kwargs.pop("callbacks", []),
            ],
            steps_per_epoch=steps_per_epoch,
            max_epoch=1,
            logdir=str(logdir),
            **kwargs,
        )
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
    return trainer, json.loads((logdir / "stats.json").read_text())


@pytest.mark.parametrize("k", [1, 2])
def test_a_checkpoint_evaluated_without_training(tmp_path, k):
    """Train 3 steps and save; then ``steps_per_epoch=0`` with the checkpoint as
    `session_init`: no step runs (global step 3 as restored, weights unchanged) and the
    epoch's `InferenceRunner` reports the validation cost of those weights, as NumPy
    computes it; with K=2 too."""
    trained, _ = run(tmp_path / "train", 3, callbacks=[ModelSaver()])
    ckpt = str(tmp_path / "train" / "model-3")
    reader = tf1.train.load_checkpoint(ckpt)
    w = reader.get_tensor("w")
    evaluated, stats = run(
        tmp_path / "eval",
        0,
        session_init=SmartInit(ckpt),
        steps_per_execution=k,
    )
    assert trained.global_step == 3
    assert evaluated.global_step == 3
    assert len(stats) == 1
    assert stats[0]["epoch_num"] == 1
    assert stats[0]["global_step"] == 3
    want = np.mean([np.mean((X[i : i + 16] @ w - Y[i : i + 16]) ** 2) for i in (0, 16, 32)])
    assert stats[0]["validation_cost"] == pytest.approx(want, rel=1e-5)


def test_train_with_defaults_steps_per_epoch_zero(tmp_path):
    """tensorpack's idiom, ``trainer.train_with_defaults(steps_per_epoch=0, max_epoch=1)``,
    runs the epoch's callbacks once and no step."""
    seen = []

    class Epochs(InferenceRunner):
        def _trigger_epoch(self):
            seen.append((self.epoch_num, self.global_step))
            super()._trigger_epoch()

    with tf.Graph().as_default():
        trainer = SimpleTrainer()
        trainer.setup_graph(
            Linear().get_input_signature(), data(), Linear().build_graph, Linear().get_optimizer
        )
        trainer.train_with_defaults(
            callbacks=[Epochs(data(), [ScalarStats("cost")])],
            steps_per_epoch=0,
            max_epoch=1,
            logdir=str(tmp_path),
        )
    assert seen == [(1, 0)]
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert [sorted(r) for r in stats] == [["epoch_num", "global_step", "validation_cost"]]


def test_auto_resume_refuses_an_evaluation_run(tmp_path):
    """An evaluation-only run resumes nothing: AutoResumeTrainConfig says what to use."""
    with pytest.raises(ValueError, match=r"steps_per_epoch=0 \(an evaluation-only run\)"):
        AutoResumeTrainConfig(logdir=str(tmp_path), steps_per_epoch=0, max_epoch=1)


@given(
    st.integers(min_value=1, max_value=5),
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=0, max_value=50),
)
def test_no_step_events_in_epochs_of_no_step(starting_epoch, epochs, start_global_step):
    """With 0 steps per epoch the loop's events are the epoch events alone, in order, each
    epoch once, and the global step stays where it started."""
    max_epoch = starting_epoch + epochs - 1
    events = list(loop_events(starting_epoch, max_epoch, 0, start_global_step=start_global_step))
    per_epoch = [EventKind.BEFORE_EPOCH, EventKind.AFTER_EPOCH, EventKind.TRIGGER_EPOCH]
    assert [e.kind for e in events] == [
        EventKind.BEFORE_TRAIN,
        *per_epoch * epochs,
        EventKind.AFTER_TRAIN,
    ]
    assert {e.global_step for e in events} == {start_global_step}
    assert [e.epoch_num for e in events if e.kind is EventKind.TRIGGER_EPOCH] == list(
        range(starting_epoch, max_epoch + 1)
    )
