"""Steps per second of one convnet written with towerkit.layers, raw tf.compat.v1 ops and tf.layers.

The same network (conv 3x3x32 - BN - ReLU - max-pool, conv 3x3x64 - BN - ReLU -
max-pool, fully connected 10; 28x28x1 inputs, batch 64, momentum SGD, batch-norm
moving averages updated every step) is built three ways:

- ``raw``: ``tf.compat.v1`` ops written by hand (``get_variable``, ``tf.nn.conv2d``,
  ``tf.nn.fused_batch_norm``, ``assign_sub`` moving averages, ``tf.nn.max_pool2d``,
  ``tf.matmul``): the baseline;
- ``towerkit.layers``: tensorpack's style, ``Conv2D`` with ``BNReLU`` as activation
  under ``argscope``, ``MaxPooling``, ``FullyConnected``;
- ``tf.layers``: ``tf.compat.v1.layers`` (from tf-keras: ``conv2d``,
  ``batch_normalization(fused=True)``, ``max_pooling2d``, ``dense``).

Each case trains in its own graph and session, fed by the same ``tf.data`` pipeline
(``from_tensor_slices -> repeat -> batch -> prefetch``), through a bare loop over
``sess.make_callable(train_op)`` (so the figures compare the graphs the layers
build, not a trainer). Each round warms up for ``--warmup`` steps then times
``--steps`` steps; the cases are interleaved round by round (their order rotated
each round) and the table gives the median steps/s with the slowest and fastest
rounds. The ratios are medians of the rounds' paired ratios (each round's
towerkit.layers rate over the baseline's rate in the same round). Goals:
``towerkit.layers`` >= 0.98x ``raw`` and >= 1.0x ``tf.layers``.

The report ends with the kernels one step executes, after TensorFlow's graph
optimizations, compared case by case (`executed_kernels`): towerkit.layers runs
the same kernels as tf.layers, and as raw but for the last bias add, so a ratio
away from 1.0 is the machine's noise, not the graphs'.

A second table gives steps per CPU-second of the process (all of TensorFlow's threads
counted, ``time.process_time``): on shared cores, where other processes take the
CPU away for a while, the wall-clock rounds spread widely, while the CPU time a step
costs moves much less, so it tells apart what the graphs cost when the wall-clock
medians cannot.

Usage::

    python benchmarks/bench_layers.py --out layers.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CASES = ("raw", "towerkit.layers", "tf.layers")
GOALS = {"raw": 0.98, "tf.layers": 1.0}
"""Baseline case -> the least ratio of towerkit.layers' median to its median."""

BATCH = 64
SHAPE = (28, 28, 1)
CHANNELS = (32, 64)
CLASSES = 10
MOMENTUM = 0.9
"""The batch-norm momentum (tensorpack's default), the same in every case."""
EPSILON = 1e-5


def synthetic(n: int = 2048, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels: float32 (n, 28, 28, 1), int32 (n,).

    >>> x, y = synthetic(4)
    >>> x.shape, y.shape, x.dtype.name, y.dtype.name
    ((4, 28, 28, 1), (4,), 'float32', 'int32')
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *SHAPE)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=n).astype(np.int32)
    return x, y


