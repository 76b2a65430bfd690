"""The idioms of tensorpack's mnist-tflayers and char-rnn/PTB-LSTM: tf.layers.* layers,
tf.contrib.layers.l2_regularizer with apply_regularization, a reader under TensorFlow 1's
three-argument tf.name_scope, a stack of tf.contrib.rnn.LSTMBlockCell, ScheduledHyperParamSetter
with string epochs, TrainConfig bounds from the command line (strings)."""

import argparse

import numpy as np
import tensorflow as tf
from tensorflow.contrib import rnn

from tensorpack import *

STEPS = 6
HIDDEN = 8


def producer(raw_data, batch_size, name=None):
    """PTB's reader: the sequence and its next-step target, in a scope named by TensorFlow 1."""
    with tf.name_scope(name, "Producer", [raw_data, batch_size]):
        data = tf.convert_to_tensor(raw_data, name="raw_data", dtype=tf.float32)
        return tf.identity(data[:, :-1], name='x'), tf.identity(data[:, 1:], name='y')


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 8, 8, 1), tf.float32, 'image'),
                tf.TensorSpec((None,), tf.int32, 'label'),
                tf.TensorSpec((None, STEPS + 1), tf.float32, 'seq')]

    def build_graph(self, image, label, seq):
        is_training = get_current_tower_context().is_training
        l2 = tf.contrib.layers.l2_regularizer(scale=1e-5)
        l = tf.layers.conv2d(image, 4, 3, padding='same', activation=tf.nn.relu,
                             kernel_regularizer=l2, name='conv0')
        l = tf.layers.batch_normalization(l, training=is_training, name='bn0')
        l = tf.layers.max_pooling2d(l, 2, 2, padding='valid')
        l = tf.layers.flatten(l)
        l = tf.layers.dense(l, 16, activation=tf.nn.relu, kernel_regularizer=l2, name='fc0')
        l = tf.layers.dropout(l, rate=0.5, training=is_training)
        logits = tf.layers.dense(l, 3, name='fc1')
        cost = tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label)
        cost = tf.reduce_mean(cost, name='cross_entropy_loss')
        reg = tf.identity(tf.contrib.layers.apply_regularization(
            l2, tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, 'fc0')), name='regularize_loss')

        x, y = producer(seq, tf.shape(seq)[0])
        cell = rnn.MultiRNNCell([rnn.LSTMBlockCell(num_units=HIDDEN) for _ in range(2)])
        outputs, _ = tf.nn.dynamic_rnn(cell, tf.expand_dims(x, -1), dtype=tf.float32)
        pred = tf.squeeze(tf.layers.dense(outputs, 1, name='head'), -1)
        seq_cost = tf.reduce_mean(tf.squared_difference(pred, y), name='seq_cost')

        wrong = tf.cast(tf.logical_not(tf.nn.in_top_k(logits, label, 1)), tf.float32)
        add_moving_summary(tf.reduce_mean(wrong, name='train_error'), seq_cost, reg)
        update = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update):
            return tf.add_n([cost, seq_cost, reg], name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.05, trainable=False)
        return tf.train.AdamOptimizer(lr)


class Blobs:
    """A DataFlow of its own: batches of images whose class is where the bright square is,
    and of sine waves to predict."""

    def __init__(self, n, batch):
        self.n, self.batch = n, batch

    def reset_state(self):
        self.rng = np.random.RandomState(0)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            label = self.rng.randint(3, size=self.batch).astype('int32')
            img = self.rng.rand(self.batch, 8, 8, 1).astype('float32') * 0.1
            for i, c in enumerate(label):
                img[i, 2 * c:2 * c + 3, 2:5] += 1.0
            phase = self.rng.rand(self.batch, 1) * 6.28
            seq = np.sin(phase + 0.5 * np.arange(STEPS + 1)).astype('float32')
            yield [img, label, seq]


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', default='2')
    parser.add_argument('--steps', default='8')
    args = parser.parse_args()
    logger.auto_set_dir()
    config = TrainConfig(
        model=Model(),
        data=QueueInput(Blobs(10, 16)),
        callbacks=[ModelSaver(),
                   ScheduledHyperParamSetter('learning_rate', [('1', '0.02')])],
        steps_per_epoch=args.steps,
        max_epoch=args.epochs,
    )
    launch_train_with_config(config, SimpleTrainer())
