"""Steps per second of the training loop against bare session loops, Keras and tensorpack.

Every case trains the same model on the same synthetic data through the same
``tf.data`` pipeline (``from_tensor_slices -> repeat -> batch -> prefetch``):

- (a) ``callable``: a bare loop over ``sess.make_callable(train_op)`` (the baseline);
- (b) ``sess.run``: a bare ``sess.run(train_op)`` loop;
- (c) ``towerkit``: ``SimpleTrainer`` with ``DEFAULT_CALLBACKS()`` and ``DEFAULT_MONITORS()``
  (progress bar, summaries, stats.json and event files into a temporary logdir);
- (d) ``keras``: Keras 3 ``model.fit`` on the equivalent model (SGD, same batch);
- (e) ``tensorpack``: tensorpack 0.11's ``SimpleTrainer`` with its default callbacks and
  monitors, in its own virtual environment (``uv venv`` + ``tensorflow-cpu`` +
  ``tensorpack==0.11``, with small shims for TensorFlow 2.21); when it cannot be
  installed or run, its cells say why.

Models: ``tiny`` (a 32-64-10 MLP, batch 64: the loop's own cost dominates), ``mlp``
(784-256-256-10, batch 64) and ``conv`` (two 3x3 convolutions with pooling on 28x28x1,
batch 64). Each case runs ``--repeats`` times, interleaved with the other cases;
each run warms up for ``--warmup`` steps (an untimed first epoch for the trainers)
and then times ``--steps`` steps. The table shows the median steps/s and the ratio
of each median to (a)'s; goals: (c) >= 0.9x (a) on ``tiny`` and >= 0.98x elsewhere.

Usage::

    python benchmarks/bench_loop.py --models tiny,mlp,conv --repeats 5 --out loop.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODELS = {
    "tiny": {"input": (32,), "hidden": (64,), "classes": 10, "batch": 64, "steps": 3000},
    "mlp": {"input": (784,), "hidden": (256, 256), "classes": 10, "batch": 64, "steps": 600},
    "conv": {"input": (28, 28, 1), "conv": (16, 32), "classes": 10, "batch": 64, "steps": 150},
}
"""Model name -> its shape and default number of timed steps."""

GOALS = {"tiny": 0.9, "mlp": 0.98, "conv": 0.98}
"""Model name -> the smallest allowed ratio of (c) to (a)."""

CASES = ("callable", "sess.run", "towerkit", "keras", "tensorpack")

TENSORPACK_VERSION = "0.11"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,mlp,conv", help="comma-separated: tiny,mlp,conv")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default: per model)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed steps first")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per case")
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES)
    )
    parser.add_argument(
        "--tensorpack-venv",
        default=None,
        help="where to make tensorpack's venv (default: a temp dir)",
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument(
        "--check", action="store_true", help="exit with status 1 when a goal is missed"
    )
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.cases = [c for c in args.cases.split(",") if c]
    bad = [m for m in args.models if m not in MODELS] + [c for c in args.cases if c not in CASES]
    if bad:
        parser.error(f"unknown models or cases: {bad}")
    if args.repeats <= 0 or args.warmup < 0 or (args.steps is not None and args.steps <= 0):
        parser.error("--repeats and --steps must be > 0, --warmup >= 0")
    return args


def synthetic(model: str, n: int = 4096, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels for `model`: float32 inputs, int32 labels.

    >>> x, y = synthetic("tiny", n=8)
    >>> x.shape, y.shape, x.dtype.name, y.dtype.name
    ((8, 32), (8,), 'float32', 'int32')
    """
    spec = MODELS[model]
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *spec["input"])).astype(np.float32)
    y = rng.integers(0, spec["classes"], size=n).astype(np.int32)
    return x, y


# -- the graph-mode model, shared by (a), (b), (c) ----------------------------------------


