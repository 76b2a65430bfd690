"""A checkpoint written by tensorpack 0.11's trainer restores by name into towerkit.layers."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_v2_behavior()

import tensorpack as tp  # noqa: E402
from tensorpack import (  # noqa: E402
    DataFromList,
    ModelDesc,
    ModelSaver,
    OfflinePredictor,
    PredictConfig,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
    logger,
)
from tensorpack.tfutils.sessinit import SmartInit as TPSmartInit  # noqa: E402

import towerkit.layers as tk  # noqa: E402
from towerkit.sessinit import SmartInit  # noqa: E402
from towerkit.towers import TowerContext  # noqa: E402

SHAPE = (8, 8, 3)
CLASSES = 5


def convnet(lib, x, fmt):
    """A small convnet with BatchNorm, written once for both libraries (`lib` is the module)."""
    if fmt == "channels_first":
        x = tf.transpose(x, [0, 3, 1, 2])
    with (
        tp.argscope([tp.Conv2D, tp.MaxPooling, tp.BatchNorm, tp.GlobalAvgPooling], data_format=fmt)
        if lib is tp
        else _tk_scope(fmt)
    ):
        h = lib.Conv2D("conv0", x, 6, 3)
        h = lib.BatchNorm("bn0", h)
        h = tf.nn.relu(h)
        h = lib.MaxPooling("pool0", h, 2)
        h = lib.Conv2D("conv1", h, 8, 3, use_bias=False)
        h = lib.BNReLU("bnrelu1", h)
        h = lib.GlobalAvgPooling("gap", h)
        h = lib.LayerNorm("ln", h)
        return tf.identity(lib.FullyConnected("fc", h, CLASSES), name="logits")


def _tk_scope(fmt):
    from towerkit.towers import argscope

    return argscope([tk.Conv2D, tk.MaxPooling, tk.BatchNorm, tk.GlobalAvgPooling], data_format=fmt)


def _data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *SHAPE)).astype(np.float32) + 1.0
    y = rng.integers(0, CLASSES, size=n).astype(np.int32)
    return x, y


def _tp_model(build, fmt, make_optimizer):
    """A tensorpack ModelDesc whose tower is ``build(tp, image, fmt)`` with a softmax cost."""

    class Model(ModelDesc):
        def inputs(self):
            return [
                tf.TensorSpec((None, *SHAPE), tf.float32, "x"),
                tf.TensorSpec((None,), tf.int32, "y"),
            ]

        def build_graph(self, image, label):
            logits = build(tp, image, fmt)
            return tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                name="cost",
            )

        def optimizer(self):
            return make_optimizer()

    return Model()


def _train_with_tensorpack(tmp_path, model):
    """Six steps of tensorpack's SimpleTrainer on `model` (a function making it): the checkpoint."""
    x, y = _data()
    logger.set_logger_dir(str(tmp_path / "log"), action="d")
    flow = DataFromList([[x[i : i + 8], y[i : i + 8]] for i in range(0, 32, 8)], shuffle=False)
    ckpt_dir = str(tmp_path / "ckpt")
    with tf.Graph().as_default():
        config = TrainConfig(
            model=model(),
            dataflow=flow,
            callbacks=[ModelSaver(checkpoint_dir=ckpt_dir)],
            steps_per_epoch=6,
            max_epoch=1,
        )
        launch_train_with_config(config, SimpleTrainer())
    ckpt = tf1.train.latest_checkpoint(ckpt_dir)
    assert ckpt is not None
    return ckpt


def _tensorpack_logits(model, ckpt, test_x):
    """tensorpack's OfflinePredictor on the checkpoint: the logits of `test_x`."""
    with tf.Graph().as_default():
        predictor = OfflinePredictor(
            PredictConfig(
                model=model(),
                session_init=TPSmartInit(ckpt),
                input_names=["x"],
                output_names=["logits"],
            )
        )
        (logits,) = predictor(test_x)
    return logits


