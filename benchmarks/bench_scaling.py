"""Samples per second of data-parallel training: towers on logical CPUs, horovod processes.

Every case trains the same small convnet (two 3x3 convolutions of 16 and 32 channels
with 2x2 max pooling on 28x28x1 inputs, a 10-way softmax; the ``conv`` model of
``bench_loop.py``) with plain SGD on synthetic data through the same ``tf.data``
pipeline, ``--batch`` samples per tower (and per process) and step, 256 by default:

- (a) ``1 tower``: ``SimpleTrainer``, TensorFlow's default thread pools;
- (b) ``2 replicated``: ``SyncMultiGPUTrainerReplicated(2, mode='cpu')`` with its towers
  on the logical CPU devices ``/cpu:0`` and ``/cpu:1`` of the same process and the same
  cores. This measures the cost of the second tower and the all-reduce: goal (b) >= 0.9x (a);
- (c) ``horovod x1``: ``HorovodTrainer`` in 1 process launched by horovod (gloo),
  intra-op and inter-op thread pools of 1 (``TOWERKIT_BENCH_POOL_THREADS=N`` sets
  them for every process case, 0 for TensorFlow's default);
- (d) ``horovod x2``: the same in 2 processes; samples of both ranks count:
  goal (d) >= 1.6x (c);
- (e) ``2 solo processes``: two ``SimpleTrainer`` processes with the same one-thread
  pools training at once, with no communication: the speed-up the machine allows two
  processes at that moment, the ceiling of (d). Compare (d)/(c) with (e)/(c).
- (h) ``horovod 2 hosts``: case (d) with its 2 ranks on 2 simulated hosts (network
  namespaces joined by a bridge, ranks started over ssh, gloo over the namespaces'
  interfaces; ``tests/hosts/simhosts.py``), the launcher on the first: what crossing a
  (virtual) network costs against (d). It needs root and ``sshd``; without them its cell
  says so.
- (f) ``bare horovod x1`` and (g) ``bare horovod x2``: no trainer at all, a loop over
  ``sess.make_callable(train_op)`` whose gradients go through the same
  ``hvd.grouped_allreduce`` (after broadcasting the variables), same pools and input:
  what horovod itself allows on this machine. (g)/(f) next to (d)/(c) tells the
  trainer's share of a missed goal from horovod's.

Why 256: horovod coordinates its processes every cycle (``HOROVOD_CYCLE_TIME``, 1 ms
by default; the environment's value applies), and each all-reduce costs the processes
a few milliseconds of waiting and of CPU time (about 2 ms per step measured on 2
cores) that two busy cores do not have to spare. A step of this convnet on 64 samples
takes about 5 ms on one core, so at 64 those fixed costs, not the trainer, decide the
ratio; at 256 (about 20 ms a step) the measure shows the trainers' own overhead.

Each case trains ``--epochs`` epochs of ``--steps`` steps; the first epoch is a
warm-up, and the median throughput of the other epochs is reported. Cases (c) and
(d) need horovod (``nox -s horovod`` builds it); without it their cells say so.
Other processes busy on the same cores lower every number, and the ratios with them:
the load average is printed before and after.

Usage::

    python benchmarks/bench_scaling.py --steps 60 --epochs 4 --out scaling.json

``--out`` writes ``{"results": [{"case", "samples_per_s", "ratio", "baseline",
"goal"}, ...], "settings": ..., "load_average": ...}``; ``--quick`` is a short run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 256
"""Samples per tower (and process) and step, by default."""

GOALS = {"2 replicated": ("1 tower", 0.9), "horovod x2": ("horovod x1", 1.6)}
"""Case -> (the case it is compared with, the smallest allowed ratio)."""

REFERENCES = {
    "horovod 2 hosts": ("horovod x2", "2 simulated hosts against 2 ranks on one"),
    "2 solo processes": ("horovod x1", "what the machine allows two processes"),
    "bare horovod x2": ("bare horovod x1", "what horovod allows without a trainer"),
}
"""Case -> (the case it is compared with, what the ratio shows); no goal."""

CASES = (
    "1 tower",
    "2 replicated",
    "horovod x1",
    "horovod x2",
    "horovod 2 hosts",
    "2 solo processes",
    "bare horovod x1",
    "bare horovod x2",
)

TAG = "BENCH-RESULT "


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=4, help="epochs, the first untimed")
    parser.add_argument("--batch", type=int, default=BATCH, help="samples per tower and step")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument(
        "--quick", action="store_true", help="a short run (20 steps, 3 epochs) to check it works"
    )
    parser.add_argument("--hvd-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--solo-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.epochs = 20, 3
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    if args.steps < 1 or args.epochs < 2 or args.batch < 1:
        parser.error("--steps, --batch must be >= 1 and --epochs >= 2 (the first is a warm-up)")
    return args


def synthetic(n: int = 2048, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 28, 28, 1) float32 and labels (n,) int32.

    >>> x, y = synthetic(4)
    >>> x.shape, y.shape, x.dtype.name, y.dtype.name
    ((4, 28, 28, 1), (4,), 'float32', 'int32')
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=n).astype(np.int32)
    return x, y


def convnet_cost(x, y):
    """The convnet's mean cross-entropy (a tower function of ``tf.compat.v1`` variables)."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    init = tf1.glorot_uniform_initializer()
    h = x
    for i, channels in enumerate((16, 32)):
        k = tf1.get_variable(f"conv{i}/W", [3, 3, h.shape[-1], channels], initializer=init)
        h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(h, k, 1, "SAME")), 2, 2, "VALID")
    h = tf.reshape(h, [-1, int(np.prod(h.shape[1:]))])
    w = tf1.get_variable("out/W", [h.shape[-1], 10], initializer=init)
    b = tf1.get_variable("out/b", [10], initializer=tf1.zeros_initializer())
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.matmul(h, w) + b)
    return tf.reduce_mean(loss, name="cost")


