"""A helper module of the convnet program: the network, with tensorpack's layers."""

import tensorflow as tf

from tensorpack.models import FullyConnected, Dropout
from tensorpack.tfutils import argscope


def classifier(x, training):
    with argscope(FullyConnected, activation=tf.nn.relu):
        h = FullyConnected('fc0', x, 16)
    h = Dropout(h, rate=0.1, training=training)  # only while training
    return FullyConnected('fc1', h, 2)
