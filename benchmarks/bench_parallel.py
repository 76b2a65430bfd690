"""Parallel input: steps per second of a model fed by a Python source costing ~4 ms a datapoint.

A source whose every datapoint (a batch of 32 x 64 floats and 32 labels) costs
``--cost-ms`` of pure Python (a busy loop standing for decoding and augmenting) feeds
a small MLP (64-64-10) trained by `SimpleTrainer` through ``TrainConfig(data=
IterableInput(source, ...))``:

- ``thread``: ``IterableInput(source)``, the feeding thread produces the datapoints
  (one core at most, and it shares the interpreter with the training loop);
- ``workers=1``: ``IterableInput(source, workers=1)``, one producer process: the
  baseline;
- ``workers=2``: ``IterableInput(source, workers=2)``, two producer processes.

Each round trains every case for ``--warmup`` steps, then times ``--steps`` steps
(the workers' start is in the warm-up); cases are interleaved round by round and the
table gives the median steps/s and the ratio of medians to ``workers=1``. Goal on 2
cores: ``workers=2`` >= 1.6x ``workers=1``. tensorpack's ``MultiProcessRunnerZMQ``
and Keras 3's ``PyDataset(workers=2, use_multiprocessing=True)`` are not measured
here yet (see the benchmarks README).

The source lives in this module, whose top imports NumPy only: the fork server that
starts the workers imports it (not TensorFlow).

Usage::

    python benchmarks/bench_parallel.py --out parallel.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CASES = ("thread", "workers=1", "workers=2")
GOAL = 1.6
"""The least ratio of workers=2's median steps/s to workers=1's."""

BATCH, DIM, CLASSES = 32, 64, 10


class CostlySource:
    """`n` datapoints by index, each costing `cost_s` seconds of Python.

    Examples:
        >>> x, y = CostlySource(2, cost_s=0.0)[1]
        >>> x.shape, x.dtype, y.shape
        ((32, 64), dtype('float32'), (32,))
    """

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __len__(self) -> int:
        return self.n

    def __iter__(self):  # the thread case iterates; workers index
        return (self[i] for i in range(self.n))

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:
            pass
        rng = np.random.default_rng(i)
        x = rng.standard_normal((BATCH, DIM), dtype=np.float32)
        return x, rng.integers(0, CLASSES, BATCH).astype(np.int32)


def steps_per_s(case: str, cost_s: float, warmup: int, steps: int) -> float:
    """Train the MLP with one case's input; steps/s over the timed steps."""
    import tensorflow as tf

    from towerkit.callbacks import Callback
    from towerkit.towers.compat import tf1
    from towerkit.trainers import (
        IterableInput,
        ModelDesc,
        SimpleTrainer,
        TrainConfig,
        launch_train_with_config,
    )

    class Model(ModelDesc):
        def inputs(self):
            return [
                tf.TensorSpec([BATCH, DIM], tf.float32, "x"),
                tf.TensorSpec([BATCH], tf.int32, "y"),
            ]

        def build_graph(self, x, y):
            w1 = tf1.get_variable("w1", [DIM, 64])
            h = tf.nn.relu(tf.matmul(x, w1))
            w2 = tf1.get_variable("w2", [64, CLASSES])
            logits = tf.matmul(h, w2)
            return tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                name="cost",
            )

        def optimizer(self):
            return tf1.train.GradientDescentOptimizer(0.01)

    class Clock(Callback):
        _chief_only = False

        def __init__(self) -> None:
            self.times: list[float] = []

        def _trigger_step(self) -> None:
            self.times.append(time.perf_counter())

    source = CostlySource(warmup + steps + 1, cost_s)
    workers = None if case == "thread" else int(case.split("=")[1])
    clock = Clock()
    config = TrainConfig(
        model=Model(),
        data=IterableInput(source, workers=workers),
        callbacks=[clock],
        monitors=[],
        extra_callbacks=[],
        max_epoch=1,
        steps_per_epoch=warmup + steps,
    )
    with tf1.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    return steps / (clock.times[-1] - clock.times[warmup - 1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cost-ms", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    rates: dict[str, list[float]] = {c: [] for c in CASES}
    for r in range(args.repeats):
        order = CASES[r % len(CASES) :] + CASES[: r % len(CASES)]
        for case in order:
            rates[case].append(steps_per_s(case, args.cost_ms / 1000, args.warmup, args.steps))
    medians = {c: statistics.median(v) for c, v in rates.items()}
    ratios = {c: medians[c] / medians["workers=1"] for c in CASES}
    print(f"## Parallel input: {args.cost_ms:g} ms of Python per datapoint, MLP 64-64-10\n")
    print(f"| case | steps/s (median of {args.repeats}) | slowest | fastest | vs workers=1 |")
    print("|---|---|---|---|---|")
    for c in CASES:
        print(
            f"| {c} | {medians[c]:.1f} | {min(rates[c]):.1f} | {max(rates[c]):.1f} | "
            f"{ratios[c]:.2f}x |"
        )
    met = ratios["workers=2"] >= GOAL
    print(f"\nGoal workers=2 >= {GOAL}x workers=1: {'met' if met else 'missed'}.")
    print("tensorpack MultiProcessRunnerZMQ and Keras PyDataset: not measured.")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"medians": medians, "ratios": ratios, "rates": rates, "goal": GOAL}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
