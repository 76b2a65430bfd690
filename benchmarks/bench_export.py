"""Inference speed of the exported forms of a model against the OfflinePredictor it came from.

Builds a small convnet for 8x8 images (two convolutions with batch normalization,
dropout when training, two fully connected layers), writes a checkpoint of it, and
exports it with ``ModelExporter`` as a compact frozen graph and as a SavedModel. Then it
times, side by side in this one process:

- ``compact graph``: the frozen GraphDef, imported with ``tf.compat.v1.import_graph_def``
  and run by a session callable;
- ``SavedModel (tf.saved_model.load)``: the predict signature called eagerly, outputs
  converted to numpy;
- ``SavedModel (v1 loader)``: ``tf.compat.v1.saved_model.loader.load`` in a session, run by
  a session callable;
- ``OfflinePredictor``: the baseline, built from the same checkpoint.

For each form: the latency of one call on a batch of 1 (milliseconds per call, mean over
``--latency-calls`` calls) and the throughput on batches of ``--batch`` (samples per
second over ``--throughput-calls`` calls), as the median and the best of ``--repeats``
timed rounds taken after ``--warmup`` untimed calls, the forms interleaved round by round.
The best round is the one least disturbed by other load on the machine; the verdict
compares best rounds. Every form's outputs are checked against the predictor's first.

Usage::

    python benchmarks/bench_export.py --out export.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

SIGNATURE_NAME = "prediction_pipeline"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256, help="batch size of the throughput runs")
    parser.add_argument("--latency-calls", type=int, default=200, help="calls per latency round")
    parser.add_argument(
        "--throughput-calls", type=int, default=20, help="calls per throughput round"
    )
    parser.add_argument("--repeats", type=int, default=10, help="timed rounds per form")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per form first")
    parser.add_argument("--dir", default=None, help="where to write files (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write the Markdown report here")
    parser.add_argument("--json", default=None, help="write the raw results as JSON here")
    args = parser.parse_args(argv)
    counts = (args.batch, args.latency_calls, args.throughput_calls, args.repeats)
    if min(counts) <= 0 or args.warmup < 0:
        parser.error("--batch, --latency-calls, --throughput-calls, --repeats must be > 0")
    return args


def summarize(samples: list[float], higher_is_better: bool = False) -> tuple[float, float]:
    """The median and the best of `samples` (the least disturbed by other load on the machine).

    >>> summarize([3.0, 1.0, 2.0])
    (2.0, 1.0)
    >>> summarize([3.0, 1.0, 2.0], higher_is_better=True)
    (2.0, 3.0)
    """
    return statistics.median(samples), (max if higher_is_better else min)(samples)


def render_table(rows: list[dict], baseline: str) -> str:
    """The Markdown table of the results, with each form's best compared with `baseline`'s.

    >>> rows = [
    ...     {"form": "a", "latency_ms": (1.2, 1.0), "throughput": (900.0, 1000.0), "max_diff": 0.0},
    ...     {"form": "b", "latency_ms": (0.6, 0.5), "throughput": (1800.0, 2000.0), "max_diff": 1e-7},
    ... ]
    >>> print(render_table(rows, "a"))
    | form | latency, batch 1 (ms): median | best | best vs a | throughput (samples/s): median | best | best vs a | max abs diff |
    |---|---:|---:|---:|---:|---:|---:|---:|
    | a | 1.200 | 1.000 | 1.00x | 900 | 1000 | 1.00x | 0 |
    | b | 0.600 | 0.500 | 0.50x | 1800 | 2000 | 2.00x | 1e-07 |
    """
    base = next(r for r in rows if r["form"] == baseline)
    lines = [
        f"| form | latency, batch 1 (ms): median | best | best vs {baseline} "
        f"| throughput (samples/s): median | best | best vs {baseline} | max abs diff |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        (lat_med, lat_best), (thr_med, thr_best) = r["latency_ms"], r["throughput"]
        lines.append(
            f"| {r['form']} | {lat_med:.3f} | {lat_best:.3f} "
            f"| {lat_best / base['latency_ms'][1]:.2f}x | {thr_med:.0f} | {thr_best:.0f} "
            f"| {thr_best / base['throughput'][1]:.2f}x | {r['max_diff']:.3g} |"
        )
    return "\n".join(lines)


def slower_than(rows: list[dict], baseline: str, tolerance: float = 0.05) -> list[str]:
    """The forms whose best latency or best throughput is worse than `baseline`'s beyond `tolerance`.

    >>> rows = [
    ...     {"form": "a", "latency_ms": (1.2, 1.0), "throughput": (900.0, 1000.0)},
    ...     {"form": "b", "latency_ms": (1.0, 1.04), "throughput": (1000.0, 990.0)},
    ...     {"form": "c", "latency_ms": (1.0, 0.9), "throughput": (800.0, 900.0)},
    ... ]
    >>> slower_than(rows, "a")
    ['c']
    """
    base = next(r for r in rows if r["form"] == baseline)
    return [
        r["form"]
        for r in rows
        if r["form"] != baseline
        and (
            r["latency_ms"][1] > base["latency_ms"][1] * (1 + tolerance)
            or r["throughput"][1] < base["throughput"][1] / (1 + tolerance)
        )
    ]


def _model():
    """The benchmark's tower function and input signature."""
    import tensorflow as tf

    from towerkit.towers import get_current_tower_context
    from towerkit.towers.compat import tf1

    signature = [tf.TensorSpec([None, 8, 8, 1], tf.float32, "image")]

    def batch_norm(x, name):
        training = get_current_tower_context().is_training
        c = int(x.shape[-1])
        keys = [tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES]
        with tf1.variable_scope(name):
            beta = tf1.get_variable("beta", [c], initializer=tf1.zeros_initializer())
            gamma = tf1.get_variable("gamma", [c], initializer=tf1.ones_initializer())
            mean = tf1.get_variable(
                "mean/EMA",
                [c],
                initializer=tf1.random_normal_initializer(),
                trainable=False,
                collections=keys,
            )
            var = tf1.get_variable(
                "variance/EMA",
                [c],
                initializer=tf1.random_uniform_initializer(0.5, 2.0),
                trainable=False,
                collections=keys,
            )
            if training:
                m, v = tf1.nn.moments(x, [0, 1, 2])
                tf1.add_to_collection(
                    tf1.GraphKeys.UPDATE_OPS, tf1.assign(mean, 0.9 * mean + 0.1 * m)
                )
                tf1.add_to_collection(
                    tf1.GraphKeys.UPDATE_OPS, tf1.assign(var, 0.9 * var + 0.1 * v)
                )
                mean, var = m, v
            return tf1.nn.batch_normalization(x, mean, var, beta, gamma, 1e-5)

    def tower(image):
        training = get_current_tower_context().is_training
        h = image
        for i, channels in enumerate((16, 32)):
            w = tf1.get_variable(f"conv{i}/W", [3, 3, int(h.shape[-1]), channels])
            h = tf1.nn.relu(batch_norm(tf1.nn.conv2d(h, w, 1, "SAME"), f"bn{i}"))
        h = tf1.reshape(h, [-1, 8 * 8 * 32])
        w = tf1.get_variable("fc0/W", [8 * 8 * 32, 64])
        h = tf1.nn.relu(tf1.matmul(h, w))
        if training:
            h = tf1.nn.dropout(h, rate=0.5)
        w = tf1.get_variable("fc1/W", [64, 10])
        b = tf1.get_variable("fc1/b", [10], initializer=tf1.zeros_initializer())
        return tf1.nn.softmax(tf1.matmul(h, w) + b, name="prob")

    return tower, signature


