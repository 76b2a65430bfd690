"""A small training job run as a real process by the resume and interrupt tests.

Usage: python resume_script.py LOGDIR MAX_EPOCH [--kill-at STEP] [--kill-after-save EPOCH]
[--sigint-at STEP]

It trains a tiny MLP with `AutoResumeTrainConfig` (4 steps per epoch), saving a
checkpoint every epoch, with a learning-rate schedule, and records the learning rate
used in each epoch as the statistic ``lr``. The kill options make the process send
itself SIGKILL (after the run of a global step, or at the end of an epoch after its
checkpoint is saved but before its statistics are written) or SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

import numpy as np
import tensorflow as tf

from towerkit.callbacks import Callback, ModelSaver, ScheduledHyperParamSetter
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AutoResumeTrainConfig,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    launch_train_with_config,
)

SCHEDULE = [(0, 0.1), (2, 0.05), (4, 0.01)]
"""(epoch after which to set it, learning rate): epochs 1-2 use 0.1, 3-4 0.05, 5+ 0.01."""
STEPS_PER_EPOCH = 4


def lr_in_epoch(epoch: int) -> float:
    """The learning rate the schedule gives during `epoch` (1-based)."""
    return [v for e, v in SCHEDULE if e <= epoch - 1][-1]


class Model(ModelDesc):
    """An 8-16-3 MLP."""

    def inputs(self):
        return [tf.TensorSpec([None, 8], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]

    def build_graph(self, x, y):
        w0 = tf1.get_variable("fc0/W", [8, 16])
        w1 = tf1.get_variable("fc1/W", [16, 3])
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w0)), w1)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        return tf.reduce_mean(loss, name="cost")

    def optimizer(self):
        lr = tf1.get_variable("learning_rate", initializer=0.5, trainable=False)
        return tf1.train.GradientDescentOptimizer(lr)


class RecordLR(Callback):
    """Puts the learning rate used in the epoch as statistic ``lr`` (before the setter runs)."""

    def _setup_graph(self):
        (self.lr,) = [v for v in tf1.global_variables() if v.op.name == "learning_rate"]

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar("lr", float(self.trainer.sess.run(self.lr)))


class Kill(Callback):
    """Sends this process a signal after a given global step, or after a given epoch's save."""

    def __init__(self, sig, at_step=None, after_epoch=None):
        self.sig, self.at_step, self.after_epoch = sig, at_step, after_epoch

    def _after_run(self, ctx, values):
        if self.at_step is not None and self.trainer.global_step == self.at_step:
            os.kill(os.getpid(), self.sig)

    def _trigger_epoch(self):
        if self.after_epoch is not None and self.trainer.epoch_num == self.after_epoch:
            os.kill(os.getpid(), self.sig)


class Marker(Callback):
    """Writes ``after_train.txt`` with the final global step into the logdir."""

    def _after_train(self):
        with open(os.path.join(self.trainer.logdir, "after_train.txt"), "w") as f:
            f.write(str(self.trainer.global_step))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("max_epoch", type=int)
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--kill-after-save", type=int)
    parser.add_argument("--sigint-at", type=int)
    args = parser.parse_args(argv)
    if args.sigint_at is not None:
        # A parent started in the background (`cmd &`) hands its children SIGINT ignored, and
        # Python then installs no KeyboardInterrupt handler: put the default one back.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    callbacks = [
        ModelSaver(),
        Kill(signal.SIGKILL, after_epoch=args.kill_after_save),
        RecordLR(),
        ScheduledHyperParamSetter("learning_rate", SCHEDULE),
        Kill(signal.SIGKILL, at_step=args.kill_at),
        Kill(signal.SIGINT, at_step=args.sigint_at),
        Marker(),
    ]
    config = AutoResumeTrainConfig(
        model=Model(),
        data=NumpyInput([x, y], batch_size=16, seed=0),
        callbacks=callbacks,
        max_epoch=args.max_epoch,
        logdir=args.logdir,
    )
    with tf.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
