#!/usr/bin/env python
"""A low-bitwidth digit classifier in the shape of tensorpack's DoReFa-Net, SVHN and
mnist-visualizations programs: quantizers built with tf.custom_gradient and
tf.stop_gradient, the weights replaced through remap_variables, LinearWrap's .apply(),
a dropout rate read from self.training, the tower context asked whether it trains,
add_param_summary over the weights, an exponentially decayed learning rate on the global
step, conv weights and activations drawn as image summaries, and the validation error
counted by ClassificationError."""

import argparse
import math

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils.summary import add_moving_summary, add_param_summary
from tensorpack.tfutils.tower import get_current_tower_context
from tensorpack.tfutils.varreplace import remap_variables

SIZE = 12
BITW, BITA, BITG = 1, 2, 4


class Digits(object):
    """[image, label] batches: the label is which of four stripes is lit."""

    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            label = self.rng.randint(4, size=16).astype('int32')
            img = self.rng.uniform(0, 60, size=(16, SIZE, SIZE, 3)).astype('float32')
            for i, k in enumerate(label):
                img[i, :, k * 3:k * 3 + 3] += 180
            yield [img, label]


def quantizers(bit_w, bit_a, bit_g):
    """fw, fa, fg: weights, activations and gradients kept to a few bits."""
    def round_to(x, bits):
        levels = float(2 ** bits - 1)

        @tf.custom_gradient
        def rounded(v):
            return tf.round(v * levels) / levels, lambda dy: dy
        return rounded(x)

    def fw(x):
        scale = tf.stop_gradient(tf.reduce_mean(tf.abs(x)))

        @tf.custom_gradient
        def sign(v):
            return tf.where(tf.equal(v, 0), tf.ones_like(v), tf.sign(v / scale)) * scale, lambda dy: dy
        if bit_w == 1:
            return sign(x)
        x = tf.tanh(x)
        return 2 * round_to(x / tf.reduce_max(tf.abs(x)) * 0.5 + 0.5, bit_w) - 1

    def fa(x):
        return round_to(x, bit_a)

    def fg(x):
        @tf.custom_gradient
        def identity(v):
            def grad(dy):
                top = tf.reduce_max(tf.abs(dy), list(range(1, dy.get_shape().ndims)), keep_dims=True)
                dy = dy / (top + 1e-8) * 0.5 + 0.5
                return (round_to(tf.clip_by_value(dy, 0.0, 1.0), bit_g) - 0.5) * top * 2
            return v, grad
        return identity(x)
    return fw, fa, fg


def visualize_conv_weights(filters, name):
    """One image of all the [h, w, cin, cout] filters, cout across, cin down."""
    with tf.name_scope('weights_' + name):
        filters = tf.transpose(filters, (3, 2, 0, 1))
        filters = tf.concat(tf.unstack(filters), 1)
        filters = tf.concat(tf.unstack(filters), 1)
        filters = tf.expand_dims(tf.expand_dims(filters, 0), -1)
    tf.summary.image('weights_' + name, filters)


def visualize_conv_activations(activation, name):
    """The first channels of an activation side by side."""
    channels = activation.get_shape().as_list()[3]
    per_row = int(math.sqrt(channels))
    with tf.name_scope('activations_' + name):
        rows = [tf.concat(tf.unstack(activation[:, :, :, c:c + per_row], axis=3), 1)
                for c in range(0, channels - per_row + 1, per_row)]
        viz = tf.concat(rows, 2)
    tf.summary.image('activations_' + name, tf.expand_dims(viz, -1), max_outputs=2)


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32, 'input'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        fw, fa, fg = quantizers(BITW, BITA, BITG)
        ctx = get_current_tower_context()
        assert ctx.is_training == self.training

        def quantize_weight(v):
            name = v.op.name
            if not name.endswith('W') or 'conv0' in name or 'fc' in name:
                return v
            logger.info("Quantizing weight {}".format(name))
            return fw(v)

        def activate(x):
            return fa(tf.clip_by_value(x, 0.0, 1.0))

        image = image / 256.0
        with remap_variables(quantize_weight), \
                argscope(BatchNorm, momentum=0.9, epsilon=1e-4), \
                argscope(Conv2D, use_bias=False):
            conv0 = Conv2D('conv0', image, 8, 3, padding='SAME', use_bias=True, activation=tf.nn.relu)
            logits = (LinearWrap(conv0)
                      .MaxPooling('pool0', 2, padding='SAME')
                      .apply(activate)
                      .Conv2D('conv1', 8, 3, padding='SAME')
                      .apply(fg)
                      .BatchNorm('bn1').apply(activate)
                      .Dropout(rate=0.2 if self.training else 0.0)
                      .FullyConnected('fc1', 4)())
        tf.nn.softmax(logits, name='output')
        with tf.variable_scope('conv0', reuse=True):
            visualize_conv_weights(tf.get_variable('W'), 'conv0')
        visualize_conv_activations(conv0, 'conv0')

        wrong = tf.cast(tf.logical_not(tf.nn.in_top_k(logits, label, 1)), tf.float32, name='wrong_tensor')
        add_moving_summary(tf.reduce_mean(wrong, name='train_error'))
        cost = tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label)
        cost = tf.reduce_mean(cost, name='cross_entropy_loss')
        wd_cost = regularize_cost('fc.*/W', l2_regularizer(1e-5), name='wd_cost')
        add_param_summary(('.*/W', ['histogram', 'rms']))
        total_cost = tf.add_n([cost, wd_cost], name='cost')
        add_moving_summary(cost, wd_cost, total_cost)
        return total_cost

    def optimizer(self):
        lr = tf.train.exponential_decay(
            learning_rate=1e-2, global_step=get_global_step_var(),
            decay_steps=10, decay_rate=0.5, staircase=True, name='learning_rate')
        tf.summary.scalar('lr', lr)
        return tf.train.AdamOptimizer(lr, epsilon=1e-5)


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=int, default=2)
    args = parser.parse_args()
    logger.set_logger_dir('train_log/dorefa_digits', action='k')
    config = TrainConfig(
        model=Model(),
        data=QueueInput(Digits(10, 0)),
        callbacks=[
            ModelSaver(),
            InferenceRunner(Digits(3, 1), [ScalarStats('cost'), ClassificationError('wrong_tensor')]),
        ],
        max_epoch=args.epochs,
    )
    launch_train_with_config(config, SimpleTrainer())