def _write_checkpoint(tower, signature, workdir: str) -> str:
    """A checkpoint of the model's (seeded, random) initial values."""
    from towerkit.towers import TowerContext, build_placeholders
    from towerkit.towers.compat import tf1

    with tf1.Graph().as_default() as graph:
        tf1.set_random_seed(0)
        inputs = build_placeholders(signature)
        with TowerContext("", is_training=True):
            tower(*inputs)
        saver = tf1.train.Saver()
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            return saver.save(sess, os.path.join(workdir, "model"), global_step=0)


def _session_callable(graph, feed: str, fetch: str):
    from towerkit.towers.compat import tf1

    sess = tf1.Session(graph=graph)
    return sess, sess.make_callable(fetch, feed_list=[feed])


def build_forms(workdir: str) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Export the model both ways; one callable per form, the predictor's last."""
    import tensorflow as tf

    from towerkit.export import ModelExporter, OfflinePredictor, PredictConfig
    from towerkit.sessinit import SaverRestore
    from towerkit.towers.compat import tf1

    tower, signature = _model()
    checkpoint = _write_checkpoint(tower, signature, workdir)
    config = PredictConfig(
        tower_func=tower,
        input_signature=signature,
        output_names=["prob"],
        session_init=SaverRestore(checkpoint),
    )
    exporter = ModelExporter(config)
    compact = exporter.export_compact(os.path.join(workdir, "compact.pb"), overwrite=True)
    serving = exporter.export_serving(os.path.join(workdir, "serving"), overwrite=True)

    forms: dict[str, Callable[[np.ndarray], np.ndarray]] = {}

    graph_def = tf1.GraphDef()
    with open(compact, "rb") as f:
        graph_def.ParseFromString(f.read())
    with tf1.Graph().as_default() as g:
        tf1.import_graph_def(graph_def, name="")
    _, run_compact = _session_callable(g, "image:0", "prob:0")
    forms["compact graph"] = run_compact

    signature_fn = tf.saved_model.load(serving).signatures[SIGNATURE_NAME]
    forms["SavedModel (tf.saved_model.load)"] = lambda x: signature_fn(image=tf.constant(x))[
        "prob"
    ].numpy()

    with tf1.Graph().as_default() as g:
        sess = tf1.Session(graph=g)
        meta = tf1.saved_model.loader.load(sess, [tf1.saved_model.tag_constants.SERVING], serving)
        sig = meta.signature_def[SIGNATURE_NAME]
    forms["SavedModel (v1 loader)"] = sess.make_callable(
        sig.outputs["prob"].name, feed_list=[sig.inputs["image"].name]
    )

    predictor = OfflinePredictor(config)
    forms["OfflinePredictor"] = lambda x: predictor(x)[0]
    return forms


