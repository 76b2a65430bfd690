"""tensorpack programs that build with ``tf.layers`` and ``tf.contrib.rnn``'s block cells, on towerkit.

Two programs in tensorpack's form, written as ``towerkit-migrate`` leaves them: the
model of tensorpack's ``examples/basics/mnist-tflayers.py`` (``tf.layers`` under an
argscope, weight decay on ``fc.*/kernel``, dropout and batch normalization following
``self.training``) on 8x8 digits, and the model of ``examples/Char-RNN/char-rnn.py``
(a ``MultiRNNCell`` of ``LSTMBlockCell`` under ``static_rnn`` in scope ``rnnlm``) on a
repeating text. Both train under the simple trainer; the checkpoint holds TensorFlow
1's names and, for the convnet, the moving averages the update ops moved.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import InferenceRunner, ModelSaver, ScalarStats
from towerkit.layers import FullyConnected, regularize_cost, rnn, tf_layers
from towerkit.towers import add_moving_summary, argscope, enable_argscope_for_module
from towerkit.trainers import (
    FeedInput,
    ModelDesc,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)

pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("test_tf_layers_programs")]

tf1 = tf.compat.v1

enable_argscope_for_module(tf_layers)


class TFLayersModel(ModelDesc):
    """mnist-tflayers' model (smaller), plus a batch normalization that trains."""

    def inputs(self):
        return [
            tf.TensorSpec((None, 8, 8), tf.float32, "input"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, image, label):
        image = tf.expand_dims(image * 2 - 1, 3)
        with argscope([tf_layers.conv2d], padding="same", activation=tf.nn.relu):
            x = tf_layers.conv2d(image, 16, 3, name="conv0")
            x = tf_layers.max_pooling2d(x, 2, 2, padding="valid")
            x = tf_layers.conv2d(x, 16, 3, name="conv1")
            x = tf_layers.batch_normalization(x, training=self.training, name="bn")
            x = tf_layers.flatten(x)
            x = tf_layers.dense(x, 64, activation=tf.nn.relu, name="fc0")
            x = tf_layers.dropout(x, rate=0.3, training=self.training)
        logits = tf_layers.dense(x, 10, activation=tf.identity, name="fc1")
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label),
            name="cross_entropy_loss",
        )
        correct = tf.cast(tf1.nn.in_top_k(logits, label, 1), tf.float32, name="correct")
        tf.reduce_mean(correct, name="accuracy")
        wd_cost = tf.multiply(
            1e-5, regularize_cost("fc.*/kernel", tf.nn.l2_loss), name="regularize_loss"
        )
        add_moving_summary(cost, wd_cost)
        return tf.add_n([wd_cost, cost], name="total_cost")

    def optimizer(self):
        return tf1.train.AdamOptimizer(3e-3)


def digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)
    labels = data.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(labels))
    images, labels = images[order], labels[order]
    train = [(images[i : i + 32], labels[i : i + 32]) for i in range(0, 1376, 32)]
    test = [(images[i : i + 100], labels[i : i + 100]) for i in range(1397, 1797, 100)]
    return train, test


def checkpoint_values(logdir):
    path = tf1.train.latest_checkpoint(logdir)
    reader = tf1.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_mnist_tflayers_trains(tmp_path):
    """In 2 epochs validation accuracy rises past 0.8; TF1 names; the batch-norm averages moved."""
    train, test = digits()
    logdir = str(tmp_path / "tflayers")
    with tf.Graph().as_default():
        config = TrainConfig(
            model=TFLayersModel(),
            dataflow=train,
            callbacks=[
                ModelSaver(),
                InferenceRunner(FeedInput(test), [ScalarStats(["cross_entropy_loss", "accuracy"])]),
            ],
            max_epoch=2,
            logdir=logdir,
        )
        launch_train_with_config(config, SimpleTrainer())
    with open(os.path.join(logdir, "stats.json")) as f:
        records = json.load(f)
    assert records[-1]["validation_accuracy"] > 0.8
    values = checkpoint_values(logdir)
    assert {
        "conv0/kernel",
        "conv0/bias",
        "conv1/kernel",
        "bn/gamma",
        "bn/beta",
        "bn/moving_mean",
        "bn/moving_variance",
        "fc0/kernel",
        "fc1/bias",
    } <= set(values)
    assert values["conv0/kernel"].shape == (3, 3, 1, 16)
    assert np.abs(values["bn/moving_mean"]).max() > 1e-3, "the update ops ran"


