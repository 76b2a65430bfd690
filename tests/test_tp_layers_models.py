"""Models written in tensorpack's style with towerkit.layers, trained by every trainer kind.

The three models of ``examples/tp_style`` (a batch-norm convnet with argscope,
LinearWrap, Dropout, weight decay and an LSTM over its feature rows; a residual block with synchronized batch norm;
a small GAN) train on the in-process trainers (simple, replicated, parameter server,
async), on a 2-worker TensorFlow cluster (parameter server and replicated) and on 2
horovod ranks (``nox -s horovod``). For each run: the checkpoint holds tensorpack's
single-tower names, the cost fell, the batch-norm statistics moved, every trainable
variable trained, and the checkpoint loads into a one-tower predictor whose
predictions the compact graph and the SavedModel reproduce.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from example_modules import load_example
from layers_harness import HAVE_HOROVOD, multi_process_run
from layers_job import EPOCHS, STEPS, tower_facts

# The tests share module fixtures that train in processes (one run per trainer):
# one worker runs them all, so that each run is made once.
pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("test_tp_layers_models")]

MODELS = ("convnet", "resnet", "gan")

EXPECTED_NAMES = {
    "convnet": {
        "conv0/W",
        "conv0/bn/gamma",
        "conv0/bn/beta",
        "conv0/bn/mean/EMA",
        "conv0/bn/variance/EMA",
        "conv1/W",
        "bn/gamma",
        "bn/beta",
        "bn/mean/EMA",
        "bn/variance/EMA",
        "fc/W",
        "fc/b",
        "rnn/lstm_cell/kernel",
        "rnn/lstm_cell/bias",
    },
    "resnet": {
        "conv0/W",
        "conv0/bn/mean/EMA",
        "res/conv1/W",
        "res/conv1/bn/mean/EMA",
        "res/conv1/bn/variance/EMA",
        "res/conv2/W",
        "res/bn/gamma",
        "res/bn/mean/EMA",
        "linear/W",
        "linear/b",
    },
    "gan": {
        "gen/fc/W",
        "gen/bn/mean/EMA",
        "gen/bn/variance/EMA",
        "gen/deconv0/W",
        "gen/deconv0/bn/gamma",
        "gen/deconv0/bn/mean/EMA",
        "gen/deconv1/W",
        "gen/deconv1/b",
        "discrim/conv0/W",
        "discrim/conv0/b",
        "discrim/conv1/W",
        "discrim/fc/W",
        "discrim/fc/b",
    },
}
"""Model -> tensorpack's names of (some of) its variables."""

BATCH_NORMS = {"convnet": 2, "resnet": 3, "gan": 2}
"""Model -> its BatchNorm layers (each adds 2 update ops, unless its statistics are synced)."""

MULTI_TOWER = {"replicated", "ps", "async", "dist-ps", "dist-replicated"}
"""The trainers that build several towers in one process."""

IN_PROCESS = ("replicated", "ps", "async", "simple")
MULTI_PROCESS = ("dist-ps", "dist-replicated", "horovod")


def sync_for(trainer: str) -> str | None:
    """The residual model's ``sync_statistics`` under `trainer`: the towers' or the ranks'."""
    if trainer == "horovod":
        return "horovod"
    return "nccl" if trainer in MULTI_TOWER else None


@pytest.fixture(scope="module")
def example():
    """The example module."""
    return load_example("tp_style")


def _initial_values(example, model: str) -> dict[str, np.ndarray]:
    """The variables of a freshly initialized model (its initializers are seeded)."""
    import tensorflow as tf

    from towerkit.towers import TowerContext, TowerFunc, build_placeholders

    tf1 = tf.compat.v1
    built = example.make_model(model)
    graph = tf.Graph()
    with graph.as_default():
        func = TowerFunc(built.build_graph, built.inputs())
        with TowerContext("", is_training=True):
            func(*build_placeholders(func.input_signature))
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            return {v.op.name: sess.run(v) for v in tf1.global_variables()}


@pytest.fixture(scope="module")
def initial(example):
    """Model -> its initial variable values."""
    return {m: _initial_values(example, m) for m in MODELS}


@pytest.fixture(scope="module")
def initial_cost(example, initial):
    """Model -> its cost at the initial values (computed once for every trainer's run)."""
    return {m: _cost(example, m, initial[m]) for m in MODELS}


def _eval_arrays(example, model: str) -> list[np.ndarray]:
    """A fixed evaluation batch for `model`'s inputs."""
    _, _, x_val, y_val = example.load_data()
    if model == "gan":
        return [x_val[:200], example.noise(200, seed=99)]
    return [x_val[:200], y_val[:200]]


