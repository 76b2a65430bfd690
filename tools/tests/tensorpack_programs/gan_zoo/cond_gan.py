#!/usr/bin/env python
"""A conditional GAN on 8x8 class-coded squares, written the way tensorpack's GAN programs are:
the shared GAN.py beside it, `from tensorpack import *`, the tfutils modules imported as
modules, the discriminator reused through auto_reuse_variable_scope, a BEGAN-style balance
variable updated under control_dependencies, a CycleGAN-style learning-rate variable set by a
schedule, Image2Image's always-training BatchNorm and Dropout under argscope, LinearWrap, and
samples drawn afterwards with an OfflinePredictor."""

import argparse

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils import gradproc, optimizer, summary
from tensorpack.tfutils.scope_utils import auto_reuse_variable_scope, under_name_scope
from tensorpack.utils import logger

from GAN import GANModelDesc, GANTrainer, RandomZData, SeparateGANTrainer

SHAPE = 8
CLASSES = 3
Z_DIM = 6
BATCH = 16


def BNLReLU(x, name=None):
    return tf.nn.leaky_relu(BatchNorm('bn', x), alpha=0.2, name=name)


class Squares(object):
    """[image, label] batches: a bright 4x4 square in the corner the label names."""

    def __init__(self, n):
        self.n = n

    def reset_state(self):
        self.rng = np.random.RandomState(3)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            label = self.rng.randint(CLASSES, size=BATCH).astype('int32')
            img = self.rng.uniform(-1, -0.8, size=(BATCH, SHAPE, SHAPE, 1)).astype('float32')
            for i, k in enumerate(label):
                r, c = divmod(int(k), 2)
                img[i, r * 4:r * 4 + 4, c * 4:c * 4 + 4] = 0.9
            yield [img, label]


class Model(GANModelDesc):
    def inputs(self):
        return [tf.placeholder(tf.float32, (None, SHAPE, SHAPE, 1), 'input'),
                tf.placeholder(tf.int32, (None,), 'label')]

    def generator(self, z, y):
        l = tf.concat([z, y], 1)
        l = FullyConnected('fc0', l, 4 * 4 * 8, activation=BNReLU)
        l = tf.reshape(l, [-1, 4, 4, 8])
        with argscope(BatchNorm, training=True), argscope(Dropout, is_training=True):
            l = (LinearWrap(l)
                 .Conv2DTranspose('deconv', 4, 3, strides=2, activation=BNReLU)
                 .Dropout(rate=0.1)())
        l = InstanceNorm('inorm', l)
        l = tf.pad(l, [[0, 0], [1, 1], [1, 1], [0, 0]], mode='SYMMETRIC')
        l = Conv2D('conv_out', l, 1, 3, padding='VALID', activation=tf.tanh)
        return l

    @auto_reuse_variable_scope
    def discriminator(self, imgs, y):
        yv = tf.reshape(y, [-1, 1, 1, CLASSES])
        l = tf.concat([imgs, yv * tf.ones([1, SHAPE, SHAPE, 1])], 3)
        with argscope(Conv2D, kernel_size=3, strides=2):
            l = (LinearWrap(l)
                 .Conv2D('conv0', 8, activation=tf.nn.leaky_relu)
                 .Conv2D('conv1', 16, activation=BNLReLU)
                 .FullyConnected('fct', 1)())
        return l

    @under_name_scope()
    def balance(self, d_loss_real, d_loss_fake):
        kt = tf.get_variable('kt', dtype=tf.float32, initializer=0.0, trainable=False)
        update = kt.assign(tf.clip_by_value(kt + 1e-3 * tf.abs(0.5 * d_loss_real - d_loss_fake), 0.0, 1.0))
        tf.summary.scalar('kt', kt)
        return update

    def build_graph(self, image, label):
        y = tf.one_hot(label, CLASSES)
        z = tf.random_uniform([tf.shape(image)[0], Z_DIM], -1, 1, name='z_train')
        z = tf.placeholder_with_default(z, [None, Z_DIM], name='z')
        summary.add_tensor_summary(z, ['histogram'], name='z-hist')
        with argscope([Conv2D, Conv2DTranspose, FullyConnected],
                      kernel_initializer=tf.truncated_normal_initializer(stddev=0.02)):
            with tf.variable_scope('gen'):
                fake = self.generator(z, y)
                tf.identity(fake, name='sample')
                tf.summary.image('gen', tf.cast((fake + 1) * 127.5, tf.uint8), max_outputs=3)
            with tf.variable_scope('discrim'):
                real_logits = self.discriminator(image, y)
                fake_logits = self.discriminator(fake, y)
        self.build_losses(real_logits, fake_logits)
        update_kt = self.balance(self.d_loss, self.g_loss)
        with tf.control_dependencies([update_kt]):
            self.d_loss = tf.identity(self.d_loss, name='d_loss_balanced')
        summary.add_moving_summary(self.d_loss)  # fetched every step: kt moves every step
        self.collect_variables()

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=2e-3, trainable=False)
        tf.summary.scalar('learning_rate-summary', lr)
        opt = tf.train.AdamOptimizer(lr, beta1=0.5, epsilon=1e-3)
        return optimizer.apply_grad_processors(
            opt, [gradproc.ScaleGradient(('gen/.*', 2.0), verbose=False), gradproc.GlobalNormClip(10.)])


def sample(model_path, n=6):
    pred = OfflinePredictor(PredictConfig(
        session_init=SmartInit(model_path), model=Model(),
        input_names=['z', 'label'], output_names=['gen/sample']))
    z = next(iter(_seeded(RandomZData((n, Z_DIM)))))[0]
    return pred(z, np.arange(n, dtype='int32') % CLASSES)[0]


def _seeded(df):
    df.reset_state()
    return df


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--towers', type=int, default=1)
    parser.add_argument('--separate', action='store_true', help='SeparateGANTrainer(d_period=2)')
    args = parser.parse_args()
    logger.auto_set_dir()
    input = QueueInput(Squares(12))
    if args.separate:
        trainer = SeparateGANTrainer(input, Model(), d_period=2)
    else:
        trainer = GANTrainer(input, Model(), num_gpu=args.towers)
    trainer.train_with_defaults(
        callbacks=[PeriodicTrigger(ModelSaver(), every_k_epochs=1),
                   ScheduledHyperParamSetter('learning_rate', [(1, 2e-3), (2, 1e-3)], interp='linear')],
        steps_per_epoch=12, max_epoch=2)
    samples = sample(tf.train.latest_checkpoint('train_log/cond_gan'))
    print('samples', samples.shape, 'range', float(samples.min()) >= -1.0, float(samples.max()) <= 1.0)
