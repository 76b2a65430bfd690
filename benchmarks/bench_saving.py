"""Saving in the background: what a checkpoint costs the training loop, blocking against background.

A `SimpleTrainer` trains a dense model of three ``--width`` x ``--width`` layers beside ``--size-mb`` megabytes of other variables (``--num-vars`` of them, as the
embeddings and heads of a large model are), and a ``PeriodicTrigger(ModelSaver(...),
every_k_steps=--every)`` saves them. Three cases, in interleaved rounds, each a fresh
graph and log directory:

- ``none``: no saver (the loop's own time);
- ``blocking``: ``ModelSaver()``, which writes inside the loop;
- ``background``: ``ModelSaver(background=True)``: the variables are copied into the
  snapshot (in the loop), and a thread writes them while training goes on.

For each, the table gives the time the loop spends inside the saver's call per save
(measured around it), and the loop's extra wall time per save against ``none`` (what
a save costs the run, the writer thread's competition for the cores included), with
the bytes each checkpoint holds. The goal: the background save's stall in the loop at
most a quarter of the blocking one's.

Usage::

    python benchmarks/bench_saving.py --size-mb 300 --out saving.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

CASES = ("none", "blocking", "background")
GOAL = 0.25
"""Largest allowed ratio of the background save's stall in the loop to the blocking one's."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=300.0, help="MiB of saved variables")
    parser.add_argument("--num-vars", type=int, default=60, help="how many variables hold them")
    parser.add_argument("--steps", type=int, default=200, help="steps per run")
    parser.add_argument("--every", type=int, default=50, help="a save every this many steps")
    parser.add_argument("--width", type=int, default=1024, help="the dense model's width")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per case")
    parser.add_argument("--dir", default=None, help="where the runs write (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument(
        "--check", action="store_true", help="exit with status 1 when the goal is missed"
    )
    args = parser.parse_args(argv)
    if min(args.size_mb, args.num_vars, args.steps, args.every, args.repeats, args.width) <= 0:
        parser.error("every size and count must be > 0")
    if args.every > args.steps:
        parser.error("--every must be at most --steps (no save would be timed)")
    return args


def table_length(size_mb: float, num_vars: int) -> int:
    """Elements of each of the `num_vars` float32 variables that hold about `size_mb` MiB.

    >>> table_length(300, 60), table_length(300, 60) * 60 * 4 / 2**20
    (1310720, 300.0)
    >>> table_length(0.00001, 3)
    1
    """
    return max(1, int(size_mb * 2**20 / 4 / num_vars))


def stall_ratio(results: list[dict[str, Any]]) -> float:
    """The background save's stall in the loop over the blocking one's.

    >>> stall_ratio([{"case": "blocking", "stall_s": 0.6}, {"case": "background", "stall_s": 0.15}])
    0.25
    """
    by_case = {r["case"]: r for r in results}
    return float(by_case["background"]["stall_s"] / max(by_case["blocking"]["stall_s"], 1e-9))