def build_cost(model: str, x, y):
    """The cost of `model` on tensors `x`, `y`, with `tf.compat.v1` variables (a tower function)."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    spec = MODELS[model]
    init = tf1.glorot_uniform_initializer()

    def dense(h, units, name):
        w = tf1.get_variable(f"{name}/W", [h.shape[-1], units], initializer=init)
        b = tf1.get_variable(f"{name}/b", [units], initializer=tf1.zeros_initializer())
        return tf.matmul(h, w) + b

    h = x
    if "conv" in spec:
        for i, ch in enumerate(spec["conv"]):
            k = tf1.get_variable(f"conv{i}/W", [3, 3, h.shape[-1], ch], initializer=init)
            h = tf.nn.relu(tf.nn.conv2d(h, k, 1, "SAME"))
            h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.reshape(h, [-1, int(np.prod(h.shape[1:]))])
    for i, units in enumerate(spec.get("hidden", ())):
        h = tf.nn.relu(dense(h, units, f"fc{i}"))
    logits = dense(h, spec["classes"], "out")
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
    return tf.reduce_mean(loss, name="cost")


def dataset(model: str):
    """The shared input pipeline."""
    import tensorflow as tf

    x, y = synthetic(model)
    batch = MODELS[model]["batch"]
    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .repeat()
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def bare_loop(model: str, steps: int, warmup: int, use_callable: bool) -> float:
    """(a)/(b): steps/s of a bare loop over the train op."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        x, y = tf1.data.make_one_shot_iterator(dataset(model)).get_next()
        cost = build_cost(model, x, y)
        train_op = tf1.train.GradientDescentOptimizer(0.01).minimize(cost)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            if use_callable:
                run = sess.make_callable(train_op)
                for _ in range(warmup):
                    run()
                start = time.perf_counter()
                for _ in range(steps):
                    run()
            else:
                for _ in range(warmup):
                    sess.run(train_op)
                start = time.perf_counter()
                for _ in range(steps):
                    sess.run(train_op)
            return steps / (time.perf_counter() - start)


def towerkit_loop(model: str, steps: int, warmup: int) -> float:
    """(c): steps/s of SimpleTrainer with the default callbacks and monitors (epoch 2 of 2)."""
    import tensorflow as tf

    from towerkit.callbacks import Callback
    from towerkit.trainers import (
        DEFAULT_CALLBACKS,
        DEFAULT_MONITORS,
        SimpleTrainer,
        TFDatasetInput,
    )

    tf1 = tf.compat.v1
    times: dict[str, float] = {}

    class EpochTimer(Callback):
        """Times the last epoch, from before_epoch to after_epoch."""

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
    logdir = tempfile.mkdtemp(prefix="bench-loop-")
    try:
        with tf.Graph().as_default(), contextlib.redirect_stderr(io.StringIO()):
            trainer = SimpleTrainer()
            trainer.setup_graph(
                sig,
                TFDatasetInput(lambda: dataset(model)),
                lambda x, y: build_cost(model, x, y),
                lambda: tf1.train.GradientDescentOptimizer(0.01),
            )
            # epoch 1 (warm-up, at least `warmup` steps) is timed too, but only epoch 2 counts
            trainer.train_with_defaults(
                callbacks=[*DEFAULT_CALLBACKS(), EpochTimer()],
                extra_callbacks=[],
                monitors=DEFAULT_MONITORS(),
                steps_per_epoch=max(steps, warmup),
                max_epoch=2,
                logdir=os.path.join(logdir, "log"),
            )
        return max(steps, warmup) / (times["end"] - times["start"])
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def keras_fit(model: str, steps: int, warmup: int) -> float:
    """(d): steps/s of Keras 3 ``model.fit`` (epoch 2 of 2; epoch 1 traces and warms up)."""
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
    )
    times: dict[int, float] = {}

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            times[2 * epoch] = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times[2 * epoch + 1] = time.perf_counter()

    n = max(steps, warmup)
    with tf.device("/cpu:0"):
        net.fit(dataset(model), steps_per_epoch=n, epochs=2, verbose=0, callbacks=[Timer()])
    return n / (times[3] - times[2])


# -- tensorpack, in its own venv ----------------------------------------------------------

