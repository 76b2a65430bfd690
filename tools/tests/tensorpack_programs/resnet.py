"""A residual network in tensorpack's style, trained on 2 towers, with an L2 weight decay."""

import numpy as np
import tensorflow as tf

from tensorpack import ModelDesc, TrainConfig, SyncMultiGPUTrainerReplicated
from tensorpack import launch_train_with_config
from tensorpack.callbacks import ModelSaver
from tensorpack.models import (
    BatchNorm, BNReLU, Conv2D, FullyConnected, GlobalAvgPooling, regularize_cost, l2_regularizer)
from tensorpack.tfutils import argscope
from tensorpack.tfutils.summary import add_moving_summary
from tensorpack.utils import logger


class Images:
    """A DataFlow of its own: 8x8 images whose class is the sign of their mean."""

    def __init__(self, n, batch):
        self.n, self.batch = n, batch
        self.rng = None

    def reset_state(self):
        self.rng = np.random.RandomState(0)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            x = self.rng.randn(self.batch, 8, 8, 3).astype(np.float32)
            yield [x, (x.mean(axis=(1, 2, 3)) > 0).astype(np.int32)]


def residual(name, x):
    with tf.variable_scope(name):
        h = Conv2D('conv1', x, 8, 3, activation=BNReLU)
        h = Conv2D('conv2', h, 8, 3)
        return tf.nn.relu(BatchNorm('bn', h) + x)


class Model(ModelDesc):
    def inputs(self):
        return [tf.placeholder(tf.float32, (None, 8, 8, 3), 'input'),
                tf.placeholder(tf.int32, (None,), 'label')]

    def build_graph(self, image, label):
        with argscope(Conv2D, use_bias=False, kernel_initializer=tf.variance_scaling_initializer()):
            x = Conv2D('conv0', image, 8, 3, activation=BNReLU)
            x = residual('res1', x)
            logits = FullyConnected('linear', GlobalAvgPooling('gap', x), 2)
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits), name='xent')
        wd_cost = regularize_cost('.*/W', l2_regularizer(1e-4), name='wd_cost')
        add_moving_summary(cost, wd_cost)
        return tf.add_n([cost, wd_cost], name='cost')

    def optimizer(self):
        return tf.train.MomentumOptimizer(0.05, 0.9)


if __name__ == '__main__':
    logger.set_logger_dir('train_log/resnet', action='k')
    config = TrainConfig(
        model=Model(),
        dataflow=Images(6, 16),
        callbacks=[ModelSaver()],
        max_epoch=2,
    )
    launch_train_with_config(config, SyncMultiGPUTrainerReplicated(2))
