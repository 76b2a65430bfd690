"""Steps per second of recurrent stacks built with towerkit.layers.rnn and with tf.nn.rnn_cell.

The same model (``--model``, each a ``MultiRNNCell`` of two layers under ``dynamic_rnn``,
inputs held in a constant, a mean-square loss, plain SGD) is built twice:

- ``tf.nn.rnn_cell``: TensorFlow's ``tf.compat.v1.nn.rnn_cell`` cells and
  ``tf.compat.v1.nn.dynamic_rnn`` (they need tf-keras): the baseline;
- ``towerkit.layers.rnn``: the same names from ``towerkit.layers.rnn`` (no Keras).

Each case trains in its own graph and session through a bare loop over
``sess.make_callable(train_op)``. Rounds are interleaved (the order alternates each
round); the tables give the median steps/s, and steps per process CPU-second (steadier
on shared cores), with the slowest and fastest rounds; the ratio is the median of the
rounds' paired ratios. Goal: ``towerkit.layers.rnn``
>= 1.0x ``tf.nn.rnn_cell`` (``lstm``), >= 1.2x for the others.

The models (`MODELS`):

- ``lstm``: two ``LSTMCell(128)``, inputs ``[32, 20, 64]``;
- ``ptb``: tensorpack's PennTreebank example, the recurrent part: two
  ``BasicLSTMCell(650, forget_bias=0.0)`` each in ``DropoutWrapper(output_keep_prob=0.5)``,
  inputs ``[20, 35, 650]`` (the embedding's width);
- ``char-rnn``: tensorpack's Char-RNN example, the recurrent part: two
  ``LSTMCell(256)`` (its ``LSTMBlockCell`` computes the same), inputs ``[128, 50, 256]``;
- ``padded``: ``lstm`` with ``sequence_length`` (padded batches: lengths 5 to 20);
- ``gru``: two ``GRUCell(128)``, inputs ``[32, 20, 64]``.

``--floor`` adds a reference case to each round, ``matrix products``: the model's
matrix products alone, in a loop over time and layers as the cells' training step
runs them (each step and layer: the forward product of ``[input, h]`` with each
kernel, and backward the two products of its gradient, with the kernel for the
inputs' gradient and with ``[input, h]`` for the kernel's), with one ``tanh`` a step
to keep the values bounded and no other element-wise work. An implementation that
computes the same model exactly does these products, so ``tf.nn.rnn_cell``'s share of
that floor bounds what any such implementation can gain over it (at a share of 0.9 the
most is 1/0.9 = 1.11x), except where it makes them as larger products: the fused loop
makes the kernels' gradients and the bottom layer's products with its inputs as one
product over all steps, which oneDNN runs faster per operation than a step's.

Usage::

    python benchmarks/bench_rnn.py --out rnn.json
    python benchmarks/bench_rnn.py --model ptb --steps 20
    python benchmarks/bench_rnn.py --model char-rnn --steps 8 --floor
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
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.nn.rnn_cell lives in tf-keras

CASES = ("tf.nn.rnn_cell", "towerkit.layers.rnn")
BASE, OURS = CASES
FLOOR = "matrix products"
GOAL = 1.0
BATCH, TIME, DEPTH, UNITS = 32, 20, 64, 128

# model -> (layer, units, [batch, time, depth], output keep probability, lengths?, goal)
MODELS = {
    "lstm": ("LSTMCell", UNITS, (BATCH, TIME, DEPTH), 1.0, False, 1.0),
    "ptb": ("BasicLSTMCell", 650, (20, 35, 650), 0.5, False, 1.2),
    "char-rnn": ("LSTMCell", 256, (128, 50, 256), 1.0, False, 1.2),
    "padded": ("LSTMCell", UNITS, (BATCH, TIME, DEPTH), 1.0, True, 1.2),
    "gru": ("GRUCell", UNITS, (BATCH, TIME, DEPTH), 1.0, False, 1.2),
}


def round_order(round_index: int) -> tuple[str, ...]:
    """The cases in the order round `round_index` runs them: alternated each round.

    >>> round_order(0), round_order(1)
    (('tf.nn.rnn_cell', 'towerkit.layers.rnn'), ('towerkit.layers.rnn', 'tf.nn.rnn_cell'))
    """
    return CASES if round_index % 2 == 0 else CASES[::-1]


def paired_ratio(runs: dict[str, list[float]]) -> float | None:
    """The median over rounds of towerkit's rate over the baseline's in the same round.

    >>> paired_ratio({"tf.nn.rnn_cell": [100.0, 50.0], "towerkit.layers.rnn": [110.0, 50.0]})
    1.05
    """
    pairs = [a / b for a, b in zip(runs.get(OURS) or [], runs.get(BASE) or []) if b]
    return round(statistics.median(pairs), 3) if pairs else None


def _train_op(case: str, model: str = "lstm"):
    import tensorflow as tf

    tf1 = tf.compat.v1
    if case == OURS:
        from towerkit.layers import rnn as cells

        loop = cells.dynamic_rnn
    else:
        cells = tf1.nn.rnn_cell
        loop = tf1.nn.dynamic_rnn
    layer, units, shape, keep, padded, _ = MODELS[model]
    rng = np.random.default_rng(0)
    x = tf1.constant(rng.standard_normal(shape), tf.float32)
    lengths = rng.integers(shape[1] // 4, shape[1] + 1, shape[0]) if padded else None
    kwargs = {"forget_bias": 0.0} if model == "ptb" else {}

    def make():
        cell = getattr(cells, layer)(units, **kwargs)
        return cells.DropoutWrapper(cell, output_keep_prob=keep) if keep < 1 else cell

    cell = cells.MultiRNNCell([make(), make()])
    out, _ = loop(cell, x, sequence_length=lengths, dtype=tf.float32)
    loss = tf1.reduce_mean(tf1.square(out))
    return tf1.train.GradientDescentOptimizer(0.01).minimize(loss)


def product_shapes(model: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The forward products of one step, per layer and kernel: ``([batch, in + units], kernel)``.

    An LSTM layer has one kernel of 4 x units columns, a GRU layer two (its gates', 2 x
    units, and its candidate's, units); the second layer's input is the first's output.

    >>> product_shapes("gru")[:2]
    [((32, 192), (192, 256)), ((32, 192), (192, 128))]
    >>> len(product_shapes("lstm")), product_shapes("lstm")[1]
    (2, ((32, 256), (256, 512)))
    """
    layer, units, (batch, _, depth), *_ = MODELS[model]
    widths = [2 * units, units] if layer == "GRUCell" else [4 * units]
    return [
        ((batch, below + units), (below + units, w)) for below in (depth, units) for w in widths
    ]


