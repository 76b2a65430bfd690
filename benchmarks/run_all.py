"""Run every benchmark back to back and write one Markdown report with the machine it ran on.

Each benchmark script (``bench_loop.py``, ``bench_restore.py``, ``bench_scaling.py``,
``bench_export.py``, ``bench_layers.py``, ``bench_parallel.py``, ``bench_rnn.py``, ``bench_precision.py``,
``bench_jit.py``) times the systems it compares inside one invocation, with warm-up
runs and repeated, interleaved measurements, and reports medians. This script runs them
one after the other as separate processes (so one benchmark's memory and threads do not
disturb the next), collects the JSON each writes, and writes:

- a machine section: CPU model, cores, memory, OS, Python, TensorFlow, NumPy, Keras;
- a summary table: the headline ratio of each area against its baseline;
- one section per area with the benchmark's own table (absolute figures and ratios),
  its command line and its wall time.

The sizes below are chosen so that the whole run takes well under 30 minutes on 2 CPU
cores; ``--quick`` makes every benchmark tiny (a smoke test, not a measurement).

Usage::

    python benchmarks/run_all.py --out report.md [--only loop,restore] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from towerkit.sessinit import atomic_write_text

HERE = Path(__file__).resolve().parent

BENCHES: dict[str, dict[str, Any]] = {
    "loop": {
        "title": "Training loop: steps per second against a bare session callable, Keras 3 and tensorpack 0.11",
        "script": "bench_loop.py",
        "json_flag": "--out",
        "args": [
            "--models",
            "tiny,mlp,conv",
            "--repeats",
            "5",
            "--feed-models",
            "tiny,mlp,conv",
            "--costly-models",
            "tiny,mlp",
        ],
        "quick": [
            "--models",
            "tiny",
            "--repeats",
            "1",
            "--steps",
            "200",
            "--warmup",
            "20",
            "--feed-models",
            "tiny",
            "--costly-models",
            "",
            "--rss-steps",
            "1000",
        ],
        "baseline": "a bare loop over sess.make_callable(train_op)",
    },
    "multistep": {
        "title": "Several steps per session call: steps_per_execution K = 1, 10, 50, 200 against the one-step floor, a hand-written while loop and Keras 3",
        "script": "bench_multistep.py",
        "json_flag": "--out",
        "args": ["--repeats", "3"],
        "quick": ["--models", "tiny", "--ks", "1,50", "--repeats", "1", "--scale", "0.1"],
        "baseline": "a bare loop over sess.make_callable(train_op), one step per call",
    },
    "jit": {
        "title": "XLA: steps/s of SimpleTrainer with xla=True against xla=False, K = 1 and 10",
        "script": "bench_jit.py",
        "json_flag": "--out",
        "args": ["--repeats", "3"],
        "quick": ["--models", "mlp", "--ks", "1,2", "--repeats", "1", "--scale", "0.05"],
        "baseline": "the same trainer and model with xla=False, the same round",
    },
    "restore": {
        "title": "Restore: SessionInit speed against tf.compat.v1.train.Saver.restore",
        "script": "bench_restore.py",
        "json_flag": "--out",
        "args": ["--size-mb", "512", "--num-vars", "1000", "--repeats", "5"],
        "quick": ["--size-mb", "4", "--num-vars", "20", "--repeats", "2"],
        "baseline": "Saver.restore on the same checkpoint",
    },
    "saving": {
        "title": "Saving: the loop's time per checkpoint, ModelSaver(background=True) against the blocking save",
        "script": "bench_saving.py",
        "json_flag": "--out",
        "args": ["--size-mb", "300", "--repeats", "3"],
        "quick": [
            *("--size-mb", "8", "--num-vars", "8", "--steps", "20", "--every", "5"),
            *("--repeats", "1", "--width", "128"),
        ],
        "baseline": "the same run without a saver",
    },
    "scaling": {
        "title": "Scaling: multi-tower and horovod trainers against one tower",
        "script": "bench_scaling.py",
        "json_flag": "--out",
        "args": [],
        "quick": ["--quick"],
        "baseline": "SimpleTrainer (one tower)",
    },
    "export": {
        "title": "Export: latency and throughput of the exported forms against the OfflinePredictor",
        "script": "bench_export.py",
        "json_flag": "--json",
        "args": ["--repeats", "7"],
        "quick": [
            "--repeats",
            "2",
            "--latency-calls",
            "20",
            "--throughput-calls",
            "3",
            "--warmup",
            "3",
        ],
        "baseline": "OfflinePredictor built from the same checkpoint",
    },
    "layers": {
        "title": "Layers: a convnet built with towerkit.layers against raw tf.compat.v1 ops and tf.layers",
        "script": "bench_layers.py",
        "json_flag": "--out",
        "args": [],
        "quick": ["--repeats", "1", "--steps", "20", "--warmup", "5"],
        "baseline": "the same convnet in raw tf.compat.v1 ops",
    },
    "parallel": {
        "title": "Parallel input: IterableInput(workers=2) against workers=1 on a 4 ms Python source",
        "script": "bench_parallel.py",
        "json_flag": "--out",
        "args": ["--steps", "400", "--warmup", "400", "--repeats", "5"],
        "quick": [
            *("--steps", "60", "--warmup", "10", "--repeats", "1", "--large-kib", "64"),
            *("--sources", "indexed,flow", "--work", "20"),
        ],
        "baseline": "IterableInput(source, workers=1)",
    },
    "precision": {
        "title": "Mixed precision: a BN convnet in float32 and mixed_bfloat16, towerkit against Keras 3",
        "script": "bench_precision.py",
        "json_flag": "--out",
        "args": ["--repeats", "3", "--steps", "30", "--warmup", "5"],
        "quick": ["--repeats", "1", "--steps", "3", "--warmup", "1"],
        "baseline": "the same network in towerkit, float32",
    },
    "rnn": {
        "title": "Recurrent cells: a 2-layer LSTM step, towerkit.layers.rnn against tf.nn.rnn_cell",
        "script": "bench_rnn.py",
        "json_flag": "--out",
        "args": ["--repeats", "9", "--steps", "150", "--warmup", "10"],
        "quick": ["--repeats", "2", "--steps", "10", "--warmup", "2"],
        "baseline": "the same model with tf.compat.v1.nn.rnn_cell (tf-keras)",
    },
    **{
        f"rnn-{model}": {
            "title": f"Recurrent cells, {what}: towerkit.layers.rnn against tf.nn.rnn_cell",
            "script": "bench_rnn.py",
            "json_flag": "--out",
            "args": [
                *("--model", model, "--repeats", "5", "--steps", steps, "--warmup", warmup),
                "--floor",
            ],
            "quick": ["--model", model, "--repeats", "1", "--steps", "3", "--warmup", "1"],
            "baseline": "the same model with tf.compat.v1.nn.rnn_cell (tf-keras)",
        }
        for model, what, steps, warmup in [
            ("ptb", "PTB's dropout-wrapped 2-layer LSTM", "8", "2"),
            ("char-rnn", "char-rnn's 2-layer LSTM", "8", "2"),
            ("padded", "padded batches with sequence_length", "60", "5"),
            ("gru", "a 2-layer GRU", "60", "5"),
        ]
    },
}
"""Area -> its script, arguments (full and quick), the flag that names its JSON output."""

BUDGET_S = 30 * 60
"""The time the whole run must stay within on 2 CPU cores."""


# -- the machine ----------------------------------------------------------------------------


def cpu_model(cpuinfo: str) -> str:
    """The CPU model named in the text of ``/proc/cpuinfo``.

    Examples:
        >>> cpu_model("processor : 0\\nmodel name\\t: Example CPU @ 2.00GHz\\n")
        'Example CPU @ 2.00GHz'
        >>> cpu_model("")
        'unknown'
    """
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model", "Hardware") and value.strip():
            return value.strip()
    return "unknown"


def mem_total_gib(meminfo: str) -> float | None:
    """Total memory in GiB from the text of ``/proc/meminfo``, or None.

    Examples:
        >>> mem_total_gib("MemTotal:       16384000 kB\\n")
        15.625
    """
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _version(*dists: str) -> str:
    for dist in dists:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return f"{importlib.metadata.version(dist)} ({dist})"
    return "not installed"


def machine_info() -> dict[str, Any]:
    """What the benchmarks ran on, read without importing TensorFlow."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        usable = os.cpu_count()
    commit = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "cpu": cpu_model(_read("/proc/cpuinfo"))
        if os.path.exists("/proc/cpuinfo")
        else platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": mem_total_gib(_read("/proc/meminfo")),
        "os": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow-cpu", "tensorflow", "tensorflow-gpu"),
        "numpy": _version("numpy"),
        "keras": _version("keras"),
        "commit": commit.stdout.strip() if commit.returncode == 0 else "unknown",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


