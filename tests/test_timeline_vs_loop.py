"""The timeline tool predicts exactly what a real training run's callbacks do."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import (
    Callback,
    ObjAttrParam,
    PeriodicCallback,
    PeriodicTrigger,
    ScheduledHyperParamSetter,
)
from towerkit.tools.timeline import load_description, run_timeline
from towerkit.trainers import NumpyInput, SimpleTrainer

pytestmark = pytest.mark.procs

tf1 = tf.compat.v1

LOOP = {"steps_per_epoch": 5, "max_epoch": 6}
SCHEDULE = [(0, 0.5), (2, 0.25), (5, 0.125)]
STEP_SCHEDULE = [(3, 1.0), (11, 2.0), (29, 3.0)]


class Recorder(Callback):
    """Records (epoch, global step) at each ``trigger()``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def _trigger(self) -> None:
        self.calls.append((self.trainer.epoch_num, self.trainer.global_step))


class Knob:
    """An object whose attribute a setter sets; it records each value with the loop position."""

    def __init__(self, trainer_box: list) -> None:
        self._value = -1.0
        self._box = trainer_box
        self.sets: list[tuple[int, int, float]] = []

    @property
    def value(self) -> float:
        return self._value

    @value.setter
    def value(self, v: float) -> None:
        t = self._box[0]
        self.sets.append((t.epoch_num, t.global_step, float(v)))
        self._value = v


def _cost(x: tf.Tensor) -> tf.Tensor:
    w = tf1.get_variable("w", [2], initializer=tf1.zeros_initializer())
    return tf.reduce_mean(tf.square(tf.reduce_sum(x * w, axis=1) - 1.0), name="cost")


@pytest.mark.slow
def test_timeline_matches_a_real_run():
    """Each callback fires at the epochs and global steps the timeline predicts, with its values."""
    graph = tf.Graph()
    with graph.as_default():
        trainer = SimpleTrainer()
        box = [trainer]
        every3, every2e, gated, plain = Recorder(), Recorder(), Recorder(), Recorder()
        lr, lr_steps = Knob(box), Knob(box)
        source = NumpyInput([np.ones((10, 2), np.float32)], batch_size=2, shuffle=False)
        trainer.setup_graph(
            [tf.TensorSpec((None, 2), tf.float32, "x")],
            source,
            _cost,
            lambda: tf1.train.GradientDescentOptimizer(0.1),
        )
        callbacks = [
            PeriodicTrigger(every3, every_k_steps=3),
            PeriodicTrigger(every2e, every_k_epochs=2, before_train=True),
            PeriodicCallback(gated, every_k_epochs=4),
            plain,
            ScheduledHyperParamSetter(ObjAttrParam(lr, "value", "lr"), SCHEDULE),
            ScheduledHyperParamSetter(
                ObjAttrParam(lr_steps, "value", "lr_steps"), STEP_SCHEDULE, step_based=True
            ),
        ]
        from towerkit.trainers import NewSessionCreator

        trainer.train(
            callbacks,
            [],
            NewSessionCreator(),
            None,
            steps_per_epoch=LOOP["steps_per_epoch"],
            max_epoch=LOOP["max_epoch"],
        )

    description = load_description(
        LOOP,
        [
            {"name": "every3", "every_k_steps": 3},
            {"name": "every2e", "every_k_epochs": 2, "before_train": True},
            {"name": "gated", "type": "PeriodicCallback", "every_k_epochs": 4},
            {"name": "plain"},
            {"name": "lr", "schedule": [list(p) for p in SCHEDULE]},
            {"name": "lr_steps", "schedule": [list(p) for p in STEP_SCHEDULE], "step_based": True},
        ],
    )
    predicted: dict[str, list] = {}
    for f in run_timeline(description):
        entry = (
            (f.epoch_num, f.global_step)
            if f.value is None
            else (f.epoch_num, f.global_step, f.value)
        )
        predicted.setdefault(f.name, []).append(entry)

    observed = {
        "every3": every3.calls,
        "every2e": every2e.calls,
        "gated": gated.calls,
        "plain": plain.calls,
        "lr": lr.sets,
        "lr_steps": lr_steps.sets,
    }
    assert observed == predicted
    assert predicted["gated"] == [(4, 20), (6, 30)]
    assert predicted["every2e"][0] == (0, 0)
