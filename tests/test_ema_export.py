"""A model trained with EMAOptimizer predicts and exports with its averaged weights."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from towerkit.callbacks import ModelSaver
from towerkit.export import ModelExporter, OfflinePredictor, PredictConfig
from towerkit.sessinit import SaverRestore
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    EMAOptimizer,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)


def regression(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return [x, (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + 0.3).astype(np.float32)]


class Linear(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 4], tf.float32, "x"), tf.TensorSpec([None], tf.float32, "y")]

    def build_graph(self, x, y):
        w = tf1.get_variable("W", [4, 1], initializer=tf1.constant_initializer(0.1))
        b = tf1.get_variable("b", [], initializer=tf1.zeros_initializer())
        pred = tf.identity(tf.squeeze(tf.matmul(x, w), 1) + b, name="pred")
        return tf.reduce_mean(tf.square(pred - y), name="cost")

    def optimizer(self):
        return EMAOptimizer(tf1.train.GradientDescentOptimizer(0.05), decay=0.9)


def test_predictor_and_exports_use_the_averages(tmp_path):
    """OfflinePredictor, the compact graph and the SavedModel, all with SaverRestore(ema=True),
    compute x W_ema + b_ema from the checkpoint's averages (not the last weights)."""
    config = TrainConfig(
        model=Linear(),
        data=NumpyInput(regression(64, 0), batch_size=8, shuffle=False),
        callbacks=[ModelSaver()],
        monitors=[],
        steps_per_epoch=8,
        max_epoch=2,
        logdir=str(tmp_path / "log"),
    )
    with tf.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    ckpt = tf1.train.latest_checkpoint(str(tmp_path / "log"))
    reader = tf.train.load_checkpoint(ckpt)
    w, b = (
        reader.get_tensor("W/ExponentialMovingAverage"),
        reader.get_tensor("b/ExponentialMovingAverage"),
    )
    assert not np.allclose(w, reader.get_tensor("W"))
    x = regression(16, 1)[0]
    want = (x @ w)[:, 0] + b

    def predict_config():
        return PredictConfig(
            model=Linear(),
            session_init=SaverRestore(ckpt, ema=True),
            input_names=["x"],
            output_names=["pred"],
        )

    with tf.Graph().as_default():
        np.testing.assert_allclose(OfflinePredictor(predict_config())(x)[0], want, rtol=1e-5)
    with tf.Graph().as_default():
        exporter = ModelExporter(predict_config())
        compact = exporter.export_compact(str(tmp_path / "net.pb"))
        serving = exporter.export_serving(str(tmp_path / "saved"))
    graph_def = tf1.GraphDef()
    with open(compact, "rb") as f:
        graph_def.ParseFromString(f.read())
    with tf.Graph().as_default() as graph:
        tf1.import_graph_def(graph_def, name="")
        with tf1.Session(graph=graph) as sess:
            np.testing.assert_allclose(sess.run("pred:0", {"x:0": x}), want, rtol=1e-5)
    served = tf.saved_model.load(serving).signatures["prediction_pipeline"](x=tf.constant(x))
    np.testing.assert_allclose(served["pred"].numpy(), want, rtol=1e-5)
