"""What the ImageNet programs share, kept in a module of their own: a ModelDesc that takes
uint8 images, normalizes them, adds weight decay and the top-k errors, and a tiny DataFlow
standing in for the ImageNet one."""

import numpy as np

from tensorpack import ModelDesc
from tensorpack import tfv1 as tf
from tensorpack.models import regularize_cost
from tensorpack.tfutils.summary import add_moving_summary, add_param_summary

IMAGE_SIZE = 16
CLASSES = 4


class ImageNetModel(ModelDesc):
    image_dtype = tf.uint8
    data_format = 'channels_last'
    weight_decay = 1e-4
    weight_decay_pattern = '.*/W'

    def inputs(self):
        return [tf.placeholder(self.image_dtype, [None, IMAGE_SIZE, IMAGE_SIZE, 3], 'input'),
                tf.placeholder(tf.int32, [None], 'label')]

    def build_graph(self, image, label):
        image = self.image_preprocess(image)
        logits = self.get_logits(image)
        loss = ImageNetModel.compute_loss_and_error(logits, label)
        wd_loss = regularize_cost(self.weight_decay_pattern, tf.nn.l2_loss) * self.weight_decay
        add_moving_summary(loss, wd_loss)
        add_param_summary(('.*/W', ['histogram', 'rms']))
        return tf.add_n([loss, wd_loss], name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=0.05, trainable=False)
        tf.summary.scalar('learning_rate-summary', lr)
        return tf.train.MomentumOptimizer(lr, 0.9, use_nesterov=True)

    def image_preprocess(self, image):
        with tf.name_scope('image_preprocess'):
            image = tf.cast(image, tf.float32) * (1.0 / 255)
            mean = tf.constant([0.485, 0.456, 0.406], dtype=tf.float32)
            return (image - mean) / tf.constant([0.229, 0.224, 0.225], dtype=tf.float32)

    @staticmethod
    def compute_loss_and_error(logits, label):
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label),
                              name='xentropy-loss')

        def prediction_incorrect(logits, label, topk=1, name='incorrect_vector'):
            with tf.name_scope('prediction_incorrect'):
                x = tf.logical_not(tf.nn.in_top_k(logits, label, topk))
            return tf.cast(x, tf.float32, name=name)

        wrong = prediction_incorrect(logits, label, 1, name='wrong-top1')
        add_moving_summary(tf.reduce_mean(wrong, name='train-error-top1'))
        wrong = prediction_incorrect(logits, label, 2, name='wrong-top2')
        add_moving_summary(tf.reduce_mean(wrong, name='train-error-top2'))
        return loss


class FakeImages(object):
    """uint8 [image, label] batches whose mean colour gives the label away."""

    def __init__(self, n, batch=16, seed=0):
        self.n, self.batch, self.seed = n, batch, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            label = self.rng.randint(CLASSES, size=self.batch).astype('int32')
            img = self.rng.randint(0, 64, size=(self.batch, IMAGE_SIZE, IMAGE_SIZE, 3))
            img[..., 0] += 60 * label[:, None, None]
            yield [img.astype('uint8'), label]


def get_imagenet_dataflow(name, batch=16):
    return FakeImages(8 if name == 'train' else 2, batch, seed=0 if name == 'train' else 1)
