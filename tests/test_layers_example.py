"""The graph-mode layers example: tf.compat.v1.layers with argscope follow the tower rules in every trainer."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from example_modules import load_example

pytest.importorskip("tf_keras", reason="the layers example needs towerkit-towers[layers]")

EPOCHS, STEPS = 1, 15


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


@pytest.fixture(scope="module", params=["replicated", "ps", "async", "simple"])
def run(request, example, tmp_path_factory):
    """A short run with the first convolution frozen, per trainer: (name, trainer, checkpoint)."""
    logdir = str(tmp_path_factory.mktemp(f"layers_{request.param}") / "log")
    trainer, checkpoint = example.train(logdir, request.param, EPOCHS, STEPS, freeze_first=True)
    return request.param, trainer, checkpoint


@pytest.mark.slow
class TestLayersInEveryTrainer:
    """Variables, update ops, freezing and checkpoints of tf.compat.v1.layers models, per trainer."""

    def test_checkpoint_is_one_tower(self, run, initial):
        """The checkpoint holds the single-tower names (no tower copies), as a 1-tower graph has."""
        import tensorflow as tf

        _, _, checkpoint = run
        names = set(tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map())
        assert not [n for n in names if re.match(r"tower\d+/", n)]
        assert set(initial) <= names

    def test_frozen_layer_unchanged_others_trained(self, run, initial):
        """freeze_variables holds conv0 in every tower; conv1, fc and batch-norm parameters train."""
        import tensorflow as tf

        _, _, checkpoint = run
        reader = tf.train.load_checkpoint(checkpoint)
        np.testing.assert_array_equal(reader.get_tensor("conv0/kernel"), initial["conv0/kernel"])
        for name in ("conv1/kernel", "fc/kernel", "bn1/gamma"):
            assert not np.allclose(reader.get_tensor(name), initial[name]), name

    def test_batch_norm_statistics_updated(self, run):
        """The moving statistics moved away from their initial 0 (the update ops ran)."""
        import tensorflow as tf

        _, _, checkpoint = run
        reader = tf.train.load_checkpoint(checkpoint)
        assert np.abs(reader.get_tensor("bn0/moving_mean")).max() > 1e-3

    def test_update_ops_and_variables(self, run):
        """UPDATE_OPS holds the first tower's 4 updates; shared-variable trainers make one copy."""
        import tensorflow as tf

        name, trainer, _ = run
        with trainer.graph.as_default():
            updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
            trainable = [v.op.name for v in tf.compat.v1.trainable_variables()]
        assert len(updates) == 4
        if name != "simple":
            assert all(op.name.startswith("tower0/") for op in updates)
        # conv0 is frozen: conv1 (2), bn0 and bn1 (2 each), fc (2)
        assert len(trainable) == 8
        assert not [n for n in trainable if re.match(r"tower\d+/", n)]
        if name == "replicated":
            replicas = {v.op.name for v in trainer.replica_variables}
            assert "tower1/bn0/moving_mean" in replicas
            assert "tower1/conv0/kernel" in replicas


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
        import tensorflow as tf

        tf1 = tf.compat.v1
        _, checkpoint = trained
        _, _, x_val, _ = example.load_data()
        (expected,) = example.predictor(checkpoint)(x_val[:50])
        compact, serving = example.export(checkpoint, str(tmp_path / "export"))
        graph_def = tf1.GraphDef()
        with open(compact, "rb") as f:
            graph_def.ParseFromString(f.read())
        graph = tf.Graph()
        with graph.as_default():
            tf1.import_graph_def(graph_def, name="")
        with tf1.Session(graph=graph) as sess:
            frozen = sess.run("prob:0", {"image:0": x_val[:50]})
        np.testing.assert_allclose(frozen, expected, atol=1e-5)
        assert os.path.isfile(os.path.join(serving, "saved_model.pb"))
        loaded = tf.saved_model.load(serving)
        out = loaded.signatures["prediction_pipeline"](image=tf.constant(x_val[:50]))["prob"]
        np.testing.assert_allclose(out.numpy(), expected, atol=1e-5)
