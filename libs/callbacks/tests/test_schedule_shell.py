"""ScheduledHyperParamSetter sets, at every event of a real loop, what `scheduled_value` says."""

import attrs
import numpy as np
import tensorflow as tf
from callbacks_strategies import schedule_points
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    EventKind,
    OnSchedule,
    PiecewiseSchedule,
    ScheduledHyperParamSetter,
    loop_events,
    scheduled_value,
)
from towerkit.callbacks._schedules import points_kind
from towerkit.towers.compat import tf1

WATCHED = (EventKind.BEFORE_TRAIN, EventKind.TRIGGER_STEP, EventKind.TRIGGER_EPOCH)
INITIAL = -7.0


class Watch(Callback):
    """After the setter, at each watched event: the variable's value and the setter's answer."""

    def __init__(self, setter):
        self.setter = setter
        self.seen = []

    def _setup_graph(self):
        (var,) = [v for v in tf1.global_variables() if v.op.name == "learning_rate"]
        self.lr = var.read_value()

    def _log(self, kind):
        t = self.trainer
        value = np.float32(t.sess.run(self.lr))
        self.seen.append((kind, t.epoch_num, t.global_step, value, self.setter.get_value_to_set()))

    def _before_train(self):
        self._log(EventKind.BEFORE_TRAIN)

    def _trigger_step(self):
        self._log(EventKind.TRIGGER_STEP)

    def _trigger_epoch(self):
        self._log(EventKind.TRIGGER_EPOCH)


def run(setter, *, starting, max_epoch, steps, start_gs):
    watch = Watch(setter)
    g = tf.Graph()
    with g.as_default():
        lr = tf1.get_variable("learning_rate", initializer=INITIAL, trainable=False)
        w = tf1.get_variable("w", initializer=0.0)
        train_op = tf1.assign_add(w, lr)
        gs_init = None
        if start_gs:

            class SetGlobalStep:
                def init(self, sess):
                    tf1.train.get_global_step(sess.graph).load(start_gs, sess)

            gs_init = SetGlobalStep()
        LoopTrainer(
            g,
            train_op,
            [setter, watch],
            None,
            steps_per_epoch=steps,
            max_epoch=max_epoch,
            starting_epoch=starting,
            session_init=gs_init,
        ).train()
    return watch.seen


def predicted(rule, *, starting, max_epoch, steps, start_gs):
    """The fold of `scheduled_value` over the loop's events: the value after each watched one."""
    value = np.float32(INITIAL)
    out = []
    for event in loop_events(starting, max_epoch, steps, start_global_step=start_gs, kinds=WATCHED):
        new = scheduled_value(rule, event)
        if new is not None:
            value = np.float32(new)
        asked = scheduled_value(rule, attrs.evolve(event, kind=points_kind(rule.schedule)))
        out.append((event.kind, event.epoch_num, event.global_step, value, asked))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    points=schedule_points(max_size=4, max_point=10),
    interp=st.sampled_from([None, "linear"]),
    unit=st.sampled_from(["epoch", "step"]),
    set_at_beginning=st.booleans(),
    starting=st.integers(1, 3),
    epochs=st.integers(0, 3),
    steps=st.integers(1, 3),
    start_gs=st.integers(0, 4),
)
def test_shell_values_are_the_pure_function(
    points, interp, unit, set_at_beginning, starting, epochs, steps, start_gs
):
    """At every step and epoch the variable holds what `scheduled_value` implies, and
    ``get_value_to_set`` (the ``trigger()`` path) answers what it says at the schedule's points."""
    schedule = PiecewiseSchedule(points=points, interp=interp, unit=unit)
    rule = OnSchedule(schedule=schedule, set_at_beginning=set_at_beginning)
    setter = ScheduledHyperParamSetter("learning_rate", schedule, set_at_beginning=set_at_beginning)
    assert setter.trigger_record == rule
    bounds = {"starting": starting, "max_epoch": starting + epochs - 1, "steps": steps}
    seen = run(setter, start_gs=start_gs, **bounds)
    assert seen == predicted(rule, start_gs=start_gs, **bounds)