def _floor_op(model: str):
    """One training step's matrix products (forward, inputs' and kernels' gradients) over time."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    _, units, (batch, steps, _), *_ = MODELS[model]
    rng = np.random.default_rng(0)
    shapes = product_shapes(model)
    kernels = [tf1.constant(rng.standard_normal(k) / np.sqrt(k[0]), tf.float32) for _, k in shapes]
    ins = [tf1.constant(rng.standard_normal(a), tf.float32) for a, _ in shapes]

    def step(t, h, total):
        for x, kernel in zip(ins, kernels, strict=True):
            zc = tf1.concat([x[:, : x.shape[1] - units], h], 1)
            z = tf1.matmul(zc, kernel)  # forward
            d_zc = tf1.matmul(z, kernel, transpose_b=True)  # the inputs' gradient
            d_kernel = tf1.matmul(zc, z, transpose_a=True)  # the kernel's gradient
            h = tf1.tanh(z[:, :units] + d_zc[:, :units])
            total = total + d_kernel[0, 0]
        return t + 1, h, total

    start = (tf1.constant(0), tf1.zeros([batch, units]), tf1.constant(0.0))
    return tf1.while_loop(lambda t, *_: t < steps, step, start)[2]


def train_rate(case: str, steps: int, warmup: int, model: str = "lstm") -> tuple[float, float]:
    """Steps per second and per process CPU-second of a bare make_callable loop on `case`."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        train_op = _floor_op(model) if case == FLOOR else _train_op(case, model)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            run = sess.make_callable(train_op)
            for _ in range(warmup):
                run()
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                run()
            return steps / (time.perf_counter() - start), steps / (time.process_time() - cpu)


def floor_share(runs: dict[str, list[float]]) -> float | None:
    """The median over rounds of the baseline's rate over the floor's in the same round.

    >>> floor_share({"tf.nn.rnn_cell": [9.0, 8.0], "matrix products": [10.0, 10.0]})
    0.85
    """
    pairs = [a / b for a, b in zip(runs.get(BASE) or [], runs.get(FLOOR) or []) if b]
    return round(statistics.median(pairs), 3) if pairs else None