def _time_calls(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return time.perf_counter() - start


def run(args: argparse.Namespace, workdir: str) -> list[dict]:
    """Time every form; one result row per form, the baseline last."""
    forms = build_forms(workdir)
    rng = np.random.default_rng(0)
    one = rng.normal(size=(1, 8, 8, 1)).astype(np.float32)
    batch = rng.normal(size=(args.batch, 8, 8, 1)).astype(np.float32)
    expected = forms["OfflinePredictor"](batch)
    diffs = {name: float(np.abs(fn(batch) - expected).max()) for name, fn in forms.items()}
    for fn in forms.values():
        for _ in range(args.warmup):
            fn(one)
        for _ in range(max(1, args.warmup // 10)):
            fn(batch)
    latency: dict[str, list[float]] = {name: [] for name in forms}
    throughput: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(args.repeats):
        for name, fn in forms.items():
            latency[name].append(_time_calls(fn, one, args.latency_calls) / args.latency_calls)
        for name, fn in forms.items():
            seconds = _time_calls(fn, batch, args.throughput_calls)
            throughput[name].append(args.batch * args.throughput_calls / seconds)
    return [
        {
            "form": name,
            "latency_ms": tuple(1000.0 * t for t in summarize(latency[name])),
            "throughput": summarize(throughput[name], higher_is_better=True),
            "max_diff": diffs[name],
            "latency_rounds_ms": [1000.0 * t for t in latency[name]],
            "throughput_rounds": throughput[name],
        }
        for name in forms
    ]


def report(rows: list[dict], args: argparse.Namespace) -> str:
    """The Markdown report: settings, table, verdict."""
    import tensorflow as tf

    slower = slower_than(rows, "OfflinePredictor")
    verdict = (
        "Every exported form is as fast as the OfflinePredictor or faster (best rounds, "
        "5% tolerance)."
        if not slower
        else f"Slower than the OfflinePredictor (best rounds, beyond 5%): {', '.join(slower)}."
    )
    return "\n".join(
        [
            "## Export: inference speed of the exported forms",
            "",
            f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs; median and best of {args.repeats} rounds "
            f"({args.latency_calls} calls at batch 1, {args.throughput_calls} calls at batch "
            f"{args.batch}) after {args.warmup} warm-up calls.",
            "",
            render_table(rows, "OfflinePredictor"),
            "",
            verdict,
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the Markdown report and write it to ``--out``."""
    args = parse_args(argv)
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        rows = run(args, args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_export_") as workdir:
            rows = run(args, workdir)
    text = report(rows, args)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
