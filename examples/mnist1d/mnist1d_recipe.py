"""The MNIST-1D recipe as data: its settings, one run's result, and the table over seeds.

Pure Python and NumPy (no TensorFlow, no Keras, no mnist1d), so the table and its
checks are tested where neither framework is installed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import attrs
import numpy as np

MODELS = ("logistic", "mlp", "cnn", "gru")
"""The paper's four models, in the order of its table."""

DATASETS = ("plain", "shuffled")
"""The data as generated, and with the 40 positions of every signal permuted (one fixed order)."""

FRAMEWORKS = ("towerkit", "keras")
"""Who trains the model: towerkit (``launch_train_with_config``) or Keras 3 (``Model.fit``)."""

PAPER = {
    ("logistic", "plain"): 32.0,
    ("mlp", "plain"): 68.0,
    ("cnn", "plain"): 94.0,
    ("gru", "plain"): 91.0,
    ("logistic", "shuffled"): 32.0,
    ("mlp", "shuffled"): 68.0,
    ("cnn", "shuffled"): 56.0,
    ("gru", "shuffled"): 57.0,
}
"""Test accuracy (%) in Greydanus and Kobak's table (MNIST-1D, ICML 2024), by (model, data)."""

NOTEBOOK = {
    ("logistic", "plain"): 31.5,
    ("mlp", "plain"): 65.1,
    ("cnn", "plain"): 92.3,
    ("gru", "plain"): 89.1,
    ("logistic", "shuffled"): 31.5,
    ("mlp", "shuffled"): 66.0,
    ("cnn", "shuffled"): 58.7,
    ("gru", "shuffled"): 53.3,
}
"""Test accuracy (%) after 6,000 steps in the paper's own notebook as its repository keeps it
(``notebooks/mnist1d-classification.ipynb``: PyTorch, one run, the same data; its
``set_seed(42)`` seeds ``random`` and NumPy only, not PyTorch's initial weights)."""

INITS = ("paper", "own")
"""How the weights start: as in the paper's PyTorch code, or as each framework's defaults."""

TRAIN_SIZE = 4000
"""Training signals in the paper's split (5,000 generated, 80% for training)."""

BATCH_SIZE = 100
"""Signals per step, as in the paper."""

BATCHES_PER_PASS = TRAIN_SIZE // BATCH_SIZE
"""Steps in one pass over the training set (40): the batches go in the same order every pass."""


def _positive(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"'{attribute.name}' must be a positive int; got {value!r}"
        raise ValueError(msg)


def _names(allowed: tuple[str, ...]) -> object:
    def check(
        _: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]
    ) -> None:
        wrong = [v for v in value if v not in allowed]
        if wrong or not value or len(set(value)) != len(value):
            msg = (
                f"'{attribute.name}' must be distinct names among {allowed}, at least one;"
                f" got {value!r}" + (f" ({wrong} unknown)" if wrong else "")
            )
            raise ValueError(msg)

    return check


