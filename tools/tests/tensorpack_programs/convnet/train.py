"""A small classifier in tensorpack's style: self.training, a shuffling validation DataFlow.

Its network and its DataFlow live in helper modules next to it."""

import tensorflow as tf

from tensorpack import ModelDesc, TrainConfig, SimpleTrainer, launch_train_with_config
from tensorpack.callbacks import InferenceRunner, ScalarStats, ClassificationError, ModelSaver
from tensorpack.input_source import QueueInput
from tensorpack.utils import logger

from dataflows import Points  # a DataFlow of its own: reset_state, __iter__, __len__
from nets import classifier


class Model(ModelDesc):
    def inputs(self):
        return [tf.placeholder(tf.float32, (None, 3), 'x'),
                tf.placeholder(tf.int32, (None,), 'label')]

    def build_graph(self, x, label):
        logits = classifier(x, self.training)
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits), name='cost')
        correct = tf.cast(tf.nn.in_top_k(logits, label, 1), tf.float32)
        tf.subtract(1.0, correct, name='wrong')
        return cost

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.3, trainable=False)
        return tf.train.GradientDescentOptimizer(lr)


def get_config():
    return TrainConfig(
        model=Model(),
        data=QueueInput(Points(256, 32, seed=0)),
        callbacks=[
            ModelSaver(),
            InferenceRunner(Points(96, 32, seed=1), [ScalarStats('cost'), ClassificationError('wrong')]),
        ],
        steps_per_epoch=8,
        max_epoch=2,
    )


if __name__ == '__main__':
    logger.auto_set_dir()
    launch_train_with_config(get_config(), SimpleTrainer())
    logger.info("done")
