"""Parallel input: steps per second of a model fed by a Python source costing ~4 ms a datapoint.

A source whose every datapoint (a batch of 32 x 64 floats and 32 labels) costs
``--cost-ms`` of pure Python (a busy loop standing for decoding and augmenting) feeds
a small MLP (64-64-10) trained by `SimpleTrainer` through ``TrainConfig(data=
IterableInput(source, ...))``. Three sources (``--sources``), one table each:

- ``indexed``: a map-style source (``__len__`` and ``__getitem__``), split by index,
  in order;
- ``flow``: a DataFlow-shaped source as users write one (``__len__``,
  ``reset_state``, the cost in ``__iter__``, no ``__getitem__``): each worker
  iterates a copy of its own; tensorpack's ``MultiProcessRunnerZMQ(flow, 2)`` over the
  same flow is the peer;
- ``tpmap``: tensorpack's own idiom, ``MapData(DataFromList(items), decode)`` with the
  cost in ``decode``: ``IterableInput(flow, workers=N)`` against
  ``MultiProcessRunnerZMQ(flow, 2)`` and ``MultiProcessMapDataZMQ(DataFromList(items),
  2, decode)`` (needs tensorpack: every case of this table runs in a fresh interpreter).

The cases of the ``indexed`` table:

- ``thread``: ``IterableInput(source)``, the feeding thread produces the datapoints
  (one core at most, and it shares the interpreter with the training loop);
- ``workers=1``: ``IterableInput(source, workers=1)``, one producer process: the
  baseline;
- ``workers=2``: ``IterableInput(source, workers=2)``, two producer processes;
- ``tensorpack ZMQ``: tensorpack 0.11's ``MultiProcessRunnerZMQ(flow, num_proc=2)`` over
  the same source as a DataFlow, under the same ``IterableInput`` (each of its processes
  runs the whole flow, as tensorpack's do);
- ``keras PyDataset``: Keras 3's ``model.fit`` on the same MLP (SGD, same batch), fed by a
  ``keras.utils.PyDataset(workers=2, use_multiprocessing=True)`` over the same source.

The cost is CPU time of the producing thread (``time.thread_time``), as decoding and
augmenting are: a producer that loses its core to another process for a while takes
that much longer. A loop until a wall-clock deadline would not: a producer preempted
mid-loop would still finish on time, so the CPU that the training process and a
runner's own threads take from the producers would cost nothing while it falls inside
a loop (with such a loop ``workers=2`` measured 0.99x tensorpack's ZMQ runner).

Each round trains every case for ``--warmup`` steps, then times ``--steps`` steps
(the workers' start is in the warm-up). The warm-up must be longer than the deepest
buffer between the producers and the model (tensorpack's ZMQ sockets hold about 100
datapoints, the input's queues some 50 more): filled while the graph is built, a
buffer drains in the first steps at the model's speed, not the producers', so timing
starts once every buffer is drained (400 steps). Cases are interleaved round by round and the
table gives the median steps/s and the ratio of medians to ``workers=1``. The two
peers run in a fresh interpreter each (tensorpack's import needs tf-keras's
``tf.layers``; Keras runs eagerly); a peer that is not installed gets a cell saying so
(``nox -s bench`` installs both). Goals on 2 cores: ``workers=2`` >= 1.6x
``workers=1``, and >= 1.0x each peer.

The source lives in this module, whose top imports NumPy only: the fork server that
starts the workers imports it (not TensorFlow).

Usage::

    python benchmarks/bench_parallel.py --out parallel.json
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

OURS = ("thread", "workers=1", "workers=2")
PEERS = ("tensorpack ZMQ", "keras PyDataset")
CASES = OURS + PEERS
SOURCES = {
    "indexed": ("a map-style source (`__len__`, `__getitem__`: split by index, in order)", CASES),
    "flow": (
        "a DataFlow-shaped source (cost in `__iter__`, no `__getitem__`: a copy per worker)",
        ("workers=1", "workers=2", "tensorpack ZMQ"),
    ),
    "tpmap": (
        "tensorpack's `MapData(DataFromList(items), decode)`, the cost in `decode`",
        ("workers=1", "workers=2", "tensorpack ZMQ", "tensorpack MapZMQ"),
    ),
}
"""Each table's source (a line of its title) and cases."""
ALL_PEERS = ("tensorpack ZMQ", "tensorpack MapZMQ", "keras PyDataset")
GOAL = 1.6
"""The least ratio of workers=2's median steps/s to workers=1's."""
PEER_GOAL = 1.0
"""The least ratio of workers=2's median steps/s to each peer's."""