def _dataset():
    import tensorflow as tf

    x, y = synthetic()
    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .repeat()
        .batch(BATCH, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def raw_logits(x):
    """The network with hand-written tf.compat.v1 ops."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    init = tf1.variance_scaling_initializer(2.0)
    h = x
    for i, ch in enumerate(CHANNELS):
        with tf1.variable_scope(f"conv{i}"):
            w = tf1.get_variable("W", [3, 3, h.shape[-1], ch], initializer=init)
            h = tf.nn.conv2d(h, w, 1, "SAME")
            gamma = tf1.get_variable("bn/gamma", [ch], initializer=tf1.ones_initializer())
            beta = tf1.get_variable("bn/beta", [ch], initializer=tf1.zeros_initializer())
            mean = tf1.get_variable(
                "bn/mean/EMA", [ch], initializer=tf1.zeros_initializer(), trainable=False
            )
            var = tf1.get_variable(
                "bn/variance/EMA", [ch], initializer=tf1.ones_initializer(), trainable=False
            )
            h, batch_mean, batch_var = tf1.nn.fused_batch_norm(
                h, gamma, beta, epsilon=EPSILON, is_training=True
            )
            for moving, value in ((mean, batch_mean), (var, batch_var)):
                update = tf1.assign_sub(moving, (moving - value) * (1.0 - MOMENTUM))
                tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, update)
            h = tf.nn.relu(h)
            h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.reshape(h, [-1, int(np.prod(h.shape[1:]))])
    with tf1.variable_scope("fc"):
        w = tf1.get_variable("W", [h.shape[-1], CLASSES], initializer=init)
        b = tf1.get_variable("b", [CLASSES], initializer=tf1.zeros_initializer())
        return tf.matmul(h, w) + b


def towerkit_logits(x):
    """The network in tensorpack's style with towerkit.layers."""
    from towerkit.layers import BatchNorm, BNReLU, Conv2D, FullyConnected, MaxPooling
    from towerkit.towers import argscope

    with (
        argscope(Conv2D, kernel_size=3, activation=BNReLU, use_bias=False),
        argscope(BatchNorm, momentum=MOMENTUM, epsilon=EPSILON),
    ):
        h = x
        for i, ch in enumerate(CHANNELS):
            h = Conv2D(f"conv{i}", h, ch)
            h = MaxPooling(f"pool{i}", h, 2)
        return FullyConnected("fc", h, CLASSES)


def tflayers_logits(x):
    """The network with tf.compat.v1.layers (tf-keras)."""
    import tensorflow as tf

    from towerkit.towers import enable_tf_layers

    enable_tf_layers()
    layers = tf.compat.v1.layers
    init = tf.compat.v1.variance_scaling_initializer(2.0)
    h = x
    for i, ch in enumerate(CHANNELS):
        h = layers.conv2d(h, ch, 3, padding="same", use_bias=False, kernel_initializer=init)
        h = layers.batch_normalization(
            h, momentum=MOMENTUM, epsilon=EPSILON, training=True, fused=True, name=f"bn{i}"
        )
        h = tf.nn.relu(h)
        h = layers.max_pooling2d(h, 2, 2)
    return layers.dense(layers.flatten(h), CLASSES, kernel_initializer=init)


BUILDERS: dict[str, Callable] = {
    "raw": raw_logits,
    "towerkit.layers": towerkit_logits,
    "tf.layers": tflayers_logits,
}


BOOKKEEPING = frozenset(
    {"Const", "Identity", "NoOp", "ReadVariableOp", "VarHandleOp", "_Arg", "_Retval"}
)
"""Op types that compute nothing; left out of `executed_kernels`."""


def _train_graph(case: str):
    """`case`'s network with its loss and momentum train op, in the default graph."""
    import tensorflow as tf

    from towerkit.towers import TowerContext

    tf1 = tf.compat.v1
    x, y = tf1.data.make_one_shot_iterator(_dataset()).get_next()
    with TowerContext("", is_training=True):
        logits = BUILDERS[case](x)
    cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    updates = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)
    if len(updates) != 2 * len(CHANNELS):
        msg = f"{case}: {len(updates)} batch-norm update ops; expected {2 * len(CHANNELS)}"
        raise RuntimeError(msg)
    with tf1.control_dependencies(updates):
        return tf1.train.MomentumOptimizer(0.01, 0.9).minimize(cost)


def executed_kernels(case: str) -> dict[str, int]:
    """``{op type: count}`` of the kernels one training step of `case` runs.

    The graph as TensorFlow executes it (after its graph optimizations: fusions,
    pruning of identities), read from the step's partition graphs, without the
    ops that compute nothing (`BOOKKEEPING`). Two cases with equal counts run the
    same computation; their speeds differ only by noise.
    """
    import collections

    import tensorflow as tf

    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        train_op = _train_graph(case)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            meta = tf1.RunMetadata()
            sess.run(
                train_op,
                options=tf1.RunOptions(output_partition_graphs=True),
                run_metadata=meta,
            )
    return dict(
        collections.Counter(
            node.op
            for graph in meta.partition_graphs
            for node in graph.node
            if node.op not in BOOKKEEPING
        )
    )


def kernel_difference(ours: dict[str, int], theirs: dict[str, int]) -> str:
    """What `ours` runs more or less than `theirs`, as text ("same kernels" when equal).

    >>> kernel_difference({"Conv2D": 2, "Sum": 1}, {"Conv2D": 2, "BiasAddGrad": 1})
    '+1 Sum, -1 BiasAddGrad'
    >>> kernel_difference({"Conv2D": 2}, {"Conv2D": 2})
    'same kernels'
    """
    parts = []
    for op in sorted(set(ours) | set(theirs), key=lambda o: (o not in ours, o)):
        delta = ours.get(op, 0) - theirs.get(op, 0)
        if delta:
            parts.append(f"{delta:+d} {op}")
    return ", ".join(parts) or "same kernels"


def round_order(round_index: int) -> tuple[str, ...]:
    """The cases in the order round `round_index` runs them: rotated each round.

    >>> round_order(0), round_order(1)[0], round_order(3) == round_order(0)
    (('raw', 'towerkit.layers', 'tf.layers'), 'towerkit.layers', True)
    """
    k = round_index % len(CASES)
    return CASES[k:] + CASES[:k]


def paired_ratios(runs: dict[str, list[float]]) -> dict[str, float | None]:
    """Per baseline, the median over rounds of towerkit.layers' rate over the baseline's.

    Each round's ratio compares runs made next to each other, so a slow spell of
    the machine moves both sides of it.

    >>> paired_ratios({"raw": [100.0, 50.0], "towerkit.layers": [99.0, 49.0],
    ...                "tf.layers": [90.0, 50.0]})
    {'raw': 0.985, 'tf.layers': 1.04}
    """
    ours = runs.get("towerkit.layers") or []
    out: dict[str, float | None] = {}
    for base in GOALS:
        theirs = runs.get(base) or []
        pairs = [a / b for a, b in zip(ours, theirs) if b]
        out[base] = round(statistics.median(pairs), 3) if pairs else None
    return out


