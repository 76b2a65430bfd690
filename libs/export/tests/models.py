"""Small models for the tests: a convnet with batch normalization and dropout, and its maths in numpy."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from numpy.lib.stride_tricks import sliding_window_view

from towerkit.towers import TowerContext, build_placeholders, get_current_tower_context
from towerkit.towers.compat import tf1

SIGNATURE = (
    tf.TensorSpec([None, 8, 8, 1], tf.float32, "image"),
    tf.TensorSpec([None], tf.int32, "label"),
)
"""Inputs of `convnet`: 8x8 grey images and their class (0, 1 or 2)."""

EPSILON = 1e-3
CLASSES = 3


def batch_norm(x, name, momentum=0.8):
    """Batch normalization over the last axis: batch statistics when training, moving ones otherwise."""
    training = get_current_tower_context().is_training
    channels = int(x.shape[-1])
    keys = [tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES]
    with tf1.variable_scope(name):
        beta = tf1.get_variable("beta", [channels], initializer=tf1.zeros_initializer())
        gamma = tf1.get_variable("gamma", [channels], initializer=tf1.ones_initializer())
        moving_mean = tf1.get_variable(
            "mean/EMA",
            [channels],
            initializer=tf1.zeros_initializer(),
            trainable=False,
            collections=keys,
        )
        moving_var = tf1.get_variable(
            "variance/EMA",
            [channels],
            initializer=tf1.ones_initializer(),
            trainable=False,
            collections=keys,
        )
        if training:
            mean, var = tf1.nn.moments(x, list(range(len(x.shape) - 1)))
            for moving, value in ((moving_mean, mean), (moving_var, var)):
                update = tf1.assign(moving, moving * momentum + value * (1 - momentum))
                tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, update)
        else:
            mean, var = moving_mean, moving_var
        return tf1.nn.batch_normalization(x, mean, var, beta, gamma, EPSILON)


def convnet(image, label):
    """conv 3x3x4 -> batch norm -> relu -> dropout (training) -> fc -> softmax; returns the cost."""
    training = get_current_tower_context().is_training
    kernel = tf1.get_variable("conv/W", [3, 3, 1, 4])
    h = tf1.nn.conv2d(image, kernel, [1, 1, 1, 1], "SAME")
    h = tf1.nn.relu(batch_norm(h, "bn"))
    h = tf1.reshape(h, [-1, 8 * 8 * 4])
    if training:
        h = tf1.nn.dropout(h, rate=0.5)
    weights = tf1.get_variable("fc/W", [8 * 8 * 4, CLASSES])
    bias = tf1.get_variable("fc/b", [CLASSES], initializer=tf1.zeros_initializer())
    logits = tf1.nn.bias_add(tf1.matmul(h, weights), bias, name="logits")
    tf1.nn.softmax(logits, name="prob")
    loss = tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
    return tf1.reduce_mean(loss, name="cost")


def make_data(n, seed=0):
    """`n` images whose class is which third of the image is brightest."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, CLASSES, n).astype(np.int32)
    image = rng.normal(0.0, 1.0, (n, 8, 8, 1)).astype(np.float32)
    for i, c in enumerate(label):
        image[i, :, 3 * c : 3 * c + 2, 0] += 2.0
    return image, label


def train(logdir, steps=30, batch=32):
    """Train `convnet` with a plain loop and save a checkpoint; returns its prefix."""
    graph = tf1.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        image, label = build_placeholders(SIGNATURE)
        with TowerContext("", is_training=True):
            cost = convnet(image, label)
        with tf1.control_dependencies(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)):
            step = tf1.train.AdamOptimizer(0.01).minimize(cost)
        saver = tf1.train.Saver()
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            for i in range(steps):
                x, y = make_data(batch, seed=100 + i)
                sess.run(step, {image: x, label: y})
            return saver.save(sess, f"{logdir}/model", global_step=steps)


def reference(values, image):
    """`convnet`'s inference outputs in numpy, from the variable values `values` (name -> array)."""
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = sliding_window_view(padded, (3, 3), axis=(1, 2))  # n, 8, 8, 1, 3, 3
    h = np.einsum("nhwcij,ijco->nhwo", windows, values["conv/W"])
    mean, var = values["bn/mean/EMA"], values["bn/variance/EMA"]
    h = (h - mean) / np.sqrt(var + EPSILON) * values["bn/gamma"] + values["bn/beta"]
    h = np.maximum(h, 0.0).reshape(len(image), -1)
    logits = h @ values["fc/W"] + values["fc/b"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
