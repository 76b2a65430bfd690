"""A word-level language model in tensorpack's PTB style: the LSTM state carried across steps.

The state lives in non-trainable variables that each step assigns its last state to;
RunOp callbacks zero it before each epoch and each of the two inference runs, which
have towers of their own (validation and test). The corpus is made up here.
"""

import numpy as np
import tensorflow as tf
from tensorpack import *
from tensorpack.tfutils import gradproc, optimizer, summary
from tensorpack.utils import logger

rnn = tf.contrib.rnn

VOCAB = 40
SEQ_LEN = 10
BATCH = 8
HIDDEN = 24
NUM_LAYER = 2


def corpus(n_words, seed):
    """Words from a small grammar: each word mostly decides the next one."""
    rng = np.random.RandomState(seed)
    follow = np.random.RandomState(0).randint(0, VOCAB, size=(VOCAB, 3))
    words = [0]
    for _ in range(n_words - 1):
        words.append(follow[words[-1], rng.randint(0, 3)])
    return np.array(words, dtype=np.int32)


class SequenceData:
    """BATCH parallel streams over the corpus, cut in SEQ_LEN steps (the PTB reader's layout).

    A re-iterable with a length, where tensorpack's program has a DataFlow.
    """

    def __init__(self, words):
        per_stream = len(words) // BATCH
        self.streams = words[: per_stream * BATCH].reshape(BATCH, per_stream)
        self.steps = (per_stream - 1) // SEQ_LEN

    def __len__(self):
        return self.steps

    def __iter__(self):
        for k in range(self.steps):
            chunk = self.streams[:, k * SEQ_LEN : (k + 1) * SEQ_LEN + 1]
            yield [chunk[:, :-1], chunk[:, 1:]]


class Model(ModelDesc):
    def inputs(self):
        return [
            tf.placeholder(tf.int32, (BATCH, SEQ_LEN), "input"),
            tf.placeholder(tf.int32, (BATCH, SEQ_LEN), "nextinput"),
        ]

    def build_graph(self, input, nextinput):
        initializer = tf.random_uniform_initializer(-0.1, 0.1)

        def one_cell():
            cell = rnn.BasicLSTMCell(num_units=HIDDEN, forget_bias=0.0)
            if self.training:
                cell = rnn.DropoutWrapper(cell, output_keep_prob=0.9)
            return cell

        cell = rnn.MultiRNNCell([one_cell() for _ in range(NUM_LAYER)])

        def state_variable(name):
            return tf.get_variable(
                name, [BATCH, HIDDEN], trainable=False, initializer=tf.constant_initializer()
            )

        self.state = tuple(
            rnn.LSTMStateTuple(state_variable("c{}".format(k)), state_variable("h{}".format(k)))
            for k in range(NUM_LAYER)
        )
        embedding = tf.get_variable("embedding", [VOCAB, HIDDEN], initializer=initializer)
        x = tf.nn.embedding_lookup(embedding, input)
        with tf.variable_scope("LSTM", initializer=initializer):
            steps = tf.unstack(x, num=SEQ_LEN, axis=1)
            outputs, last_state = rnn.static_rnn(cell, steps, self.state, scope="rnn")
        carry = []
        for k in range(NUM_LAYER):
            carry.append(tf.assign(self.state[k].c, last_state[k].c))
            carry.append(tf.assign(self.state[k].h, last_state[k].h))
        with tf.control_dependencies(carry):
            output = tf.reshape(tf.concat(outputs, 1), [-1, HIDDEN])
        logits = FullyConnected("fc", output, VOCAB, activation=tf.identity)
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
            logits=logits, labels=tf.reshape(nextinput, [-1])
        )
        cost = tf.truediv(tf.reduce_sum(xent), float(BATCH), name="cost")
        summary.add_moving_summary(cost)
        return cost

    def reset_lstm_state(self):
        zero = tf.zeros_like(self.state[0].c)
        ops = []
        for k in range(NUM_LAYER):
            ops.append(self.state[k].c.assign(zero))
            ops.append(self.state[k].h.assign(zero))
        return tf.group(*ops, name="reset_lstm_state")

    def optimizer(self):
        lr = tf.get_variable("learning_rate", initializer=0.5, trainable=False)
        opt = tf.train.GradientDescentOptimizer(lr)
        return optimizer.apply_grad_processors(opt, [gradproc.GlobalNormClip(5)])


def perplexities(self):
    for name in ("validation", "test"):
        cost = self.trainer.monitors.get_latest("{}_cost".format(name))
        self.trainer.monitors.put_scalar("{}_perplexity".format(name), np.exp(cost / SEQ_LEN))


if __name__ == "__main__":
    logger.auto_set_dir(name="ptb_lm")
    M = Model()
    train_data = SequenceData(corpus(BATCH * SEQ_LEN * 12 + BATCH, 1))
    config = TrainConfig(
        data=QueueInput(train_data),
        model=M,
        callbacks=[
            ModelSaver(),
            HyperParamSetterWithFunc("learning_rate", lambda e, x: x * 0.8 if e > 1 else x),
            RunOp(lambda: M.reset_lstm_state()),
            InferenceRunner(
                SequenceData(corpus(BATCH * SEQ_LEN * 3 + BATCH, 2)), [ScalarStats(["cost"])]
            ),
            RunOp(lambda: M.reset_lstm_state()),
            InferenceRunner(
                SequenceData(corpus(BATCH * SEQ_LEN * 3 + BATCH, 3)),
                [ScalarStats(["cost"], prefix="test")],
                tower_name="InferenceTowerTest",
            ),
            RunOp(lambda: M.reset_lstm_state()),
            CallbackFactory(trigger=perplexities),
        ],
        max_epoch=3,
    )
    launch_train_with_config(config, SimpleTrainer())