def epoch_throughputs(trainer, steps: int, epochs: int, batch: int, towers: int, **train_kw):
    """Train the convnet with `trainer`, `batch` samples per tower; samples/s of epochs 2...."""
    import tensorflow as tf

    from towerkit.callbacks import Callback
    from towerkit.trainers import TFDatasetInput

    tf1 = tf.compat.v1
    times: list[float] = []

    class EpochTimer(Callback):
        """Times each epoch, from before_epoch to after_epoch."""

        _chief_only = False

        def _before_epoch(self):
            self.start = time.perf_counter()

        def _after_epoch(self):
            times.append(time.perf_counter() - self.start)

    def dataset():
        x, y = synthetic()
        return (
            tf.data.Dataset.from_tensor_slices((x, y))
            .repeat()
            .batch(batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE)
        )

    sig = [tf.TensorSpec([None, 28, 28, 1], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]
    trainer.setup_graph(
        sig, TFDatasetInput(dataset), convnet_cost, lambda: tf1.train.GradientDescentOptimizer(0.01)
    )
    trainer.train_with_defaults(
        callbacks=[EpochTimer()],
        extra_callbacks=[],
        monitors=[],
        steps_per_epoch=steps,
        max_epoch=epochs,
        **train_kw,
    )
    return [steps * batch * towers / t for t in times[1:]]


def in_process(case: str, steps: int, epochs: int, batch: int) -> float:
    """(a) or (b): the median samples/s of the timed epochs."""
    import tensorflow as tf

    from towerkit.trainers import SimpleTrainer, SyncMultiGPUTrainerReplicated

    with tf.Graph().as_default(), contextlib.redirect_stderr(io.StringIO()):
        if case == "1 tower":
            trainer, towers = SimpleTrainer(), 1
        else:
            trainer, towers = SyncMultiGPUTrainerReplicated(2, mode="cpu"), 2
        rates = epoch_throughputs(trainer, steps, epochs, batch, towers)
    return statistics.median(rates)


POOL_THREADS_ENV = "TOWERKIT_BENCH_POOL_THREADS"
"""The session thread pools of the process cases: 1 when unset; 0 is TensorFlow's default."""


def pool_threads(env: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, int]:
    """The process cases' ``ConfigProto`` pools: one thread each, unless `POOL_THREADS_ENV` says.

    >>> pool_threads({}), pool_threads({POOL_THREADS_ENV: "0"})["intra_op_parallelism_threads"]
    ({'intra_op_parallelism_threads': 1, 'inter_op_parallelism_threads': 1}, 0)
    """
    n = int(env.get(POOL_THREADS_ENV, "1"))
    return {"intra_op_parallelism_threads": n, "inter_op_parallelism_threads": n}


def hvd_worker(steps: int, epochs: int, batch: int) -> int:
    """One horovod rank: train with one-thread pools; rank 0 prints the job's samples/s."""
    import tensorflow as tf

    from towerkit.trainers import HorovodTrainer, NewSessionCreator

    config = tf.compat.v1.ConfigProto(**pool_threads())
    with tf.Graph().as_default(), contextlib.redirect_stderr(io.StringIO()):
        trainer = HorovodTrainer()
        trainer.BROADCAST_EVERY_EPOCH = False
        rates = epoch_throughputs(
            trainer,
            steps,
            epochs,
            batch,
            trainer.size,
            session_creator=NewSessionCreator(config=config),
        )
    if trainer.rank == 0:
        print(TAG + json.dumps({"size": trainer.size, "rates": rates}), flush=True)
    return 0


def bare_worker(steps: int, epochs: int, batch: int) -> int:
    """One rank of a trainer-less horovod loop; rank 0 prints the job's samples/s per epoch."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    tf1 = tf.compat.v1
    hvd.init()
    x, y = synthetic()
    with tf.Graph().as_default():
        dataset = (
            tf.data.Dataset.from_tensor_slices((x, y))
            .repeat()
            .batch(batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE)
        )
        xb, yb = tf1.data.make_one_shot_iterator(dataset).get_next()
        cost = convnet_cost(xb, yb)
        opt = tf1.train.GradientDescentOptimizer(0.01)
        grads_vars = [(g, v) for g, v in opt.compute_gradients(cost) if g is not None]
        reduced = hvd.grouped_allreduce([g for g, _ in grads_vars], op=hvd.Average)
        train_op = opt.apply_gradients(zip(reduced, [v for _, v in grads_vars]))
        bcast = hvd.broadcast_global_variables(0)
        config = tf1.ConfigProto(**pool_threads())
        with tf1.Session(config=config) as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(bcast)
            run = sess.make_callable(train_op)
            rates = []
            for epoch in range(epochs):
                start = time.perf_counter()
                for _ in range(steps):
                    run()
                if epoch:
                    rates.append(steps * batch * hvd.size() / (time.perf_counter() - start))
    if hvd.rank() == 0:
        print(TAG + json.dumps({"size": hvd.size(), "rates": rates}), flush=True)
    return 0


def solo_worker(steps: int, epochs: int, batch: int) -> int:
    """A process training alone (SimpleTrainer, one-thread pools); prints its samples/s."""
    import tensorflow as tf

    from towerkit.trainers import NewSessionCreator, SimpleTrainer

    config = tf.compat.v1.ConfigProto(**pool_threads())
    with tf.Graph().as_default(), contextlib.redirect_stderr(io.StringIO()):
        rates = epoch_throughputs(
            SimpleTrainer(),
            steps,
            epochs,
            batch,
            1,
            session_creator=NewSessionCreator(config=config),
        )
    print(TAG + json.dumps({"size": 1, "rates": rates}), flush=True)
    return 0


def _result(text: str) -> list[float] | None:
    for line in text.splitlines():
        _, tag, rest = line.partition(TAG)
        if tag:
            return json.loads(rest)["rates"]
    return None


def solo_processes(n: int, steps: int, epochs: int, batch: int, timeout: float = 900.0):
    """`n` processes training alone at once, no communication: their summed median samples/s.

    What the machine allows for `n` processes; the ceiling of a horovod job's speed-up.
    """
    argv = [sys.executable, os.path.abspath(__file__), "--solo-worker"]
    argv += ["--steps", str(steps), "--epochs", str(epochs), "--batch", str(batch)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for _ in range(n)
    ]
    total = 0.0
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            return f"n/a: the processes ran past {timeout:g} s"
        rates = _result(out)
        if rates is None:
            return f"n/a: exit {proc.returncode}: {out.strip().splitlines()[-1:]}"
        total += statistics.median(rates)
    return total


def horovod(
    np_: int, steps: int, epochs: int, batch: int, timeout: float = 900.0, worker="--hvd-worker"
) -> float | str:
    """(c), (d), (f) or (g): the median samples/s of a job of `np_` processes, or why not."""
    try:
        import horovod  # noqa: F401
    except ImportError:
        return "n/a: horovod not installed (nox -s horovod)"
    argv = [sys.executable, "-m", "horovod.runner.launch", "-np", str(np_), "--gloo"]
    argv += ["-H", f"localhost:{np_}", sys.executable, os.path.abspath(__file__), worker]
    argv += ["--steps", str(steps), "--epochs", str(epochs), "--batch", str(batch)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"n/a: the job ran past {timeout:g} s"
    rates = _result(proc.stdout)
    if rates is not None:
        return statistics.median(rates)
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    return f"n/a: exit {proc.returncode}: {' / '.join(tail)[:200]}"


def horovod_hosts(steps: int, epochs: int, batch: int, timeout: float = 900.0) -> float | str:
    """(h): case (d) with one rank on each of 2 simulated hosts, or why not."""
    try:
        import horovod  # noqa: F401
    except ImportError:
        return "n/a: horovod not installed (nox -s horovod)"
    sys.path.insert(
        0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "hosts")
    )
    from simhosts import IFACE, SimulatedHosts, host_list, missing_requirements

    from towerkit.trainers import launch_horovod_job

    missing = missing_requirements()
    if missing:
        return f"n/a: simulated hosts need {', '.join(missing)}"
    argv = [sys.executable, os.path.abspath(__file__), "--hvd-worker"]
    argv += ["--steps", str(steps), "--epochs", str(epochs), "--batch", str(batch)]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    with SimulatedHosts(2) as hosts:
        job = launch_horovod_job(
            argv,
            2,
            timeout=timeout,
            env=hosts.env({**os.environ, **env}),
            hosts=host_list(hosts.addresses),
            network_interface=IFACE,
            ssh_identity_file=hosts.identity_file,
            launcher_prefix=hosts.exec_argv(0),
        )
    rates = _result(job.output)
    if rates is not None:
        return statistics.median(rates)
    tail = job.output.strip().splitlines()[-3:]
    return f"n/a: exit {job.returncode}: {' / '.join(tail)[:200]}"


def _bases() -> dict[str, str]:
    return {**{c: b for c, (b, _) in GOALS.items()}, **{c: b for c, (b, _) in REFERENCES.items()}}


def ratios(results: dict[str, float | str]) -> dict[str, float | None]:
    """Each compared case's samples/s over its baseline's (None where either is missing).

    >>> ratios({"1 tower": 100.0, "2 replicated": 95.0, "horovod x1": "n/a", "horovod x2": 1.0})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'2 replicated': 0.95, 'horovod x2': None, 'horovod 2 hosts': None, '2 solo processes': None,
     'bare horovod x2': None}
    """
    out: dict[str, float | None] = {}
    for case, base in _bases().items():
        a, b = results.get(base), results.get(case)
        ok = isinstance(a, float) and isinstance(b, float) and a > 0
        out[case] = round(b / a, 3) if ok else None
    return out


def render(results: dict[str, float | str]) -> str:
    """A Markdown table: samples/s per case, and each goal's ratio and verdict.

    >>> print(render({"1 tower": 100.0, "2 replicated": 95.0}))
    | case | samples/s | ratio | goal |
    |---|---|---|---|
    | 1 tower | 100.0 | | |
    | 2 replicated | 95.0 | 0.95x (1 tower) | >= 0.9x: met |
    """
    r = ratios(results)
    lines = ["| case | samples/s | ratio | goal |", "|---|---|---|---|"]
    for case, value in results.items():
        cell = f"{value:.1f}" if isinstance(value, float) else str(value)
        if case in r:
            base = _bases()[case]
            ratio = r[case]
            shown = "-" if ratio is None else f"{ratio:.2f}x ({base})"
            if case in GOALS:
                goal = GOALS[case][1]
                verdict = "-" if ratio is None else ("met" if ratio >= goal else "MISSED")
                lines.append(f"| {case} | {cell} | {shown} | >= {goal}x: {verdict} |")
            else:
                lines.append(f"| {case} | {cell} | {shown} | (reference, no goal) |")
        else:
            lines.append(f"| {case} | {cell} | | |")
    return "\n".join(lines)


def as_records(results: dict[str, float | str], args: argparse.Namespace) -> dict:
    """The results as JSON: one record per case, with its ratio, baseline and goal.

    >>> args = argparse.Namespace(steps=1, epochs=2, batch=64)
    >>> as_records({"1 tower": 100.0, "2 replicated": 95.0}, args)["results"][1]
    {'case': '2 replicated', 'samples_per_s': 95.0, 'ratio': 0.95, 'baseline': '1 tower', 'goal': 0.9}
    """
    r = ratios(results)
    bases = _bases()
    records = []
    for case, value in results.items():
        records.append(
            {
                "case": case,
                "samples_per_s": value if isinstance(value, float) else None,
                **({"error": value} if not isinstance(value, float) else {}),
                "ratio": r.get(case),
                "baseline": bases.get(case),
                "goal": GOALS[case][1] if case in GOALS else None,
            }
        )
    return {
        "results": records,
        "settings": {"steps": args.steps, "epochs": args.epochs, "batch": args.batch},
        "load_average": _load(),
    }


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the table and ratios; 1 on a missed goal with --check."""
    args = parse_args(argv)
    if args.hvd_worker:
        return hvd_worker(args.steps, args.epochs, args.batch)
    if args.solo_worker:
        return solo_worker(args.steps, args.epochs, args.batch)
    if args.bare_worker:
        return bare_worker(args.steps, args.epochs, args.batch)
    results: dict[str, float | str] = {}
    print(f"load average before: {_load()}", file=sys.stderr, flush=True)
    for case in args.cases:
        if case in ("1 tower", "2 replicated"):
            try:
                results[case] = in_process(case, args.steps, args.epochs, args.batch)
            except Exception as err:  # a case that cannot run is reported, not fatal
                results[case] = f"n/a: {type(err).__name__}: {str(err)[:160]}"
        elif case == "2 solo processes":
            results[case] = solo_processes(2, args.steps, args.epochs, args.batch)
        elif case == "horovod 2 hosts":
            results[case] = horovod_hosts(args.steps, args.epochs, args.batch)
        else:
            np_ = 2 if case.endswith("x2") else 1
            worker = "--bare-worker" if case.startswith("bare") else "--hvd-worker"
            results[case] = horovod(np_, args.steps, args.epochs, args.batch, worker=worker)
        print(f"{case}: {results[case]}", file=sys.stderr, flush=True)
    print(render(results))
    print(f"load average (1, 5, 15 min) after: {_load()}")
    for case, ratio in ratios(results).items():
        if ratio is not None:
            goal = f"goal >= {GOALS[case][1]}" if case in GOALS else REFERENCES[case][1]
            print(f"ratio {case} / {_bases()[case]}: {ratio:.3f} ({goal})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(as_records(results, args), f, indent=1)
    missed = [
        c for c, ratio in ratios(results).items() if c in GOALS and (ratio or 0) < GOALS[c][1]
    ]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
