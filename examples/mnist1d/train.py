"""MNIST-1D's table reproduced: the paper's four models in towerkit and in Keras 3, several seeds.

Greydanus and Kobak ("Scaling down deep learning with MNIST-1D", ICML 2024) report
test accuracies of logistic regression, an MLP, a CNN and a GRU on MNIST-1D, and on
the same data with each signal's positions shuffled. This script trains each model
on both with towerkit (``towerkit.layers``, ``launch_train_with_config``) and with
Keras 3 under the same recipe (Adam 1e-2, batch 100, 6,000 steps), one run after the
other so that load on the machine falls on both alike, for each seed, and writes into
``--out``:

- ``results.json``: every run's test-accuracy curve and wall time (rewritten after
  each run, so an interrupted table keeps what it has);
- ``table.md``: paper, towerkit and Keras (mean ± standard deviation over seeds) and
  each one's mean seconds per run;
- ``curves_<model>.png``: test accuracy against steps, towerkit and Keras on one figure.

Usage::

    python examples/mnist1d/train.py [--steps 6000] [--eval-every 200] [--seeds 0 1 2]
        [--models logistic mlp cnn gru] [--data plain shuffled] [--out DIR] [--check]

``--check`` trains one seed for 80 steps and checks that every file is written and
complete (the pipeline, not the accuracy): what CI runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the recipe's modules beside this script

import mnist1d_recipe as rc  # noqa: E402

CHECK = rc.Recipe(steps=80, eval_every=40, seeds=(0,))
"""The pipeline check: every model and data set, one seed, two measurements."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, checked before TensorFlow loads (exit status 2 on a mistake)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    defaults = rc.Recipe()
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(defaults.seeds))
    parser.add_argument("--models", nargs="+", default=list(rc.MODELS), choices=rc.MODELS)
    parser.add_argument("--data", nargs="+", default=list(rc.DATASETS), choices=rc.DATASETS)
    parser.add_argument(
        "--init",
        default=defaults.init,
        choices=rc.INITS,
        help="paper: PyTorch's start, as the paper's numbers (default); own: each framework's",
    )
    parser.add_argument(
        "--epsilon", type=float, default=defaults.epsilon, help="Adam's epsilon (default 1e-8)"
    )
    parser.add_argument("--out", default=str(HERE / "results"), help="where the files go")
    parser.add_argument(
        "--check", action="store_true", help="one seed, 80 steps: check the pipeline only"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            args.recipe = rc.Recipe(
                steps=CHECK.steps,
                eval_every=CHECK.eval_every,
                seeds=CHECK.seeds,
                models=args.models,
                datasets=args.data,
                init=args.init,
                epsilon=args.epsilon,
            )
        else:
            args.recipe = rc.Recipe(
                steps=args.steps,
                eval_every=args.eval_every,
                seeds=args.seeds,
                models=args.models,
                datasets=args.data,
                init=args.init,
                epsilon=args.epsilon,
            )
    except ValueError as err:
        parser.error(str(err))
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a file, not a folder: give a folder")
    return args


def run_all(recipe: rc.Recipe, out: Path) -> list[rc.RunResult]:
    """Every run of `recipe`, towerkit and Keras one after the other; results.json after each."""
    import mnist1d_keras
    import mnist1d_signals
    import mnist1d_towerkit

    from towerkit.sessinit import atomic_write_text

    trainers = {"towerkit": mnist1d_towerkit.train, "keras": mnist1d_keras.train}
    split = mnist1d_signals.generate()
    results: list[rc.RunResult] = []
    turn = 0
    for seed in recipe.seeds:
        for data in recipe.datasets:
            variant = mnist1d_signals.variant(split, data)
            for model in recipe.models:
                # Who goes first alternates, so a slower spell of the machine hits both.
                order = rc.FRAMEWORKS if turn % 2 == 0 else rc.FRAMEWORKS[::-1]
                turn += 1
                for framework in order:
                    result = trainers[framework](model, variant, recipe, seed, data)
                    results.append(result)
                    print(
                        f"{framework:8} {model:8} {data:8} seed {seed}: "
                        f"{result.accuracy:5.1f}% in {result.seconds:6.1f} s",
                        flush=True,
                    )
                    atomic_write_text(out / "results.json", dump(recipe, results))
    return results


def dump(recipe: rc.Recipe, results: Sequence[rc.RunResult]) -> str:
    """The recipe and the runs as JSON text."""
    import platform

    doc = {
        "recipe": {
            "steps": recipe.steps,
            "eval_every": recipe.eval_every,
            "learning_rate": recipe.learning_rate,
            "epsilon": recipe.epsilon,
            "init": recipe.init,
            "seeds": list(recipe.seeds),
        },
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "runs": [
            {
                "framework": r.framework,
                "model": r.model,
                "data": r.data,
                "seed": r.seed,
                "accuracy": r.accuracy,
                "seconds": round(r.seconds, 2),
                "curve": [round(x, 2) for x in r.curve],
            }
            for r in results
        ],
    }
    return json.dumps(doc, indent=1) + "\n"


def plot(recipe: rc.Recipe, results: Sequence[rc.RunResult], out: Path) -> list[Path]:
    """One figure per model: test accuracy against steps, towerkit and Keras, both data sets.

    Each line is the mean over seeds; the band around it spans the lowest to the highest.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from towerkit.sessinit import atomic_path

    steps = np.asarray(recipe.eval_steps)
    colors = {"towerkit": "tab:blue", "keras": "tab:orange"}
    styles = {"plain": "-", "shuffled": "--"}
    written = []
    for model in recipe.models:
        fig, ax = plt.subplots(figsize=(6, 4))
        for data in recipe.datasets:
            for fw in rc.FRAMEWORKS:
                curves = np.array(
                    [
                        r.curve
                        for r in results
                        if (r.model, r.data, r.framework) == (model, data, fw)
                    ]
                )
                if not len(curves):
                    continue
                label = f"{'Keras 3' if fw == 'keras' else 'towerkit'}, {data}"
                ax.plot(steps, curves.mean(0), styles[data], color=colors[fw], label=label)
                ax.fill_between(steps, curves.min(0), curves.max(0), color=colors[fw], alpha=0.15)
            paper = rc.PAPER[(model, data)]
            ax.axhline(paper, color="grey", linestyle=styles[data], linewidth=0.8)
        ax.set_title(f"MNIST-1D, {model}: test accuracy (grey: the paper's)")
        ax.set_xlabel("training step")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(0, 100)
        ax.legend(loc="lower right")
        fig.tight_layout()
        path = out / f"curves_{model}.png"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def check_outputs(recipe: rc.Recipe, out: Path) -> list[str]:
    """What is missing or wrong in `out` after a run of `recipe` (empty when all is there)."""
    problems = []
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    expected = len(recipe.seeds) * len(recipe.models) * len(recipe.datasets) * len(rc.FRAMEWORKS)
    if len(doc["runs"]) != expected:
        problems.append(f"results.json holds {len(doc['runs'])} runs, not {expected}")
    for run in doc["runs"]:
        if len(run["curve"]) != len(recipe.eval_steps):
            problems.append(
                f"{run['framework']} {run['model']} {run['data']}: curve {run['curve']}"
            )
    table = (out / "table.md").read_text(encoding="utf-8").splitlines()
    if len(table) != 2 + len(recipe.models) * len(recipe.datasets):
        problems.append(f"table.md has {len(table)} lines:\n" + "\n".join(table))
    for model in recipe.models:
        png = out / f"curves_{model}.png"
        if not png.is_file() or not png.read_bytes().startswith(b"\x89PNG"):
            problems.append(f"{png} is missing or not a PNG")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recipe = args.recipe
    results = run_all(recipe, out)

    from towerkit.sessinit import atomic_write_text

    table = rc.format_table(rc.table_rows(results))
    atomic_write_text(out / "table.md", table + "\n")
    plot(recipe, results, out)
    print(table)
    if args.check:
        problems = check_outputs(recipe, out)
        for problem in problems:
            print(f"check: {problem}", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
