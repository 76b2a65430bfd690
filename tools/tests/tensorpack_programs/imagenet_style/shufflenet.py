#!/usr/bin/env python
"""A small ShuffleNet in the style of tensorpack's ImageNet programs: tfv1 as tf, star imports
of the callbacks and models, a depthwise layer registered by the program, a channel shuffle
under its own name scope, argscope over several layers, LinearWrap with .tf calls, visualized
filters and activations, and two towers through launch_train_with_config."""

import argparse
import os

from tensorpack import logger
from tensorpack import tfv1 as tf
from tensorpack.callbacks import *
from tensorpack.models import *
from tensorpack.tfutils import SmartInit, argscope, model_utils
from tensorpack.tfutils.tower import TowerContext
from tensorpack.tfutils.scope_utils import under_name_scope
from tensorpack.train import SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config

from imagenet_utils import ImageNetModel, get_imagenet_dataflow


@layer_register(log_shape=True)
def DepthConv(x, out_channel, kernel_shape, padding='SAME', stride=1,
              W_init=None, activation=tf.identity):
    in_shape = x.get_shape().as_list()
    in_channel = in_shape[3]
    assert out_channel % in_channel == 0, (out_channel, in_channel)
    multiplier = out_channel // in_channel
    if W_init is None:
        W_init = tf.variance_scaling_initializer(2.0)
    W = tf.get_variable('W', [kernel_shape, kernel_shape, in_channel, multiplier], initializer=W_init)
    conv = tf.nn.depthwise_conv2d(x, W, [1, stride, stride, 1], padding=padding, data_format='NHWC')
    return activation(conv, name='output')


@under_name_scope()
def channel_shuffle(l, group):
    in_shape = l.get_shape().as_list()
    in_channel = in_shape[3]
    l = tf.reshape(l, [-1, in_shape[1], in_shape[2], group, in_channel // group])
    l = tf.transpose(l, [0, 1, 2, 4, 3])
    return tf.reshape(l, [-1, in_shape[1], in_shape[2], in_channel])


def visualize_conv_weights(filters, name):
    with tf.name_scope('visualize_w_' + name):
        filters = tf.transpose(filters, (3, 2, 0, 1))  # [out, in, h, w]
        filters = tf.unstack(filters)
        filters = tf.concat(filters, 1)
        filters = tf.unstack(filters)
        filters = tf.concat(filters, 1)
        filters = tf.expand_dims(filters, 0)
        filters = tf.expand_dims(filters, -1)
    tf.summary.image('visualize_w_' + name, filters)


def visualize_conv_activations(activation, name):
    with tf.name_scope('visualize_act_' + name):
        _, h, w, c = activation.get_shape().as_list()
        rows = tf.split(activation, c // 4, axis=3)
        row_image = [tf.concat(tf.split(r, 4, axis=3), axis=1) for r in rows]
        viz = tf.concat(row_image, axis=2)
    tf.summary.image('visualize_act_' + name, viz, max_outputs=2)


class Model(ImageNetModel):
    def __init__(self, group=2):
        self.group = group

    def shufflenet_unit(self, l, out_channel, stride):
        in_channel = l.get_shape().as_list()[3]
        shortcut = l
        l = Conv2D('conv1', l, out_channel // 4, 1, split=self.group, activation=BNReLU)
        l = channel_shuffle(l, self.group)
        l = DepthConv('dconv', l, out_channel // 4, 3, stride=stride)
        l = BatchNorm('dconv_bn', l)
        l = Conv2D('conv2', l, out_channel if stride == 1 else out_channel - in_channel, 1,
                   split=self.group)
        l = BatchNorm('conv2_bn', l)
        if stride == 1:
            return tf.nn.relu(shortcut + l)
        shortcut = AvgPooling('avgpool', shortcut, 3, 2, padding='SAME')
        return tf.concat([shortcut, tf.nn.relu(l)], axis=3)

    def get_logits(self, image):
        with argscope([Conv2D, MaxPooling, AvgPooling, GlobalAvgPooling, BatchNorm],
                      data_format=self.data_format), \
                argscope(Conv2D, use_bias=False):
            l = Conv2D('conv1', image, 8, 3, strides=2, activation=BNReLU)
            with tf.variable_scope('conv1', reuse=True):
                visualize_conv_weights(tf.get_variable('W'), 'conv1')
            l = MaxPooling('pool1', l, 3, 2, padding='SAME')
            visualize_conv_activations(l, 'pool1')
            with tf.variable_scope('group1'):
                for i, stride in enumerate([2, 1]):
                    with tf.variable_scope('block{}'.format(i)):
                        l = self.shufflenet_unit(l, 16, stride)
            logits = (LinearWrap(l)
                      .GlobalAvgPooling('gap')
                      .tf.nn.dropout(rate=0.1)
                      .FullyConnected('linear', 4)())
        return logits


def get_config(model):
    callbacks = [
        ModelSaver(),
        ScheduledHyperParamSetter('learning_rate', [(0, 0.05), (2, 0.01)]),
        EstimatedTimeLeft(),
        InferenceRunner(get_imagenet_dataflow('val'),
                        [ScalarStats('xentropy-loss'),
                         ClassificationError('wrong-top1', 'val-error-top1'),
                         ClassificationError('wrong-top2', 'val-error-top2')]),
    ]
    return TrainConfig(model=model, dataflow=get_imagenet_dataflow('train'),
                       callbacks=callbacks, steps_per_epoch=8, max_epoch=2)


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--load', help='a checkpoint to start from')
    parser.add_argument('--towers', type=int, default=2)
    parser.add_argument('--flops', action='store_true', help='print the model and its size, then exit')
    args = parser.parse_args()
    if args.flops:
        with tf.Graph().as_default():
            inputs = [tf.placeholder(tf.uint8, [1, 16, 16, 3], 'input'),
                      tf.placeholder(tf.int32, [1], 'label')]
            with TowerContext('', is_training=False):
                Model(group=2).build_graph(*inputs)
            model_utils.describe_trainable_vars()
        raise SystemExit(0)
    logger.set_logger_dir(os.path.join('train_log', 'shufflenet-g2'))
    model = Model(group=2)
    config = get_config(model)
    config.session_init = SmartInit(args.load)
    launch_train_with_config(config, SyncMultiGPUTrainerReplicated(args.towers))
