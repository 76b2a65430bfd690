"""The graph-mode layers example: tf.compat.v1.layers with argscope follow the tower rules in every trainer."""

from __future__ import annotations

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
pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("test_layers_example")]

pytest.importorskip("tf_keras", reason="the layers example needs towerkit-towers[layers]")


def _initial_values(layers_example) -> dict[str, np.ndarray]:
    """The variables of a freshly initialized model (same seeded initializers as the example)."""
    import tensorflow as tf

    from towerkit.towers import TowerContext, TowerFunc, build_placeholders

    tf1 = tf.compat.v1
    model = layers_example.LayersModel(freeze_first=True)
    graph = tf.Graph()
    with graph.as_default():
        func = TowerFunc(model.build_graph, model.inputs())
        with TowerContext("", is_training=True):
            func(*build_placeholders(func.input_signature))
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            return {v.op.name: sess.run(v) for v in tf1.global_variables()}


@pytest.fixture(scope="module")
def example():
    """The example module (importing it enables the layers and their argscope)."""
    return load_example("layers")


@pytest.fixture(scope="module")
def initial(example):
    """The model's initial variable values."""
    return _initial_values(example)


TRAINER_PARAMS = [
    "replicated",
    "ps",
    "async",
    "simple",
    "dist-ps",
    "dist-replicated",
    pytest.param(
        "horovod",
        marks=[
            pytest.mark.horovod,
            pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: nox -s horovod"),
        ],
    ),
]


@pytest.fixture(scope="module")
def dist_ps_run(tmp_path_factory):
    """The cluster trainer with variables on the parameter server."""
    return multi_process_run("dist-ps", tmp_path_factory.mktemp("layers_dist_ps"))


@pytest.fixture(scope="module")
def dist_replicated_run(tmp_path_factory):
    """The cluster trainer with a copy of the variables per tower."""
    return multi_process_run("dist-replicated", tmp_path_factory.mktemp("layers_dist_rep"))


@pytest.fixture(scope="module")
def horovod_run(tmp_path_factory):
    """Two horovod ranks."""
    if not HAVE_HOROVOD:
        pytest.skip("horovod not installed: nox -s horovod")
    return multi_process_run("horovod", tmp_path_factory.mktemp("layers_horovod"))


@pytest.fixture(scope="module", params=TRAINER_PARAMS)
def run(request, example, tmp_path_factory):
    """A short run with the first convolution frozen, per trainer.

    A dict: ``name``, ``checkpoint`` (the chief's last one), ``facts`` (`tower_facts` of
    the chief's graph) and, for the multi-process trainers, ``reports`` (every worker's
    or rank's `layers_job` report).
    """
    name = request.param
    if name in ("dist-ps", "dist-replicated", "horovod"):
        return request.getfixturevalue(f"{name.replace('-', '_')}_run")
    logdir = str(tmp_path_factory.mktemp(f"layers_{name}") / "log")
    trainer, checkpoint = example.train(logdir, name, EPOCHS, STEPS, freeze_first=True)
    return {"name": name, "checkpoint": checkpoint, "facts": tower_facts(trainer)}


MULTI_TOWER = {"replicated", "ps", "async", "dist-ps", "dist-replicated"}
"""The trainers that build several towers in one process."""

REPLICATED = {"replicated", "dist-replicated"}
"""The trainers that keep a copy of the variables per tower."""


def _exports_agree(example, checkpoint: str, out: Path, images: np.ndarray) -> np.ndarray:
    """Export `checkpoint`; check the compact graph and the SavedModel predict what the
    one-tower predictor does; return the predictor's probabilities."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    (expected,) = example.predictor(checkpoint)(images)
    compact, serving = example.export(checkpoint, str(out))
    graph_def = tf1.GraphDef()
    with open(compact, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
    with tf1.Session(graph=graph) as sess:
        frozen = sess.run("prob:0", {"image:0": images})
    np.testing.assert_allclose(frozen, expected, atol=1e-5)
    assert os.path.isfile(os.path.join(serving, "saved_model.pb"))
    loaded = tf.saved_model.load(serving)
    out_prob = loaded.signatures["prediction_pipeline"](image=tf.constant(images))["prob"]
    np.testing.assert_allclose(out_prob.numpy(), expected, atol=1e-5)
    return expected


@pytest.mark.slow
class TestLayersInEveryTrainer:
    """Variables, update ops, freezing and checkpoints of tf.compat.v1.layers models, per trainer."""

    def test_checkpoint_is_one_tower(self, run, initial):
        """The checkpoint holds the single-tower names (no tower copies), as a 1-tower graph has."""
        import tensorflow as tf

        names = set(tf.train.load_checkpoint(run["checkpoint"]).get_variable_to_shape_map())
        assert not [n for n in names if re.match(r"tower\d+/", n)]
        assert set(initial) <= names

    def test_frozen_layer_unchanged_others_trained(self, run, initial):
        """freeze_variables holds conv0 in every tower; conv1, fc and batch-norm parameters train."""
        import tensorflow as tf

        reader = tf.train.load_checkpoint(run["checkpoint"])
        np.testing.assert_array_equal(reader.get_tensor("conv0/kernel"), initial["conv0/kernel"])
        for name in ("conv1/kernel", "fc/kernel", "bn1/gamma"):
            assert not np.allclose(reader.get_tensor(name), initial[name]), name

    def test_batch_norm_statistics_updated(self, run):
        """The moving statistics moved away from their initial 0 (the update ops ran)."""
        import tensorflow as tf

        reader = tf.train.load_checkpoint(run["checkpoint"])
        assert np.abs(reader.get_tensor("bn0/moving_mean")).max() > 1e-3

    def test_update_ops_and_variables(self, run):
        """UPDATE_OPS holds the first tower's 4 updates; one shared copy of the trainables."""
        name, facts = run["name"], run["facts"]
        assert len(facts["updates"]) == 4
        if name in MULTI_TOWER:
            assert all(op.startswith("tower0/") for op in facts["updates"])
        # conv0 is frozen: conv1 (2), bn0 and bn1 (2 each), fc (2)
        assert len(facts["trainable"]) == 8
        assert not [n for n in facts["trainable"] if re.match(r"tower\d+/", n)]
        if name in REPLICATED:
            assert {"tower1/bn0/moving_mean", "tower1/conv0/kernel"} <= set(facts["replicas"])
        else:
            assert facts["replicas"] == []

    def test_one_tower_predictor_and_export(self, example, run, tmp_path):
        """The checkpoint loads into a one-tower predictor, which classifies well, and exports."""
        _, _, x_val, y_val = example.load_data()
        prob = _exports_agree(example, run["checkpoint"], tmp_path / "export", x_val[:200])
        assert float(np.mean(prob.argmax(axis=1) != y_val[:200])) < 0.25