def _towerkit_logits(build, fmt, ckpt, test_x):
    """The same tower built with towerkit.layers, restored by SmartInit: its variables, logits."""
    graph = tf1.Graph()
    with graph.as_default():
        image = tf1.placeholder(tf.float32, (None, *SHAPE), name="x")
        with TowerContext("", is_training=False):
            logits = build(tk, image, fmt)
        model_vars = {v.op.name: v.shape.as_list() for v in tf1.global_variables()}
        with tf1.Session(graph=graph) as sess:
            SmartInit(ckpt).init(sess)
            return model_vars, sess.run(logits, {image: test_x})


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
def test_tensorpack_checkpoint_restores_into_towerkit(tmp_path, fmt):
    """Trained a few steps by tensorpack, restored by SmartInit: same variables, same predictions."""

    def model():
        return _tp_model(convnet, fmt, lambda: tf1.train.MomentumOptimizer(0.1, 0.9))

    ckpt = _train_with_tensorpack(tmp_path, model)
    names = {name for name, _ in tf1.train.list_variables(ckpt)}
    # the moving averages moved during training (RunUpdateOps): the test would not see a
    # mismatch of the EMA variables if they were still at their initial values
    ema = tf1.train.load_variable(ckpt, "bn0/mean/EMA")
    assert np.abs(ema).max() > 1e-3

    test_x = _data(6, seed=1)[0]
    want = _tensorpack_logits(model, ckpt, test_x)
    model_vars, got = _towerkit_logits(convnet, fmt, ckpt, test_x)
    assert set(model_vars) <= names, f"not in the checkpoint: {sorted(set(model_vars) - names)}"
    weights = {n for n in names if n.endswith(("/EMA", "/gamma", "/beta", "/W", "/b"))}
    assert weights == set(model_vars)  # every weight of the checkpoint is a variable here
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert os.path.exists(ckpt + ".index")


def _channel_scale(x, init=1.0, data_format="channels_last"):
    """A user layer, the way tensorpack users write one: one variable, scaled per channel."""
    axis = 1 if data_format in ("channels_first", "NCHW") else 3
    channels = x.shape[axis]
    scale = tf1.get_variable("scale", [channels], initializer=tf1.constant_initializer(init))
    shape = [1, channels, 1, 1] if axis == 1 else [1, 1, 1, channels]
    return x * tf.reshape(scale, shape)


# The same user layer, registered with each library's decorator (a name is registered once).
ChannelScale = {
    tp: tp.layer_register(log_shape=True)(_channel_scale),
    tk: tk.layer_register(log_shape=True)(_channel_scale),
}


def generator_blocks(lib, x, fmt):
    """InstanceNorm, a grouped convolution, a user layer and Conv2DTranspose, as GANs use them."""
    if fmt == "channels_first":
        x = tf.transpose(x, [0, 3, 1, 2])
    layers = [lib.Conv2D, lib.Conv2DTranspose, lib.InstanceNorm, lib.GlobalAvgPooling]
    scope = tp.argscope(layers, data_format=fmt) if lib is tp else _tk_argscope(layers, fmt)
    with scope:
        h = lib.Conv2D("conv0", x, 8, 3)
        h = lib.InstanceNorm("in0", h)
        h = tf.nn.leaky_relu(h, 0.2)
        h = lib.Conv2D("gconv", h, 8, 3, split=2, use_bias=False)
        h = ChannelScale[lib]("scale", h, init=0.5, data_format=fmt)
        h = lib.Conv2DTranspose("deconv", h, 4, 3, strides=2)
        h = lib.InstanceNorm("in1", h, use_affine=False)
        h = lib.GlobalAvgPooling("gap", h)
        return tf.identity(lib.FullyConnected("fc", h, CLASSES), name="logits")


def _tk_argscope(layers, fmt):
    from towerkit.towers import argscope

    return argscope(layers, data_format=fmt)


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
def test_generator_checkpoint_restores_into_towerkit(tmp_path, fmt):
    """InstanceNorm, Conv2DTranspose, split convolutions and a user layer: same outputs."""

    def model():
        return _tp_model(generator_blocks, fmt, lambda: tf1.train.AdamOptimizer(0.05))

    ckpt = _train_with_tensorpack(tmp_path, model)
    saved = dict(tf1.train.list_variables(ckpt))
    # trained away from the initial values, so a variable restored into the wrong place shows
    assert np.abs(tf1.train.load_variable(ckpt, "scale/scale") - 0.5).max() > 1e-3
    assert saved["gconv/W"] == [3, 3, 4, 8]  # a group convolution: in_channels / split

    test_x = _data(6, seed=1)[0]
    want = _tensorpack_logits(model, ckpt, test_x)
    model_vars, got = _towerkit_logits(generator_blocks, fmt, ckpt, test_x)
    weights = {n: s for n, s in saved.items() if not n.endswith(("Adam", "Adam_1"))}
    weights = {n: s for n, s in weights.items() if "power" not in n and n != "global_step"}
    assert model_vars == weights  # the same names and shapes, in both directions
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
