"""The shared part of a family of GAN programs, kept beside them as tensorpack users do: a
model base with the d/g variable split and the usual losses, a trainer on one or several
towers (the generator step, then the discriminator step), one that alternates the two at a
ratio, and a DataFlow of noise."""

import numpy as np
import tensorflow as tf

from tensorpack import (BatchNorm, DataParallelBuilder, LeastLoadedDeviceSetter, ModelDescBase,
                        StagingInput, TowerContext, TowerFunc, TowerTrainer, argscope)
from tensorpack.tfutils.summary import add_moving_summary
from tensorpack.utils import logger


class GANModelDesc(ModelDescBase):
    def collect_variables(self, g_scope='gen', d_scope='discrim'):
        self.g_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, g_scope)
        self.d_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, d_scope)
        assert self.g_vars and self.d_vars, (g_scope, d_scope)

    def build_losses(self, real_logits, fake_logits):
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        with tf.name_scope('GAN_loss'):
            tf.summary.histogram('real-score', tf.sigmoid(real_logits))
            with tf.name_scope('discrim'):
                on_real = tf.reduce_mean(xent(logits=real_logits, labels=tf.ones_like(real_logits)),
                                         name='loss_real')
                on_fake = tf.reduce_mean(xent(logits=fake_logits, labels=tf.zeros_like(fake_logits)),
                                         name='loss_fake')
                d_acc = tf.reduce_mean(tf.cast(real_logits > 0, tf.float32), name='accuracy_real')
            self.d_loss = tf.add(0.5 * on_real, 0.5 * on_fake, name='loss')
            with tf.name_scope('gen'):
                self.g_loss = tf.reduce_mean(xent(logits=fake_logits, labels=tf.ones_like(fake_logits)),
                                             name='loss')
            add_moving_summary(self.g_loss, self.d_loss, d_acc)

    def get_optimizer(self):
        if not hasattr(self, '_opt'):
            self._opt = self.optimizer()
        return self._opt


class GANTrainer(TowerTrainer):
    def __init__(self, input, model, num_gpu=1):
        super(GANTrainer, self).__init__()
        if num_gpu > 1:
            input = StagingInput(input)
        self.register_callback(input.setup(model.get_input_signature()))
        if num_gpu <= 1:
            self.tower_func = TowerFunc(model.build_graph, model.inputs())
            with TowerContext('', is_training=True):
                self.tower_func(*input.get_input_tensors())
            d_loss, g_loss = model.d_loss, model.g_loss
        else:
            def losses(*inputs):
                model.build_graph(*inputs)
                return [model.d_loss, model.g_loss]

            self.tower_func = TowerFunc(losses, model.get_input_signature())
            devices = ['/cpu:0'] * num_gpu
            per_tower = DataParallelBuilder.call_for_each_tower(
                list(range(num_gpu)), lambda: self.tower_func(*input.get_input_tensors()),
                [LeastLoadedDeviceSetter(d, devices) for d in devices])
            d_loss = tf.add_n([x[0] for x in per_tower]) * (1.0 / num_gpu)
            g_loss = tf.add_n([x[1] for x in per_tower]) * (1.0 / num_gpu)
        opt = model.get_optimizer()
        with tf.name_scope('optimize'):
            g_min = opt.minimize(g_loss, var_list=model.g_vars, colocate_gradients_with_ops=True,
                                 name='g_op')
            with tf.control_dependencies([g_min]):
                d_min = opt.minimize(d_loss, var_list=model.d_vars, colocate_gradients_with_ops=True,
                                     name='d_op')
        self.train_op = d_min


class SeparateGANTrainer(TowerTrainer):
    """The discriminator every d_period steps, the generator every g_period steps."""

    def __init__(self, input, model, d_period=1, g_period=1):
        super(SeparateGANTrainer, self).__init__()
        self._d_period, self._g_period = int(d_period), int(g_period)
        self.register_callback(input.setup(model.get_input_signature()))
        self.tower_func = TowerFunc(model.build_graph, model.inputs())
        with TowerContext('', is_training=True), argscope(BatchNorm, ema_update='internal'):
            self.tower_func(*input.get_input_tensors())
        if tf.get_collection(tf.GraphKeys.UPDATE_OPS):
            logger.warn('UPDATE_OPS is not empty: each of the two ops would run them')
        opt = model.get_optimizer()
        with tf.name_scope('optimize'):
            self.d_min = opt.minimize(model.d_loss, var_list=model.d_vars, name='d_min')
            self.g_min = opt.minimize(model.g_loss, var_list=model.g_vars, name='g_min')

    def run_step(self):
        if self.global_step % self._d_period == 0:
            self.hooked_sess.run(self.d_min)
        if self.global_step % self._g_period == 0:
            self.hooked_sess.run(self.g_min)


class RandomZData(object):
    """Uniform noise of `shape`, forever."""

    def __init__(self, shape):
        self.shape = shape

    def reset_state(self):
        self.rng = np.random.RandomState(7)

    def __iter__(self):
        while True:
            yield [self.rng.uniform(-1, 1, size=self.shape).astype('float32')]
