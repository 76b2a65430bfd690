"""Test helpers: a callback that records the loop's events, small models, trainers."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from towerkit.callbacks import (
    Callback,
    EventKind,
    LoopBounds,
    LoopEvent,
    LoopPosition,
    StopTraining,
)
from towerkit.towers.compat import tf1
from towerkit.trainers import Trainer
from towerkit.trainers._sesscreate import NewSessionCreator

ALL_KINDS = tuple(EventKind)


class Probe(Callback):
    """Records every callback method the loop calls, with the trainer's position then.

    Args:
        stop_at: ``(kind, nth)``: raise `StopTraining` at the nth (0-based) call of that kind.
        error_at: same, raising ``error`` instead.
        request_stop_at: global step (after the run) at which ``after_run`` asks the
            hooked session to stop.
        chief_only: the callback's ``chief_only``.
    """

    def __init__(
        self, stop_at=None, error_at=None, error=None, request_stop_at=None, chief_only=False
    ):
        self.events: list[tuple[str, int, int, int]] = []
        self.counts: dict[EventKind, int] = {}
        self.stop_at = stop_at
        self.error_at = error_at
        self.error = error
        self.request_stop_at = request_stop_at
        self.chief_only = chief_only
        self.setup_done = False

    def _record(self, kind: EventKind) -> None:
        t = self.trainer
        self.events.append((kind.value, t.epoch_num, t.local_step, t.global_step))
        n = self.counts.get(kind, 0)
        self.counts[kind] = n + 1
        if self.stop_at == (kind, n):
            raise StopTraining(f"probe stops at {kind.value} #{n}")
        if self.error_at == (kind, n):
            raise self.error

    def _setup_graph(self):
        self.setup_done = True

    def _before_train(self):
        self._record(EventKind.BEFORE_TRAIN)

    def _before_epoch(self):
        self._record(EventKind.BEFORE_EPOCH)

    def _before_run(self, ctx):
        self._record(EventKind.BEFORE_RUN)

    def _after_run(self, ctx, values):
        self._record(EventKind.AFTER_RUN)
        if self.request_stop_at is not None and self.trainer.global_step >= self.request_stop_at:
            ctx.request_stop()

    def _trigger_step(self):
        self._record(EventKind.TRIGGER_STEP)

    def _after_epoch(self):
        self._record(EventKind.AFTER_EPOCH)

    def _trigger_epoch(self):
        self._record(EventKind.TRIGGER_EPOCH)

    def _after_train(self):
        self._record(EventKind.AFTER_TRAIN)


def as_tuples(events):
    """`LoopEvent`s as the (kind, epoch_num, local_step, global_step) tuples `Probe` records."""
    return [(e.kind.value, e.epoch_num, e.local_step, e.global_step) for e in events]


def truncated(events, last_index):
    """The events up to `last_index` inclusive, then ``after_train`` at that event's position."""
    events = list(events)
    kept = events[: last_index + 1]
    return [*kept, LoopEvent(EventKind.AFTER_TRAIN, kept[-1].position)]


def counter_trainer(trainer_cls=Trainer):
    """A trainer whose ``train_op`` adds 1 to variable ``x``; returns (trainer, x)."""
    x = tf1.get_variable("x", initializer=0.0)
    trainer = trainer_cls()
    trainer.train_op = tf1.assign_add(x, 1.0).op
    return trainer, x


def creator():
    """The default session creator."""
    return NewSessionCreator()


def position(starting_epoch, max_epoch, steps_per_epoch, **kw):
    """A `LoopPosition` (shorthand)."""
    bounds = LoopBounds(
        starting_epoch=starting_epoch, max_epoch=max_epoch, steps_per_epoch=steps_per_epoch
    )
    return LoopPosition(bounds=bounds, **kw)


def blobs(n=512, dim=32, classes=10, seed=0):
    """A linearly separable synthetic classification set: (features float32, labels int32)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, dim)).astype(np.float32) * 3
    labels = rng.integers(0, classes, size=n).astype(np.int32)
    feats = centers[labels] + rng.normal(size=(n, dim)).astype(np.float32)
    return feats, labels


def dense(x, units, name, activation=None):
    """A fully connected layer made of `tf1.get_variable`s under variable scope `name`."""
    with tf1.variable_scope(name):
        w = tf1.get_variable(
            "W", [x.shape[-1], units], initializer=tf1.glorot_uniform_initializer()
        )
        b = tf1.get_variable("b", [units], initializer=tf1.zeros_initializer())
        out = tf.matmul(x, w) + b
        return activation(out) if activation is not None else out


def mlp_cost(x, y, hidden=64, classes=10):
    """A 1-hidden-layer MLP's cross-entropy cost, named ``cost``; tower-rule abiding.

    It also names its class probabilities ``prob``.
    """
    h = dense(x, hidden, "fc0", tf.nn.relu)
    logits = dense(h, classes, "fc1")
    tf.identity(tf.nn.softmax(logits), name="prob")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return tf.identity(loss, name="cost")
