"""The paper's own PyTorch code over several seeds: the yardstick for the recipe's table.

Greydanus and Kobak's repository trains its four models with ``notebooks/models.py``
and ``notebooks/train.py`` from ``notebooks/mnist1d-classification.ipynb``, once. This
script imports those two files, unmodified, from a clone of that repository
(``--paper-repo``; nothing of theirs is copied here), and runs the notebook's recipe
for each model, data set and seed: ``get_model_args()`` with ``total_steps = 6000``,
``train_model`` on the repository's ``mnist1d_data.pkl`` (checked against the recipe's
SHA-256), the shuffled set made as the notebook makes it. Before each model it calls the
notebook's ``mnist1d.utils.set_seed(seed)`` and ``torch.manual_seed(seed)``: the
notebook's call seeds only ``random`` and NumPy, which leaves the initial weights to
PyTorch's generator as the notebook's session left it (``train.py``'s own
``set_seed`` adds ``torch.manual_seed``, as the repository's 2020 one did).

Writes ``--out`` (JSON, rewritten after each run: every run's test accuracy every 250
steps, its final and best value and wall time, the torch version and thread count) and
beside it ``table.md`` (mean ± standard deviation over the seeds and each seed's).

Usage::

    pip install torch scipy matplotlib requests ./libs/sessinit  # the clone's imports
    python examples/mnist1d/paper_code.py --paper-repo PATH [--seeds 0 1 2]
        [--models logistic mlp cnn gru] [--data plain shuffled] [--threads 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the recipe's modules beside this script

import mnist1d_recipe as rc  # noqa: E402

PAPER_FILES = ("notebooks/models.py", "notebooks/train.py", "mnist1d/utils.py", "mnist1d_data.pkl")
"""What ``--paper-repo`` must hold: the notebook's two modules, the package's seeding, the data."""

STEPS = 6000
"""The notebook's ``args.total_steps`` (``train_model`` takes steps 0 to 6000 inclusive)."""

EVAL_EVERY = 250
"""``get_model_args()``'s ``eval_every``: test accuracy after steps 0, 250, ..., 6000."""


def _floats(values: Iterable[float]) -> tuple[float, ...]:
    return tuple(float(x) for x in values)


@attrs.frozen(kw_only=True)
class PaperRun:
    """One run of the paper's code: a model on a data set from one seed.

    Args:
        model: one of `rc.MODELS`.
        data: one of `rc.DATASETS`.
        seed: the seed given to ``set_seed`` and ``torch.manual_seed``.
        curve: test accuracy (%) after steps 0, `EVAL_EVERY`, ..., `STEPS`.
        seconds: wall time: building the model and ``train_model``.
    """

    model: str = attrs.field(validator=attrs.validators.in_(rc.MODELS))
    data: str = attrs.field(validator=attrs.validators.in_(rc.DATASETS))
    seed: int
    curve: tuple[float, ...] = attrs.field(converter=_floats, validator=rc.check_accuracies)
    seconds: float = attrs.field(converter=float)

    @property
    def final(self) -> float:
        """Test accuracy after the last step, as the notebook reports it."""
        return self.curve[-1]

    @property
    def best(self) -> float:
        """The highest test accuracy measured during training."""
        return max(self.curve)


@attrs.frozen(kw_only=True)
class PaperRow:
    """One (model, data) of the paper's code over its seeds: summary and each seed's final."""

    model: str
    data: str
    paper: float
    final: rc.Summary
    best: rc.Summary
    per_seed: tuple[tuple[int, float], ...]


