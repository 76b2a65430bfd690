"""Steps per second of a BN convnet in float32 and mixed_bfloat16: towerkit against Keras 3.

The network: conv 3x3x64 - BN - ReLU - max-pool, conv 3x3x128 - BN - ReLU - max-pool,
global average pool, fully connected 10; 64x64x3 inputs, batch 32, momentum SGD,
batch-norm moving averages updated every step, data from a ``tf.data`` pipeline held
in memory. Cases:

- ``towerkit float32`` / ``towerkit mixed_bfloat16``: written with ``towerkit.layers``
  (``Conv2D``, ``BatchNorm``, ``MaxPooling``, ``GlobalAvgPooling``, ``FullyConnected``)
  and built as ``SingleCostTrainer`` builds a training tower (a `TowerFunc` called in a
  training ``TowerContext`` under ``precision_scope(policy)``, the cost cast to
  float32), run by a bare ``make_callable`` loop;
- ``keras float32`` / ``keras mixed_bfloat16``: the same network in Keras 3 under
  ``keras.mixed_precision.set_global_policy(policy)`` (the last layer in float32, as
  Keras advises), trained by ``model.fit`` with ``steps_per_epoch`` (its default
  compilation).

Each case runs in a process of its own (Keras 3 needs eager TensorFlow, towerkit graph
mode), one process per case per round, the cases interleaved round by round; each
round warms up then times ``--steps`` steps; the table gives medians. Goals, on a CPU
with AVX512-BF16 or AMX (``bf16`` in the table's header says whether this one has
them): towerkit ``mixed_bfloat16`` >= 1.4x towerkit ``float32`` and >= 1.0x Keras
``mixed_bfloat16``. Without those instructions bfloat16 is emulated and slower than
float32: the table says so and the goals are not judged.

Usage::

    python benchmarks/bench_precision.py --out precision.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CASES = ("towerkit float32", "towerkit mixed_bfloat16", "keras float32", "keras mixed_bfloat16")
GOALS = {"towerkit float32": 1.4, "keras mixed_bfloat16": 1.0}
"""Baseline case -> the least ratio of towerkit mixed_bfloat16's median to its median."""
OURS = "towerkit mixed_bfloat16"
BATCH = 32
SHAPE = (64, 64, 3)
CHANNELS = (64, 128)
CLASSES = 10


def has_bf16_instructions(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has AVX512-BF16 or AMX (bfloat16 matmuls in hardware).

    >>> has_bf16_instructions("flags : sse avx512_bf16"), has_bf16_instructions("flags : sse")
    (True, False)
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def _dataset():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4 * BATCH, *SHAPE)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=4 * BATCH).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH, drop_remainder=True)


def towerkit_rate(policy: str, steps: int, warmup: int) -> float:
    import tensorflow as tf

    from towerkit.layers import BatchNorm, Conv2D, FullyConnected, GlobalAvgPooling, MaxPooling
    from towerkit.towers import TowerContext, TowerFunc, argscope, precision_scope

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()

    def tower(x, y):
        with argscope(Conv2D, kernel_size=3, use_bias=False):
            h = x
            for i, ch in enumerate(CHANNELS):
                h = tf.nn.relu(BatchNorm(f"bn{i}", Conv2D(f"conv{i}", h, ch)))
                h = MaxPooling(f"pool{i}", h, 2)
        logits = tf.cast(FullyConnected("fc", GlobalAvgPooling("gap", h), CLASSES), tf.float32)
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        )

    with tf.Graph().as_default():
        x, y = tf1.data.make_one_shot_iterator(_dataset()).get_next()
        signature = [
            tf.TensorSpec((None, *SHAPE), tf.float32, "x"),
            tf.TensorSpec((None,), tf.int32, "y"),
        ]
        with TowerContext("", is_training=True), precision_scope(policy):
            cost = tf.cast(TowerFunc(tower, signature)(x, y), tf.float32)
        with tf1.control_dependencies(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)):
            train_op = tf1.train.MomentumOptimizer(0.01, 0.9).minimize(cost)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            run = sess.make_callable(train_op)
            for _ in range(warmup):
                run()
            start = time.perf_counter()
            for _ in range(steps):
                run()
            return steps / (time.perf_counter() - start)


