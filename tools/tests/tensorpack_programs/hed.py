"""The idioms of tensorpack's HED: side outputs fused into one edge map, a class-balanced
loss, float edge maps fed to an int32 input, gradients scaled per layer, a predictor."""

import numpy as np
import tensorflow as tf

from tensorpack import (
    ModelDesc, TrainConfig, SimpleTrainer, launch_train_with_config, PredictConfig,
    OfflinePredictor, SmartInit)
from tensorpack.callbacks import ModelSaver, ScheduledHyperParamSetter
from tensorpack.models import Conv2D, Conv2DTranspose, MaxPooling, regularize_cost
from tensorpack.tfutils import argscope, get_global_step_var, gradproc, optimizer
from tensorpack.tfutils.summary import add_moving_summary
from tensorpack.utils import logger


class Edges:
    """A DataFlow of its own: noisy squares and their outline, the outline as a float map."""

    def __init__(self, batches, seed):
        self.batches, self.seed = batches, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def __len__(self):
        return self.batches

    def __iter__(self):
        for _ in range(self.batches):
            images = self.rng.rand(4, 16, 16, 3).astype(np.float32) * 0.1
            edges = np.zeros((4, 16, 16), np.float32)  # 0.0 and 1.0, as HED's data has them
            for k in range(4):
                a, b = self.rng.randint(2, 7), self.rng.randint(9, 14)
                images[k, a:b, a:b] += 1.0
                edges[k, a:b, [a, b - 1]] = edges[k, [a, b - 1], a:b] = 1.0
            yield [images, edges]


def class_balanced_sigmoid_cross_entropy(logits, label, name):
    """Weighs the rare edge pixels by how rare they are (written here, as HED does)."""
    y = tf.cast(label, tf.float32)
    count_neg = tf.reduce_sum(1. - y)
    count_pos = tf.reduce_sum(y)
    beta = count_neg / (count_neg + count_pos)
    pos_weight = beta / (1 - beta)
    cost = tf.nn.weighted_cross_entropy_with_logits(logits=logits, labels=y, pos_weight=pos_weight)
    cost = tf.reduce_mean(cost * (1 - beta))
    return tf.where(tf.equal(count_pos, 0.0), 0.0, cost, name=name)


class Model(ModelDesc):
    def inputs(self):
        return [tf.placeholder(tf.float32, [None, 16, 16, 3], 'image'),
                tf.placeholder(tf.int32, [None, 16, 16], 'edgemap')]

    def build_graph(self, image, edgemap):
        edgemap = tf.expand_dims(edgemap, 3, name='edgemap4d')

        def branch(name, l, up):
            with tf.variable_scope(name):
                l = Conv2D('convfc', l, 1, 1, activation=tf.identity, use_bias=True)
                while up != 1:
                    l = Conv2DTranspose('upsample{}'.format(up), l, 1, 4, strides=2)
                    up //= 2
                return l

        with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu):
            l = Conv2D('conv1_1', image, 8)
            b1 = branch('branch1', l, 1)
            l = MaxPooling('pool1', l, 2)
            l = Conv2D('conv2_1', l, 8)
            b2 = branch('branch2', l, 2)

        final_map = Conv2D('convfcweight', tf.concat([b1, b2], 3), 1, 1,
                           kernel_initializer=tf.constant_initializer(0.5), use_bias=False)
        tf.sigmoid(final_map, name='output')
        costs = []
        for idx, b in enumerate([b1, b2, final_map]):
            xentropy = class_balanced_sigmoid_cross_entropy(
                b, edgemap, name='xentropy{}'.format(idx + 1))
            costs.append(xentropy)
        wrong = tf.cast(tf.not_equal(tf.cast(final_map > 0, tf.int32), edgemap), tf.float32)
        wrong = tf.reduce_mean(wrong, name='train_error')
        wd_w = tf.train.exponential_decay(2e-4, get_global_step_var(), 80, 0.1, True)
        wd_cost = tf.multiply(wd_w, regularize_cost('.*/W', tf.nn.l2_loss), name='wd_cost')
        costs.append(wd_cost)
        add_moving_summary(wrong, wd_cost, *costs[:-1])
        return tf.add_n(costs, name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=3e-3, trainable=False)
        opt = tf.train.AdamOptimizer(lr, epsilon=1e-3)
        return optimizer.apply_grad_processors(
            opt, [gradproc.ScaleGradient([('convfcweight.*', 0.1), ('conv2_.*', 5)])])


if __name__ == '__main__':
    logger.auto_set_dir()
    config = TrainConfig(
        model=Model(),
        dataflow=Edges(6, seed=0),
        callbacks=[ModelSaver(), ScheduledHyperParamSetter('learning_rate', [(2, 1e-3)])],
        max_epoch=2,
    )
    launch_train_with_config(config, SimpleTrainer())
    predictor = OfflinePredictor(PredictConfig(
        model=Model(),
        session_init=SmartInit('train_log/hed'),
        input_names=['image'],
        output_names=['output']))
    df = Edges(1, seed=2)
    df.reset_state()
    images, edges = next(iter(df))
    prob, = predictor(images)
    print('edge map', prob.shape, 'mean', float(prob.mean()))
