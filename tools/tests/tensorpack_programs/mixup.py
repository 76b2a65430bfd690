"""The idioms of tensorpack's cifar10-preact18-mixup: one-hot labels mixed with weights
from np.random.beta in the DataFlow, softmax cross-entropy on the soft labels, the error
on their argmax, pre-activation blocks with BNReLU, tfv1 as tf."""

import argparse

import numpy as np

from tensorpack import *
from tensorpack.compat import tfv1 as tf
from tensorpack.tfutils.summary import *

BATCH_SIZE = 16
CLASS_NUM = 3
LR_SCHEDULE = [(0, 0.1), (1, 0.05)]
WEIGHT_DECAY = 1e-4


def preactivation_block(input, num_filters, stride=1):
    num_filters_in = input.get_shape().as_list()[3]
    net = BNReLU(input)
    residual = Conv2D('conv1', net, num_filters, kernel_size=3, strides=stride, use_bias=False,
                      activation=BNReLU)
    residual = Conv2D('conv2', residual, num_filters, kernel_size=3, strides=1, use_bias=False)
    shortcut = input
    if stride != 1 or num_filters_in != num_filters:
        shortcut = Conv2D('shortcut', net, num_filters, kernel_size=1, strides=stride,
                          use_bias=False)
    return shortcut + residual


class ResNet_Cifar(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 8, 8, 3], tf.float32, 'input'),
                tf.TensorSpec([None, CLASS_NUM], tf.float32, 'label')]

    def build_graph(self, image, label):
        data_format = 'channels_first' if tf.test.is_gpu_available() else 'channels_last'
        image = image / 255.0 - 0.5
        if data_format == 'channels_first':
            image = tf.transpose(image, [0, 3, 1, 2])
        pytorch_default_init = tf.variance_scaling_initializer(
            scale=1.0 / 3, mode='fan_in', distribution='uniform')
        with argscope([Conv2D, BatchNorm, GlobalAvgPooling], data_format=data_format), \
                argscope(Conv2D, kernel_initializer=pytorch_default_init):
            net = Conv2D('conv0', image, 8, kernel_size=3, strides=1, use_bias=False)
            for i, filters in enumerate([8, 16]):
                with tf.variable_scope("res%d.0" % i):
                    net = preactivation_block(net, filters, 2 if i > 0 else 1)
            net = GlobalAvgPooling('gap', net)
            logits = FullyConnected('linear', net, CLASS_NUM,
                                    kernel_initializer=tf.random_normal_initializer(stddev=1e-3))

        ce_cost = tf.nn.softmax_cross_entropy_with_logits(labels=label, logits=logits)
        ce_cost = tf.reduce_mean(ce_cost, name='cross_entropy_loss')

        single_label = tf.cast(tf.argmax(label, axis=1), tf.int32)
        wrong = tf.cast(tf.logical_not(tf.nn.in_top_k(logits, single_label, 1)), tf.float32,
                        name='wrong_vector')
        add_moving_summary(tf.reduce_mean(wrong, name='train_error'), ce_cost)
        add_param_summary(('.*/W', ['histogram']))

        wd_cost = tf.multiply(WEIGHT_DECAY, regularize_cost('.*', tf.nn.l2_loss), name='wd_cost')
        return tf.add_n([ce_cost, wd_cost], name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.1, trainable=False)
        return tf.train.MomentumOptimizer(lr, 0.9)


class Stripes:
    """A DataFlow of its own: images whose class is the colour channel that carries stripes,
    in batches with one-hot labels, mixed up (np.random.beta) when training."""

    def __init__(self, batches, seed, is_train, is_mixup, alpha):
        self.batches, self.seed = batches, seed
        self.is_train, self.is_mixup, self.alpha = is_train, is_mixup, alpha

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)
        np.random.seed(self.seed)

    def __len__(self):
        return self.batches

    def __iter__(self):
        for _ in range(self.batches):
            labels = self.rng.randint(0, CLASS_NUM, BATCH_SIZE)
            images = self.rng.rand(BATCH_SIZE, 8, 8, 3) * 60
            images[np.arange(BATCH_SIZE), :, ::2, labels] += 180
            one_hot_labels = np.eye(CLASS_NUM)[labels]
            if not self.is_train or not self.is_mixup:
                yield [images, one_hot_labels]
                continue
            weight = np.random.beta(self.alpha, self.alpha, BATCH_SIZE)
            x_weight = weight.reshape(BATCH_SIZE, 1, 1, 1)
            y_weight = weight.reshape(BATCH_SIZE, 1)
            index = np.random.permutation(BATCH_SIZE)
            x = images * x_weight + images[index] * (1 - x_weight)
            y = one_hot_labels * y_weight + one_hot_labels[index] * (1 - y_weight)
            yield [x, y]


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--load', help='load model')
    parser.add_argument('--mixup', help='enable mixup', action='store_true')
    parser.add_argument('--alpha', default=1, type=float, help='alpha in mixup')
    args = parser.parse_args()

    log_folder = 'train_log/mixup%s' % ('-mixup' if args.mixup else '')
    logger.set_logger_dir(log_folder)

    dataset_train = Stripes(20, 0, True, args.mixup, args.alpha)
    dataset_test = Stripes(4, 1, False, args.mixup, args.alpha)

    config = TrainConfig(
        model=ResNet_Cifar(),
        data=QueueInput(dataset_train),
        callbacks=[
            ModelSaver(),
            InferenceRunner(dataset_test,
                            [ScalarStats('cost'), ClassificationError('wrong_vector')]),
            ScheduledHyperParamSetter('learning_rate', LR_SCHEDULE)
        ],
        max_epoch=2,
        steps_per_epoch=len(dataset_train),
        session_init=SmartInit(args.load)
    )
    launch_train_with_config(config, SimpleTrainer())
