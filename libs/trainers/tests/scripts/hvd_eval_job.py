"""One rank of a horovod evaluation-only job (``steps_per_epoch=0``); prints a JSON report.

Usage: ``hvd_eval_job.py LOGDIR``. Each rank evaluates its own shard of the data
(`shard`: uneven batches, a different number on each rank) with an `InferenceRunner`
given ``reduce=True``, and prints ``RANK-REPORT {json}`` with the statistics it put.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from dp_model import SIG, cost_fn, data

from towerkit.callbacks import Callback, ClassificationError, InferenceRunner, ScalarStats
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    HorovodTrainer,
    ModelDesc,
    NumpyInput,
    TrainConfig,
    launch_train_with_config,
)

STATS = ("validation_cost", "validation_error")
SIZES = {0: (8, 8, 5), 1: (16, 16, 11)}
"""The batch sizes of each rank's shard: 21 and 43 samples, 3 batches each."""


def shard(rank: int) -> list[list[np.ndarray]]:
    """The batches rank `rank` evaluates: consecutive slices of ``data(64, seed=5)``."""
    x, y = data(64, seed=5)
    start = sum(SIZES[0]) if rank == 1 else 0
    batches = []
    for size in SIZES[rank]:
        batches.append([x[start : start + size], y[start : start + size]])
        start += size
    return batches


class Model(ModelDesc):
    """The shared test model."""

    def inputs(self):
        return SIG

    def build_graph(self, x, y):
        return cost_fn(x, y)

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.1)


class Report(Callback):
    """Runs on every rank after the runner: keeps the statistics this rank put."""

    _chief_only = False

    def _trigger_epoch(self):
        self.stats = {name: self.trainer.monitors.get_latest(name) for name in STATS}
        self.step = int(self.trainer.global_step)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    args = parser.parse_args(argv)
    graph = tf.Graph()
    with graph.as_default():
        trainer = HorovodTrainer()
        runner = InferenceRunner(
            shard(trainer.rank),
            [ScalarStats("cost"), ClassificationError("incorrect_vector")],
            reduce=True,
        )
        report = Report()
        config = TrainConfig(
            logdir=args.logdir,
            data=NumpyInput(data(32, seed=1), batch_size=8),
            model=Model(),
            callbacks=[runner, report],
            steps_per_epoch=0,
            max_epoch=1,
        )
        launch_train_with_config(config, trainer)
    out = {
        "rank": trainer.rank,
        "is_chief": trainer.is_chief,
        "stats": report.stats,
        "global_step": report.step,
        "runner_chief_only": runner.chief_only,
    }
    print("RANK-REPORT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