def _cost(example, model: str, values) -> float:
    """`model`'s cost (inference mode) on the evaluation batch, from a checkpoint or a dict."""
    from towerkit.export import OfflinePredictor
    from towerkit.sessinit import SmartInit

    config = example.predict_config(model, SmartInit(values), outputs=[example.COST[model]])
    (cost,) = OfflinePredictor(config)(*_eval_arrays(example, model))
    return float(cost)


def _run_in_process(example, model: str, trainer: str, base: Path) -> dict:
    logdir = str(base / "log")
    used, checkpoint = example.train(
        logdir, trainer, EPOCHS, STEPS, model=model, sync=sync_for(trainer)
    )
    return {"checkpoint": checkpoint, "facts": tower_facts(used), "reports": []}


def _run_multi_process(model: str, trainer: str, base: Path) -> dict:
    if trainer == "horovod" and not HAVE_HOROVOD:
        pytest.skip("horovod not installed: nox -s horovod")
    kwargs = {"model": model, "sync": sync_for(trainer)}
    job = multi_process_run(
        trainer, base, ["--example", "tp_style", "--kwargs", json.dumps(kwargs)]
    )
    return {"checkpoint": job["checkpoint"], "facts": job["facts"], "reports": job["reports"]}


def _trainer_param(name: str):
    if name != "horovod":
        return name
    return pytest.param(
        name,
        marks=[
            pytest.mark.horovod,
            pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: nox -s horovod"),
        ],
    )


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return request.param


@pytest.fixture(scope="module")
def runs():
    """(model, trainer) -> its run, so a run serves every test that needs it."""
    return {}


def _get_run(runs, example, model: str, trainer: str, tmp_path_factory) -> dict:
    """A short run of `model` by `trainer`: ``checkpoint``, ``facts``, ``reports``, names."""
    if (model, trainer) not in runs:
        base = tmp_path_factory.mktemp(f"tp_{model}_{trainer}")
        if trainer in IN_PROCESS:
            got = _run_in_process(example, model, trainer, base)
        else:
            got = _run_multi_process(model, trainer, base)
        runs[model, trainer] = {**got, "model": model, "trainer": trainer}
    return runs[model, trainer]


@pytest.fixture(scope="module", params=[_trainer_param(t) for t in IN_PROCESS + MULTI_PROCESS])
def run(request, runs, example, model, tmp_path_factory):
    """A short run of `model` by each trainer."""
    return _get_run(runs, example, model, request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=[_trainer_param(t) for t in MULTI_PROCESS])
def multi_run(request, runs, example, model, tmp_path_factory):
    """A short run of `model` by each multi-process trainer (the same runs as `run`'s)."""
    return _get_run(runs, example, model, request.param, tmp_path_factory)


def _exports_agree(example, model: str, checkpoint: str, out: Path) -> np.ndarray:
    """Export `checkpoint`; the compact graph and the SavedModel predict what the one-tower
    predictor does; return the predictor's output."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    (input_name,), (output_name,) = example.PREDICTION[model]
    arrays = _eval_arrays(example, model)
    feed = arrays[1] if model == "gan" else arrays[0]
    (expected,) = example.predictor(checkpoint, model)(feed[:50])
    compact, serving = example.export(checkpoint, str(out), model)
    graph_def = tf1.GraphDef()
    with open(compact, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
    with tf1.Session(graph=graph) as sess:
        frozen = sess.run(f"{output_name}:0", {f"{input_name}:0": feed[:50]})
    np.testing.assert_allclose(frozen, expected, atol=1e-5)
    loaded = tf.saved_model.load(serving)
    served = loaded.signatures["prediction_pipeline"](**{input_name: tf.constant(feed[:50])})
    np.testing.assert_allclose(served[output_name].numpy(), expected, atol=1e-5)
    return expected


@pytest.mark.slow
class TestTensorpackStyleModelsInEveryTrainer:
    """Names, training, statistics, prediction and export of each model, per trainer."""

    def test_checkpoint_has_tensorpack_single_tower_names(self, run, initial):
        import tensorflow as tf

        names = set(tf.train.load_checkpoint(run["checkpoint"]).get_variable_to_shape_map())
        assert not [n for n in names if re.match(r"tower\d+/", n)]
        assert EXPECTED_NAMES[run["model"]] <= names, sorted(names)
        assert set(initial[run["model"]]) <= names
        # tensorpack's layers say W, mean/EMA; TensorFlow 1's cells (rnn/) say kernel.
        tf_layer_names = ("kernel", "moving_mean", "moving_variance")
        assert not [n for n in names if n.endswith(tf_layer_names) and not n.startswith("rnn/")]

    def test_cost_fell(self, example, run, initial_cost):
        model = run["model"]
        before = initial_cost[model]
        after = _cost(example, model, run["checkpoint"])
        assert after < before - 0.05, (before, after)

    def test_statistics_moved_and_variables_trained(self, run, initial):
        import tensorflow as tf

        reader = tf.train.load_checkpoint(run["checkpoint"])
        start = initial[run["model"]]
        statistics = [n for n in start if n.endswith(("mean/EMA", "variance/EMA"))]
        assert len(statistics) == 2 * BATCH_NORMS[run["model"]]
        for name in statistics:
            moved = np.abs(reader.get_tensor(name) - start[name]).max()
            assert moved > 1e-3, f"{name} did not move"
        for name in run["facts"]["trainable"]:
            assert not np.allclose(reader.get_tensor(name), start[name]), f"{name} not trained"

    def test_update_ops(self, run):
        """The first tower's BatchNorm updates are in UPDATE_OPS (synced ones update internally)."""
        facts, trainer = run["facts"], run["trainer"]
        synced = run["model"] == "resnet" and sync_for(trainer) is not None
        expected = 0 if synced else 2 * BATCH_NORMS[run["model"]]
        assert len(facts["updates"]) == expected, facts["updates"]
        if trainer in MULTI_TOWER:
            assert all(op.startswith("tower0/") for op in facts["updates"])
        assert not [n for n in facts["trainable"] if re.match(r"tower\d+/", n)]

    def test_one_tower_predictor_and_export(self, example, run, tmp_path):
        model = run["model"]
        out = _exports_agree(example, model, run["checkpoint"], tmp_path / "export")
        if model == "gan":
            assert out.shape == (50, 8, 8, 1)
            assert np.abs(out).max() <= 1.0
        else:
            _, _, _, y_val = example.load_data()
            assert float(np.mean(out.argmax(axis=1) != y_val[:50])) < 0.5