TENSORPACK_RUNNER = textwrap.dedent(
    '''
    """Runs in tensorpack's venv: prints {"steps_per_s": ...} or {"error": ...}."""
    import json, os, sys, time, tempfile, contextlib, io
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    tf1 = tf.compat.v1
    tf1.disable_v2_behavior()
    # shims for TensorFlow 2.21: tensorpack's TFDatasetInput reads TF 1 dataset attributes
    from tensorflow.python.data.ops import dataset_ops as _dso
    for _cls in (_dso.DatasetV2,):
        _cls.output_types = property(lambda self: tf1.data.get_output_types(self))
        _cls.output_shapes = property(lambda self: tf1.data.get_output_shapes(self))
        _cls.output_classes = property(lambda self: tf1.data.get_output_classes(self))
        _cls.make_initializable_iterator = lambda self: tf1.data.make_initializable_iterator(self)
        _cls.make_one_shot_iterator = lambda self: tf1.data.make_one_shot_iterator(self)
    try:
        import tensorpack
        from tensorpack import (SimpleTrainer, TrainConfig, ModelDesc, TFDatasetInput,
                                launch_train_with_config, Callback, logger)
    except Exception as err:
        print(json.dumps({"error": f"import tensorpack: {type(err).__name__}: {err}"}))
        sys.exit(0)
    spec = json.loads(sys.argv[1])
    model_src = sys.argv[2]
    exec(model_src)
    x, y = synthetic_data(spec)
    def make_ds():
        return (tf.data.Dataset.from_tensor_slices((x, y)).repeat()
                .batch(spec["batch"], drop_remainder=True).prefetch(tf.data.AUTOTUNE))
    times = {}
    class EpochTimer(Callback):
        def _before_epoch(self):
            times["start"] = time.perf_counter()
        def _after_epoch(self):
            times["end"] = time.perf_counter()
    class M(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec([None, *spec["input"]], tf.float32, "x"),
                    tf.TensorSpec([None], tf.int32, "y")]
        def build_graph(self, x, y):
            return cost_fn(spec, x, y)
        def optimizer(self):
            return tf1.train.GradientDescentOptimizer(0.01)
    logdir = tempfile.mkdtemp()
    logger.set_logger_dir(os.path.join(logdir, "log"), action="d")
    n = int(sys.argv[3])
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            cfg = TrainConfig(model=M(), data=TFDatasetInput(make_ds()), callbacks=[EpochTimer()],
                              steps_per_epoch=n, max_epoch=2)
            launch_train_with_config(cfg, SimpleTrainer())
    except Exception as err:
        print(json.dumps({"error": f"train: {type(err).__name__}: {err}"}))
        sys.exit(0)
    print(json.dumps({"steps_per_s": n / (times["end"] - times["start"]),
                      "tensorpack": tensorpack.__version__}))
    '''
)

TENSORPACK_MODEL = textwrap.dedent(
    """
    def synthetic_data(spec, n=4096):
        rng = np.random.default_rng(0)
        return (rng.normal(size=(n, *spec["input"])).astype(np.float32),
                rng.integers(0, spec["classes"], size=n).astype(np.int32))
    def cost_fn(spec, x, y):
        init = tf1.glorot_uniform_initializer()
        def dense(h, units, name):
            w = tf1.get_variable(name + "/W", [h.shape[-1], units], initializer=init)
            b = tf1.get_variable(name + "/b", [units], initializer=tf1.zeros_initializer())
            return tf.matmul(h, w) + b
        h = x
        if "conv" in spec:
            for i, ch in enumerate(spec["conv"]):
                k = tf1.get_variable(f"conv{i}/W", [3, 3, h.shape[-1], ch], initializer=init)
                h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(h, k, 1, "SAME")), 2, 2, "VALID")
            h = tf.reshape(h, [-1, int(np.prod(h.shape[1:]))])
        for i, u in enumerate(spec.get("hidden", ())):
            h = tf.nn.relu(dense(h, u, f"fc{i}"))
        logits = dense(h, spec["classes"], "out")
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                              name="cost")
    """
)


