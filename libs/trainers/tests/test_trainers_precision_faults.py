"""Mixed precision's faults: skipped steps are counted and bounded, and the policy is never lost.

Real sessions, real checkpoints and ``stats.json``: a float16 run on data it cannot
train on (NaN everywhere, values beyond float16's range) says so and fails; a
tensorpack-style trainer calling ``self.tower_func`` builds under the policy, and its
predictors and `InferenceRunner` towers in float32 as documented; a graph built
without the policy is refused.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import InferenceRunner, JSONWriter, ModelSaver, ScalarStats
from towerkit.towers import TowerContext
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    LossScaleError,
    LossScaleOptimizer,
    LossScaleSchedule,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
    next_loss_scale,
)
from towerkit.trainers._precision import SKIPPED_STEPS_NAME, next_stuck_steps

STEPS = 6


def arrays(n=48, scale=1.0, nan=False):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(n, 4)) * scale).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    if nan:
        x[:, 1] = np.nan
    return [x, y]


class Dense(ModelDesc):
    """One dense layer; records the dtype each tower's input reached it in."""

    def __init__(self, schedule=None):
        self.schedule = schedule
        self.dtypes = []

    def inputs(self):
        return [tf.TensorSpec((None, 4), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        self.dtypes.append(x.dtype)
        w = tf1.get_variable("W", [4, 2], initializer=tf1.glorot_uniform_initializer(seed=1))
        logits = tf.cast(tf.matmul(x, tf.cast(w, x.dtype)), tf.float32)
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost"
        )

    def optimizer(self):
        opt = tf1.train.GradientDescentOptimizer(0.1)
        return opt if self.schedule is None else LossScaleOptimizer(opt, self.schedule)


def train(logdir, data, *, model=None, precision="mixed_float16", epochs=2, trainer=None, cbs=()):
    cfg = TrainConfig(
        model=Dense() if model is None else model,
        data=NumpyInput(data, batch_size=8, shuffle=False),
        callbacks=[ModelSaver(), *cbs],
        monitors=[JSONWriter()],
        max_epoch=epochs,
        steps_per_epoch=STEPS,
        logdir=str(logdir),
        precision=precision,
    )
    with tf.Graph().as_default():
        tf1.set_random_seed(0)
        launch_train_with_config(cfg, SimpleTrainer() if trainer is None else trainer)
    return json.loads((logdir / "stats.json").read_text())


class TestNextStuckSteps:
    """`next_stuck_steps`: the skipped steps in a row at the minimum scale."""

    @given(
        st.lists(st.booleans(), max_size=60),
        st.sampled_from([1.0, 4.0, 2.0**15]),
    )
    def test_counts_the_trailing_skips_at_the_minimum(self, steps, initial):
        """It equals the run of skipped steps, at the end, taken at the minimum scale."""
        schedule = LossScaleSchedule(initial=initial, growth_interval=3)
        scale, good, stuck, trail = schedule.initial, 0, 0, 0
        for finite in steps:
            at_min = scale <= schedule.minimum
            stuck = next_stuck_steps(stuck, scale, finite, schedule)
            scale, good = next_loss_scale(scale, good, finite, schedule)
            trail = trail + 1 if (not finite and at_min) else 0
            assert stuck == trail
            assert stuck == 0 or scale == schedule.minimum

    def test_fail(self):
        """The bound is an int >= 1."""
        with pytest.raises(ValueError, match="max_skipped_at_minimum must be an int >= 1; got 0"):
            LossScaleSchedule(max_skipped_at_minimum=0)


@pytest.mark.parametrize(
    "data", [arrays(nan=True), arrays(scale=1e6)], ids=["nan-everywhere", "beyond-float16"]
)
def test_a_float16_run_that_trains_nothing_fails_saying_why(tmp_path, data):
    """Every step skipped: after the scale reaches its minimum and `max_skipped_at_minimum`
    more steps, the run fails with LossScaleError; no checkpoint of that state is written."""
    model = Dense(LossScaleSchedule(initial=4.0, max_skipped_at_minimum=5))
    with pytest.raises(LossScaleError, match=r"5 steps in a row had non-finite gradients"):
        train(tmp_path, data, model=model, epochs=3)
    # 4 -> 2 -> 1 in two skipped steps, then 5 more: the eighth step fails, in epoch 2
    assert not (tmp_path / "model-8.index").exists()


def test_skipped_steps_are_a_statistic_and_a_whole_skipped_epoch_warns(tmp_path, caplog):
    """Within the bound: each epoch's skipped steps in stats.json, and a warning for an
    epoch that applied none; a finite run reports 0 and warns nothing."""
    model = Dense(LossScaleSchedule(initial=4.0, max_skipped_at_minimum=1000))
    with caplog.at_level(logging.WARNING, logger="towerkit.trainers"):
        stats = train(tmp_path / "nan", arrays(nan=True), model=model)
    assert [r[SKIPPED_STEPS_NAME] for r in stats] == [STEPS, STEPS]
    assert [r["loss_scale"] for r in stats] == [1.0, 1.0]
    warned = [r.getMessage() for r in caplog.records if "applied none" in r.getMessage()]
    assert len(warned) == 2, caplog.text
    assert f"epoch 1 applied none of its {STEPS} steps" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="towerkit.trainers"):
        stats = train(tmp_path / "fine", arrays())
    assert [r[SKIPPED_STEPS_NAME] for r in stats] == [0, 0]
    assert "applied none" not in caplog.text


