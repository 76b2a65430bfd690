"""The idioms of tensorpack's CTC-TIMIT: variable-length frames with sparse labels fed as
three inputs and put together into a tf.SparseTensor, a bidirectional LSTM of TensorFlow 1
cells, CTC loss with greedy and beam-search decoding, and an edit-distance error."""

import argparse

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils.gradproc import GlobalNormClip, SummaryGradient

rnn = tf.contrib.rnn

BATCH = 8
HIDDEN = 16
NR_SYMBOL = 4
NR_CLASS = NR_SYMBOL + 1  # the symbols and CTC's blank
FEATUREDIM = 6


def pad_frames(feats):
    """Frames of several lengths as one zero-padded batch."""
    longest = max(f.shape[0] for f in feats)
    out = np.zeros((len(feats), longest, FEATUREDIM), np.float32)
    for k, f in enumerate(feats):
        out[k, :f.shape[0]] = f
    return out


def sparse_label(labels):
    """Labels of several lengths as the indices, values and shape of a sparse tensor."""
    indices = [[b, t] for b, lab in enumerate(labels) for t in range(len(lab))]
    values = [c for lab in labels for c in lab]
    shape = [len(labels), max(len(lab) for lab in labels)]
    return np.asarray(indices, np.int64), np.asarray(values, np.int32), np.asarray(shape, np.int64)


class Utterances:
    """A DataFlow of its own: each symbol is spoken as 1 to 3 noisy frames, with silences."""

    def __init__(self, batches, seed):
        self.batches, self.seed = batches, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def __len__(self):
        return self.batches

    def utterance(self):
        label = self.rng.randint(0, NR_SYMBOL, size=self.rng.randint(2, 5))
        frames = []
        for c in label:
            for _ in range(self.rng.randint(1, 4)):
                frames.append(np.eye(FEATUREDIM)[c])
            frames.append(np.eye(FEATUREDIM)[FEATUREDIM - 1])  # a silence
        feat = np.asarray(frames) + self.rng.normal(0, 0.1, (len(frames), FEATUREDIM))
        return feat, label

    def __iter__(self):
        for _ in range(self.batches):
            feats, labels = zip(*[self.utterance() for _ in range(BATCH)])
            idx, value, shape = sparse_label(labels)
            seqlen = np.asarray([f.shape[0] for f in feats], np.int32)
            yield [pad_frames(feats), idx, value, shape, seqlen]


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, None, FEATUREDIM], tf.float32, 'feat'),
                tf.TensorSpec([None, None], tf.int64, 'labelidx'),
                tf.TensorSpec([None], tf.int32, 'labelvalue'),
                tf.TensorSpec([None], tf.int64, 'labelshape'),
                tf.TensorSpec([None], tf.int32, 'seqlen')]

    def build_graph(self, feat, labelidx, labelvalue, labelshape, seqlen):
        label = tf.SparseTensor(labelidx, labelvalue, labelshape)

        cell_fw = rnn.LSTMCell(num_units=HIDDEN)
        cell_bw = tf.nn.rnn_cell.LSTMCell(num_units=HIDDEN)
        (out_fw, out_bw), _ = tf.nn.bidirectional_dynamic_rnn(
            cell_fw, cell_bw, feat, seqlen, dtype=tf.float32, scope='birnn')
        outputs = tf.concat([out_fw, out_bw], 2)

        output = tf.reshape(outputs, [-1, 2 * HIDDEN])
        logits = FullyConnected('fc', output, NR_CLASS, activation=tf.identity,
                                kernel_initializer=tf.truncated_normal_initializer(stddev=0.01))
        logits = tf.reshape(logits, (BATCH, -1, NR_CLASS))

        loss = tf.nn.ctc_loss(label, logits, seqlen, time_major=False)
        cost = tf.reduce_mean(loss, name='cost')

        logits = tf.transpose(logits, [1, 0, 2])
        if self.training:
            predictions = tf.cast(tf.nn.ctc_greedy_decoder(logits, seqlen)[0][0], tf.int32)
        else:
            predictions = tf.cast(
                tf.nn.ctc_beam_search_decoder(logits, seqlen, beam_width=4)[0][0], tf.int32)
        err = tf.edit_distance(predictions, label, normalize=True)
        err.set_shape([None])
        err = tf.reduce_mean(err, name='error')
        summary.add_moving_summary(err, cost)
        return cost

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=2e-2, trainable=False)
        opt = tf.train.AdamOptimizer(lr, epsilon=1e-3)
        return optimizer.apply_grad_processors(opt, [GlobalNormClip(5), SummaryGradient()])


def get_config(ds_train, ds_test):
    return TrainConfig(
        data=QueueInput(ds_train),
        callbacks=[
            ModelSaver(),
            StatMonitorParamSetter('learning_rate', 'error', lambda x: x * 0.2, 0, 5),
            HumanHyperParamSetter('learning_rate'),
            PeriodicTrigger(InferenceRunner(ds_test, [ScalarStats('error')]), every_k_epochs=1),
        ],
        model=Model(),
        max_epoch=2,
    )


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--load', help='load model')
    args = parser.parse_args()

    logger.auto_set_dir()
    config = get_config(Utterances(40, seed=0), Utterances(4, seed=1))
    config.session_init = SmartInit(args.load)
    launch_train_with_config(config, SimpleTrainer())