@pytest.mark.slow
class TestTensorpackStyleModelsInMultiProcessTrainers:
    """What the processes of the cluster and horovod jobs report."""

    def test_processes_agree(self, multi_run):
        """Horovod ranks hold the same trainable values; one chief saves in every job."""
        run = multi_run
        reports = run["reports"]
        assert len(reports) == 2
        assert [r["checkpoint"] is not None for r in reports] == [True, False]
        if run["trainer"] == "horovod":
            first, second = (r["values"] for r in reports)
            for key in run["facts"]["trainable"]:
                np.testing.assert_array_equal(first[key], second[key], err_msg=key)


class TestGANPlayers:
    """The GAN's one cost gives each player the gradient of its own cost only."""

    def test_gradients_per_player(self, example):
        import tensorflow as tf

        from towerkit.towers import TowerContext

        tf1 = tf.compat.v1
        model = example.make_model("gan")
        x_val, z = _eval_arrays(example, "gan")
        with tf.Graph().as_default():
            image = tf1.placeholder(tf.float32, (None, 8, 8, 1))
            noise = tf1.placeholder(tf.float32, (None, example.NOISE))
            with TowerContext("", is_training=True):
                cost = model.build_graph(image, noise)
            graph = tf1.get_default_graph()
            d_loss = graph.get_tensor_by_name("d_loss:0")
            g_loss = graph.get_tensor_by_name("g_loss:0")
            d_vars = tf1.trainable_variables("discrim/")
            g_vars = tf1.trainable_variables("gen/")
            assert d_vars
            assert g_vars
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                feed = {image: x_val[:32], noise: z[:32]}
                got_d, want_d, got_g, want_g = sess.run(
                    [
                        tf.gradients(cost, d_vars),
                        tf.gradients(d_loss, d_vars),
                        tf.gradients(cost, g_vars),
                        tf.gradients(g_loss, g_vars),
                    ],
                    feed,
                )
        for got, want in [*zip(got_d, want_d), *zip(got_g, want_g)]:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        assert any(np.abs(g).max() > 0 for g in got_g)


def test_unknown_model_and_trainer(example):
    """A wrong model or trainer name is refused with the choices."""
    with pytest.raises(ValueError, match="'model' must be one of"):
        example.make_model("vgg")
    with pytest.raises(ValueError, match="'trainer' must be one of"):
        example.make_trainer("sync")


def test_runs_as_a_script(tmp_path):
    """The example's command line trains the GAN and exports it."""
    import sys

    import prefork
    from example_modules import example_path

    done = prefork.run(
        [
            sys.executable,
            str(example_path("tp_style")),
            "--model",
            "gan",
            "--trainer",
            "simple",
            "--epochs",
            "1",
            "--steps",
            "5",
            "--logdir",
            str(tmp_path / "log"),
        ],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "generated images" in done.stdout
    assert "exported" in done.stdout
