"""Steps per second with K training steps per session call (``steps_per_execution``).

For each model (``tiny``, ``mlp``, ``conv`` of ``bench_loop.py``, the same data through the
same ``tf.data`` pipeline) and each K in ``--ks`` (default 1, 10, 50, 200):

- ``callable``: a bare loop over ``sess.make_callable(train_op)``, one step per call: the
  one-step floor every ratio is taken against (it does not depend on K);
- ``while``: a hand-written ``tf.while_loop`` of K steps (``get_next`` and the step in the
  body) behind one ``make_callable``;
- ``towerkit``: ``SimpleTrainer`` with ``steps_per_execution=K``, ``DEFAULT_CALLBACKS()``
  and ``DEFAULT_MONITORS()`` into a temporary logdir (epoch 2 of 2 timed);
- ``keras``: Keras 3 ``model.fit`` compiled with ``steps_per_execution=K`` (epoch 2 of 2);
- ``keras-jit``: the same with ``jit_compile=True``.

Cases run ``--repeats`` rounds, interleaved; the table shows medians, their ratio to the
floor, and towerkit's ratio to Keras 3 at the same K. Goals: towerkit >= 1.4x the floor
on ``tiny`` at K=50, >= 1.0x on ``mlp`` and ``conv``, and >= 1.0x ``keras`` at the same K.

Usage::

    python benchmarks/bench_multistep.py --models tiny,mlp,conv --repeats 3 --out multistep.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_loop import MODELS, bare_loop, build_cost, dataset

KS = (1, 10, 50, 200)
STEPS = {"tiny": 4000, "mlp": 1200, "conv": 400}
"""Timed steps per model: a multiple of every K."""

CASES = ("while", "towerkit", "keras", "keras-jit")

GOALS = {"tiny": (50, 1.4), "mlp": (50, 1.0), "conv": (50, 1.0)}
"""Model -> (K, the smallest allowed ratio of towerkit to the floor at that K)."""


def while_loop(model: str, steps: int, warmup: int, k: int) -> float:
    """``while``: steps/s of a hand-written K-step ``tf.while_loop``."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        it = tf1.data.make_one_shot_iterator(dataset(model))
        opt = tf1.train.GradientDescentOptimizer(0.01)

        def body(i):
            x, y = it.get_next()
            with tf.control_dependencies([opt.minimize(build_cost(model, x, y))]):
                return i + 1

        loop = tf.while_loop(
            lambda i: True, body, [tf.constant(0)], maximum_iterations=k, parallel_iterations=1
        )
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            run = sess.make_callable(loop.op if hasattr(loop, "op") else loop[0].op)
            for _ in range(max(1, warmup // k)):
                run()
            start = time.perf_counter()
            for _ in range(steps // k):
                run()
            return steps / (time.perf_counter() - start)


def towerkit_k(model: str, steps: int, warmup: int, k: int) -> float:
    """``towerkit``: SimpleTrainer with K steps per call and the default callbacks."""
    import tensorflow as tf

    from towerkit.callbacks import Callback
    from towerkit.trainers import DEFAULT_CALLBACKS, DEFAULT_MONITORS, SimpleTrainer, TFDatasetInput

    tf1 = tf.compat.v1
    times: dict[str, float] = {}

    class EpochTimer(Callback):
        _chief_only = False

        def _before_epoch(self):
            times["start"] = time.perf_counter()

        def _after_epoch(self):
            times["end"] = time.perf_counter()

    spec = MODELS[model]
    sig = [
        tf.TensorSpec([None, *spec["input"]], tf.float32, "x"),
        tf.TensorSpec([None], tf.int32, "y"),
    ]
    logdir = tempfile.mkdtemp(prefix="bench-multistep-")
    try:
        with tf.Graph().as_default(), contextlib.redirect_stderr(io.StringIO()):
            trainer = SimpleTrainer()
            trainer.setup_graph(
                sig,
                TFDatasetInput(lambda: dataset(model)),
                lambda x, y: build_cost(model, x, y),
                lambda: tf1.train.GradientDescentOptimizer(0.01),
                steps_per_execution=k,
            )
            trainer.train_with_defaults(
                callbacks=[*DEFAULT_CALLBACKS(), EpochTimer()],
                extra_callbacks=[],
                monitors=DEFAULT_MONITORS(),
                steps_per_epoch=steps,
                max_epoch=2,
                logdir=os.path.join(logdir, "log"),
                steps_per_execution=k,
            )
        return steps / (times["end"] - times["start"])
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def keras_k(model: str, steps: int, warmup: int, k: int, jit: bool) -> float:
    """``keras``/``keras-jit``: Keras 3 ``fit`` with ``steps_per_execution=K``."""
    del warmup
    import keras
    import tensorflow as tf

    spec = MODELS[model]
    layers = [keras.Input(spec["input"])]
    if "conv" in spec:
        for ch in spec["conv"]:
            layers += [
                keras.layers.Conv2D(ch, 3, padding="same", activation="relu"),
                keras.layers.MaxPooling2D(2),
            ]
        layers.append(keras.layers.Flatten())
    layers += [keras.layers.Dense(u, activation="relu") for u in spec.get("hidden", ())]
    layers.append(keras.layers.Dense(spec["classes"]))
    net = keras.Sequential(layers)
    net.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=k,
        jit_compile=jit,
    )
    times: dict[int, float] = {}

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            times[2 * epoch] = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times[2 * epoch + 1] = time.perf_counter()

    with tf.device("/cpu:0"):
        net.fit(dataset(model), steps_per_epoch=steps, epochs=2, verbose=0, callbacks=[Timer()])
    return steps / (times[3] - times[2])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,mlp,conv")
    parser.add_argument("--ks", default=",".join(map(str, KS)))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the timed steps")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", default=None)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.ks = [int(k) for k in args.ks.split(",") if k]
    args.cases = [c for c in args.cases.split(",") if c]
    bad = [m for m in args.models if m not in MODELS] + [c for c in args.cases if c not in CASES]
    if bad:
        parser.error(f"unknown models or cases: {bad}")
    return args


def timed_steps(model: str, ks: list[int], scale: float) -> int:
    """The timed steps of `model`: scaled, rounded up to a multiple of every K.

    >>> timed_steps("conv", [1, 10, 50, 200], 0.5)
    200
    >>> timed_steps("tiny", [1, 10, 50, 200], 1.0)
    4000
    >>> timed_steps("mlp", [3, 7], 1.0)
    1218
    """
    import math

    lcm = math.lcm(*ks)
    return max(lcm, math.ceil(STEPS[model] * scale / lcm) * lcm)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, dict] = {}
    lines = [
        "| model | K | callable (floor) | while | towerkit | keras | keras-jit | towerkit / floor | towerkit / keras |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    missed = []
    for model in args.models:
        steps = timed_steps(model, args.ks, args.scale)
        runs: dict[str, list[float]] = {"callable": []}
        failed: dict[str, str] = {}
        runners = {"callable": lambda m=model, n=steps: bare_loop(m, n, args.warmup, True)}
        for k in args.ks:
            for case in args.cases:
                key = f"{case}@{k}"
                runs[key] = []
                if case == "while":
                    runners[key] = lambda k=k, m=model, n=steps: while_loop(m, n, args.warmup, k)
                elif case == "towerkit":
                    runners[key] = lambda k=k, m=model, n=steps: towerkit_k(m, n, args.warmup, k)
                else:
                    jit = case == "keras-jit"
                    runners[key] = lambda k=k, j=jit, m=model, n=steps: keras_k(
                        m, n, args.warmup, k, j
                    )
        for rep in range(args.repeats):
            for key, runner in runners.items():
                if key in failed:
                    continue
                try:
                    runs[key].append(runner())
                except Exception as err:  # reported, not fatal
                    failed[key] = f"n/a: {type(err).__name__}: {str(err)[:120]}"
                print(
                    f"{model} {key} #{rep + 1}: {runs[key][-1:] or failed.get(key)}",
                    file=sys.stderr,
                    flush=True,
                )
        med = {key: statistics.median(v) for key, v in runs.items() if v}
        floor = med.get("callable")
        results[model] = {"steps": steps, "runs": runs, "medians": med, "failed": failed}
        for k in args.ks:

            def cell(case, k=k, med=med, failed=failed):
                key = f"{case}@{k}"
                if key in failed:
                    return failed[key][:40]
                return f"{med[key]:.0f}" if key in med else ""

            tk, ke = med.get(f"towerkit@{k}"), med.get(f"keras@{k}")
            r_floor = tk / floor if tk and floor else None
            r_keras = tk / ke if tk and ke else None
            lines.append(
                f"| {model} | {k} | {floor:.0f} | {cell('while')} | {cell('towerkit')} | "
                f"{cell('keras')} | {cell('keras-jit')} | "
                f"{'' if r_floor is None else f'{r_floor:.2f}x'} | "
                f"{'' if r_keras is None else f'{r_keras:.2f}x'} |"
            )
            goal = GOALS.get(model)
            if goal and k == goal[0] and (r_floor is None or r_floor < goal[1]):
                missed.append(f"{model} K={k}: towerkit/floor {r_floor} < {goal[1]}")
            if r_keras is not None and r_keras < 1.0:
                missed.append(f"{model} K={k}: towerkit/keras {r_keras:.2f} < 1.0")
    table = "\n".join(lines)
    print(table)
    print("\nmissed goals: " + ("; ".join(missed) if missed else "none"))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"results": results, "table": table, "missed": missed}, f, indent=1)
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
