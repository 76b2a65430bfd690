#!/usr/bin/env python
"""An InfoGAN with a Wasserstein critic on 8x8 bars, written the way tensorpack's InfoGAN,
WGAN, Improved-WGAN and DiscoGAN programs are: latent codes drawn from
tf.distributions, a placeholder with a default so samples can be fed a code, a
mutual-information term from the critic's second head, the critic's weights clipped by a
callback of the program's own (tf.assign over tf.trainable_variables, run every step) or
a gradient penalty through tf.gradients with LayerNorm and a VariableAssignmentOptimizer,
a piecewise-constant learning rate on the global step, the data format chosen by
tf.test.is_gpu_available, and the generator trained every other step by the
SeparateGANTrainer of GAN.py."""

import argparse

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils import optimizer, summary
from tensorpack.tfutils.scope_utils import auto_reuse_variable_scope
from tensorpack.utils import logger

from GAN import GANModelDesc, SeparateGANTrainer

SHAPE = 8
CODES = 4
NOISE = 4
BATCH = 16


class Bars(object):
    """Batches of images with one bright row; which row is the hidden factor."""

    def __init__(self, n):
        self.n = n

    def reset_state(self):
        self.rng = np.random.RandomState(5)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            img = self.rng.uniform(0, 0.1, size=(BATCH, SHAPE, SHAPE)).astype('float32')
            rows = self.rng.randint(0, CODES, size=BATCH) * 2
            img[np.arange(BATCH), rows, :] = 0.9
            yield [img]


def code_prior():
    """A categorical code and a uniform one, from the priors."""
    cat = tf.distributions.Categorical(logits=tf.zeros([CODES]), name='cat')
    one_hot = tf.one_hot(cat.sample(BATCH), CODES)
    uniform = tf.random_uniform([BATCH, 1], -1, 1)
    return tf.concat([one_hot, uniform], 1)


