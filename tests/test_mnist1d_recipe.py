"""The MNIST-1D recipe: its table's arithmetic, and the towerkit models it trains.

The recipe's venv (``nox -s recipes``, ``recipes_check``) adds Keras 3 and ``mnist1d``;
here only the parts that need neither run: the pure table code, and the four towerkit
models trained for a few steps on signals made here, with the paper's parameter counts.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from example_modules import ROOT
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(ROOT / "examples" / "mnist1d"))

import mnist1d_recipe as rc

accuracies = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
seconds = st.floats(min_value=0.01, max_value=1e4, allow_nan=False)


def result(framework="towerkit", model="cnn", data="plain", seed=0, curve=(50.0,), secs=1.0):
    return rc.RunResult(
        framework=framework, model=model, data=data, seed=seed, curve=curve, seconds=secs
    )


class TestRecipe:
    """The recipe's settings, checked when made."""

    def test_defaults_are_the_papers(self):
        """6000 steps of Adam 1e-2 (epsilon 1e-8), 3 seeds, every model on both data sets."""
        recipe = rc.Recipe()
        assert (recipe.steps, recipe.learning_rate, recipe.epsilon) == (6000, 1e-2, 1e-8)
        assert recipe.models == rc.MODELS
        assert recipe.datasets == rc.DATASETS
        assert len(recipe.seeds) >= 3
        assert recipe.passes * rc.BATCHES_PER_PASS == 6000

    def test_repr(self):
        """The repr names every field."""
        assert repr(rc.Recipe(steps=80, eval_every=40, seeds=(0,))) == (
            "Recipe(steps=80, eval_every=40, learning_rate=0.01, epsilon=1e-08, init='paper',"
            " seeds=(0,),"
            " models=('logistic', 'mlp', 'cnn', 'gru'), datasets=('plain', 'shuffled'))"
        )

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"steps": 0}, r"'steps' must be a positive int; got 0"),
            ({"eval_every": 50}, r"'eval_every' must be a multiple of 40 .*; got 50"),
            (
                {"steps": 100, "eval_every": 40},
                r"'steps' must be a multiple of 'eval_every' \(40\); got 100",
            ),
            ({"seeds": (1, 1)}, r"'seeds' must be distinct, at least one; got \(1, 1\)"),
            ({"seeds": ()}, r"'seeds' must be distinct, at least one; got \(\)"),
            (
                {"models": ("cnn", "rnn")},
                r"'models' must be distinct names among .*\['rnn'\] unknown",
            ),
            ({"datasets": ()}, r"'datasets' must be distinct names among"),
            ({"learning_rate": -1}, r"'learning_rate' must be a positive number; got -1.0"),
            ({"epsilon": math.nan}, r"'epsilon' must be a positive number; got nan"),
            ({"init": "glorot"}, r"'init' must be in \('paper', 'own'\)"),
        ],
    )
    def test_fail(self, kwargs, match):
        """A bad setting is refused, named, with what was expected and what came."""
        with pytest.raises(ValueError, match=match):
            rc.Recipe(**kwargs)

    @given(st.integers(1, 50), st.integers(1, 20))
    def test_eval_steps(self, evals, passes_per_eval):
        """Test accuracy is measured `steps / eval_every` times, the last after the last step."""
        every = passes_per_eval * rc.BATCHES_PER_PASS
        recipe = rc.Recipe(steps=evals * every, eval_every=every)
        assert len(recipe.eval_steps) == evals
        assert recipe.eval_steps[-1] == recipe.steps
        assert all(b - a == every for a, b in zip(recipe.eval_steps, recipe.eval_steps[1:]))


class TestRunResult:
    """One run's record."""

    def test_accuracy_is_the_last_point(self):
        """The accuracy reported is the one after the last step, as the paper's."""
        assert result(curve=(20.0, 90.0, 85.5)).accuracy == 85.5

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"curve": ()}, r"'curve' must be accuracies in \[0, 100\], at least one; got \(\)"),
            ({"curve": (50.0, 101.0)}, r"'curve' must be accuracies .*; got \[101.0\]"),
            ({"framework": "torch"}, r"'framework' must be in"),
            ({"model": "rnn"}, r"'model' must be in"),
        ],
    )
    def test_fail(self, kwargs, match):
        """A curve out of range or an unknown name is refused."""
        with pytest.raises(ValueError, match=match):
            result(**kwargs)