def render(
    runs: dict[str, list[float]], failed: dict[str, str], unit: str = "steps/s", goal: float = GOAL
) -> str:
    """The table: median steps/s (slowest-fastest round) per case, then the goal.

    >>> print(render({"tf.nn.rnn_cell": [10.0, 12.0], "towerkit.layers.rnn": [11.0, 12.0]}, {}))
    | case | steps/s (slowest-fastest) | towerkit.layers.rnn / case | goal |
    |---|---|---|---|
    | tf.nn.rnn_cell | 11.0 (10.0-12.0) | 1.05x | 1.0x: met |
    | towerkit.layers.rnn | 11.5 (11.0-12.0) | - | - |
    """
    ratio = paired_ratio(runs)
    lines = [
        f"| case | {unit} (slowest-fastest) | towerkit.layers.rnn / case | goal |",
        "|---|---|---|---|",
    ]
    floor = runs.get(FLOOR) or []
    if floor:
        share = floor_share(runs)
        cell = f"{statistics.median(floor):.1f} ({min(floor):.1f}-{max(floor):.1f})"
        bound = "n/a" if not share else f"{share:.2f} of it: at most {1 / share:.2f}x"
        lines.append(f"| {FLOOR} (floor) | {cell} | {BASE} reaches {bound} | - |")
    for case in CASES:
        rounds = runs.get(case) or []
        if not rounds:
            lines.append(f"| {case} | {failed.get(case, 'n/a')} | - | - |")
            continue
        cell = f"{statistics.median(rounds):.1f} ({min(rounds):.1f}-{max(rounds):.1f})"
        if case == OURS:
            lines.append(f"| {case} | {cell} | - | - |")
        elif ratio is None:
            lines.append(f"| {case} | {cell} | n/a | {goal}x: - |")
        else:
            verdict = "met" if ratio >= goal else "MISSED"
            lines.append(f"| {case} | {cell} | {ratio:.2f}x | {goal}x: {verdict} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--steps", type=int, default=150, help="timed steps a round (150)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps a round (10)")
    parser.add_argument(
        "--model", default="lstm", choices=sorted(MODELS), help="the model (default lstm)"
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--check", action="store_true", help="exit 1 when the goal is missed")
    parser.add_argument(
        "--floor", action="store_true", help="time the model's matrix products alone too"
    )
    args = parser.parse_args(argv)
    if min(args.repeats, args.steps) < 1 or args.warmup < 0:
        parser.error("--repeats and --steps must be >= 1, --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print the table, optionally write JSON; 1 on a missed goal with --check."""
    args = parse_args(argv)
    cases = (*CASES, FLOOR) if args.floor else CASES
    runs: dict[str, list[float]] = {c: [] for c in cases}
    cpu_runs: dict[str, list[float]] = {c: [] for c in cases}
    failed: dict[str, str] = {}
    for rep in range(args.repeats):
        for case in (*round_order(rep), *cases[len(CASES) :]):
            if case in failed:
                continue
            try:
                rate, cpu_rate = train_rate(case, args.steps, args.warmup, args.model)
                runs[case].append(rate)
                cpu_runs[case].append(cpu_rate)
            except Exception as err:  # a case that cannot run (no tf-keras) is reported
                failed[case] = f"n/a: {type(err).__name__}: {str(err)[:160]}"
            print(f"rnn {case} #{rep + 1}: {runs[case][-1:] or failed.get(case)}", file=sys.stderr)
    goal = MODELS[args.model][-1]
    print(render(runs, failed, goal=goal))
    print()
    print(render(cpu_runs, failed, "steps per CPU-second", goal))
    ratio = paired_ratio(runs)
    if args.out:
        medians = {c: statistics.median(r) for c, r in runs.items() if r}
        with open(args.out, "w") as f:
            json.dump(
                {
                    "model": args.model,
                    "goal": goal,
                    "runs": runs,
                    "failed": failed,
                    "medians": medians,
                    "ratios": {BASE: ratio},
                    "cpu_runs": cpu_runs,
                    "cpu_ratios": {BASE: paired_ratio(cpu_runs)},
                    "floor_shares": {"steps/s": floor_share(runs), "cpu": floor_share(cpu_runs)},
                },
                f,
                indent=1,
            )
    return 1 if args.check and (ratio is None or ratio < goal) else 0


if __name__ == "__main__":
    sys.exit(main())