def _tower_values(report: dict, tower: int) -> dict[str, np.ndarray]:
    """The values of tower `tower`'s copies in a worker's report, by plain variable name."""
    prefix = f"tower{tower}/"
    return {
        k[len(prefix) :]: np.asarray(v) for k, v in report["values"].items() if k.startswith(prefix)
    }


@pytest.mark.slow
class TestLayersInMultiProcessTrainers:
    """What the processes of the cluster and horovod trainers hold at the end."""

    def test_replicated_copies(self, dist_replicated_run, initial):
        """Each worker's towers hold copies; only the first tower's statistics move.

        Only the first tower's update ops run in replicated training, on every worker:
        the other towers' moving statistics keep what they got at the start (the
        chief's: their initial values), while their trainable copies follow the
        global values.
        """
        for report in dist_replicated_run["reports"]:
            first, second = _tower_values(report, 0), _tower_values(report, 1)
            assert set(first) == set(second) >= {"bn0/moving_mean", "conv1/kernel", "fc/bias"}
            if report["is_chief"]:
                np.testing.assert_array_equal(second["bn0/moving_mean"], initial["bn0/moving_mean"])
            moved = np.abs(first["bn0/moving_mean"] - second["bn0/moving_mean"]).max()
            assert moved > 1e-3, f"worker {report['task']}: tower 0's statistics did not move"
            np.testing.assert_array_equal(second["conv0/kernel"], initial["conv0/kernel"])
            for key in ("conv1/kernel", "fc/kernel", "bn1/gamma"):
                assert not np.allclose(second[key], initial[key]), key

    def test_one_chief(self, dist_ps_run, dist_replicated_run):
        """One worker is the chief; it alone reports a checkpoint; the global statistics moved.

        With the variables on the parameter server, both workers' update ops move the
        global statistics, so each worker sees them moved at its end. In the replicated
        trainer only the chief copies its tower 0's statistics to the global ones (after
        each epoch): the other worker may end before that, so only the chief's view counts.
        """
        for job in (dist_ps_run, dist_replicated_run):
            reports = job["reports"]
            assert [r["checkpoint"] is not None for r in reports] == [True, False]
            seen = reports if job is dist_ps_run else reports[:1]
            for r in seen:
                assert np.abs(np.asarray(r["values"]["bn0/moving_mean"])).max() > 1e-3

    @pytest.mark.horovod
    @pytest.mark.skipif(not HAVE_HOROVOD, reason="horovod not installed: nox -s horovod")
    def test_ranks_agree(self, horovod_run):
        """Horovod ranks hold the same trainable and frozen values; rank 0 alone saves."""
        first, second = (r["values"] for r in horovod_run["reports"])
        for key in [*horovod_run["facts"]["trainable"], "conv0/kernel"]:
            np.testing.assert_array_equal(first[key], second[key], err_msg=key)
        assert [r["checkpoint"] is not None for r in horovod_run["reports"]] == [True, False]


@pytest.fixture(scope="module")
def trained(example, tmp_path_factory):
    """A replicated run of 2 epochs of 30 steps, without freezing: the trainer and checkpoint."""
    logdir = str(tmp_path_factory.mktemp("layers_predict") / "log")
    return example.train(logdir, "replicated", 2, 30)


@pytest.mark.slow
class TestOneTowerPredictorAndExport:
    """A 2-tower checkpoint loads into a 1-tower predictor and exports."""

    def test_predictor_learns(self, example, trained):
        """The one-tower predictor classifies the validation digits well."""
        _, checkpoint = trained
        _, _, x_val, y_val = example.load_data()
        (prob,) = example.predictor(checkpoint)(x_val)
        assert prob.shape == (len(x_val), 10)
        assert float(np.mean(prob.argmax(axis=1) != y_val)) < 0.2

    def test_exports_agree(self, example, trained, tmp_path):
        """The compact graph and the SavedModel predict what the predictor predicts."""
        _, checkpoint = trained
        _, _, x_val, _ = example.load_data()
        _exports_agree(example, checkpoint, tmp_path / "export", x_val[:50])