def paper_rows(runs: Iterable[PaperRun]) -> list[PaperRow]:
    """One `PaperRow` per (model, data) run, in the paper's table's order; seeds ascending.

    >>> runs = [PaperRun(model="mlp", data="plain", seed=s, curve=(60.0, a), seconds=5.0)
    ...         for s, a in ((1, 66.0), (0, 64.0))]
    >>> (row,) = paper_rows(runs)
    >>> row.final.mean, row.final.std, row.per_seed
    (65.0, 1.4142135623730951, ((0, 64.0), (1, 66.0)))

    Raises:
        ValueError: two runs of the same model, data and seed.
    """
    seen: dict[tuple[str, str], dict[int, PaperRun]] = {}
    for run in runs:
        group = seen.setdefault((run.model, run.data), {})
        if run.seed in group:
            msg = f"two runs of ({run.model!r}, {run.data!r}) with seed {run.seed}: expected one"
            raise ValueError(msg)
        group[run.seed] = run
    rows = []
    for data in rc.DATASETS:
        for model in rc.MODELS:
            by_seed = seen.get((model, data))
            if not by_seed:
                continue
            done = [by_seed[s] for s in sorted(by_seed)]
            secs = [r.seconds for r in done]
            rows.append(
                PaperRow(
                    model=model,
                    data=data,
                    paper=rc.PAPER[(model, data)],
                    final=rc.summarize([r.final for r in done], secs),
                    best=rc.summarize([r.best for r in done], secs),
                    per_seed=tuple((r.seed, r.final) for r in done),
                )
            )
    return rows


