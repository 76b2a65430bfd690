"""The shape of tensorpack's boilerplate: argparse, get_config(), then --load set on the config.

A linear classifier of 2-D points with a learning-rate schedule, an L2 penalty, a
validation pass each epoch and the best checkpoint kept. `--load` restores a checkpoint
through `config.session_init`, set after the config is made."""

import argparse

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils.summary import add_moving_summary


class Points:
    """A DataFlow of its own: batches of points, labelled by the side of a line."""

    def __init__(self, batches, seed):
        self.batches, self.seed = batches, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def __len__(self):
        return self.batches

    def __iter__(self):
        for _ in range(self.batches):
            x = self.rng.randn(16, 2).astype(np.float32)
            yield [x, (x[:, 0] + x[:, 1] > 0).astype(np.int32)]


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 2), tf.float32, 'points'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def build_graph(self, points, label):
        logits = FullyConnected('fc', points, 2)
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits), name='xent')
        wd_cost = regularize_cost('fc/W', l2_regularizer(1e-3), name='wd_cost')
        add_moving_summary(cost, wd_cost)
        return tf.add(cost, wd_cost, name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.5, trainable=False)
        tf.summary.scalar('lr', lr)
        return tf.train.GradientDescentOptimizer(lr)


class PrintWeights(Callback):
    """Prints the sum of the classifier's weights before training starts."""

    def _setup_graph(self):
        self.w = [v for v in tf.global_variables() if v.op.name == 'fc/W'][0]

    def _before_train(self):
        print('weights before training: %.6f' % self.trainer.sess.run(self.w).sum())


def get_config(epochs):
    return TrainConfig(
        model=Model(),
        dataflow=Points(8, seed=0),
        callbacks=[
            PrintWeights(),
            PeriodicTrigger(ModelSaver(), every_k_epochs=1),
            InferenceRunner(Points(4, seed=1), [ScalarStats('cost')]),
            MinSaver('validation_cost'),
            ScheduledHyperParamSetter('learning_rate', [(1, 0.5), (2, 0.1)]),
            EstimatedTimeLeft(),
        ],
        max_epoch=epochs,
    )


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--load', help='load a model to start from')
    parser.add_argument('--epochs', type=int, default=2)
    args = parser.parse_args()

    logger.auto_set_dir(action='d')
    config = get_config(args.epochs)
    if args.load:
        config.session_init = SmartInit(args.load)
    launch_train_with_config(config, SimpleTrainer())
