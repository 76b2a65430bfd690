"""Plain tf.summary calls in build_graph, an InferenceRunner, `import tensorpack as tp`."""

import numpy as np
import tensorflow as tf
import tensorpack as tp
from tensorpack.utils import logger


def batches(n, seed):
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        x = rng.randn(16, 4).astype(np.float32)
        out.append([x, x.sum(axis=1)])
    return out


class Regression(tp.ModelDesc):
    def inputs(self):
        return [tf.placeholder(tf.float32, (None, 4), 'x'), tf.placeholder(tf.float32, (None,), 'y')]

    def build_graph(self, x, y):
        w = tf.get_variable('w', [4, 1], initializer=tf.zeros_initializer())
        pred = tf.squeeze(tf.matmul(x, w), 1)
        cost = tf.reduce_mean(tf.square(pred - y), name='cost')
        tf.summary.scalar('cost_in_graph', cost)
        tf.summary.histogram('pred', pred)
        return cost

    def optimizer(self):
        return tf.train.GradientDescentOptimizer(0.1)


if __name__ == '__main__':
    logger.auto_set_dir(name='summaries')
    config = tp.TrainConfig(
        model=Regression(),
        dataflow=batches(10, 0),
        callbacks=[tp.InferenceRunner(batches(3, 1), [tp.ScalarStats('cost')]),
                   tp.MergeAllSummaries()],
        max_epoch=2,
    )
    tp.launch_train_with_config(config, tp.SimpleTrainer())