def format_paper_table(rows: Sequence[PaperRow]) -> str:
    """The rows as Markdown: the paper's number, the code's final accuracy and best, seconds.

    >>> s = rc.Summary(mean=65.0, std=1.4, seconds=5.0, runs=2)
    >>> b = rc.Summary(mean=66.5, std=0.7, seconds=5.0, runs=2)
    >>> row = PaperRow(model="mlp", data="plain", paper=68.0, final=s, best=b,
    ...                per_seed=((0, 64.0), (1, 66.0)))
    >>> print(format_paper_table([row]))
    | model | data | paper | paper's code | each seed | best during training | s | seeds |
    |---|---|---:|---:|---|---:|---:|---:|
    | mlp | plain | 68 | 65.0 ± 1.4 | 64.0 (0), 66.0 (1) | 66.5 ± 0.7 | 5.0 | 2 |
    """
    lines = [
        "| model | data | paper | paper's code | each seed | best during training | s | seeds |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for row in rows:
        seeds = ", ".join(f"{acc:.1f} ({seed})" for seed, acc in row.per_seed)
        lines.append(
            f"| {row.model} | {row.data} | {row.paper:.0f}"
            f" | {row.final.mean:.1f} ± {row.final.std:.1f} | {seeds}"
            f" | {row.best.mean:.1f} ± {row.best.std:.1f} | {row.final.seconds:.1f}"
            f" | {row.final.runs} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, checked before PyTorch loads (exit status 2 on a mistake)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--paper-repo", required=True, help="a clone of the paper's repository (greydanus/mnist1d)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--models", nargs="+", default=list(rc.MODELS), choices=rc.MODELS)
    parser.add_argument("--data", nargs="+", default=list(rc.DATASETS), choices=rc.DATASETS)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument(
        "--out",
        default=str(HERE / "results" / "paper_code" / "results.json"),
        help="the JSON file to write (table.md goes beside it)",
    )
    args = parser.parse_args(argv)
    repo = Path(args.paper_repo)
    missing = [f for f in PAPER_FILES if not (repo / f).is_file()]
    if missing:
        parser.error(
            f"--paper-repo {repo} lacks {', '.join(missing)}: give a clone of the paper's"
            " repository (greydanus/mnist1d)"
        )
    bad = [s for s in args.seeds if not 0 <= s < 2**32]
    if bad or len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds must be distinct ints in [0, 2**32); got {args.seeds}")
    if len(set(args.models)) != len(args.models) or len(set(args.data)) != len(args.data):
        parser.error(f"--models and --data must be distinct; got {args.models} and {args.data}")
    if args.threads < 1:
        parser.error(f"--threads must be at least 1; got {args.threads}")
    if Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a folder: give the JSON file's path")
    return args


def load_data(repo: Path) -> dict[str, dict[str, Any]]:
    """The repository's pickle, checked, as the notebook uses it: plain and shuffled.

    Raises:
        ValueError: the pickle is not the data the recipe checks (`PAPER_DATA_SHA256`).
    """
    import mnist1d_signals
    import numpy as np

    with open(repo / "mnist1d_data.pkl", "rb") as f:
        data = pickle.load(f)  # the paper's own file, checked below
    split = mnist1d_signals.Split(
        x=np.asarray(data["x"], np.float32),
        y=np.asarray(data["y"], np.int32),
        x_test=np.asarray(data["x_test"], np.float32),
        y_test=np.asarray(data["y_test"], np.int32),
    )
    if split.sha256() != mnist1d_signals.PAPER_DATA_SHA256:
        msg = (
            f"{repo / 'mnist1d_data.pkl'} holds other data than the paper's (SHA-256"
            f" {split.sha256()} as float32, expected {mnist1d_signals.PAPER_DATA_SHA256})"
        )
        raise ValueError(msg)
    order = rc.fixed_permutation(data["x"].shape[1])  # the notebook's: NumPy's seed 42
    shuffled = {**data, "x": data["x"][:, order], "x_test": data["x_test"][:, order]}
    return {"plain": data, "shuffled": shuffled}


def paper_commit(repo: Path) -> str | None:
    """The clone's commit, where ``git`` can tell it."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except OSError:
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def dump(runs: Sequence[PaperRun], meta: dict[str, Any]) -> str:
    """The runs and what they ran on, as JSON text."""
    doc = {
        **meta,
        "steps": STEPS,
        "eval_every": EVAL_EVERY,
        "runs": [
            {
                "model": r.model,
                "data": r.data,
                "seed": r.seed,
                "final": r.final,
                "best": r.best,
                "best_step": r.curve.index(r.best) * EVAL_EVERY,
                "seconds": round(r.seconds, 2),
                "curve": [round(x, 2) for x in r.curve],
            }
            for r in runs
        ],
    }
    return json.dumps(doc, indent=1) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    repo = Path(args.paper_repo).resolve()
    out = Path(args.out)
    datasets = load_data(repo)
    sys.path[:0] = [str(repo / "notebooks"), str(repo)]
    import torch
    from mnist1d.utils import set_seed  # the notebook's seeding call
    from models import ConvBase, GRUBase, LinearBase, MLPBase  # the paper's notebooks/
    from train import get_model_args, train_model

    from towerkit.sessinit import atomic_write_text

    torch.set_num_threads(args.threads)
    margs = get_model_args()
    margs.total_steps = STEPS
    margs.device = "cpu"
    if margs.eval_every != EVAL_EVERY:
        msg = f"the clone's get_model_args() has eval_every {margs.eval_every}, not {EVAL_EVERY}"
        raise ValueError(msg)
    builders = {  # as the notebook's cells build them
        "logistic": lambda: LinearBase(margs.input_size, margs.output_size),
        "mlp": lambda: MLPBase(margs.input_size, margs.output_size),
        "cnn": lambda: ConvBase(output_size=margs.output_size),
        "gru": lambda: GRUBase(input_size=1, output_size=margs.output_size),
    }
    meta = {
        "paper_commit": paper_commit(repo),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "seeding": "mnist1d.utils.set_seed(seed); torch.manual_seed(seed)",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    runs: list[PaperRun] = []
    for model in args.models:
        for data in args.data:
            for seed in args.seeds:
                set_seed(seed)
                torch.manual_seed(seed)
                start = time.perf_counter()
                history = train_model(datasets[data], builders[model](), margs)
                run = PaperRun(
                    model=model,
                    data=data,
                    seed=seed,
                    curve=history["test_acc"],
                    seconds=time.perf_counter() - start,
                )
                runs.append(run)
                print(
                    f"paper's code {model:8} {data:8} seed {seed}: {run.final:5.1f}%"
                    f" (best {run.best:.1f}) in {run.seconds:6.1f} s",
                    flush=True,
                )
                atomic_write_text(out, dump(runs, meta))
    table = format_paper_table(paper_rows(runs))
    atomic_write_text(out.parent / "table.md", table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
