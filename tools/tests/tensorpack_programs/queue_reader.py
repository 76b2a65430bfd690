"""The reader idioms of tensorpack's PTB-LSTM: the data as one constant in the graph, a batch
index from tf.train.range_input_producer (a queue runner), and tf.train.batch over examples
cut from it (two more queues), given to the trainer by TensorInput and to an InferenceRunner."""

import argparse

import numpy as np
import tensorflow as tf

from tensorpack import *

BATCH = 4
SEQ = 5
CHARS = 7


def producer(raw, batch_size, num_steps, name=None):
    """Yield the rows of one time-major slice and its next-character target, in order."""
    with tf.name_scope(name, "Producer", [raw, batch_size, num_steps]):
        raw = tf.convert_to_tensor(raw, name="raw_data", dtype=tf.int32)
        batch_len = tf.size(raw) // batch_size
        data = tf.reshape(raw[0:batch_size * batch_len], [batch_size, batch_len])
        epoch_size = (batch_len - 1) // num_steps
        i = tf.train.range_input_producer(epoch_size, shuffle=False).dequeue()
        x = tf.strided_slice(data, [0, i * num_steps], [batch_size, (i + 1) * num_steps])
        y = tf.strided_slice(data, [0, i * num_steps + 1], [batch_size, (i + 1) * num_steps + 1])
        x.set_shape([batch_size, num_steps])
        y.set_shape([batch_size, num_steps])
        return x, y


def examples(raw):
    """One (x, y) example at a time from the producer's rows, batched again by tf.train.batch."""
    x, y = producer(raw, 1, SEQ)
    return tf.train.batch([x[0], y[0]], batch_size=BATCH, num_threads=1, capacity=4 * BATCH)


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((BATCH, SEQ), tf.int32, 'input'),
                tf.TensorSpec((BATCH, SEQ), tf.int32, 'nextinput')]

    def build_graph(self, input, nextinput):
        emb = tf.get_variable('embedding', [CHARS, 8])
        feat = tf.nn.embedding_lookup(emb, input)
        logits = FullyConnected('fc', tf.reshape(feat, [-1, 8]), CHARS, activation=tf.identity)
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
            logits=logits, labels=tf.reshape(nextinput, [-1]))
        cost = tf.reduce_mean(xent, name='cost')
        summary.add_moving_summary(cost)
        return cost

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.5, trainable=False)
        return tf.train.GradientDescentOptimizer(lr)


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=int, default=2)
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    train_ids = (np.arange(400) % CHARS).astype('int32')  # the next character is predictable
    val_ids = rng.randint(CHARS, size=200).astype('int32')
    logger.auto_set_dir()
    config = TrainConfig(
        model=Model(),
        data=TensorInput(lambda: examples(train_ids), 6),
        callbacks=[
            ModelSaver(),
            InferenceRunner(TensorInput(lambda: producer(val_ids, BATCH, SEQ), 3),
                            [ScalarStats(['cost'])]),
        ],
        max_epoch=args.epochs,
    )
    launch_train_with_config(config, SimpleTrainer())