class Model(GANModelDesc):
    def __init__(self, critic):
        self.critic = critic

    def inputs(self):
        return [tf.TensorSpec((None, SHAPE, SHAPE), tf.float32, 'input')]

    def generator(self, z):
        l = FullyConnected('fc0', z, 4 * 4 * 8, activation=tf.nn.relu)
        l = tf.reshape(l, [-1, 4, 4, 8])
        l = Conv2DTranspose('deconv', l, 1, 4, strides=2)
        return tf.sigmoid(l, name='gen')

    @auto_reuse_variable_scope
    def discriminator(self, imgs):
        norm = LayerNorm if self.critic == 'penalty' else (lambda name, x: x)
        with argscope(Conv2D, kernel_size=3, strides=2, data_format=self.data_format):
            l = Conv2D('conv0', imgs, 8, activation=tf.nn.leaky_relu)
            l = tf.nn.leaky_relu(norm('ln1', Conv2D('conv1', l, 16)))
        score = FullyConnected('fct', l, 1)
        code = FullyConnected('fce', l, CODES + 1)
        return score, code

    def build_graph(self, real):
        self.data_format = 'channels_first' if tf.test.is_gpu_available() else 'channels_last'
        real = tf.expand_dims(real, -1)
        zc = tf.placeholder_with_default(code_prior(), [None, CODES + 1], name='z_code')
        noise = tf.placeholder_with_default(tf.random_uniform([BATCH, NOISE], -1, 1), [None, NOISE],
                                            name='z_noise')
        with argscope([Conv2D, Conv2DTranspose, FullyConnected],
                      kernel_initializer=tf.truncated_normal_initializer(stddev=0.1)):
            with tf.variable_scope('gen'):
                fake = self.generator(tf.concat([zc, noise], 1, name='z'))
                tf.summary.image('gen', tf.cast(fake * 255, tf.uint8, name='viz'), max_outputs=4)
            with tf.variable_scope('discrim'):
                real_score, _ = self.discriminator(real)
                fake_score, code = self.discriminator(fake)

        with tf.name_scope('mutual_information'):
            logits, mean = code[:, :CODES], code[:, CODES:]
            posterior_cat = tf.distributions.Categorical(logits=logits)
            posterior_uni = tf.distributions.Normal(loc=mean, scale=1.0)
            cond_entropy = tf.add(
                -tf.reduce_mean(posterior_cat.log_prob(tf.argmax(zc[:, :CODES], 1))),
                -tf.reduce_mean(posterior_uni.log_prob(zc[:, CODES:])), name='cond_entropy')
            prior_entropy = tf.constant(np.log(CODES), tf.float32, name='prior_entropy')
            mi = tf.subtract(prior_entropy, cond_entropy, name='mutual_information')
            summary.add_moving_summary(cond_entropy, mi)

        with tf.name_scope('wgan'):
            d_loss = tf.reduce_mean(fake_score - real_score, name='d_loss')
            g_loss = tf.negative(tf.reduce_mean(fake_score), name='g_loss')
            if self.critic == 'penalty':
                alpha = tf.random_uniform([tf.shape(real)[0], 1, 1, 1], 0., 1., name='alpha')
                between = real + alpha * (fake - real)
                with tf.variable_scope('discrim'):
                    grad = tf.gradients(self.discriminator(between)[0], [between])[0]
                norm = tf.sqrt(tf.reduce_sum(tf.square(grad), [1, 2, 3]))
                penalty = tf.reduce_mean(tf.square(norm - 1), name='gradient_penalty')
                summary.add_moving_summary(penalty)
                d_loss = tf.add(d_loss, 10 * penalty)
        self.d_loss = tf.subtract(d_loss, mi, name='total_d_loss')
        self.g_loss = tf.subtract(g_loss, mi, name='total_g_loss')
        summary.add_moving_summary(self.d_loss, self.g_loss)
        self.collect_variables()

    def optimizer(self):
        lr = tf.train.piecewise_constant(get_global_step_var(), [25], [2e-3, 1e-3], name='learning_rate')
        tf.summary.scalar('lr', lr)
        if self.critic == 'clip':
            return tf.train.RMSPropOptimizer(lr)

        def keep_scale_positive(v):
            if not v.op.name.endswith('/gamma'):
                return None
            logger.info("Clip {}".format(v.op.name))
            return tf.maximum(v, 0.0)
        return optimizer.VariableAssignmentOptimizer(tf.train.AdamOptimizer(lr, beta1=0.5), keep_scale_positive)


class ClipCallback(Callback):
    def _setup_graph(self):
        ops = []
        for v in tf.trainable_variables():
            if v.op.name.startswith('discrim/'):
                ops.append(tf.assign(v, tf.clip_by_value(v, -0.05, 0.05)))
        self._op = tf.group(*ops, name='clip')

    def _trigger_step(self):
        self._op.run()


def sample(model_path, critic):
    pred = OfflinePredictor(PredictConfig(
        session_init=SmartInit(model_path), model=Model(critic),
        input_names=['z_code', 'z_noise'], output_names=['gen/gen']))
    codes = np.concatenate([np.eye(CODES), np.zeros((CODES, 1))], 1).astype('float32')
    return pred(codes, np.zeros((CODES, NOISE), 'float32'))[0]


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--critic', choices=['clip', 'penalty'], default='clip')
    args = parser.parse_args()
    logger.auto_set_dir(name=args.critic)
    callbacks = [ModelSaver()]
    if args.critic == 'clip':
        callbacks.append(ClipCallback())
    SeparateGANTrainer(QueueInput(Bars(10)), Model(args.critic), g_period=2).train_with_defaults(
        callbacks=callbacks, steps_per_epoch=10, max_epoch=2)
    samples = sample(tf.train.latest_checkpoint('train_log/info_wgan:' + args.critic), args.critic)
    print('samples', samples.shape, 'range', float(samples.min()) >= 0.0, float(samples.max()) <= 1.0)
