"""Steps per second of the training step with XLA (``TrainConfig(xla=True)``) and without.

For each model and each K in ``--ks`` (default 1 and 10 steps per session call),
``SimpleTrainer`` trains twice in the same process, ``xla=False`` and ``xla=True``:

- ``mlp`` and ``conv``: the models of ``bench_loop.py`` (784-256-256-10; two 3x3
  convolutions), through its ``tf.data`` pipeline;
- ``rnn``: the 2-layer ``LSTMCell(128)`` of ``bench_rnn.py`` built with
  ``towerkit.layers.rnn`` under ``dynamic_rnn`` (inputs ``[32, 20, 64]`` from a
  ``tf.data`` pipeline, a mean-square loss).

Each run trains 2 epochs of the model's timed steps with no callback but a timer, and
epoch 2 is timed (epoch 1 holds XLA's compilation and the warm-up). Rounds alternate
which of the two goes first; the table gives the medians of ``--repeats`` rounds, the
median of the rounds' paired ratios (XLA over plain, in the same round), and the time
``setup_graph`` took (with XLA it builds and compiles the tower once more, in a scratch
graph: the check at setup). No goal: the table says where XLA pays on this machine.

Usage::

    python benchmarks/bench_jit.py --repeats 3 --out jit.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_loop import MODELS, build_cost, dataset

MODEL_NAMES = ("mlp", "conv", "rnn")
STEPS = {"mlp": 600, "conv": 200, "rnn": 200}
"""Timed steps per model (a multiple of every K used)."""

RNN_BATCH, RNN_TIME, RNN_DEPTH, RNN_UNITS = 32, 20, 64, 128
"""The recurrent model's shape: ``bench_rnn.py``'s."""

MODES = (False, True)


def round_order(round_index: int) -> tuple[bool, ...]:
    """The XLA settings in the order round `round_index` runs them: alternated each round.

    >>> round_order(0), round_order(1)
    ((False, True), (True, False))
    """
    return MODES if round_index % 2 == 0 else MODES[::-1]


def paired_ratio(plain: list[float], xla: list[float]) -> float | None:
    """The median over rounds of XLA's rate over the plain graph's in the same round.

    >>> paired_ratio([100.0, 50.0, 80.0], [110.0, 40.0, 80.0])
    1.0
    >>> paired_ratio([], [1.0]) is None
    True
    """
    pairs = [b / a for a, b in zip(plain, xla) if a]
    return round(statistics.median(pairs), 3) if pairs else None


def rnn_cost(x, y):
    """The 2-layer LSTM of ``bench_rnn.py`` (towerkit.layers.rnn), a mean-square loss."""
    import tensorflow as tf

    from towerkit.layers import rnn as cells

    del y
    cell = cells.MultiRNNCell([cells.LSTMCell(RNN_UNITS), cells.LSTMCell(RNN_UNITS)])
    out, _ = cells.dynamic_rnn(cell, x, dtype=tf.float32)
    return tf.reduce_mean(tf.square(out), name="cost")


def rnn_dataset():
    """Random sequences, batched as ``bench_rnn.py``'s constant input."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal([512, RNN_TIME, RNN_DEPTH]).astype(np.float32)
    y = np.zeros([512], np.int32)
    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .repeat()
        .batch(RNN_BATCH, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def _model(model: str):
    """``(input signature, tower function, dataset function)`` of `model`."""
    import tensorflow as tf

    if model == "rnn":
        shape: list[int] = [RNN_BATCH, RNN_TIME, RNN_DEPTH]
        batch = RNN_BATCH
        return (
            [tf.TensorSpec(shape, tf.float32, "x"), tf.TensorSpec([batch], tf.int32, "y")],
            rnn_cost,
            rnn_dataset,
        )
    spec = MODELS[model]
    batch = spec["batch"]
    return (
        [
            tf.TensorSpec([batch, *spec["input"]], tf.float32, "x"),
            tf.TensorSpec([batch], tf.int32, "y"),
        ],
        lambda x, y: build_cost(model, x, y),
        lambda: dataset(model),
    )


def train_rate(model: str, steps: int, k: int, xla: bool) -> tuple[float, float]:
    """Steps per second of epoch 2, and the seconds ``setup_graph`` took."""
    import tensorflow as tf

    from towerkit.callbacks import Callback
    from towerkit.trainers import SimpleTrainer, TFDatasetInput

    tf1 = tf.compat.v1
    times: dict[str, float] = {}

    class EpochTimer(Callback):
        _chief_only = False

        def _before_epoch(self):
            times["start"] = time.perf_counter()

        def _after_epoch(self):
            times["end"] = time.perf_counter()

    signature, cost, data = _model(model)
    with tf.Graph().as_default(), contextlib.redirect_stderr(io.StringIO()):
        trainer = SimpleTrainer()
        start = time.perf_counter()
        trainer.setup_graph(
            signature,
            TFDatasetInput(data),
            cost,
            lambda: tf1.train.GradientDescentOptimizer(0.01),
            steps_per_execution=k,
            xla=xla,
        )
        setup_s = time.perf_counter() - start
        if trainer.xla_compiled != xla:
            msg = f"{model}: asked xla={xla}, built xla_compiled={trainer.xla_compiled}"
            raise RuntimeError(msg)
        trainer.train_with_defaults(
            callbacks=[EpochTimer()],
            extra_callbacks=[],
            monitors=[],
            steps_per_epoch=steps,
            max_epoch=2,
            steps_per_execution=k,
        )
    return steps / (times["end"] - times["start"]), setup_s


def render(results: dict[str, dict[str, dict]]) -> str:
    """The Markdown table of the medians, the paired ratio and the setup times.

    >>> print(render({"mlp": {"1": {"plain": [100.0], "xla": [120.0], "setup_plain": [0.5],
    ...                              "setup_xla": [1.5], "failed": ""}}}))
    | model | K | plain steps/s | xla steps/s | xla / plain | setup plain (s) | setup xla (s) |
    |---|---|---|---|---|---|---|
    | mlp | 1 | 100.0 | 120.0 | 1.20x | 0.50 | 1.50 |
    """
    lines = [
        "| model | K | plain steps/s | xla steps/s | xla / plain | setup plain (s) | setup xla (s) |",
        "|---|---|---|---|---|---|---|",
    ]

    def med(values: list[float], fmt: str) -> str:
        return format(statistics.median(values), fmt) if values else "n/a"

    for model, by_k in results.items():
        for k, r in by_k.items():
            ratio = paired_ratio(r["plain"], r["xla"])
            lines.append(
                f"| {model} | {k} | {med(r['plain'], '.1f')} | "
                f"{med(r['xla'], '.1f') if not r['failed'] else r['failed'][:60]} | "
                f"{'n/a' if ratio is None else f'{ratio:.2f}x'} | "
                f"{med(r['setup_plain'], '.2f')} | {med(r['setup_xla'], '.2f')} |"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODEL_NAMES))
    parser.add_argument("--ks", default="1,10")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the timed steps")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.ks = [int(k) for k in args.ks.split(",") if k]
    bad = [m for m in args.models if m not in MODEL_NAMES]
    if bad or not args.ks or any(k < 1 for k in args.ks):
        parser.error(f"unknown models {bad} or bad --ks {args.ks}")
    return args


