"""Restore speed of towerkit.sessinit against tf.compat.v1.train.Saver.restore, on the same files.

Builds a graph of ``--num-vars`` float32 variables totalling about ``--size-mb``
megabytes, writes one checkpoint (with a plain ``Saver``) and one npz file, and times
restoring them into a finalized graph:

- ``Saver.restore``: the baseline, ``tf.compat.v1.train.Saver.restore``;
- ``SaverRestore`` (goal: within 1.2x of the baseline);
- ``SaverRestoreRelaxed`` and ``DictRestore`` (goal: within 1.5x);
- ``SmartInit(npz)``: reading the npz file included.

Each case runs ``--warmup`` times, then ``--repeats`` times interleaved with the other
cases; the table reports the median and the best time, the ratio of medians to the
baseline, and the bytes restored (file size, or the dict's size) divided by the median.

Usage::

    python benchmarks/bench_restore.py --size-mb 200 --out restore.json
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

import numpy as np

GOALS = {"SaverRestore": 1.2, "SaverRestoreRelaxed": 1.5, "DictRestore": 1.5}
"""Case name -> largest allowed ratio of its median time to Saver.restore's."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=1000.0, help="total size (MiB)")
    parser.add_argument("--num-vars", type=int, default=1000, help="number of variables")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per case")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per case first")
    parser.add_argument("--dir", default=None, help="where to write files (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument(
        "--check", action="store_true", help="exit with status 1 when a goal is missed"
    )
    args = parser.parse_args(argv)
    if args.size_mb <= 0 or args.num_vars <= 0 or args.repeats <= 0 or args.warmup < 0:
        parser.error("--size-mb, --num-vars and --repeats must be > 0, --warmup >= 0")
    return args


def variable_shapes(size_mb: float, num_vars: int, seed: int = 0) -> list[tuple[int, ...]]:
    """Shapes of `num_vars` float32 variables of mixed sizes totalling about `size_mb` MiB.

    >>> shapes = variable_shapes(1, 10)
    >>> len(shapes), abs(sum(int(np.prod(s)) for s in shapes) * 4 - 2**20) < 4 * 10 * 64
    (10, True)
    """
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, 1.0, num_vars)
    elements = np.maximum(1, np.round(weights / weights.sum() * size_mb * 2**20 / 4)).astype(int)
    shapes: list[tuple[int, ...]] = []
    for i, n in enumerate(elements):
        if i % 3 == 0 and n >= 64:
            shapes.append((int(n) // 64, 64))
        else:
            shapes.append((int(n),))
    return shapes


def _file_bytes(paths: list[str]) -> int:
    return sum(os.path.getsize(p) for p in paths)


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(args: argparse.Namespace, workdir: str) -> dict:
    """Build, write, time; return the results record."""
    import tensorflow as tf

    from towerkit.sessinit import (
        DictRestore,
        SaverRestore,
        SaverRestoreRelaxed,
        SmartInit,
        save_checkpoint_vars,
    )

    tf1 = tf.compat.v1
    shapes = variable_shapes(args.size_mb, args.num_vars)
    rng = np.random.default_rng(1)
    graph = tf.Graph()
    with graph.as_default():
        variables = [
            tf1.get_variable(f"block{i // 50}/var{i}", shape=s, initializer=tf1.zeros_initializer())
            for i, s in enumerate(shapes)
        ]
        names = [v.op.name for v in variables]
        values = {n: rng.random(s, dtype=np.float32) for n, s in zip(names, shapes)}
        saver = tf1.train.Saver(variables)
        sess = tf1.Session(graph=graph)
        sess.run(tf1.global_variables_initializer())
        DictRestore(values).init(sess)
        ckpt = saver.save(sess, os.path.join(workdir, "model-1"), write_meta_graph=False)
        npz = os.path.join(workdir, "params.npz")
        save_checkpoint_vars(values, npz)
        ckpt_files = [
            os.path.join(workdir, n) for n in os.listdir(workdir) if n.startswith("model-1.")
        ]
        ckpt_bytes = _file_bytes(ckpt_files)
        dict_bytes = sum(v.nbytes for v in values.values())
        inits = {
            "SaverRestore": SaverRestore(ckpt),
            "SaverRestoreRelaxed": SaverRestoreRelaxed(ckpt),
            "DictRestore": DictRestore(values),
            "SmartInit(npz)": SmartInit(npz),
        }
        for init in inits.values():
            init.setup_graph(graph)
        graph.finalize()
        cases: dict[str, tuple[Callable[[], object], int]] = {
            "Saver.restore": (lambda: saver.restore(sess, ckpt), ckpt_bytes),
            "SaverRestore": (lambda: SaverRestore(ckpt).init(sess), ckpt_bytes),
            "SaverRestoreRelaxed": (lambda: SaverRestoreRelaxed(ckpt).init(sess), ckpt_bytes),
            "DictRestore": (lambda: inits["DictRestore"].init(sess), dict_bytes),
            "SmartInit(npz)": (lambda: SmartInit(npz).init(sess), _file_bytes([npz])),
        }
        probe = [0, len(names) // 2, len(names) - 1]
        for name, (fn, _) in cases.items():
            sess.run([v.initializer for v in variables])
            fn()
            got = sess.run([variables[i] for i in probe])
            if not all(np.array_equal(g, values[names[i]]) for g, i in zip(got, probe)):
                msg = f"{name} restored wrong values"
                raise RuntimeError(msg)
            for _ in range(args.warmup - 1):
                fn()
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeats):
            for name, (fn, _) in cases.items():
                times[name].append(_time(fn))
        sess.close()
    base = statistics.median(times["Saver.restore"])
    results = []
    for name, (_, nbytes) in cases.items():
        median = statistics.median(times[name])
        goal = GOALS.get(name)
        results.append(
            {
                "case": name,
                "median_s": median,
                "min_s": min(times[name]),
                "ratio": median / base,
                "mb_per_s": nbytes / 2**20 / median,
                "bytes": nbytes,
                "goal": goal,
                "ok": None if goal is None else median / base <= goal,
            }
        )
    return {
        "size_mb": args.size_mb,
        "num_vars": args.num_vars,
        "repeats": args.repeats,
        "tensorflow": tf.__version__,
        "cpus": os.cpu_count(),
        "results": results,
    }


def markdown(record: dict) -> str:
    """The results as a Markdown table."""
    lines = [
        f"### Restore: {record['num_vars']} variables, {record['size_mb']:g} MiB "
        f"(median of {record['repeats']}, TensorFlow {record['tensorflow']})",
        "",
        "| case | median (s) | best (s) | x Saver.restore | MiB/s | goal |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in record["results"]:
        goal = "" if r["goal"] is None else f"<= {r['goal']}x: {'met' if r['ok'] else 'MISSED'}"
        lines.append(
            f"| {r['case']} | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['ratio']:.2f} "
            f"| {r['mb_per_s']:.0f} | {goal} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; 1 if `--check` and a goal is missed, else 0."""
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        record = run(args, args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_restore-") as workdir:
            record = run(args, workdir)
    print(markdown(record))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
    missed = [r["case"] for r in record["results"] if r["ok"] is False]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
