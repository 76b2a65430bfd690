"""One process of an elastic horovod training job; prints a JSON report when it ends.

Usage: ``hvd_elastic_job.py LOGDIR MAX_EPOCH [--commit-every K] [--kill-rank R
(--kill-at STEP | --kill-at-epoch-end EPOCH)] [--step-sleep S] [--progress FILE]``. A
process that is rank R when the global step reaches STEP sends itself SIGKILL (once in
the job: it leaves a mark in LOGDIR's parent); with ``--kill-at-epoch-end`` it does so
at the end of EPOCH, once the monitors wrote it (after the checkpoint and stats.json,
before the epoch's commit). Rank 0 writes the global step to FILE after each step.
Each process that ends prints one line ``ELASTIC-REPORT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from dp_model import SIG, cost_fn, data

from towerkit.callbacks import (
    Callback,
    JSONWriter,
    ModelSaver,
    MonitorBase,
    ScheduledHyperParamSetter,
    TFEventWriter,
)
from towerkit.towers import add_moving_summary
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    HorovodTrainer,
    LossScaleOptimizer,
    LossScaleSchedule,
    ModelDesc,
    NumpyInput,
    TrainConfig,
    launch_train_with_config,
)

STEPS_PER_EPOCH = 4
MODEL_VARS = ("fc0/W", "fc0/b", "fc1/W", "fc1/b", "learning_rate", "global_step", "loss_scale")


class Model(ModelDesc):
    def __init__(self, grow_scale: bool = False) -> None:
        self.grow_scale = grow_scale

    def inputs(self):
        return SIG

    def build_graph(self, x, y):
        cost = cost_fn(x, y)
        add_moving_summary(cost)
        return cost

    def optimizer(self):
        lr = tf1.get_variable("learning_rate", initializer=0.05, trainable=False)
        opt = tf1.train.MomentumOptimizer(lr, 0.9)
        if self.grow_scale:  # the scale doubles after every applied step: 2**steps
            opt = LossScaleOptimizer(opt, LossScaleSchedule(initial=1.0, growth_interval=1))
        return opt


class Watch(Callback):
    """Every process: the steps it ran (global step, epoch, local step, ring size), its end."""

    _chief_only = False

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.steps: list[list[int]] = []
        self.epochs_begun: list[int] = []
        self.end: dict[str, object] = {}

    def _setup_graph(self):
        import horovod.tensorflow as hvd

        self._vars = [v for v in tf1.global_variables() if v.op.name in MODEL_VARS]
        # an averaging all-reduce of 1.0 from every rank: 1.0 if it divides by the size
        # of the current ring, not of the first one (run after each step, in a session
        # call of its own). Fed, not a constant: grappler would fold a constant's
        # all-reduce when a session call is first prepared, out of step with the others.
        self._one = tf1.placeholder(tf.float32, [], name="probe_one")
        self._probe = hvd.allreduce(self._one, op=hvd.Average, name="average_probe")
        self.probes: list[float] = []

    def _before_epoch(self):
        self.epochs_begun.append(self.trainer.epoch_num)

    def _trigger_step(self):
        t = self.trainer
        self.steps.append([t.global_step, t.epoch_num, t.local_step, t.size])
        self.probes.append(float(t.sess.run(self._probe, {self._one: 1.0})))
        a = self.args
        if a.progress and t.rank == 0:
            tmp = a.progress + ".tmp"
            Path(tmp).write_text(str(t.global_step))
            os.replace(tmp, a.progress)
        if a.kill_at is not None and t.rank == a.kill_rank and t.global_step >= a.kill_at:
            kill_once(a, t)
        if a.step_sleep:
            time.sleep(a.step_sleep)

    def _after_train(self):
        values = self.trainer.sess.run(self._vars)
        self.end = {v.op.name: val.tolist() for v, val in zip(self._vars, values)}


def kill_once(args: argparse.Namespace, t) -> None:
    """SIGKILL this process, unless a process of the job was killed already."""
    mark = Path(args.logdir).parent / "killed"
    if not mark.exists():
        mark.write_text(f"{os.getpid()} {t.global_step} {t.epoch_num} {t.local_step}")
        os.kill(os.getpid(), signal.SIGKILL)


class KillAtEpochEnd(MonitorBase):
    """Every process, after the other monitors: rank R dies at the end of the given epoch."""

    _chief_only = False

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def _trigger_epoch(self):
        t, a = self.trainer, self.args
        if t.rank == a.kill_rank and t.epoch_num == a.kill_at_epoch_end:
            kill_once(a, t)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("max_epoch", type=int)
    parser.add_argument("--commit-every", type=int, default=1)
    parser.add_argument("--kill-rank", type=int, default=None)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--kill-at-epoch-end", type=int, default=None)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--progress", default=None)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--grow-scale", action="store_true", help="a loss scale doubling each step")
    args = parser.parse_args(argv)

    graph = tf.Graph()
    graph.seed = 1234
    with graph.as_default():
        trainer = HorovodTrainer(elastic=True, commit_every_k_steps=args.commit_every)
        first_rank, first_size = trainer.rank, trainer.size
        watch = Watch(args)
        config = TrainConfig(
            logdir=args.logdir,
            data=NumpyInput(data(256, seed=10), batch_size=16, shuffle=True),
            model=Model(args.grow_scale),
            precision=args.precision,
            callbacks=[
                watch,
                ModelSaver(max_to_keep=20),
                ScheduledHyperParamSetter("learning_rate", [(1, 0.05), (3, 0.02)]),
            ],
            monitors=[TFEventWriter(), JSONWriter(), KillAtEpochEnd(args)],
            steps_per_epoch=STEPS_PER_EPOCH,
            max_epoch=args.max_epoch,
        )
        launch_train_with_config(config, trainer)
    report = {
        "pid": os.getpid(),
        "first_rank": first_rank,
        "first_size": first_size,
        "rank": trainer.rank,
        "size": trainer.size,
        "is_chief": trainer.is_chief,
        "global_step": trainer.global_step,
        "steps": watch.steps,
        "epochs_begun": watch.epochs_begun,
        "end": watch.end,
        "average_probes": watch.probes,
    }
    print("ELASTIC-REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