def keras_rate(policy: str, steps: int, warmup: int) -> float:
    import keras

    keras.mixed_precision.set_global_policy(policy)
    layers = keras.layers
    inputs = keras.Input(SHAPE)
    h = inputs
    for ch in CHANNELS:
        h = layers.Conv2D(ch, 3, padding="same", use_bias=False)(h)
        h = layers.ReLU()(layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(h))
        h = layers.MaxPooling2D(2)(h)
    h = layers.GlobalAveragePooling2D()(h)
    outputs = layers.Dense(CLASSES, dtype="float32")(h)
    model = keras.Model(inputs, outputs)
    model.compile(
        keras.optimizers.SGD(0.01, momentum=0.9),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    data = _dataset()
    model.fit(data, steps_per_epoch=warmup, epochs=1, verbose=0)
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    return steps / (time.perf_counter() - start)


def child(case: str, steps: int, warmup: int) -> float:
    system, policy = case.split(" ")
    return (towerkit_rate if system == "towerkit" else keras_rate)(policy, steps, warmup)


def run_case(case: str, steps: int, warmup: int) -> float:
    """`case`'s steps/s, measured in a fresh process."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        case,
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
    return float(out.stdout.strip().splitlines()[-1])


def paired_ratio(runs: dict[str, list[float]], base: str) -> float | None:
    """Median over rounds of ours/base in the same round.

    >>> paired_ratio({OURS: [2.0, 3.0], "keras float32": [1.0, 2.0]}, "keras float32")
    1.75
    """
    pairs = [a / b for a, b in zip(runs.get(OURS, []), runs.get(base, [])) if b]
    return statistics.median(pairs) if pairs else None


def render(runs: dict[str, list[float]], failed: dict[str, str], bf16: bool) -> str:
    """The table: median steps/s per case, ours over each, the goal and its verdict.

    >>> runs = {"towerkit float32": [1.0], OURS: [1.5], "keras float32": [1.2], "keras mixed_bfloat16": [1.4]}
    >>> print(render(runs, {}, True).splitlines()[4])
    | towerkit float32 | 1.00 (1.00-1.00) | 1.50x | 1.4x: met |
    """
    head = "bfloat16 in hardware (AVX512-BF16 or AMX)" if bf16 else "no bfloat16 instructions"
    lines = [
        f"CPU: {head}",
        "",
        "| case | steps/s (slowest-fastest) | towerkit mixed_bfloat16 / case | goal |",
        "|---|---|---|---|",
    ]
    for case in CASES:
        rounds = runs.get(case) or []
        if not rounds:
            lines.append(f"| {case} | {failed.get(case, 'n/a')} | - | - |")
            continue
        cell = f"{statistics.median(rounds):.2f} ({min(rounds):.2f}-{max(rounds):.2f})"
        ratio = None if case == OURS else paired_ratio(runs, case)
        goal = GOALS.get(case)
        if ratio is None:
            lines.append(f"| {case} | {cell} | - | - |")
        elif goal is None:
            lines.append(f"| {case} | {cell} | {ratio:.2f}x | - |")
        else:
            verdict = ("met" if ratio >= goal else "MISSED") if bf16 else "not judged (no bf16)"
            lines.append(f"| {case} | {cell} | {ratio:.2f}x | {goal}x: {verdict} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps a round (30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps a round (5)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--child", default=None, choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.repeats, args.steps) < 1 or args.warmup < 1:
        parser.error("--repeats, --steps and --warmup must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print the table, optionally write JSON; 1 on a missed goal with --check."""
    args = parse_args(argv)
    if args.child:
        print(child(args.child, args.steps, args.warmup))
        return 0
    runs: dict[str, list[float]] = {c: [] for c in CASES}
    failed: dict[str, str] = {}
    for rep in range(args.repeats):
        order = CASES[rep % len(CASES) :] + CASES[: rep % len(CASES)]
        for case in order:
            if case in failed:
                continue
            try:
                runs[case].append(run_case(case, args.steps, args.warmup))
            except Exception as err:  # a case that cannot run (no keras) is reported
                failed[case] = f"n/a: {type(err).__name__}: {str(err)[:160]}"
            print(
                f"precision {case} #{rep + 1}: {runs[case][-1:] or failed.get(case)}",
                file=sys.stderr,
            )
    bf16 = has_bf16_instructions()
    print(render(runs, failed, bf16))
    ratios = {c: paired_ratio(runs, c) for c in CASES if c != OURS}
    if args.out:
        medians = {c: statistics.median(r) for c, r in runs.items() if r}
        with open(args.out, "w") as f:
            json.dump(
                {
                    "runs": runs,
                    "failed": failed,
                    "medians": medians,
                    "ratios": ratios,
                    "bf16": bf16,
                },
                f,
                indent=1,
            )
    missed = [c for c, goal in GOALS.items() if (ratios.get(c) or 0.0) < goal]
    return 1 if args.check and bf16 and missed else 0


if __name__ == "__main__":
    sys.exit(main())