BATCH, DIM, CLASSES = 32, 64, 10


class CostlySource:
    """`n` datapoints by index, each costing `cost_s` seconds of the producing thread's CPU.

    Examples:
        >>> x, y = CostlySource(2, cost_s=0.0)[1]
        >>> x.shape, x.dtype, y.shape
        ((32, 64), dtype('float32'), (32,))
    """

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __len__(self) -> int:
        return self.n

    def __iter__(self):  # the thread case iterates; workers index
        return (self[i] for i in range(self.n))

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        end = time.thread_time() + self.cost_s
        while time.thread_time() < end:
            pass
        rng = np.random.default_rng(i)
        x = rng.standard_normal((BATCH, DIM), dtype=np.float32)
        return x, rng.integers(0, CLASSES, BATCH).astype(np.int32)


class CostlyFlow:
    """The same datapoints as a DataFlow users write: a length, ``reset_state``, the cost
    in ``__iter__`` (a shuffled order, each datapoint decoded), no ``__getitem__``.

    Examples:
        >>> flow = CostlyFlow(3, cost_s=0.0)
        >>> flow.reset_state()
        >>> [x.shape for x, y in flow]
        [(32, 64), (32, 64), (32, 64)]
    """

    def __init__(self, n: int, cost_s: float) -> None:
        self.source = CostlySource(n, cost_s)
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return len(self.source)

    def reset_state(self) -> None:
        self.rng = np.random.default_rng(np.random.randint(1 << 30))

    def __iter__(self):
        for i in self.rng.permutation(len(self.source)):
            yield list(self.source[int(i)])


def decode(dp: list) -> list:
    """The costly function of the ``tpmap`` table: datapoint ``[i, cost_s]`` decoded."""
    i, cost_s = dp
    return list(CostlySource(i + 1, cost_s)[i])