def train_rate(case: str, steps: int, warmup: int) -> tuple[float, float]:
    """Steps per second and steps per process CPU-second of a bare make_callable loop
    training `case`'s network."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        train_op = _train_graph(case)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            run = sess.make_callable(train_op)
            for _ in range(warmup):
                run()
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                run()
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            return steps / wall, steps / cpu


def ratios(medians: dict[str, float]) -> dict[str, float | None]:
    """towerkit.layers' median over each baseline's (None where one is missing).

    >>> ratios({"raw": 100.0, "towerkit.layers": 99.0, "tf.layers": 90.0})
    {'raw': 0.99, 'tf.layers': 1.1}
    """
    ours = medians.get("towerkit.layers")
    return {
        base: (round(ours / medians[base], 3) if ours and medians.get(base) else None)
        for base in GOALS
    }


def render(runs: dict[str, list[float]], failed: dict[str, str], unit: str = "steps/s") -> str:
    """The table: median `unit` (slowest-fastest round) per case, then the goals.

    The ratio column is the median of the rounds' paired ratios (`paired_ratios`).

    >>> print(render({"raw": [100.0, 98.0], "towerkit.layers": [99.0, 100.0],
    ...               "tf.layers": [80.0, 82.0]}, {}))
    | case | steps/s (slowest-fastest) | towerkit.layers / case | goal |
    |---|---|---|---|
    | raw | 99.0 (98.0-100.0) | 1.00x | 0.98x: met |
    | towerkit.layers | 99.5 (99.0-100.0) | - | - |
    | tf.layers | 81.0 (80.0-82.0) | 1.23x | 1.0x: met |
    """
    got = paired_ratios(runs)
    lines = [
        f"| case | {unit} (slowest-fastest) | towerkit.layers / case | goal |",
        "|---|---|---|---|",
    ]
    for case in CASES:
        rounds = runs.get(case) or []
        if not rounds:
            lines.append(f"| {case} | {failed.get(case, 'n/a')} | - | - |")
            continue
        cell = f"{statistics.median(rounds):.1f} ({min(rounds):.1f}-{max(rounds):.1f})"
        r = got.get(case)
        if case not in GOALS:
            lines.append(f"| {case} | {cell} | - | - |")
        elif r is None:
            lines.append(f"| {case} | {cell} | n/a | {GOALS[case]}x: - |")
        else:
            verdict = "met" if r >= GOALS[case] else "MISSED"
            lines.append(f"| {case} | {cell} | {r:.2f}x | {GOALS[case]}x: {verdict} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--steps", type=int, default=300, help="timed steps a round (300)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps a round (30)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)
    if min(args.repeats, args.steps) < 1 or args.warmup < 0:
        parser.error("--repeats and --steps must be >= 1, --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print the table, optionally write JSON; 1 on a missed goal with --check."""
    args = parse_args(argv)
    runs: dict[str, list[float]] = {c: [] for c in CASES}
    cpu_runs: dict[str, list[float]] = {c: [] for c in CASES}
    failed: dict[str, str] = {}
    for rep in range(args.repeats):
        for case in round_order(rep):
            if case in failed:
                continue
            try:
                rate, cpu_rate = train_rate(case, args.steps, args.warmup)
                runs[case].append(rate)
                cpu_runs[case].append(cpu_rate)
            except Exception as err:  # a case that cannot run is reported, not fatal
                failed[case] = f"n/a: {type(err).__name__}: {str(err)[:160]}"
            print(
                f"layers {case} #{rep + 1}: {runs[case][-1:] or failed.get(case)} "
                f"(per CPU-second: {cpu_runs[case][-1:]})",
                file=sys.stderr,
                flush=True,
            )
    kernels = {c: executed_kernels(c) for c in CASES if c not in failed}
    print(render(runs, failed))
    print()
    print(render(cpu_runs, failed, "steps per CPU-second"))
    print()
    for base in GOALS:
        if base in kernels and "towerkit.layers" in kernels:
            diff = kernel_difference(kernels["towerkit.layers"], kernels[base])
            print(f"executed kernels, towerkit.layers against {base}: {diff}")
    medians = {c: statistics.median(r) for c, r in runs.items() if r}
    cpu_medians = {c: statistics.median(r) for c, r in cpu_runs.items() if r}
    got = paired_ratios(runs)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "runs": runs,
                    "failed": failed,
                    "medians": medians,
                    "ratios": got,
                    "cpu_runs": cpu_runs,
                    "cpu_medians": cpu_medians,
                    "cpu_ratios": paired_ratios(cpu_runs),
                    "ratios_of_medians": ratios(medians),
                    "kernels": kernels,
                },
                f,
                indent=1,
            )
    missed = [b for b, goal in GOALS.items() if got.get(b) is None or got[b] < goal]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