def run_once(case: str, args: argparse.Namespace, logdir: str) -> dict[str, float]:
    """One training run of `case`; its wall time, the time inside the saves, and their count."""
    import tensorflow as tf

    from towerkit.callbacks import Callback, ModelSaver, PeriodicTrigger, ProxyCallback
    from towerkit.trainers import (
        ModelDesc,
        NumpyInput,
        SimpleTrainer,
        TrainConfig,
        launch_train_with_config,
    )

    tf1 = tf.compat.v1
    width, per_var = args.width, table_length(args.size_mb, args.num_vars)

    class Model(ModelDesc):
        def inputs(self) -> list[Any]:
            return [tf.TensorSpec((None, width), tf.float32, "x")]

        def build_graph(self, x: Any) -> Any:
            for i in range(args.num_vars):  # saved, not trained: the bulk of the checkpoint
                tf1.get_variable(
                    f"table{i}", [per_var], initializer=tf1.ones_initializer(), trainable=False
                )
            h = x
            for i in range(3):
                h = tf.nn.relu(tf.matmul(h, tf1.get_variable(f"fc{i}", [width, width])))
            return tf.reduce_mean(tf.square(h), name="cost")

        def optimizer(self) -> Any:
            return tf1.train.GradientDescentOptimizer(1e-4)

    class Timed(ProxyCallback):
        """Times the wrapped saver's trigger (the loop's stall per save)."""

        def __init__(self, cb: Callback) -> None:
            super().__init__(cb)
            self.spent: list[float] = []

        def _trigger(self) -> None:
            start = time.perf_counter()
            self.cb.trigger()
            self.spent.append(time.perf_counter() - start)

    class Clock(Callback):
        def _before_train(self) -> None:
            self.start = time.perf_counter()

        def _after_train(self) -> None:
            self.wall = time.perf_counter() - self.start

    clock = Clock()
    callbacks: list[Any] = [clock]
    timed = None
    if case != "none":
        timed = Timed(ModelSaver(max_to_keep=2, background=case == "background"))
        callbacks.append(PeriodicTrigger(timed, every_k_steps=args.every))
    data = np.random.default_rng(0).normal(size=(256, width)).astype(np.float32)
    config = TrainConfig(
        model=Model(),
        data=NumpyInput([data], batch_size=64),
        callbacks=callbacks,
        extra_callbacks=[],
        monitors=[],
        steps_per_epoch=args.steps,
        max_epoch=1,
        logdir=logdir,
        logdir_action="keep",
    )
    with tf.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    spent = [] if timed is None else timed.spent
    # the last save is the epoch end's, which the run waits for: only the ones inside count
    inside = spent[:-1] if len(spent) > 1 else spent
    checkpoint_bytes = 0
    for name in os.listdir(logdir):
        if name.startswith(f"model-{args.steps}."):
            checkpoint_bytes += os.path.getsize(os.path.join(logdir, name))
    return {
        "wall_s": clock.wall,
        "saves": len(inside),
        "stall_s": statistics.median(inside) if inside else 0.0,
        "bytes": checkpoint_bytes,
    }


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    """The interleaved rounds; the results record."""
    import tensorflow as tf

    rounds: dict[str, list[dict[str, float]]] = {c: [] for c in CASES}
    for r in range(args.repeats + 1):  # the first round warms up and is dropped
        for case in CASES:
            logdir = os.path.join(workdir, f"{case}-{r}")
            got = run_once(case, args, logdir)
            shutil.rmtree(logdir, ignore_errors=True)
            if r:
                rounds[case].append(got)
    base = statistics.median(x["wall_s"] for x in rounds["none"])
    results = []
    for case in CASES:
        runs = rounds[case]
        saves = max(1, int(runs[0]["saves"]) + 1)  # the epoch end's save counts in the wall time
        wall = statistics.median(x["wall_s"] for x in runs)
        results.append(
            {
                "case": case,
                "wall_s": wall,
                "stall_s": statistics.median(x["stall_s"] for x in runs),
                "extra_per_save_s": (wall - base) / saves if case != "none" else 0.0,
                "saves_per_run": saves if case != "none" else 0,
                "bytes": int(max(x["bytes"] for x in runs)),
            }
        )
    ratio = stall_ratio(results)
    return {
        "size_mb": args.size_mb,
        "num_vars": args.num_vars,
        "steps": args.steps,
        "every": args.every,
        "repeats": args.repeats,
        "tensorflow": tf.__version__,
        "cpus": os.cpu_count(),
        "results": results,
        "stall_ratio": ratio,
        "goal": GOAL,
        "ok": ratio <= GOAL,
    }


def markdown(record: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    lines = [
        f"### Saving: {record['size_mb']:g} MiB in {record['num_vars']} variables, a save every "
        f"{record['every']} of {record['steps']} steps (median of {record['repeats']} "
        f"interleaved rounds, TensorFlow {record['tensorflow']})",
        "",
        "| case | run (s) | stall in the loop per save (s) | extra run time per save (s) "
        "| checkpoint (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in record["results"]:
        size = f"{r['bytes'] / 2**20:.0f}" if r["bytes"] else ""
        extra = f"{r['extra_per_save_s']:.3f}" if r["case"] != "none" else ""
        stall = f"{r['stall_s']:.3f}" if r["case"] != "none" else ""
        lines.append(f"| {r['case']} | {r['wall_s']:.2f} | {stall} | {extra} | {size} |")
    verdict = "met" if record["ok"] else "MISSED"
    lines += [
        "",
        f"background stall / blocking stall = {record['stall_ratio']:.3f} "
        f"(goal <= {record['goal']}: {verdict})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; 1 if `--check` and the goal is missed, else 0."""
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        record = run(args, args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_saving-") as workdir:
            record = run(args, workdir)
    print(markdown(record))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
    return 1 if args.check and not record["ok"] else 0


if __name__ == "__main__":
    sys.exit(main())