# -- running ---------------------------------------------------------------------------------


def command(area: str, json_path: str, quick: bool = False) -> list[str]:
    """The command line that runs one benchmark and writes its JSON to `json_path`.

    Examples:
        >>> command("restore", "r.json", quick=True)[1:]  # doctest: +ELLIPSIS
        ['.../bench_restore.py', '--size-mb', '4', '--num-vars', '20', '--repeats', '2', '--out', 'r.json']
    """
    bench = BENCHES[area]
    args = bench["quick"] if quick else bench["args"]
    return [sys.executable, str(HERE / bench["script"]), *args, bench["json_flag"], json_path]


def run_bench(area: str, workdir: str, quick: bool, timeout_s: float) -> dict[str, Any]:
    """Run one benchmark; its status, wall time, stdout (its own table) and JSON."""
    bench = BENCHES[area]
    script = HERE / bench["script"]
    if not script.is_file():
        return {"status": "missing", "reason": f"benchmarks/{bench['script']} does not exist"}
    json_path = os.path.join(workdir, f"{area}.json")
    cmd = command(area, json_path, quick)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    print(f"run_all: {area}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as err:
        return {
            "status": "timeout",
            "reason": f"stopped after {timeout_s:.0f} s",
            "seconds": time.perf_counter() - start,
            "command": cmd,
            "stdout": (err.stdout or b"").decode(errors="replace")
            if isinstance(err.stdout, bytes)
            else (err.stdout or ""),
        }
    seconds = time.perf_counter() - start
    record: dict[str, Any] = {
        "seconds": seconds,
        "command": cmd,
        "returncode": done.returncode,
        "stdout": done.stdout,
        "stderr_tail": done.stderr.strip().splitlines()[-5:],
    }
    if os.path.isfile(json_path):
        with open(json_path, encoding="utf-8") as f:
            record["data"] = json.load(f)
    if done.returncode != 0 or "data" not in record:
        record["status"] = "failed"
        record["reason"] = f"exit status {done.returncode}: " + " / ".join(
            record["stderr_tail"][-2:]
        )
    else:
        record["status"] = "ok"
    print(f"run_all: {area}: {record['status']} in {seconds:.0f} s", file=sys.stderr, flush=True)
    return record


# -- the report ------------------------------------------------------------------------------


def _ratio(value: Any) -> str:
    return f"{value:.2f}x" if isinstance(value, int | float) else "n/a"


def headlines(area: str, data: Any) -> list[tuple[str, str, str]]:
    """``(what, figure, ratio)`` rows summarizing one benchmark's JSON (empty when unknown).

    Examples:
        >>> headlines("restore", {"results": [{"case": "SaverRestore", "median_s": 0.5, "ratio": 1.05}]})
        [('SaverRestore restore time', '0.500 s', '1.05x')]
        >>> headlines("layers", {"medians": {"raw": 50.0, "towerkit.layers": 49.5, "tf.layers": 40.0},
        ...                      "ratios": {"raw": 0.99, "tf.layers": 1.24}})
        [('towerkit.layers steps/s', '49.5', '0.99x'), ('tf.layers steps/s (vs baseline: towerkit.layers over it)', '40.0', '1.24x')]
        >>> headlines("loop", {"medians": {"tiny": {"callable": 900.0, "towerkit": 870.0}},
        ...                    "ratios": {"tiny": {"callable": 1.0, "towerkit": 0.967}},
        ...                    "feed": {"rows": [{"model": "mlp", "cost_s": 0.0,
        ...                        "medians": {"fed": 500.0, "towerkit": 520.0},
        ...                        "ratios": {"fed": 1.0, "towerkit": 1.04}}]}})
        [('towerkit steps/s, tiny model', '870.0', '0.97x'), ('towerkit dataflow steps/s, mlp model (vs the fed callable)', '520.0', '1.04x')]
    """
    rows: list[tuple[str, str, str]] = []
    if area == "loop" and isinstance(data, Mapping):
        for model, medians in data.get("medians", {}).items():
            ratios = data.get("ratios", {}).get(model, {})
            for case in ("towerkit", "keras", "tensorpack"):
                value = medians.get(case)
                if value is None:
                    continue
                figure = f"{value:.1f}" if isinstance(value, int | float) else str(value)[:60]
                rows.append((f"{case} steps/s, {model} model", figure, _ratio(ratios.get(case))))
        for row in (data.get("feed") or {}).get("rows", []):
            value = row.get("medians", {}).get("towerkit")
            if value is None:
                continue
            figure = f"{value:.1f}" if isinstance(value, int | float) else str(value)[:60]
            cost = ", producer cost 1 step" if row.get("cost_s") else ""
            what = f"towerkit dataflow steps/s, {row['model']} model{cost} (vs the fed callable)"
            rows.append((what, figure, _ratio(row.get("ratios", {}).get("towerkit"))))
    elif area == "multistep" and isinstance(data, Mapping):
        for model, res in data.get("results", {}).items():
            med = res.get("medians", {})
            floor = med.get("callable")
            for key, value in med.items():
                if key.startswith("towerkit@") and floor:
                    k = key.split("@")[1]
                    what = f"towerkit steps/s, {model} model, K={k} (vs the one-step floor)"
                    rows.append((what, f"{value:.1f}", _ratio(value / floor)))
    elif area == "jit" and isinstance(data, Mapping):
        for model, by_k in data.get("results", {}).items():
            for k, r in by_k.items():
                if r.get("xla"):
                    pairs = [b / a for a, b in zip(r.get("plain", []), r["xla"]) if a]
                    ratio = sorted(pairs)[len(pairs) // 2] if pairs else None
                    figure = f"{sorted(r['xla'])[len(r['xla']) // 2]:.1f}"
                    what = f"xla=True steps/s, {model} model, K={k} (vs xla=False)"
                    rows.append((what, figure, _ratio(ratio)))
    elif area == "restore" and isinstance(data, Mapping):
        for r in data.get("results", []):
            if r.get("case") != "Saver.restore":
                rows.append(
                    (f"{r['case']} restore time", f"{r['median_s']:.3f} s", _ratio(r.get("ratio")))
                )
    elif area == "export" and isinstance(data, list):
        base = next((r for r in data if r.get("form") == "OfflinePredictor"), None)
        for r in data:
            if base is None or r is base:
                continue
            lat, base_lat = r["latency_ms"][0], base["latency_ms"][0]
            rows.append((f"{r['form']} latency, batch 1", f"{lat:.3f} ms", _ratio(lat / base_lat)))
    elif area == "layers" and isinstance(data, Mapping):
        medians, ratios = data.get("medians", {}), data.get("ratios", {})
        ours = medians.get("towerkit.layers")
        if isinstance(ours, int | float):
            rows.append(("towerkit.layers steps/s", f"{ours:.1f}", _ratio(ratios.get("raw"))))
        if isinstance(ratios.get("tf.layers"), int | float):
            figure = f"{medians['tf.layers']:.1f}"
            what = "tf.layers steps/s (vs baseline: towerkit.layers over it)"
            rows.append((what, figure, _ratio(ratios["tf.layers"])))
    elif area == "parallel" and isinstance(data, Mapping):
        medians, ratios = data.get("medians", {}), data.get("ratios", {})
        for case in ("workers=2", "thread"):
            if isinstance(medians.get(case), int | float):
                what = f"IterableInput {case} steps/s (vs workers=1)"
                rows.append((what, f"{medians[case]:.1f}", _ratio(ratios.get(case))))
        ours = medians.get("workers=2")
        for peer in ("tensorpack ZMQ", "keras PyDataset"):
            theirs = medians.get(peer)
            if isinstance(ours, int | float) and isinstance(theirs, int | float) and theirs:
                what = f"{peer} steps/s (vs baseline: IterableInput workers=2 over it)"
                rows.append((what, f"{theirs:.1f}", _ratio(ours / theirs)))
        flow = (data.get("sources") or {}).get("flow") or {}
        medians, ratios = flow.get("medians", {}), flow.get("ratios", {})
        ours = medians.get("workers=2")
        if isinstance(ours, int | float):
            what = "DataFlow-shaped source, workers=2 steps/s (vs workers=1)"
            rows.append((what, f"{ours:.1f}", _ratio(ratios.get("workers=2"))))
            theirs = medians.get("tensorpack ZMQ")
            if isinstance(theirs, int | float) and theirs:
                what = "DataFlow-shaped, tensorpack ZMQ steps/s (vs baseline: workers=2 over it)"
                rows.append((what, f"{theirs:.1f}", _ratio(ours / theirs)))
    elif area == "precision" and isinstance(data, Mapping):
        medians, ratios = data.get("medians", {}), data.get("ratios", {})
        ours = medians.get("towerkit mixed_bfloat16")
        if isinstance(ours, int | float):
            what = "towerkit mixed_bfloat16 steps/s (vs towerkit float32)"
            rows.append((what, f"{ours:.2f}", _ratio(ratios.get("towerkit float32"))))
        theirs = medians.get("keras mixed_bfloat16")
        if isinstance(theirs, int | float):
            what = "keras mixed_bfloat16 steps/s (vs baseline: towerkit mixed_bfloat16 over it)"
            rows.append((what, f"{theirs:.2f}", _ratio(ratios.get("keras mixed_bfloat16"))))
    elif area.startswith("rnn") and isinstance(data, Mapping):
        medians, ratios = data.get("medians", {}), data.get("ratios", {})
        ours = medians.get("towerkit.layers.rnn")
        if isinstance(ours, int | float):
            what = "towerkit.layers.rnn steps/s (vs tf.nn.rnn_cell)"
            rows.append((what, f"{ours:.1f}", _ratio(ratios.get("tf.nn.rnn_cell"))))
        cpu = (data.get("cpu_ratios") or {}).get("tf.nn.rnn_cell")
        if isinstance(cpu, int | float):
            rows.append(("the same, per CPU-second", "", _ratio(cpu)))
        share = (data.get("floor_shares") or {}).get("cpu")
        if isinstance(share, int | float) and share > 0:
            what = "tf.nn.rnn_cell's share of its matrix products' floor, per CPU-second"
            rows.append((what, f"{share:.2f}", f"at most {1 / share:.2f}x"))
    elif area == "scaling" and isinstance(data, Mapping):
        for r in data.get("results", []):
            if isinstance(r, Mapping) and "case" in r:
                value = r.get("samples_per_s", r.get("steps_per_s"))
                figure = f"{value:.1f}/s" if isinstance(value, int | float) else "n/a"
                rows.append((str(r["case"]), figure, _ratio(r.get("ratio", r.get("speedup")))))
    return rows


def render_report(
    machine: Mapping[str, Any],
    results: Mapping[str, Mapping[str, Any]],
    total_s: float,
    quick: bool,
) -> str:
    """The Markdown report.

    Examples:
        >>> text = render_report({"cpu": "X", "cores": 2, "usable_cores": 2, "memory_gib": 8.0,
        ...     "os": "Linux", "python": "3.11", "tensorflow": "2.21", "numpy": "2.1", "keras": "3.1",
        ...     "commit": "abc", "date": "today"}, {"scaling": {"status": "missing",
        ...     "reason": "benchmarks/bench_scaling.py does not exist"}}, 12.0, False)
        >>> print(text.splitlines()[0])
        # towerkit benchmark report
        >>> "not run: benchmarks/bench_scaling.py does not exist" in text
        True
    """
    mem = machine.get("memory_gib")
    lines = [
        "# towerkit benchmark report",
        "",
        f"Written by `benchmarks/run_all.py` on {machine['date']} (commit {machine['commit']}); "
        f"all benchmarks took {total_s / 60:.1f} min back to back"
        + (" (--quick: smoke-test sizes, not measurements)." if quick else "."),
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {machine['cpu']} |",
        f"| cores | {machine['cores']} ({machine['usable_cores']} usable by this process) |",
        f"| memory | {'unknown' if mem is None else f'{mem:.1f} GiB'} |",
        f"| OS | {machine['os']} |",
        f"| Python | {machine['python']} |",
        f"| TensorFlow | {machine['tensorflow']} |",
        f"| NumPy | {machine['numpy']} |",
        f"| Keras | {machine['keras']} |",
        "",
        "## Method",
        "",
        "Each benchmark runs in its own process, one after the other. Inside a benchmark "
        "the compared systems run in the same invocation, each warmed up first, then "
        "measured several times with the systems interleaved; tables give medians (and "
        "best rounds where noted). A ratio compares a system with the baseline of its area "
        "(for times, below 1 is faster; for rates, above 1 is faster). Sizes are chosen "
        f"to keep the whole run under {BUDGET_S // 60} minutes on 2 CPU cores.",
        "",
        "## Summary",
        "",
        "| area | what | figure | vs baseline | baseline |",
        "|---|---|---:|---:|---|",
    ]
    for area, record in results.items():
        rows = headlines(area, record.get("data")) if record.get("status") == "ok" else []
        if not rows:
            reason = record.get("reason", "no headline figures")
            lines.append(f"| {area} | {reason} | | | {BENCHES[area]['baseline']} |")
        for what, figure, ratio in rows:
            lines.append(f"| {area} | {what} | {figure} | {ratio} | {BENCHES[area]['baseline']} |")
    for area, record in results.items():
        bench = BENCHES[area]
        lines += ["", f"## {bench['title']}", ""]
        status = record.get("status")
        if status == "missing":
            lines.append(f"not run: {record['reason']}.")
            continue
        cmd = " ".join(["python", f"benchmarks/{bench['script']}", *record["command"][2:-2]])
        lines += [
            f"`{cmd}`: {status}, {record.get('seconds', 0):.0f} s.",
            "",
        ]
        if status != "ok":
            lines += [f"Reason: {record.get('reason', 'unknown')}.", ""]
        table = _demote_headings(record.get("stdout", "").strip())
        if table:
            lines += [table, ""]
    return "\n".join(lines).rstrip() + "\n"


def _demote_headings(text: str) -> str:
    """Headings in a benchmark's output, set to level 4 (below this report's sections).

    Examples:
        >>> _demote_headings("## Export\\ntext\\n### Restore")
        '#### Export\\ntext\\n#### Restore'
    """
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            line = "#### " + line.lstrip("#").strip()
        out.append(line)
    return "\n".join(out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the Markdown report to write")
    parser.add_argument("--json", default=None, help="also write every result as JSON here")
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated areas to run (default: all of {list(BENCHES)})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: a smoke test of the report"
    )
    parser.add_argument(
        "--timeout", type=float, default=BUDGET_S, help="seconds allowed to each benchmark"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    areas = list(BENCHES) if args.only is None else [a for a in args.only.split(",") if a]
    unknown = [a for a in areas if a not in BENCHES]
    if unknown or not areas:
        parser.error(f"--only: unknown areas {unknown}; expected some of {list(BENCHES)}")
    args.areas = areas
    parent = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(parent):
        parser.error(f"--out: directory {parent!r} does not exist")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks and write the report; 1 when a benchmark failed, else 0."""
    args = parse_args(argv)
    if args.dry_run:
        for area in args.areas:
            print(" ".join(command(area, f"<tmp>/{area}.json", args.quick)))
        return 0
    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="towerkit-bench-") as workdir:
        for area in args.areas:
            results[area] = run_bench(area, workdir, args.quick, args.timeout)
    total = time.perf_counter() - start
    machine = machine_info()
    atomic_write_text(args.out, render_report(machine, results, total, args.quick))
    if args.json:
        doc = {"machine": machine, "total_s": total, "results": results}
        atomic_write_text(args.json, json.dumps(doc, indent=1, default=str))
    print(f"run_all: wrote {args.out} ({total / 60:.1f} min)", file=sys.stderr)
    failed = [a for a, r in results.items() if r["status"] in ("failed", "timeout")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