@attrs.frozen(kw_only=True)
class Recipe:
    """What every run of the table shares: the paper's optimizer, batch and length of training.

    Args:
        steps: training steps per run (the paper: 6000), a multiple of `eval_every`.
        eval_every: steps between two measurements of test accuracy, a multiple of
            `BATCHES_PER_PASS` (40): Keras validates at the end of a pass only.
        learning_rate: Adam's step size (the paper: 1e-2).
        epsilon: Adam's epsilon (the paper's PyTorch default, 1e-8; Keras's own is 1e-7).
        init: ``paper``: every layer starts as PyTorch's do in the paper's code (uniform
            in ±1/sqrt(fan-in)); ``own``: each framework's own defaults (towerkit's
            layers: tensorpack's variance scaling 2.0 and zero biases, TensorFlow 1's
            GRU cell; Keras: Glorot uniform, orthogonal recurrent kernels, zero biases).
        seeds: the seeds, one run per seed, model, data and framework.
        models: which of `MODELS`.
        datasets: which of `DATASETS`.

    >>> Recipe(steps=6000, eval_every=200).passes
    150
    """

    steps: int = attrs.field(default=6000, validator=_positive)
    eval_every: int = attrs.field(default=200, validator=_positive)
    learning_rate: float = attrs.field(default=1e-2, converter=float)
    epsilon: float = attrs.field(default=1e-8, converter=float)
    init: str = attrs.field(default="paper", validator=attrs.validators.in_(INITS))
    seeds: tuple[int, ...] = attrs.field(default=(0, 1, 2), converter=tuple)
    models: tuple[str, ...] = attrs.field(default=MODELS, converter=tuple, validator=_names(MODELS))
    datasets: tuple[str, ...] = attrs.field(
        default=DATASETS, converter=tuple, validator=_names(DATASETS)
    )

    def __attrs_post_init__(self) -> None:
        if self.eval_every % BATCHES_PER_PASS:
            msg = (
                f"'eval_every' must be a multiple of {BATCHES_PER_PASS} (steps in one pass over"
                f" the training set); got {self.eval_every}"
            )
            raise ValueError(msg)
        if self.steps % self.eval_every:
            msg = (
                f"'steps' must be a multiple of 'eval_every' ({self.eval_every}); got {self.steps}"
            )
            raise ValueError(msg)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            msg = f"'seeds' must be distinct, at least one; got {self.seeds!r}"
            raise ValueError(msg)
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            msg = f"'learning_rate' must be a positive number; got {self.learning_rate!r}"
            raise ValueError(msg)
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            msg = f"'epsilon' must be a positive number; got {self.epsilon!r}"
            raise ValueError(msg)

    @property
    def passes(self) -> int:
        """Passes over the training set in `steps` (Keras's epochs)."""
        return self.steps // BATCHES_PER_PASS

    @property
    def eval_steps(self) -> tuple[int, ...]:
        """The steps (1-based counts of steps done) after which test accuracy is measured."""
        return tuple(range(self.eval_every, self.steps + 1, self.eval_every))


def check_accuracies(
    instance: object, attribute: attrs.Attribute[tuple[float, ...]], value: tuple[float, ...]
) -> None:
    """An attrs validator: `value` is one accuracy (%) or more, each in [0, 100]."""
    del instance
    bad = [x for x in value if not 0.0 <= x <= 100.0]
    if not value or bad:
        msg = f"'{attribute.name}' must be accuracies in [0, 100], at least one; got {bad or value}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class RunResult:
    """One training run: who trained which model on which data, how well and how fast.

    Args:
        framework: one of `FRAMEWORKS`.
        model: one of `MODELS`.
        data: one of `DATASETS`.
        seed: the seed of the initial weights.
        curve: test accuracy (%) after each of the recipe's `eval_steps`.
        seconds: wall time of the run: building the model, training and measuring.
    """

    framework: str = attrs.field(validator=attrs.validators.in_(FRAMEWORKS))
    model: str = attrs.field(validator=attrs.validators.in_(MODELS))
    data: str = attrs.field(validator=attrs.validators.in_(DATASETS))
    seed: int
    curve: tuple[float, ...] = attrs.field(
        converter=lambda c: tuple(float(x) for x in c), validator=check_accuracies
    )
    seconds: float = attrs.field(converter=float)

    @property
    def accuracy(self) -> float:
        """Test accuracy (%) at the end of training, as the paper reports it."""
        return self.curve[-1]


@attrs.frozen(kw_only=True)
class Summary:
    """Mean and spread over seeds of one framework's runs of one model on one data set.

    ``std`` is the sample standard deviation (0 for one seed); ``seconds`` the mean time.
    """

    mean: float
    std: float
    seconds: float
    runs: int


def summarize(accuracies: Sequence[float], seconds: Sequence[float]) -> Summary:
    """Mean, sample standard deviation (ddof 1; 0 for one run) and mean time of some runs.

    >>> summarize([90.0, 92.0, 94.0], [10.0, 12.0, 14.0])
    Summary(mean=92.0, std=2.0, seconds=12.0, runs=3)
    """
    if not accuracies or len(accuracies) != len(seconds):
        msg = (
            "'accuracies' and 'seconds' must be equally long, at least one run; got"
            f" {len(accuracies)} and {len(seconds)}"
        )
        raise ValueError(msg)
    acc = np.asarray(accuracies, dtype=np.float64)
    std = float(acc.std(ddof=1)) if len(acc) > 1 else 0.0
    return Summary(mean=float(acc.mean()), std=std, seconds=float(np.mean(seconds)), runs=len(acc))


