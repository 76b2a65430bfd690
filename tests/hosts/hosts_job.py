"""One rank of a horovod job across simulated hosts; prints ``RANK-REPORT {json}`` at the end.

Usage: ``hosts_job.py LOGDIR MAX_EPOCH [--kill-at STEP] [--step-sleep S] [--marker DIR]``.
Each rank trains on its own shard of the data (rows ``rank::size``). With ``--kill-at``
rank 1 sends itself SIGKILL once the global step reaches STEP; with ``--step-sleep``
rank 1 sleeps S seconds after each step (rank 0 then waits in the all-reduce of the
next one); with ``--marker`` rank 0 writes ``DIR/step-<global step>`` after each step.
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
sys.path.insert(
    0, str(Path(__file__).resolve().parents[2] / "libs" / "trainers" / "tests" / "scripts")
)

import tensorflow as tf
from dp_model import SIG, cost_fn, data

from towerkit.callbacks import Callback, ModelSaver
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AutoResumeTrainConfig,
    HorovodTrainer,
    ModelDesc,
    NumpyInput,
    launch_train_with_config,
)

STEPS_PER_EPOCH = 4
ROWS = 240


class Model(ModelDesc):
    def inputs(self):
        return SIG

    def build_graph(self, x, y):
        return cost_fn(x, y)

    def optimizer(self):
        return tf1.train.MomentumOptimizer(0.05, 0.9)


class Watch(Callback):
    """Every rank: the rows of its first epoch, where it started, the faults asked for."""

    _chief_only = False

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seen: list[float] = []
        self.start: dict[str, int] = {}

    def _setup_graph(self):
        self._x = self.trainer.towers.training()[0].inputs[0]

    def _before_train(self):
        t = self.trainer
        self.start = {"global_step": t.global_step, "starting_epoch": t.starting_epoch}
        self._first_epoch = t.starting_epoch

    def _before_run(self, ctx):
        return [self._x] if self.trainer.epoch_num == self._first_epoch else None

    def _after_run(self, ctx, values):
        if values.results is not None:
            self.seen += [float(v) for v in values.results[0][:, 0]]

    def _trigger_step(self):
        t, args = self.trainer, self.args
        if t.rank == 0 and args.marker:
            Path(args.marker, f"step-{t.global_step}").touch()
        if t.rank == 1 and args.kill_at is not None and t.global_step >= args.kill_at:
            print(f"rank 1 kills itself at global step {t.global_step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if t.rank == 1 and args.step_sleep:
            time.sleep(args.step_sleep)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("max_epoch", type=int)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--marker", default=None)
    args = parser.parse_args(argv)
    graph = tf.Graph()
    graph.seed = 1234
    with graph.as_default():
        trainer = HorovodTrainer()
        rank, size = trainer.rank, trainer.size
        x, y = data(ROWS, seed=10)
        watch = Watch(args)
        config = AutoResumeTrainConfig(
            logdir=args.logdir,
            data=NumpyInput([x[rank::size], y[rank::size]], batch_size=8, shuffle=True),
            model=Model(),
            callbacks=[watch, ModelSaver(max_to_keep=100)],
            steps_per_epoch=STEPS_PER_EPOCH,
            max_epoch=args.max_epoch,
        )
        launch_train_with_config(config, trainer)
    report = {
        "rank": rank,
        "size": size,
        "is_chief": trainer.is_chief,
        "host": os.environ.get("HOROVOD_HOSTNAME"),
        "netns": os.readlink("/proc/self/ns/net"),
        "pid": os.getpid(),
        "start": watch.start,
        "global_step": trainer.global_step,
        "seen": watch.seen,
    }
    print("RANK-REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
