"""A small training job with an experiment tracker's monitor, run as a real process by the tracker tests.

Usage: python trackers_train.py LOGDIR TRACKER [--max-epoch E] [--term-at STEP]
[--kill-group-at STEP --group PGID] [--run-name NAME] [--tracking-uri URI]

TRACKER is ``mlflow``, ``wandb`` or ``hparams``. It trains an 8-16-3 MLP with
`AutoResumeTrainConfig` (4 steps per epoch, a checkpoint at every epoch's end), the
default monitors (``stats.json``, the event file) and the tracker's monitor, with the
statistic ``lr`` put at every epoch's end. ``--term-at N`` sends this process SIGTERM
after global step N (a preemption: the run saves and exits with status 143, the same
command resumes it). ``--kill-group-at N --group G`` sends SIGKILL to the process group
G (a tracking server) after global step N: the tracker goes down in the middle of the run.
``--tracking-uri`` gives MLflow's URI as the monitor's argument (else ``MLFLOW_TRACKING_URI``).
It prints ``RUN_ID <id>`` (the tracker's run id, or ``-``) and ``DONE <global step>``
when training ends normally.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

import numpy as np
import tensorflow as tf

from towerkit.callbacks import Callback, ModelSaver
from towerkit.towers import add_moving_summary
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    DEFAULT_MONITORS,
    AutoResumeTrainConfig,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    launch_train_with_config,
)

STEPS_PER_EPOCH = 4


class Model(ModelDesc):
    """An 8-16-3 MLP trained with momentum."""

    def inputs(self):
        return [tf.TensorSpec([None, 8], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]

    def build_graph(self, x, y):
        w0 = tf1.get_variable("fc0/W", [8, 16])
        w1 = tf1.get_variable("fc1/W", [16, 3])
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w0)), w1)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        cost = tf.reduce_mean(loss, name="cost")
        add_moving_summary(cost)
        return cost

    def optimizer(self):
        return tf1.train.MomentumOptimizer(0.1, 0.9)


class PutLR(Callback):
    """Puts ``lr`` = 0.1 / epoch at every epoch's end (a statistic whose values the test knows)."""

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar("lr", 0.1 / self.trainer.epoch_num)


class SignalAt(Callback):
    """Sends `sig` to this process (or to process group `group`) after global step `step`."""

    _chief_only = False

    def __init__(self, step, sig, group=None):
        self.step, self.sig, self.group = step, sig, group

    def _trigger_step(self):
        if self.trainer.global_step != self.step:
            return
        if self.group is None:
            os.kill(os.getpid(), self.sig)
        else:
            os.killpg(self.group, self.sig)
            print(f"KILLED GROUP {self.group}", flush=True)


def tracker_monitor(name: str, run_name: str | None, uri: str | None):
    if name == "mlflow":
        from towerkit.callbacks import MLflowMonitor

        return MLflowMonitor(
            uri,
            experiment_name="towerkit-tests",
            run_name=run_name,
            tags={"suite": "trackers"},
            params={"batch": 8, "optimizer_args": {"momentum": 0.9}},
            timeout=60,
        )
    if name == "wandb":
        from towerkit.callbacks import WandbMonitor

        return WandbMonitor(project="towerkit-tests", params={"batch": 8}, timeout=120)
    if name == "hparams":
        from towerkit.callbacks import HParamsMonitor

        return HParamsMonitor(params={"batch": 8, "lr0": 0.1})
    raise SystemExit(f"unknown tracker {name!r}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("tracker")
    parser.add_argument("--max-epoch", type=int, default=3)
    parser.add_argument("--term-at", type=int)
    parser.add_argument("--kill-group-at", type=int)
    parser.add_argument("--group", type=int)
    parser.add_argument("--run-name")
    parser.add_argument("--tracking-uri")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(name)s: %(message)s")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    monitor = tracker_monitor(args.tracker, args.run_name, args.tracking_uri)
    callbacks = [ModelSaver(max_to_keep=2), PutLR()]
    if args.term_at is not None:
        callbacks.append(SignalAt(args.term_at, signal.SIGTERM))
    if args.kill_group_at is not None:
        callbacks.append(SignalAt(args.kill_group_at, signal.SIGKILL, args.group))
    config = AutoResumeTrainConfig(
        model=Model(),
        data=NumpyInput([x, y], batch_size=8, shuffle=False),
        callbacks=callbacks,
        monitors=[*DEFAULT_MONITORS(), monitor],
        steps_per_epoch=STEPS_PER_EPOCH,
        max_epoch=args.max_epoch,
        logdir=args.logdir,
    )
    with tf.Graph().as_default():
        tf1.set_random_seed(0)
        trainer = SimpleTrainer()
        trainer.set_preemption(grace_s=120)
        try:
            launch_train_with_config(config, trainer)
        finally:
            print(f"RUN_ID {getattr(monitor, 'run_id', None) or '-'}", flush=True)
    print(f"DONE {trainer.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