@attrs.frozen(kw_only=True)
class Row:
    """One line of the table: a model on a data set, the paper's number and both frameworks'."""

    model: str
    data: str
    paper: float
    notebook: float
    towerkit: Summary
    keras: Summary

    @property
    def off_paper(self) -> float:
        """How far towerkit's mean is from the paper's accuracy, in points (signed)."""
        return self.towerkit.mean - self.paper

    @property
    def off_keras(self) -> float:
        """How far towerkit's mean is from Keras's, in points (signed)."""
        return self.towerkit.mean - self.keras.mean

    @property
    def within_spread_of_keras(self) -> bool:
        """Whether the two means differ by no more than the larger of the two spreads."""
        return abs(self.off_keras) <= max(self.towerkit.std, self.keras.std)

    @property
    def speedup(self) -> float:
        """Keras's mean time over towerkit's: above 1, towerkit is faster."""
        return self.keras.seconds / self.towerkit.seconds


def table_rows(results: Iterable[RunResult]) -> list[Row]:
    """One `Row` per (model, data) that both frameworks ran, in the paper's order.

    Raises:
        ValueError: a (model, data) that one framework ran and the other did not, or
            two results of the same framework, model, data and seed.
    """
    runs: dict[tuple[str, str, str], dict[int, RunResult]] = {}
    for result in results:
        key = (result.model, result.data, result.framework)
        if result.seed in runs.setdefault(key, {}):
            msg = f"two results for {key} with seed {result.seed}: expected one per seed"
            raise ValueError(msg)
        runs[key][result.seed] = result
    rows = []
    for data in DATASETS:
        for model in MODELS:
            have = {fw: runs.get((model, data, fw)) for fw in FRAMEWORKS}
            if not any(have.values()):
                continue
            missing = [fw for fw, got in have.items() if not got]
            if missing:
                msg = f"({model!r}, {data!r}) has no run by {missing}: the table compares both"
                raise ValueError(msg)
            sums = {}
            for fw in FRAMEWORKS:
                done = list(runs[(model, data, fw)].values())
                sums[fw] = summarize([r.accuracy for r in done], [r.seconds for r in done])
            rows.append(
                Row(
                    model=model,
                    data=data,
                    paper=PAPER[(model, data)],
                    notebook=NOTEBOOK[(model, data)],
                    towerkit=sums["towerkit"],
                    keras=sums["keras"],
                )
            )
    return rows


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table: accuracy (%) mean ± std over seeds, mean seconds per run.

    >>> s = Summary(mean=93.5, std=0.4, seconds=20.0, runs=3)
    >>> k = Summary(mean=93.9, std=0.6, seconds=30.0, runs=3)
    >>> row = Row(model="cnn", data="plain", paper=94.0, notebook=92.3, towerkit=s, keras=k)
    >>> print(format_table([row]))
    | model | data | paper | notebook | towerkit | Keras 3 | towerkit s | Keras s | seeds |
    |---|---|---:|---:|---:|---:|---:|---:|---:|
    | cnn | plain | 94 | 92.3 | 93.5 ± 0.4 | 93.9 ± 0.6 | 20.0 | 30.0 | 3 |
    """
    lines = [
        "| model | data | paper | notebook | towerkit | Keras 3 | towerkit s | Keras s | seeds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        tk, ke = row.towerkit, row.keras
        seeds = str(tk.runs) if tk.runs == ke.runs else f"{tk.runs}/{ke.runs}"
        lines.append(
            f"| {row.model} | {row.data} | {row.paper:.0f} | {row.notebook:.1f}"
            f" | {tk.mean:.1f} ± {tk.std:.1f}"
            f" | {ke.mean:.1f} ± {ke.std:.1f} | {tk.seconds:.1f} | {ke.seconds:.1f} | {seeds} |"
        )
    return "\n".join(lines)


def fixed_permutation(length: int, seed: int = 42) -> np.ndarray:
    """The one order in which the shuffled data set lists each signal's positions.

    The paper's notebook draws it from NumPy's legacy generator seeded with 42.

    >>> fixed_permutation(5, seed=0).tolist()
    [2, 0, 1, 3, 4]
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        msg = f"'length' must be a positive int; got {length!r}"
        raise ValueError(msg)
    return np.random.RandomState(seed).permutation(length)