SEQ_LEN, RNN_SIZE, VOCAB, BATCH = 8, 32, 5, 16


class CharRNN(ModelDesc):
    """char-rnn's model: two LSTMBlockCells under static_rnn, initial states fed or zero."""

    def inputs(self):
        return [
            tf.TensorSpec((None, SEQ_LEN), tf.int32, "input"),
            tf.TensorSpec((None, SEQ_LEN), tf.int32, "nextinput"),
        ]

    def build_graph(self, input, nextinput):
        cell = rnn.MultiRNNCell([rnn.LSTMBlockCell(num_units=RNN_SIZE) for _ in range(2)])

        def get_v(n):
            ret = tf1.get_variable(
                n + "_unused",
                [BATCH, RNN_SIZE],
                trainable=False,
                initializer=tf1.constant_initializer(),
            )
            return tf1.placeholder_with_default(ret, shape=[None, RNN_SIZE], name=n)

        initial = (
            rnn.LSTMStateTuple(get_v("c0"), get_v("h0")),
            rnn.LSTMStateTuple(get_v("c1"), get_v("h1")),
        )
        embedding = tf1.get_variable("embedding", [VOCAB, RNN_SIZE])
        feature = tf.nn.embedding_lookup(embedding, input)
        outputs, last_state = rnn.static_rnn(
            cell, tf.unstack(feature, axis=1), initial, scope="rnnlm"
        )
        tf.identity(last_state, "last_state")
        output = tf.reshape(tf.concat(outputs, 1), [-1, RNN_SIZE])
        logits = FullyConnected("fc", output, VOCAB, activation=tf.identity)
        tf.nn.softmax(logits, name="prob")
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(
                logits=logits, labels=tf.reshape(nextinput, [-1])
            ),
            name="cost",
        )
        add_moving_summary(cost)
        return cost

    def optimizer(self):
        return tf1.train.AdamOptimizer(1e-2)


def test_char_rnn_trains(tmp_path):
    """The cost of a repeating text falls; the checkpoint holds TensorFlow 1's cell names."""
    text = np.array([0, 1, 2, 3, 4, 3, 2, 1] * 200, np.int32)
    starts = np.random.default_rng(1).integers(0, len(text) - SEQ_LEN - 1, size=(40, BATCH))
    batches = [
        (
            np.stack([text[s : s + SEQ_LEN] for s in row]),
            np.stack([text[s + 1 : s + SEQ_LEN + 1] for s in row]),
        )
        for row in starts
    ]
    logdir = str(tmp_path / "charrnn")
    with tf.Graph().as_default():
        config = TrainConfig(
            model=CharRNN(), dataflow=batches, callbacks=[ModelSaver()], max_epoch=2, logdir=logdir
        )
        launch_train_with_config(config, SimpleTrainer())
    with open(os.path.join(logdir, "stats.json")) as f:
        records = json.load(f)
    assert records[-1]["cost"] < 0.5 * np.log(VOCAB)
    values = checkpoint_values(logdir)
    prefix = "rnnlm/multi_rnn_cell/cell_"
    assert values[f"{prefix}0/lstm_cell/kernel"].shape == (2 * RNN_SIZE, 4 * RNN_SIZE)
    assert values[f"{prefix}1/lstm_cell/bias"].shape == (4 * RNN_SIZE,)
