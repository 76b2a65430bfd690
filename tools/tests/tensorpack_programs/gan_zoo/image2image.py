#!/usr/bin/env python
"""Translation between two 8x8 domains (grey stripes and colour blocks), written the way
tensorpack's Image2Image (pix2pix) and CycleGAN programs are: a U-Net generator with
ConcatWith skips and Conv2DTranspose, reflect padding, InstanceNorm with a ReLU of the
program's own, a least-squares adversarial loss (tf.squared_difference) and cycle L1
losses, images joined side by side for TensorBoard by a visualize_tensors of its own
(tf.image.grayscale_to_rgb, clipping, a tensor named viz), and a callback that builds a
predictor with self.trainer.get_predictor and puts its outputs to the monitors as images
after each epoch."""

import argparse

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils.scope_utils import auto_reuse_variable_scope
from tensorpack.tfutils.summary import add_moving_summary

from GAN import GANModelDesc, GANTrainer

SHAPE = 8
BATCH = 4
LAMBDA = 10.0


class Domains(object):
    """[A, B]: grey horizontal stripes (1 channel) and unrelated colour blocks (3 channels)."""

    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            a = -np.ones((BATCH, SHAPE, SHAPE, 1), 'float32')
            b = -np.ones((BATCH, SHAPE, SHAPE, 3), 'float32')
            for i in range(BATCH):
                a[i, self.rng.randint(SHAPE)] = 1.0
                y, x = self.rng.randint(0, SHAPE - 3, size=2)
                b[i, y:y + 3, x:x + 3, self.rng.randint(3)] = 1.0
            yield [a, b]


def INReLU(x, name=None):
    return tf.nn.relu(InstanceNorm('inorm', x), name=name)


def INLReLU(x, name=None):
    return tf.nn.leaky_relu(InstanceNorm('inorm', x), alpha=0.2, name=name)


def visualize_tensors(name, imgs, scale_func=lambda x: (x + 1.) * 128., max_outputs=1):
    """Images joined along the width, scaled to [0, 255], as one image summary."""
    xy = scale_func(tf.concat(imgs, axis=2))
    xy = tf.cast(tf.clip_by_value(xy, 0, 255), tf.uint8, name='viz')
    tf.summary.image(name, xy, max_outputs=max_outputs)


class Model(GANModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, SHAPE, SHAPE, 1), tf.float32, 'inputA'),
                tf.TensorSpec((None, SHAPE, SHAPE, 3), tf.float32, 'inputB')]

    @auto_reuse_variable_scope
    def generator(self, img, out_channels):
        with argscope([Conv2D, Conv2DTranspose], kernel_size=3, activation=INReLU):
            e1 = Conv2D('enc1', img, 8, strides=2)
            e2 = Conv2D('enc2', e1, 16, strides=2)
            d1 = Conv2DTranspose('dec1', e2, 8, strides=2)
            d1 = ConcatWith(d1, e1, 3)
            d2 = Conv2DTranspose('dec2', d1, 8, strides=2)
        l = tf.pad(d2, [[0, 0], [1, 1], [1, 1], [0, 0]], mode='REFLECT')
        return Conv2D('out', l, out_channels, 3, padding='VALID', activation=tf.tanh)

    @auto_reuse_variable_scope
    def discriminator(self, img):
        with argscope(Conv2D, kernel_size=3, strides=2):
            l = (LinearWrap(img)
                 .Conv2D('conv0', 8, activation=tf.nn.leaky_relu)
                 .Conv2D('conv1', 16, activation=INLReLU)
                 .Conv2D('conv2', 1, strides=1, activation=tf.identity)())
        return l

    def build_graph(self, A, B):
        with argscope([Conv2D, Conv2DTranspose],
                      kernel_initializer=tf.random_normal_initializer(stddev=0.02)):
            with tf.variable_scope('gen'):
                with tf.variable_scope('B'):
                    AB = self.generator(A, 3)
                with tf.variable_scope('A'):
                    BA = self.generator(B, 1)
                    ABA = self.generator(AB, 1)
                with tf.variable_scope('B'):
                    BAB = self.generator(BA, 3)
            with tf.variable_scope('discrim'):
                with tf.variable_scope('A'):
                    A_real, A_fake = self.discriminator(A), self.discriminator(BA)
                with tf.variable_scope('B'):
                    B_real, B_fake = self.discriminator(B), self.discriminator(AB)

        with tf.name_scope('A_recon'):
            visualize_tensors('A-AB-ABA', [tf.image.grayscale_to_rgb(A), AB, tf.image.grayscale_to_rgb(ABA)])
        with tf.name_scope('B_recon'):
            visualize_tensors('B-BA-BAB', [B, tf.image.grayscale_to_rgb(BA), BAB])

        def lsgan(real, fake):
            d_loss = tf.add(tf.reduce_mean(tf.squared_difference(real, 0.9)),
                            tf.reduce_mean(tf.square(fake)), name='d_loss')
            g_loss = tf.reduce_mean(tf.squared_difference(fake, 0.9), name='g_loss')
            add_moving_summary(d_loss, g_loss)
            return d_loss, g_loss

        with tf.name_scope('LossA'):
            da_loss, ga_loss = lsgan(A_real, A_fake)
        with tf.name_scope('LossB'):
            db_loss, gb_loss = lsgan(B_real, B_fake)
        recon = tf.add(tf.reduce_mean(tf.abs(A - ABA)), tf.reduce_mean(tf.abs(B - BAB)), name='recon_loss')
        self.g_loss = tf.add(ga_loss + gb_loss, LAMBDA * recon, name='G_loss_total')
        self.d_loss = tf.add(da_loss, db_loss, name='D_loss_total')
        self.collect_variables('gen', 'discrim')
        add_moving_summary(recon, self.g_loss, self.d_loss)

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=2e-3, trainable=False)
        return tf.train.AdamOptimizer(lr, beta1=0.5, epsilon=1e-3)


class VisualizeTestSet(Callback):
    def _setup_graph(self):
        self.pred = self.trainer.get_predictor(['inputA', 'inputB'], ['A_recon/viz', 'B_recon/viz'])

    def _before_train(self):
        global args
        self.val_ds = Domains(args.test_batches, 9)
        self.val_ds.reset_state()

    def _trigger(self):
        for idx, (iA, iB) in enumerate(self.val_ds):
            vizA, vizB = self.pred(iA, iB)
            self.trainer.monitors.put_image('testA-{}'.format(idx), vizA)
            self.trainer.monitors.put_image('testB-{}'.format(idx), vizB)


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--test-batches', type=int, default=2)
    args = parser.parse_args()
    logger.auto_set_dir()
    GANTrainer(QueueInput(Domains(8, 0)), Model()).train_with_defaults(
        callbacks=[
            PeriodicTrigger(ModelSaver(), every_k_epochs=2),
            ScheduledHyperParamSetter('learning_rate', [(1, 2e-3), (2, 1e-3)]),
            PeriodicTrigger(VisualizeTestSet(), every_k_epochs=1),
        ],
        steps_per_epoch=8, max_epoch=2)