class LargeSource:
    """`n` datapoints of one float32 array of `nbytes` (filled with the index), no cost.

    Examples:
        >>> LargeSource(3, 16)[2][0].tolist()
        [2.0, 2.0, 2.0, 2.0]
    """

    def __init__(self, n: int, nbytes: int) -> None:
        self.n, self.nbytes = n, nbytes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> list[np.ndarray]:
        return [np.full(self.nbytes // 4, i, np.float32)]


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of process `pid` so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


WORK_FORMS = {
    "map-style, by index": ("indexed", None),
    "DataFlow-shaped, a copy per worker": ("flow", None),
    "DataFlow-shaped, stride (ordered=True)": ("flow", True),
}
"""The forms of the work table: the source, and the `ordered` asked for."""


def work_rows(cost_s: float, datapoints: int = 300, workers: int = 2) -> list[dict]:
    """Per form: the workers' CPU ms per datapoint delivered, and the wall ms per datapoint.

    The CPU the workers spend is what the form costs, whatever else runs on the
    machine: a form that does the source's work once costs ``cost_s`` a datapoint, one
    that does it N times N times that. Linux only (``/proc``).
    """
    from towerkit.callbacks import ParallelIterable

    rows = []
    for form, (kind, ordered) in WORK_FORMS.items():
        n = datapoints + 20
        source = CostlyFlow(n, cost_s) if kind == "flow" else CostlySource(n, cost_s)
        pool = ParallelIterable(source, workers, ordered=ordered)
        try:
            it = iter(pool)
            for _ in range(10):
                next(it)
            cpu = sum(_cpu_s(p) for p in pool.pids)
            start = time.perf_counter()
            for _ in range(datapoints):
                next(it)
            wall = time.perf_counter() - start
            cpu = sum(_cpu_s(p) for p in pool.pids) - cpu
        finally:
            pool.close()
        rows.append(
            {"form": form, "cpu_ms": cpu / datapoints * 1e3, "wall_ms": wall / datapoints * 1e3}
        )
    return rows


def render_work(rows: list[dict], cost_ms: float, workers: int = 2) -> str:
    """The work table.

    >>> print(render_work([{"form": "x", "cpu_ms": 4.1, "wall_ms": 2.2}], 4.0))
    ## Work per datapoint: 2 workers, 4 ms of Python per datapoint
    <BLANKLINE>
    | form | workers' CPU ms / datapoint | / the source's cost | wall ms / datapoint |
    |---|---|---|---|
    | x | 4.10 | 1.02x | 2.20 |
    """
    lines = [
        f"## Work per datapoint: {workers} workers, {cost_ms:g} ms of Python per datapoint",
        "",
        "| form | workers' CPU ms / datapoint | / the source's cost | wall ms / datapoint |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['form']} | {r['cpu_ms']:.2f} | {r['cpu_ms'] / cost_ms:.2f}x | {r['wall_ms']:.2f} |"
        )
    return "\n".join(lines)


LARGE_KIB = (64, 256, 1024, 16384)
"""The array sizes of the large-array table."""


def large_array_rows(sizes_kib=LARGE_KIB, total_mib: int = 300) -> list[dict]:
    """Per size: ms per datapoint and the reader's CPU ms per datapoint, pipe against block.

    Two workers produce datapoints of one array (no cost) as fast as the reading
    process takes them, through the pipe (``shared_memory_min_bytes=None``) and
    through shared memory blocks (threshold 1 byte); about `total_mib` MiB a case.
    """
    from towerkit.callbacks import ParallelIterable

    rows = []
    for kib in sizes_kib:
        n = max(20, min(3000, total_mib * 1024 // kib))
        row: dict = {"kib": kib, "datapoints": n}
        for label, threshold in (("pipe", None), ("block", 1)):
            pool = ParallelIterable(
                LargeSource(n + 10, kib * 1024), 2, shared_memory_min_bytes=threshold
            )
            try:
                it = iter(pool)
                for _ in range(10):
                    next(it)
                start, cpu = time.perf_counter(), time.process_time()
                for _ in range(n):
                    next(it)
                row[label] = (time.perf_counter() - start) / n * 1e3
                row[f"{label}_cpu"] = (time.process_time() - cpu) / n * 1e3
            finally:
                pool.close()
        rows.append(row)
    return rows


def render_large(rows: list[dict]) -> str:
    """The large-array table.

    >>> print(render_large([{"kib": 1024, "datapoints": 9, "pipe": 1.2, "pipe_cpu": 0.8,
    ...                      "block": 0.6, "block_cpu": 0.4}]))
    ## Large arrays: one array a datapoint, 2 workers, no source cost
    <BLANKLINE>
    | array | pipe: ms / datapoint (reader CPU) | shared memory: ms / datapoint (reader CPU) | block / pipe |
    |---|---|---|---|
    | 1024 KiB | 1.200 (0.800) | 0.600 (0.400) | 0.50x |
    """
    lines = [
        "## Large arrays: one array a datapoint, 2 workers, no source cost",
        "",
        "| array | pipe: ms / datapoint (reader CPU) | shared memory: ms / datapoint "
        "(reader CPU) | block / pipe |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kib']} KiB | {r['pipe']:.3f} ({r['pipe_cpu']:.3f}) | "
            f"{r['block']:.3f} ({r['block_cpu']:.3f}) | {r['block'] / r['pipe']:.2f}x |"
        )
    return "\n".join(lines)


def steps_per_s(
    case: str, cost_s: float, warmup: int, steps: int, source: str = "indexed"
) -> float:
    """Train the MLP with one of towerkit's cases; steps/s over the timed steps."""
    from towerkit.trainers import IterableInput

    n = warmup + steps + 1
    data: object = CostlySource(n, cost_s)
    if source == "flow":
        data = CostlyFlow(n, cost_s)
    elif source == "tpmap":
        data = _tensorpack_map(n, cost_s)
    workers = None if case == "thread" else int(case.split("=")[1])
    return _towerkit_rate(IterableInput(data, workers=workers), warmup, steps)


def _tensorpack_map(n: int, cost_s: float):
    from tensorpack.dataflow import DataFromList, MapData

    return MapData(DataFromList([[i, cost_s] for i in range(n)], shuffle=True), decode)


def _towerkit_rate(data, warmup: int, steps: int) -> float:
    import tensorflow as tf

    from towerkit.callbacks import Callback
    from towerkit.towers.compat import tf1
    from towerkit.trainers import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

    class Model(ModelDesc):
        def inputs(self):
            return [
                tf.TensorSpec([BATCH, DIM], tf.float32, "x"),
                tf.TensorSpec([BATCH], tf.int32, "y"),
            ]

        def build_graph(self, x, y):
            w1 = tf1.get_variable("w1", [DIM, 64])
            h = tf.nn.relu(tf.matmul(x, w1))
            w2 = tf1.get_variable("w2", [64, CLASSES])
            logits = tf.matmul(h, w2)
            return tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                name="cost",
            )

        def optimizer(self):
            return tf1.train.GradientDescentOptimizer(0.01)

    class Clock(Callback):
        _chief_only = False

        def __init__(self) -> None:
            self.times: list[float] = []

        def _trigger_step(self) -> None:
            self.times.append(time.perf_counter())

    clock = Clock()
    config = TrainConfig(
        model=Model(),
        data=data,
        callbacks=[clock],
        monitors=[],
        extra_callbacks=[],
        max_epoch=1,
        steps_per_epoch=warmup + steps,
    )
    with tf1.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    return steps / (clock.times[-1] - clock.times[warmup - 1])


def zmq_steps_per_s(cost_s: float, warmup: int, steps: int, source: str = "indexed") -> float:
    """tensorpack's MultiProcessRunnerZMQ (2 processes) under IterableInput."""
    from tensorpack.dataflow import DataFlow, MultiProcessRunnerZMQ

    from towerkit.trainers import IterableInput

    class Flow(DataFlow):
        def __init__(self, n: int) -> None:
            self.flow = CostlyFlow(n, cost_s)

        def __len__(self) -> int:
            return len(self.flow)

        def reset_state(self) -> None:
            self.flow.reset_state()

        def __iter__(self):
            if source == "indexed":  # the source read in order, as it was before
                yield from (list(self.flow.source[i]) for i in range(len(self.flow)))
            else:
                yield from self.flow

    n = warmup + steps + 1
    flow = _tensorpack_map(n, cost_s) if source == "tpmap" else Flow(n)
    return _towerkit_rate(IterableInput(MultiProcessRunnerZMQ(flow, num_proc=2)), warmup, steps)


def map_zmq_steps_per_s(cost_s: float, warmup: int, steps: int, source: str = "tpmap") -> float:
    """tensorpack's MultiProcessMapDataZMQ (2 processes run `decode`) under IterableInput."""
    from tensorpack.dataflow import DataFromList, MultiProcessMapDataZMQ

    from towerkit.trainers import IterableInput

    del source
    items = DataFromList([[i, cost_s] for i in range(warmup + steps + 1)], shuffle=True)
    flow = MultiProcessMapDataZMQ(items, num_proc=2, map_func=decode)
    return _towerkit_rate(IterableInput(flow), warmup, steps)


def keras_steps_per_s(cost_s: float, warmup: int, steps: int, source: str = "indexed") -> float:
    """Keras 3 model.fit on the same MLP, fed by a PyDataset with 2 worker processes."""
    import keras

    del source

    class Batches(keras.utils.PyDataset):
        def __init__(self, n: int) -> None:
            super().__init__(workers=2, use_multiprocessing=True)
            self.source = CostlySource(n, cost_s)

        def __len__(self) -> int:
            return len(self.source)

        def __getitem__(self, i: int):
            return self.source[i]

    model = keras.Sequential(
        [
            keras.Input((DIM,), batch_size=BATCH),
            keras.layers.Dense(64, activation="relu", use_bias=False),
            keras.layers.Dense(CLASSES, use_bias=False),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    times: list[float] = []
    clock = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: times.append(time.perf_counter())
    )
    model.fit(Batches(warmup + steps), epochs=1, callbacks=[clock], verbose=0)
    return steps / (times[-1] - times[warmup - 1])


PEER_RUNNERS = {
    "tensorpack ZMQ": zmq_steps_per_s,
    "tensorpack MapZMQ": map_zmq_steps_per_s,
    "keras PyDataset": keras_steps_per_s,
}


def peer_rate(
    case: str, cost_s: float, warmup: int, steps: int, source: str = "indexed"
) -> float | str:
    """A case's steps/s, run in a fresh interpreter; a string saying why when it cannot run.

    The peers run so, and every case of the ``tpmap`` table (tensorpack's import needs
    tf-keras's ``tf.layers``, set before TensorFlow is imported).
    """
    legacy = case.startswith("tensorpack") or source == "tpmap"
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1"} if legacy else None
    cmd = [sys.executable, __file__, "--peer", case, "--cost-ms", str(cost_s * 1000)]
    cmd += ["--warmup", str(warmup), "--steps", str(steps), "--sources", source]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed (exit {done.returncode}): {tail[:160]}"
    result = json.loads(lines[-1])
    return float(result["steps_per_s"]) if "steps_per_s" in result else str(result["error"])


def _run_peer(case: str, cost_s: float, warmup: int, steps: int, source: str) -> int:
    """The --peer mode: one JSON line, the rate or why the peer is missing."""
    try:
        if case in PEER_RUNNERS:
            rate = PEER_RUNNERS[case](cost_s, warmup, steps, source)
        else:
            rate = steps_per_s(case, cost_s, warmup, steps, source)
    except ImportError as err:
        print(json.dumps({"error": f"not installed ({err.name or err}): nox -s bench installs it"}))
        return 0
    print(json.dumps({"steps_per_s": rate}))
    return 0


def render(
    rates: dict[str, list[float]],
    missing: dict[str, str],
    cost_ms: float,
    source: str = "indexed",
) -> str:
    """One source's table (median, slowest, fastest, ratio to workers=1), then the goals.

    >>> print(render({"thread": [10.0], "workers=1": [20.0], "workers=2": [36.0],
    ...               "tensorpack ZMQ": [30.0], "keras PyDataset": []},
    ...              {"keras PyDataset": "not installed"}, 4.0))
    ## Parallel input: 4 ms of Python per datapoint, MLP 64-64-10
    <BLANKLINE>
    Source: a map-style source (`__len__`, `__getitem__`: split by index, in order).
    <BLANKLINE>
    | case | steps/s (median) | slowest | fastest | vs workers=1 |
    |---|---|---|---|---|
    | thread | 10.0 | 10.0 | 10.0 | 0.50x |
    | workers=1 | 20.0 | 20.0 | 20.0 | 1.00x |
    | workers=2 | 36.0 | 36.0 | 36.0 | 1.80x |
    | tensorpack ZMQ | 30.0 | 30.0 | 30.0 | 1.50x |
    | keras PyDataset | not installed | - | - | - |
    <BLANKLINE>
    Goal workers=2 >= 1.6x workers=1: met (1.80x).
    Goal workers=2 >= 1.0x tensorpack ZMQ: met (1.20x).
    Goal workers=2 >= 1.0x keras PyDataset: not measured.
    """
    what, cases = SOURCES[source]
    medians = {c: statistics.median(v) for c, v in rates.items() if v}
    base = medians.get("workers=1")
    lines = [f"## Parallel input: {cost_ms:g} ms of Python per datapoint, MLP 64-64-10", ""]
    lines += [f"Source: {what}.", ""]
    lines += [
        "| case | steps/s (median) | slowest | fastest | vs workers=1 |",
        "|---|---|---|---|---|",
    ]
    for c in cases:
        if c not in medians:
            lines.append(f"| {c} | {missing.get(c, 'n/a')} | - | - | - |")
            continue
        ratio = f"{medians[c] / base:.2f}x" if base else "-"
        lines.append(
            f"| {c} | {medians[c]:.1f} | {min(rates[c]):.1f} | {max(rates[c]):.1f} | {ratio} |"
        )
    lines.append("")
    ours = medians.get("workers=2")
    peers = [c for c in cases if c in ALL_PEERS]
    for other, goal in (("workers=1", GOAL), *((p, PEER_GOAL) for p in peers)):
        if ours is None or other not in medians:
            lines.append(f"Goal workers=2 >= {goal}x {other}: not measured.")
            continue
        ratio = ours / medians[other]
        verdict = "met" if ratio >= goal else "missed"
        lines.append(f"Goal workers=2 >= {goal}x {other}: {verdict} ({ratio:.2f}x).")
    return "\n".join(lines)


def measure(
    source: str, cost_s: float, warmup: int, steps: int, repeats: int
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """One source's rates, case by case, interleaved round by round."""
    cases = SOURCES[source][1]
    rates: dict[str, list[float]] = {c: [] for c in cases}
    missing: dict[str, str] = {}
    for r in range(repeats):
        order = cases[r % len(cases) :] + cases[: r % len(cases)]
        for case in order:
            if case in missing:
                continue
            if case in ALL_PEERS or source == "tpmap":
                rate = peer_rate(case, cost_s, warmup, steps, source)
                if isinstance(rate, str):
                    missing[case] = rate
                    continue
            else:
                rate = steps_per_s(case, cost_s, warmup, steps, source)
            rates[case].append(rate)
            print(f"parallel {source} {case} #{r + 1}: {rate:.1f} steps/s", file=sys.stderr)
    return rates, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cost-ms", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--sources", default=",".join(SOURCES), help=f"tables, among {','.join(SOURCES)}"
    )
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument(
        "--large-kib",
        default=",".join(map(str, LARGE_KIB)),
        help="array sizes (KiB) of the large-array table; empty: no table",
    )
    parser.add_argument(
        "--work", type=int, default=300, help="datapoints of the work table; 0: no table"
    )
    parser.add_argument("--peer", help=argparse.SUPPRESS)  # one case, one line
    args = parser.parse_args(argv)
    cost_s = args.cost_ms / 1000
    sources = [x for x in args.sources.split(",") if x]
    unknown = [x for x in sources if x not in SOURCES]
    if unknown:
        parser.error(f"unknown --sources {unknown}: choose among {list(SOURCES)}")
    if args.peer:
        return _run_peer(args.peer, cost_s, args.warmup, args.steps, sources[0])
    tables = {}
    for source in sources:
        rates, missing = measure(source, cost_s, args.warmup, args.steps, args.repeats)
        print(render(rates, missing, args.cost_ms, source))
        print()
        medians = {c: statistics.median(v) for c, v in rates.items() if v}
        base = medians.get("workers=1")
        ratios = {c: medians[c] / base for c in medians} if base else {}
        tables[source] = {"medians": medians, "ratios": ratios, "rates": rates}
        tables[source]["missing"] = missing
    work = work_rows(cost_s, args.work) if args.work and os.path.isdir("/proc") else []
    if work:
        print(render_work(work, args.cost_ms))
        print()
    sizes = [int(k) for k in args.large_kib.split(",") if k]
    large = large_array_rows(sizes) if sizes else []
    if large:
        print(render_large(large))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            result = dict(tables.get("indexed", {}))  # the first table's keys, as before
            result["sources"] = tables
            result["large_arrays"] = large
            result["work"] = work
            json.dump({**result, "goal": GOAL, "peer_goal": PEER_GOAL}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