class TensorpackEnv:
    """tensorpack 0.11 in its own venv, made on first use; `error` says why it is unusable."""

    def __init__(self, where: str | None) -> None:
        self.dir = where or os.path.join(tempfile.gettempdir(), "towerkit-bench-tensorpack")
        self.python = os.path.join(self.dir, "bin", "python")
        self.error: str | None = None
        self._ready = False

    def ensure(self) -> bool:
        """Make the venv once; False (with `error` set) when it cannot be made."""
        if self._ready or self.error:
            return self._ready
        import tensorflow as tf

        uv = shutil.which("uv")
        if uv is None:
            self.error = "uv not found: cannot make tensorpack's venv"
            return False
        steps = [
            [uv, "venv", "--python", sys.executable, self.dir],
            [
                uv,
                "pip",
                "install",
                "-p",
                self.python,
                f"tensorflow-cpu=={tf.__version__}",
                f"tensorpack=={TENSORPACK_VERSION}",
                "numpy",
            ],
        ]
        if not os.path.exists(self.python):
            for cmd in steps:
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    self.error = f"install failed ({' '.join(cmd[:3])}): {proc.stderr.strip().splitlines()[-1:]}"
                    return False
        self._ready = True
        return True

    def run(self, model: str, steps: int, warmup: int) -> float:
        """(e): steps/s of tensorpack's loop; raises RuntimeError with the reason on failure."""
        if not self.ensure():
            raise RuntimeError(self.error)
        spec = {k: v for k, v in MODELS[model].items() if k != "steps"}
        proc = subprocess.run(
            [
                self.python,
                "-c",
                TENSORPACK_RUNNER,
                json.dumps(spec),
                TENSORPACK_MODEL,
                str(max(steps, warmup)),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"tensorpack run failed (exit {proc.returncode}): {tail}")
        result = json.loads(lines[-1])
        if "error" in result:
            raise RuntimeError(result["error"])
        return float(result["steps_per_s"])


# -- the report ---------------------------------------------------------------------------


def ratio_row(medians: dict[str, float | str]) -> dict[str, float | None]:
    """Each case's median over the baseline's (None where either is missing).

    >>> ratio_row({"callable": 100.0, "towerkit": 95.0, "keras": "failed"})
    {'callable': 1.0, 'towerkit': 0.95, 'keras': None}
    """
    base = medians.get("callable")
    out: dict[str, float | None] = {}
    for case, value in medians.items():
        ok = isinstance(base, float) and isinstance(value, float) and base > 0
        out[case] = round(value / base, 3) if ok else None
    return out


def render(results: dict[str, dict[str, float | str]], cases: list[str]) -> str:
    """A Markdown table: median steps/s and ratio to (a) per model and case.

    >>> print(render({"tiny": {"callable": 100.0, "towerkit": 95.0}}, ["callable", "towerkit"]))
    | model | callable | towerkit | towerkit/(a) goal |
    |---|---|---|---|
    | tiny | 100.0 (1.00x) | 95.0 (0.95x) | 0.9x: met |
    """
    head = "| model | " + " | ".join(cases) + " | towerkit/(a) goal |"
    lines = [head, "|" + "---|" * (len(cases) + 2)]
    for model, medians in results.items():
        ratios = ratio_row(medians)
        cells = []
        for case in cases:
            value = medians.get(case)
            if isinstance(value, float) and ratios[case] is not None:
                cells.append(f"{value:.1f} ({ratios[case]:.2f}x)")
            elif isinstance(value, float):
                cells.append(f"{value:.1f}")
            else:
                cells.append(str(value) if value is not None else "-")
        r = ratios.get("towerkit")
        goal = GOALS[model]
        verdict = "-" if r is None else ("met" if r >= goal else "MISSED")
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {goal}x: {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, optionally write JSON; 1 on a missed goal with --check."""
    args = parse_args(argv)
    tp = TensorpackEnv(args.tensorpack_venv)
    runners = {
        "callable": lambda m, s, w: bare_loop(m, s, w, True),
        "sess.run": lambda m, s, w: bare_loop(m, s, w, False),
        "towerkit": towerkit_loop,
        "keras": keras_fit,
        "tensorpack": tp.run,
    }
    raw: dict[str, dict[str, list[float]]] = {}
    results: dict[str, dict[str, float | str]] = {}
    for model in args.models:
        steps = args.steps or MODELS[model]["steps"]
        raw[model] = {c: [] for c in args.cases}
        failed: dict[str, str] = {}
        for rep in range(args.repeats):
            for case in args.cases:
                if case in failed:
                    continue
                try:
                    raw[model][case].append(runners[case](model, steps, args.warmup))
                except Exception as err:  # a case that cannot run is reported, not fatal
                    failed[case] = f"n/a: {type(err).__name__}: {str(err)[:160]}"
                print(
                    f"{model} {case} #{rep + 1}: {raw[model][case][-1:] or failed.get(case)}",
                    file=sys.stderr,
                )
        results[model] = {
            c: (statistics.median(raw[model][c]) if raw[model][c] else failed.get(c, "n/a"))
            for c in args.cases
        }
    table = render(results, args.cases)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "medians": results,
                    "runs": raw,
                    "ratios": {m: ratio_row(r) for m, r in results.items()},
                },
                f,
                indent=1,
            )
    missed = [m for m in results if (ratio_row(results[m]).get("towerkit") or 0) < GOALS[m]]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
