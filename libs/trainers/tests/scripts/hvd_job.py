"""One rank of a horovod training job (run by horovod's launcher); prints a JSON report.

Usage: ``hvd_job.py LOGDIR MAX_EPOCH [--rank1-logdir DIR] [--fp16] [--die-at STEP]
[--sum-check] [--term-at STEP --term-rank RANK] [--precision POLICY]
[--hold-at PHASE --release FILE [--hold SECONDS]]``. Each rank prints one line
``RANK-REPORT {json}``; with ``--term-at``, rank RANK sends itself SIGTERM after global
step STEP, and a rank that the preemption stops prints ``RANK-PREEMPTED {json}``.

With ``--hold-at PHASE`` each rank, at that point of its run, writes its pid to
``FILE.rankR`` (the launcher keeps the ranks' output until the job ends, so a test
watches these files) and waits there, making no collective or session call, until FILE
exists or SECONDS (300) have passed. The phases (`PHASES`): ``starting`` (horovod
initialized, before ``launch_train_with_config``), ``first-step`` (``before_train``),
``training`` (after its third step), ``saving`` (at the end of epoch 1, before rank 0's
``ModelSaver`` saves), ``ending`` (after the loop, in ``after_train``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from dp_model import SIG, cost_fn, data, error_rate

from towerkit.callbacks import Callback, ModelSaver
from towerkit.towers import add_moving_summary
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AutoResumeTrainConfig,
    CollectiveError,
    HorovodTrainer,
    ModelDesc,
    NumpyInput,
    TrainingPreempted,
    launch_train_with_config,
)

STEPS_PER_EPOCH = 4
MODEL_VARS = ("fc0/W", "fc0/b", "fc1/W", "fc1/b")


class Model(ModelDesc):
    """The shared test model."""

    def inputs(self):
        return SIG

    def build_graph(self, x, y):
        cost = cost_fn(x, y)
        add_moving_summary(cost)
        return cost

    def optimizer(self):
        return tf1.train.MomentumOptimizer(0.05, 0.9)


class ChiefState(Callback):
    """A chief-only callback with a variable of its own: a variable rank 1 never has."""

    def _setup_graph(self):
        self.count = tf1.get_variable("chief_epochs", initializer=0, trainable=False)
        self.add = self.count.assign_add(1)

    def _trigger_epoch(self):
        self.value = int(self.trainer.sess.run(self.add))


class Watch(Callback):
    """Runs on every rank: the first batch, the variables after each epoch, the costs."""

    _chief_only = False

    def __init__(self, die_at: int | None, term_at: int | None = None, term_rank: int = 1) -> None:
        self.die_at = die_at
        self.term_at, self.term_rank = term_at, term_rank
        self.first_batch: list[float] | None = None
        self.epochs: dict[int, dict[str, list]] = {}
        self.costs: list[float] = []
        self.start: dict[str, int] = {}

    def _setup_graph(self):
        tower = self.trainer.towers.training()[0]
        self._x = tower.inputs[0]
        self._cost = tower.get_tensor("cost")
        self._vars = [v for v in tf1.global_variables() if v.op.name in MODEL_VARS]

    def _before_train(self):
        self.start = {
            "global_step": self.trainer.global_step,
            "starting_epoch": self.trainer.starting_epoch,
            "max_epoch": self.trainer.max_epoch,
        }

    def _before_run(self, ctx):
        return [self._x, self._cost]

    def _after_run(self, ctx, values):
        x, cost = values.results
        if self.first_batch is None:
            self.first_batch = [float(v) for v in x[:, 0]]
        self.costs.append(float(cost))

    def _trigger_step(self):
        t = self.trainer
        if self.die_at is not None and t.global_step >= self.die_at and t.rank == 1:
            print(f"rank 1 exits at global step {t.global_step}", flush=True)
            os._exit(3)
        if t.global_step == self.term_at and t.rank == self.term_rank:
            print(f"rank {t.rank} sends itself SIGTERM at global step {t.global_step}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)

    def _after_epoch(self):
        values = self.trainer.sess.run(self._vars)
        self.epochs[self.trainer.epoch_num] = {
            v.op.name: val.tolist() for v, val in zip(self._vars, values)
        }


PHASES = ("starting", "first-step", "training", "saving", "ending")


def hold(phase: str, rank: int, seconds: float, release: str) -> None:
    """Write this rank's pid to ``release.rankR``; wait until `release` exists or `seconds`."""
    mark = f"{release}.rank{rank}"
    with open(mark + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {phase}\n")
    os.replace(mark + ".tmp", mark)
    print(f"RANK-AT {phase} rank {rank}", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end and not os.path.exists(release):
        time.sleep(0.1)


class HoldAt(Callback):
    """Hold (`hold`) at one phase of the loop: listed before `ModelSaver`, so before its save."""

    _chief_only = False

    def __init__(self, phase: str, seconds: float, release: str) -> None:
        self._phase, self._seconds, self._release = phase, seconds, release
        self._steps = 0

    def _at(self, phase: str) -> None:
        if phase == self._phase:
            hold(phase, self.trainer.rank, self._seconds, self._release)

    def _before_train(self) -> None:
        self._at("first-step")

    def _trigger_step(self) -> None:
        self._steps += 1
        if self._steps == 3:
            self._at("training")

    def _trigger_epoch(self) -> None:
        if self.trainer.epoch_num == 1:
            self._at("saving")

    def _after_train(self) -> None:
        self._at("ending")


class KeepW(Callback):
    """Keeps the value of variable ``w`` at the end of training (every rank)."""

    _chief_only = False

    def _after_train(self):
        (w,) = [v for v in self.graph.get_collection("variables") if v.op.name == "w"]
        self.w = self.trainer.sess.run(w).tolist()


def sum_check(rank: int) -> dict[str, list[float]]:
    """One SGD step (rate 1) of a linear cost whose gradient is the rank's own vector."""
    out = {}
    for average in (True, False):
        graph = tf.Graph()
        with graph.as_default():
            g = np.full([1, 3], float(rank + 1), np.float32)
            x = NumpyInput([np.repeat(g, 4, axis=0), np.zeros(4, np.int32)], batch_size=1)

            def linear(x, y):
                w = tf1.get_variable("w", initializer=np.zeros(3, np.float32))
                return tf.reduce_sum(x[0] * w) + 0.0 * tf.cast(tf.reduce_sum(y), tf.float32)

            spec = [tf.TensorSpec([None, 3], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]
            trainer = HorovodTrainer(average=average)
            trainer.setup_graph(spec, x, linear, lambda: tf1.train.GradientDescentOptimizer(1.0))
            keep = KeepW()
            trainer.train_with_defaults(
                callbacks=[keep], monitors=[], extra_callbacks=[], steps_per_epoch=1, max_epoch=1
            )
            out["average" if average else "sum"] = keep.w
    return out


class LeaveBeforeLoop(HorovodTrainer):
    """Rank 1 leaves (status 0) once initialized, before the ranks agree on the loop.

    Rank 0's agreement then fails; it prints what is left in its logdir
    (``LOGDIR-AFTER-FAILURE [names]``) before the error goes on.
    """

    def main_loop(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> None:
        if self.rank == 1:
            print("rank 1 leaves before the loop", flush=True)
            os._exit(0)
        try:
            super().main_loop(steps_per_epoch, starting_epoch, max_epoch)
        except CollectiveError:
            left = sorted(os.listdir(self.logdir)) if os.path.isdir(self.logdir) else None
            print("LOGDIR-AFTER-FAILURE " + json.dumps(left), flush=True)
            raise


def step_collectives(train_op) -> list[list[str]]:
    """The horovod collectives a training step runs: each one's type and input names."""
    seen, todo, found = set(), [train_op], []
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type.startswith("Horovod"):
            found.append([op.type, *sorted(t.op.name for t in op.inputs)])
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return sorted(found)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("max_epoch", type=int)
    parser.add_argument("--rank1-logdir", default=None)
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--die-at", type=int, default=None)
    parser.add_argument("--sum-check", action="store_true")
    parser.add_argument("--leave-before-loop", action="store_true")
    parser.add_argument("--term-at", type=int, default=None)
    parser.add_argument("--term-rank", type=int, default=1)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--hold-at", choices=PHASES, default=None)
    parser.add_argument("--hold", type=float, default=300.0, help="seconds a hold lasts at most")
    parser.add_argument("--release", default=None, help="a hold ends once this file exists")
    args = parser.parse_args(argv)
    if args.hold_at and not args.release:
        parser.error("--hold-at needs --release")
    import horovod.tensorflow as hvd

    graph = tf.Graph()
    graph.seed = 1234
    with graph.as_default():
        kind = LeaveBeforeLoop if args.leave_before_loop else HorovodTrainer
        trainer = kind(compression=hvd.Compression.fp16 if args.fp16 else None)
        trainer.BROADCAST_EVERY_EPOCH = False
        rank = trainer.rank
        logdir = args.logdir if rank == 0 or args.rank1_logdir is None else args.rank1_logdir
        watch = Watch(args.die_at, args.term_at, args.term_rank)
        holds = [] if args.hold_at is None else [HoldAt(args.hold_at, args.hold, args.release)]
        if args.hold_at == "starting":
            hold("starting", rank, args.hold, args.release)
        config = AutoResumeTrainConfig(
            logdir=logdir,
            data=NumpyInput(data(256, seed=10), batch_size=16, shuffle=True),
            model=Model(),
            callbacks=[watch, *holds, ModelSaver(max_to_keep=10), ChiefState()],
            steps_per_epoch=STEPS_PER_EPOCH,
            max_epoch=args.max_epoch,
            precision=args.precision,
        )
        try:
            launch_train_with_config(config, trainer)
        except TrainingPreempted as stop:
            stopped = {"rank": rank, "global_step": stop.global_step, "costs": watch.costs}
            print("RANK-PREEMPTED " + json.dumps(stopped), flush=True)
            raise
    last = watch.epochs[max(watch.epochs)]
    x, y = data(256, seed=99)
    report = {
        "rank": rank,
        "size": trainer.size,
        "hvd_rank": hvd.rank(),
        "hvd_size": hvd.size(),
        "is_chief": trainer.is_chief,
        "pid": os.getpid(),
        "logdir": trainer.logdir,
        "callbacks": sorted(
            {type(cb).__name__ for cb in (*trainer.callbacks, *trainer.monitors.monitors)}
        ),
        "start": watch.start,
        "first_batch": watch.first_batch,
        "epochs": {str(k): v for k, v in watch.epochs.items()},
        "costs": watch.costs,
        "error": error_rate({k: np.asarray(v) for k, v in last.items()}, x, y),
    }
    report["step_collectives"] = step_collectives(trainer.train_op)
    if args.sum_check:
        report["sum_check"] = sum_check(rank)
    print("RANK-REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
