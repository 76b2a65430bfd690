"""A model trained in mixed precision predicts and exports in float32 (towerkit.layers model)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import ModelSaver
from towerkit.export import ModelExporter, OfflinePredictor, PredictConfig
from towerkit.layers import BatchNorm, Conv2D, FullyConnected, MaxPooling
from towerkit.sessinit import SmartInit
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)


def images(n: int, seed: int) -> list[np.ndarray]:
    """Noise, brighter in the top half for label 1 and in the bottom half for label 0."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.int32)
    x = rng.random((n, 8, 8, 1)).astype(np.float32)
    x[y == 1, :4] += 0.5
    x[y == 0, 4:] += 0.5
    return [x, y]


class Net(ModelDesc):
    def inputs(self):
        return [
            tf.TensorSpec((None, 8, 8, 1), tf.float32, "image"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, image, label):
        x = Conv2D("conv0", image, 8, 3, activation=tf.nn.relu)
        x = MaxPooling("pool0", BatchNorm("bn0", x), 2)
        logits = tf.cast(FullyConnected("fc", x, 2), tf.float32)
        tf.nn.softmax(logits, name="prob")
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        )

    def optimizer(self):
        return tf1.train.AdamOptimizer(1e-2)


def train_net(logdir, precision: str, epochs: int) -> str:
    """Train `Net` in `precision`; its last checkpoint."""
    config = TrainConfig(
        model=Net(),
        data=NumpyInput(images(256, 0), batch_size=32, shuffle=True, seed=0),
        callbacks=[ModelSaver()],
        monitors=[],
        max_epoch=epochs,
        steps_per_epoch=8,
        logdir=str(logdir),
        precision=precision,
    )
    with tf.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    return tf1.train.latest_checkpoint(str(logdir))


def predict_config(ckpt: str) -> PredictConfig:
    return PredictConfig(
        model=Net(), session_init=SmartInit(ckpt), input_names=["image"], output_names=["prob"]
    )


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_predictor_and_exports_are_float32(tmp_path, precision):
    ckpt = train_net(tmp_path / "log", precision, epochs=3)
    x, y = images(64, 1)
    with tf.Graph().as_default():
        prob = OfflinePredictor(predict_config(ckpt))(x)[0]
    assert prob.dtype == np.float32
    assert (prob.argmax(1) == y).mean() > 0.9  # it learned, in low precision
    with tf.Graph().as_default():
        exporter = ModelExporter(predict_config(ckpt))
        compact = exporter.export_compact(str(tmp_path / "net.pb"))
        serving = exporter.export_serving(str(tmp_path / "saved"))
    graph_def = tf1.GraphDef()
    with open(compact, "rb") as f:
        graph_def.ParseFromString(f.read())
    kinds = {n.attr["T"].type for n in graph_def.node if n.op in ("Conv2D", "MatMul")}
    assert kinds == {tf.float32.as_datatype_enum}
    with tf.Graph().as_default() as graph:
        tf1.import_graph_def(graph_def, name="")
        with tf1.Session(graph=graph) as sess:
            np.testing.assert_allclose(sess.run("prob:0", {"image:0": x}), prob, atol=1e-5)
    served = tf.saved_model.load(serving).signatures["prediction_pipeline"](image=tf.constant(x))
    np.testing.assert_allclose(served["prob"].numpy(), prob, atol=1e-5)


def test_exports_in_bfloat16_when_asked(tmp_path):
    """``PredictConfig(precision="mixed_bfloat16")``: the predictor and the compact graph
    compute in bfloat16 from the float32 checkpoint, near the float32 probabilities."""
    ckpt = train_net(tmp_path / "log", "float32", epochs=2)
    x, _ = images(64, 1)

    def low(path):
        return PredictConfig(
            model=Net(),
            session_init=SmartInit(path),
            input_names=["image"],
            output_names=["prob"],
            precision="mixed_bfloat16",
        )

    with tf.Graph().as_default():
        exact = OfflinePredictor(predict_config(ckpt))(x)[0]
    with tf.Graph().as_default():
        rough = OfflinePredictor(low(ckpt))(x)[0]
    np.testing.assert_allclose(rough, exact, atol=3e-2)
    with tf.Graph().as_default():
        compact = ModelExporter(low(ckpt)).export_compact(str(tmp_path / "net.pb"))
    graph_def = tf1.GraphDef()
    with open(compact, "rb") as f:
        graph_def.ParseFromString(f.read())
    kinds = {n.attr["T"].type for n in graph_def.node if n.op in ("Conv2D", "MatMul")}
    assert kinds == {tf.bfloat16.as_datatype_enum}
    with pytest.raises(ValueError, match="unknown precision policy 'bf16'"):
        PredictConfig(model=Net(), output_names=["prob"], precision="bf16")
