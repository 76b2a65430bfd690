"""A GAN written for tensorpack 0.9, as programs published on it were (a tabular GAN library's
trainer): _get_inputs with InputDesc, _build_graph(self, inputs) assigning self.*_loss and
self.cost, _get_optimizer, get_inputs_desc(), TowerFuncWrapper, an assigned self.training,
add_moving_summary(..., decay=0.), PrintData around the DataFlow, a schedule of strings."""

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils.tower import TowerFuncWrapper
from tensorpack.utils import logger


class Rows:
    """A DataFlow of its own: batches of table rows, two correlated columns."""

    def __init__(self, n, batch):
        self.n, self.batch = n, batch

    def reset_state(self):
        self.rng = np.random.RandomState(1)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            a = self.rng.randn(self.batch)
            rows = np.stack([a, 0.5 * a + 0.1 * self.rng.randn(self.batch)], axis=1)
            yield [rows.astype('float32')]


class Model(ModelDesc):
    def _get_inputs(self):
        return [InputDesc(tf.float32, (None, 2), 'row')]

    def generator(self, z):
        h = FullyConnected('fc0', z, 8, activation=tf.nn.relu)
        return FullyConnected('fc1', h, 2)

    def discriminator(self, x):
        h = FullyConnected('fc0', x, 8, activation=tf.nn.relu)
        return FullyConnected('fc1', h, 1)

    def _build_graph(self, inputs):
        real = inputs[0]
        self.training = get_current_tower_context().is_training
        z = tf.random_uniform([tf.shape(real)[0], 4], -1, 1, name='z')
        with tf.variable_scope('gen'):
            fake = self.generator(z)
        with tf.variable_scope('discrim'):
            real_logit = self.discriminator(real)
        with tf.variable_scope('discrim', reuse=True):
            fake_logit = self.discriminator(fake)
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        self.d_loss = tf.add(
            tf.reduce_mean(xent(labels=tf.ones_like(real_logit), logits=real_logit)),
            tf.reduce_mean(xent(labels=tf.zeros_like(fake_logit), logits=fake_logit)),
            name='d_loss')
        self.g_loss = tf.reduce_mean(xent(labels=tf.ones_like(fake_logit), logits=fake_logit),
                                     name='g_loss')
        self.cost = tf.add(self.d_loss, self.g_loss, name='cost')
        add_moving_summary(self.d_loss, self.g_loss, decay=0.)

    def _get_optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=2e-3, trainable=False)
        return tf.train.AdamOptimizer(lr, beta1=0.5)


class GANTrainer(TowerTrainer):
    def __init__(self, input, model):
        super(GANTrainer, self).__init__()
        inputs_desc = model.get_inputs_desc()
        self.register_callback(input.setup(inputs_desc))
        self.tower_func = TowerFuncWrapper(model.build_graph, inputs_desc)
        with TowerContext('', is_training=True):
            self.tower_func(*input.get_input_tensors())
        opt = model.get_optimizer()
        self.d_min = opt.minimize(model.d_loss, var_list=tf.trainable_variables('discrim'),
                                  name='d_min')
        self.g_min = opt.minimize(model.g_loss, var_list=tf.trainable_variables('gen'),
                                  name='g_min')

    def run_step(self):
        self.hooked_sess.run(self.d_min)
        self.hooked_sess.run(self.g_min)


if __name__ == '__main__':
    logger.auto_set_dir()
    df = PrintData(Rows(10, 32), num=1)
    trainer = GANTrainer(QueueInput(df), Model())
    trainer.train_with_defaults(
        callbacks=[ModelSaver(), ScheduledHyperParamSetter('learning_rate', [('1', '1e-3')])],
        steps_per_epoch=10, max_epoch=2)
    print('input names', [s.name for s in Model().get_inputs_desc()])
