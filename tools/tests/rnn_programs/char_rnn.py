"""A character-level language model in tensorpack's style: TensorFlow 1 contrib cells, dynamic_rnn."""

import numpy as np
import tensorflow as tf
from tensorpack import *
from tensorpack.tfutils.tower import get_current_tower_context
from tensorpack.utils import logger

TEXT = "the quick brown fox jumps over the lazy dog. " * 20
CHARS = sorted(set(TEXT))
SEQ_LEN = 12
BATCH = 16
HIDDEN = 32


def batches(n, seed):
    ids = np.array([CHARS.index(c) for c in TEXT], dtype=np.int32)
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        starts = rng.randint(0, len(ids) - SEQ_LEN - 1, size=BATCH)
        seq = np.stack([ids[s:s + SEQ_LEN + 1] for s in starts])
        out.append([seq[:, :-1], seq[:, 1:]])
    return out


class CharRNN(ModelDesc):
    def inputs(self):
        return [tf.placeholder(tf.int32, (None, SEQ_LEN), 'input'),
                tf.placeholder(tf.int32, (None, SEQ_LEN), 'nextinput')]

    def build_graph(self, input, nextinput):
        is_training = get_current_tower_context().is_training
        cells = []
        for _ in range(2):
            cell = tf.contrib.rnn.LSTMCell(HIDDEN)
            if is_training:
                cell = tf.contrib.rnn.DropoutWrapper(cell, output_keep_prob=0.9)
            cells.append(cell)
        cell = tf.nn.rnn_cell.MultiRNNCell(cells)
        embeddingW = tf.get_variable('embedding', [len(CHARS), HIDDEN])
        x = tf.nn.embedding_lookup(params=embeddingW, ids=input)
        initial = cell.zero_state(tf.shape(input)[0], tf.float32)
        outputs, last_state = tf.nn.dynamic_rnn(cell, x, initial_state=initial, scope='rnnlm')
        last_state = tf.identity(last_state[-1].h, name='last_state')
        logits = FullyConnected('fc', tf.reshape(outputs, [-1, HIDDEN]), len(CHARS))
        tf.nn.softmax(logits, name='prob')
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
            logits=logits, labels=tf.reshape(nextinput, [-1]))
        cost = tf.reduce_mean(xent, name='cost')
        add_moving_summary(cost)
        return cost

    def optimizer(self):
        return tf.train.AdamOptimizer(0.01)


if __name__ == '__main__':
    logger.auto_set_dir(name='char_rnn')
    config = TrainConfig(
        model=CharRNN(),
        dataflow=batches(20, 0),
        callbacks=[InferenceRunner(batches(4, 1), [ScalarStats('cost')])],
        max_epoch=2,
    )
    launch_train_with_config(config, SimpleTrainer())