class TensorpackStyle(SimpleTrainer):
    """tensorpack's own idiom: the tower is built with ``self.tower_func``."""

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        del get_cost_fn
        with TowerContext("", is_training=True):
            cost = self.tower_func(*input.get_input_tensors())
        self.train_op = get_opt_fn().minimize(cost, name="train_op")
        return []


class Unbound(SimpleTrainer):
    """Builds its tower from the model's function itself: the policy cannot reach it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        del get_cost_fn
        with TowerContext("", is_training=True):
            cost = self.model.build_graph(*input.get_input_tensors())
        self.train_op = get_opt_fn().minimize(cost, name="train_op")
        return []


@pytest.mark.parametrize(
    ("precision", "dtype"), [("mixed_bfloat16", tf.bfloat16), ("mixed_float16", tf.float16)]
)
def test_self_tower_func_predictors_and_inference_towers_follow_the_policy(
    tmp_path, precision, dtype
):
    """The training tower of ``self.tower_func`` computes in the policy's dtype; an
    InferenceRunner's tower and a predictor built in a callback in float32, as documented."""
    from towerkit.callbacks import Callback

    class Predicts(Callback):
        def _setup_graph(self):
            self.predict = self.trainer.get_predictor(["x"], ["cost"])

    model = Dense()
    validation = InferenceRunner(NumpyInput(arrays(16), batch_size=8), [ScalarStats("cost")])
    stats = train(
        tmp_path,
        arrays(),
        model=model,
        precision=precision,
        trainer=TensorpackStyle(),
        cbs=[validation, Predicts()],
    )
    assert model.dtypes == [dtype, tf.float32, tf.float32], "training, inference, predictor"
    assert [r["global_step"] for r in stats] == [STEPS, 2 * STEPS]


def test_a_graph_built_without_the_policy_is_refused(tmp_path):
    """A custom trainer whose tower never sees the policy: refused before training, naming it."""
    model = Dense()
    with pytest.raises(TypeError, match="precision 'mixed_bfloat16': no op of the training graph"):
        train(tmp_path, arrays(), model=model, precision="mixed_bfloat16", trainer=Unbound(model))
    assert model.dtypes == [tf.float32]
    assert not (tmp_path / "stats.json").exists()


def test_a_tower_trainer_built_by_hand_refuses_a_policy_it_did_not_build():
    """A `TowerTrainer` whose graph was built without ``setup_graph`` (float32) refuses
    ``train(precision="mixed_bfloat16")`` rather than train in float32 silently."""
    from towerkit.towers import TowerFunc
    from towerkit.trainers import TowerTrainer

    class ByHand(TowerTrainer):
        def __init__(self, model, source):
            super().__init__()
            self.tower_func = TowerFunc(model.build_graph, model.get_input_signature())
            source.setup(self.tower_func.input_signature)
            with TowerContext("", is_training=True):
                cost = self.tower_func(*source.get_input_tensors())
            self.train_op = model.get_optimizer().minimize(cost)
            self.register_callback(source.get_callbacks())

    with tf.Graph().as_default():
        trainer = ByHand(Dense(), NumpyInput(arrays(), batch_size=8))
        with pytest.raises(
            ValueError, match=r"built in 'float32'; pass precision='mixed_bfloat16'"
        ):
            trainer.train_with_defaults(
                precision="mixed_bfloat16", callbacks=[], monitors=[], steps_per_epoch=2
            )
        assert trainer.global_step == 0
