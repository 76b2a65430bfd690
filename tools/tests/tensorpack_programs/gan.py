"""A two-player GAN in tensorpack's style: `from tensorpack import *`, a trainer of its own
built at the top level, and a sampler over a DataFlow of noise with SimpleDatasetPredictor."""

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.utils import logger

REAL_MEAN = np.array([1.5, -1.0], np.float32)


class Batches:
    """A DataFlow of its own: [real, noise] batches, drawn anew each pass after reset_state()."""

    def __init__(self, n, batch, with_real=True):
        self.n, self.batch, self.with_real = n, batch, with_real
        self.rng = None

    def reset_state(self):
        self.rng = np.random.RandomState(0)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            z = self.rng.randn(self.batch, 2).astype(np.float32)
            real = (self.rng.randn(self.batch, 2) * 0.3 + REAL_MEAN).astype(np.float32)
            yield [real, z] if self.with_real else [z]


class Model(ModelDesc):
    def inputs(self):
        return [tf.placeholder(tf.float32, (None, 2), 'real'),
                tf.placeholder(tf.float32, (None, 2), 'z')]

    def generator(self, z):
        with tf.variable_scope('gen'):
            h = FullyConnected('fc0', z, 16, activation=tf.nn.relu)
            return FullyConnected('fc1', h, 2)

    def discriminator(self, x):
        with tf.variable_scope('discrim', reuse=tf.AUTO_REUSE):
            h = FullyConnected('fc0', x, 16, activation=tf.nn.leaky_relu)
            return FullyConnected('fc1', h, 1)

    def build_graph(self, real, z):
        fake = tf.identity(self.generator(z), name='sample')
        real_logit, fake_logit = self.discriminator(real), self.discriminator(fake)
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        self.d_loss = tf.add(tf.reduce_mean(xent(labels=tf.ones_like(real_logit), logits=real_logit)),
                             tf.reduce_mean(xent(labels=tf.zeros_like(fake_logit), logits=fake_logit)),
                             name='d_loss')
        self.g_loss = tf.reduce_mean(xent(labels=tf.ones_like(fake_logit), logits=fake_logit), name='g_loss')
        add_moving_summary(self.d_loss, self.g_loss)

    def optimizer(self):
        return tf.train.AdamOptimizer(1e-3, beta1=0.5)


class GANTrainer(TowerTrainer):
    """One discriminator step, then one generator step."""

    def __init__(self, input, model):
        super(GANTrainer, self).__init__()
        inputs_desc = model.get_input_signature()
        self.register_callback(input.setup(inputs_desc))
        self.tower_func = TowerFunc(model.build_graph, inputs_desc)
        with TowerContext('', is_training=True):
            self.tower_func(*input.get_input_tensors())
        opt = model.get_optimizer()
        self.d_min = opt.minimize(model.d_loss, var_list=tf.trainable_variables('discrim'), name='d_min')
        self.g_min = opt.minimize(model.g_loss, var_list=tf.trainable_variables('gen'), name='g_min')

    def run_step(self):
        self.hooked_sess.run(self.d_min)
        self.hooked_sess.run(self.g_min)


if __name__ == '__main__':
    logger.auto_set_dir()
    trainer = GANTrainer(QueueInput(Batches(10, 32)), Model())
    trainer.train_with_defaults(callbacks=[ModelSaver()], steps_per_epoch=10, max_epoch=2)
    sampler = SimpleDatasetPredictor(
        PredictConfig(model=Model(), session_init=SmartInit('train_log/gan'),
                      input_names=['z'], output_names=['sample']),
        Batches(3, 100, with_real=False))
    samples = np.concatenate([out[0] for out in sampler.get_result()])
    print('samples', samples.shape, 'mean', samples.mean(axis=0))