def timed_steps(model: str, ks: list[int], scale: float) -> int:
    """The timed steps of `model`: scaled, rounded up to a multiple of every K.

    >>> timed_steps("conv", [1, 10], 1.0), timed_steps("mlp", [1, 10], 0.01)
    (200, 10)
    """
    import math

    lcm = math.lcm(*ks)
    return max(lcm, math.ceil(STEPS[model] * scale / lcm) * lcm)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, dict[str, dict]] = {}
    for model in args.models:
        steps = timed_steps(model, args.ks, args.scale)
        results[model] = {
            str(k): {"plain": [], "xla": [], "setup_plain": [], "setup_xla": [], "failed": ""}
            for k in args.ks
        }
    for rep in range(args.repeats):
        for model in args.models:
            steps = timed_steps(model, args.ks, args.scale)
            for k in args.ks:
                r = results[model][str(k)]
                for xla in round_order(rep):
                    name = "xla" if xla else "plain"
                    if xla and r["failed"]:
                        continue
                    try:
                        rate, setup_s = train_rate(model, steps, k, xla)
                    except Exception as err:  # reported in the table, not fatal
                        r["failed"] = f"n/a: {type(err).__name__}: {str(err)[:120]}"
                        print(f"{model} K={k} {name}: {r['failed']}", file=sys.stderr, flush=True)
                        continue
                    r[name].append(rate)
                    r[f"setup_{name}"].append(setup_s)
                    print(
                        f"{model} K={k} {name} #{rep + 1}: {rate:.1f} steps/s, setup {setup_s:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    table = render(results)
    print(table)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"results": results, "table": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