class TestSummarize:
    """Mean and spread over seeds."""

    @given(st.lists(st.tuples(accuracies, seconds), min_size=1, max_size=8))
    def test_mean_and_spread(self, runs):
        """The mean lies between the lowest and highest; the spread is NumPy's ddof-1 deviation."""
        acc = [a for a, _ in runs]
        got = rc.summarize(acc, [s for _, s in runs])
        assert min(acc) - 1e-9 <= got.mean <= max(acc) + 1e-9
        assert got.runs == len(runs)
        expected = float(np.std(acc, ddof=1)) if len(acc) > 1 else 0.0
        assert got.std == pytest.approx(expected, abs=1e-9)

    def test_fail(self):
        """Unequal lists, or none, are refused with both lengths."""
        with pytest.raises(ValueError, match=r"equally long, at least one run; got 2 and 1"):
            rc.summarize([1.0, 2.0], [1.0])
        with pytest.raises(ValueError, match=r"got 0 and 0"):
            rc.summarize([], [])


class TestTableRows:
    """The table over every run."""

    @given(
        st.lists(st.sampled_from(rc.MODELS), min_size=1, unique=True),
        st.lists(st.sampled_from(rc.DATASETS), min_size=1, unique=True),
        st.integers(1, 4),
        st.data(),
    )
    def test_one_row_per_model_and_data(self, models, datasets, n_seeds, draw):
        """One row per (model, data) in the paper's order, each with every seed of both."""
        runs = [
            result(fw, m, d, seed, (draw.draw(accuracies),), draw.draw(seconds))
            for m in models
            for d in datasets
            for seed in range(n_seeds)
            for fw in rc.FRAMEWORKS
        ]
        rows = rc.table_rows(reversed(runs))
        keys = [(r.model, r.data) for r in rows]
        expected = [(m, d) for d in rc.DATASETS for m in rc.MODELS if m in models and d in datasets]
        assert keys == expected
        for row in rows:
            assert row.paper == rc.PAPER[(row.model, row.data)]
            assert row.towerkit.runs == row.keras.runs == n_seeds
            mine = [
                r.accuracy
                for r in runs
                if (r.model, r.data, r.framework) == (row.model, row.data, "towerkit")
            ]
            assert row.towerkit.mean == pytest.approx(float(np.mean(mine)))
        table = rc.format_table(rows).splitlines()
        assert len(table) == 2 + len(rows)

    def test_verdicts(self):
        """Within the spread of Keras when the means differ by no more than the larger spread."""
        runs = [
            result("towerkit", seed=s, curve=(a,), secs=10.0)
            for s, a in enumerate((92.0, 93.0, 94.0))
        ]
        runs += [
            result("keras", seed=s, curve=(a,), secs=30.0) for s, a in enumerate((93.0, 94.5, 96.0))
        ]
        (row,) = rc.table_rows(runs)
        assert row.off_paper == pytest.approx(-1.0)
        assert row.off_keras == pytest.approx(-1.5)
        assert row.within_spread_of_keras  # 1.5 <= Keras's spread, 1.5
        assert row.speedup == pytest.approx(3.0)
        runs[3:] = [result("keras", seed=s, curve=(a,)) for s, a in enumerate((96.0, 96.5, 97.0))]
        (row,) = rc.table_rows(runs)
        assert not row.within_spread_of_keras  # 3.5 > towerkit's spread, 1.0

    def test_fail(self):
        """A model that one framework did not run, or a seed twice, is refused by name."""
        with pytest.raises(ValueError, match=r"\('gru', 'plain'\) has no run by \['keras'\]"):
            rc.table_rows([result("towerkit", "gru")])
        with pytest.raises(
            ValueError, match=r"two results for \('cnn', 'plain', 'keras'\) with seed 3"
        ):
            rc.table_rows([result("keras", seed=3), result("keras", seed=3)])


class TestFixedPermutation:
    """The one order of the shuffled data set."""

    @given(st.integers(1, 200), st.integers(0, 2**31 - 1))
    def test_is_a_permutation(self, length, seed):
        """Every position once, and the same order every time."""
        order = rc.fixed_permutation(length, seed)
        assert sorted(order.tolist()) == list(range(length))
        assert (order == rc.fixed_permutation(length, seed)).all()

    def test_the_papers_order(self):
        """The notebook's order for 40 positions: NumPy's legacy generator seeded with 42."""
        assert rc.fixed_permutation(40)[:5].tolist() == [19, 16, 15, 26, 4]

    def test_fail(self):
        """A length that is not a positive int is refused."""
        with pytest.raises(ValueError, match=r"'length' must be a positive int; got 0"):
            rc.fixed_permutation(0)


def paper_run(model="mlp", data="plain", seed=0, curve=(50.0,), secs=1.0):
    import paper_code

    return paper_code.PaperRun(model=model, data=data, seed=seed, curve=curve, seconds=secs)


class TestPaperCode:
    """The driver of the paper's own code: its table's arithmetic and its checks of input.

    Training needs PyTorch and a clone of the paper's repository, which no test venv
    holds; these parts need neither.
    """

    @given(
        st.lists(
            st.tuples(
                st.sampled_from(rc.MODELS),
                st.sampled_from(rc.DATASETS),
                st.integers(0, 2**32 - 1),
                st.lists(accuracies, min_size=1, max_size=5),
            ),
            min_size=1,
            max_size=12,
            unique_by=lambda t: t[:3],
        )
    )
    def test_rows(self, runs):
        """One row per (model, data) in the paper's order; each seed's final, seeds ascending."""
        import paper_code

        rows = paper_code.paper_rows(
            paper_run(m, d, s, curve=tuple(c)) for m, d, s, c in reversed(runs)
        )
        keys = [(r.model, r.data) for r in rows]
        order = [(m, d) for d in rc.DATASETS for m in rc.MODELS]
        assert keys == [k for k in order if k in {(m, d) for m, d, _, _ in runs}]
        for row in rows:
            mine = sorted((s, c) for m, d, s, c in runs if (m, d) == (row.model, row.data))
            assert row.per_seed == tuple((s, float(c[-1])) for s, c in mine)
            assert math.isclose(row.final.mean, np.mean([c[-1] for _, c in mine]), abs_tol=1e-9)
            assert math.isclose(row.best.mean, np.mean([max(c) for _, c in mine]), abs_tol=1e-9)
            assert row.final.runs == len(mine)
            assert row.best.mean >= row.final.mean - 1e-9
            assert row.paper == rc.PAPER[(row.model, row.data)]
        table = paper_code.format_paper_table(rows).splitlines()
        assert len(table) == 2 + len(rows)

    def test_table(self):
        """Mean ± sample standard deviation over the seeds, each seed's final, the best."""
        import paper_code

        runs = [paper_run(seed=s, curve=(70.0, a)) for s, a in ((2, 66.0), (0, 64.0), (1, 65.0))]
        (line,) = paper_code.format_paper_table(paper_code.paper_rows(runs)).splitlines()[2:]
        assert line == (
            "| mlp | plain | 68 | 65.0 ± 1.0 | 64.0 (0), 65.0 (1), 66.0 (2) | 70.0 ± 0.0 | 1.0 | 3 |"
        )

    def test_fail(self):
        """A seed run twice, or an accuracy out of range, is refused by name."""
        import paper_code

        with pytest.raises(ValueError, match=r"two runs of \('gru', 'shuffled'\) with seed 3"):
            paper_code.paper_rows([paper_run("gru", "shuffled", 3)] * 2)
        with pytest.raises(ValueError, match=r"'curve' must be accuracies in \[0, 100\]"):
            paper_run(curve=(50.0, 101.0))

    def test_refuses_what_is_not_the_papers_repository(self, tmp_path, capsys):
        """A folder without the paper's files, or bad seeds: exit status 2, naming the fault."""
        import paper_code

        (tmp_path / "notebooks").mkdir()
        (tmp_path / "notebooks" / "models.py").write_text("")
        with pytest.raises(SystemExit) as exc:
            paper_code.parse_args(["--paper-repo", str(tmp_path)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "lacks notebooks/train.py, mnist1d/utils.py, mnist1d_data.pkl" in err
        assert "notebooks/models.py" not in err
        for name in ("notebooks/train.py", "mnist1d/utils.py", "mnist1d_data.pkl"):
            (tmp_path / name).parent.mkdir(exist_ok=True)
            (tmp_path / name).write_text("")
        args = paper_code.parse_args(["--paper-repo", str(tmp_path), "--seeds", "0", "42"])
        assert (args.seeds, args.threads) == ([0, 42], 1)
        assert args.out.endswith("results/paper_code/results.json")
        for bad in (["--seeds", "1", "1"], ["--seeds", "-1"], ["--threads", "0"]):
            with pytest.raises(SystemExit):
                paper_code.parse_args(["--paper-repo", str(tmp_path), *bad])
            assert f"error: {bad[0]} must be" in capsys.readouterr().err

    def test_refuses_other_data(self, tmp_path):
        """A pickle of other signals than the paper's is refused before any training."""
        import pickle

        import paper_code

        x, y = bumps(rc.TRAIN_SIZE, 0)
        x_test, y_test = bumps(1000, 1)
        data = {"x": x, "y": y, "x_test": x_test, "y_test": y_test}
        (tmp_path / "mnist1d_data.pkl").write_bytes(pickle.dumps(data))
        with pytest.raises(ValueError, match=r"mnist1d_data.pkl holds other data than the paper"):
            paper_code.load_data(tmp_path)


PARAMETERS = {"logistic": 410, "mlp": 15210, "cnn": 5210, "gru": 5110}
"""Trainable parameters; the paper's (PyTorch) counts but for the GRU, whose 5134 count
an input and a hidden bias for each of the two gates, where `GRUCell(reset_after=True)`
has their sum (2 directions x 2 gates x 6 fewer)."""


def bumps(n: int, seed: int):
    """Signals of 40 positions with a bump at 4 x label + noise: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n).astype(np.int32)
    x = rng.normal(0.0, 0.3, (n, 40)).astype(np.float32)
    x[np.arange(n), 4 * y + 1] += 3.0
    x[np.arange(n), 4 * y + 2] += 3.0
    return x, y


@pytest.mark.parametrize("model", rc.MODELS)
def test_towerkit_model_trains(model):
    """Each towerkit model has the paper's shape, and learns the bumps in 120 steps."""
    import mnist1d_signals
    import mnist1d_towerkit
    import tensorflow as tf

    x, y = bumps(rc.TRAIN_SIZE, 0)
    x_test, y_test = bumps(500, 1)
    split = mnist1d_signals.Split(x=x, y=y, x_test=x_test, y_test=y_test)
    recipe = rc.Recipe(steps=120, eval_every=40, seeds=(0,), models=(model,))
    for paper in (True, False):  # the paper's initializers or the layers' own: one shape
        with tf.Graph().as_default():
            signal = tf.compat.v1.placeholder(tf.float32, (None, 40))
            mnist1d_towerkit.BUILDERS[model](signal, paper=paper)
            count = sum(int(np.prod(v.shape)) for v in tf.compat.v1.trainable_variables())
        assert count == PARAMETERS[model]
    run = mnist1d_towerkit.train(model, split, recipe, seed=0, data="plain")
    assert (run.framework, run.model, len(run.curve)) == ("towerkit", model, 3)
    assert run.accuracy > 80.0, run.curve  # chance is 10%
    assert run.seconds > 0


def test_doctests():
    """The examples in the recipe module's and the paper-code driver's docstrings hold."""
    import doctest

    import paper_code

    failed, tried = doctest.testmod(rc)
    assert tried >= 4
    assert failed == 0
    failed, tried = doctest.testmod(paper_code)
    assert tried >= 2
    assert failed == 0
