#!/usr/bin/env python
"""Pairs of shifted glyphs, aligned by a spatial transformer and embedded, written the way
tensorpack's SpatialTransformer, SimilarityLearning, SuperResolution and Saliency programs
are: a sampling layer of the program's own (layer_register over a list of inputs,
tf.gather_nd), affine grids through tf.matmul, an embedding reused through the current
variable scope, contrastive and center losses (tf.scatter_sub, tf.count_nonzero), a fixed
feature net under freeze_variables for a perceptual loss (tf.losses with its Reduction,
tf.image.resize_bicubic, tf.space_to_batch_nd), guided-ReLU saliency through
tf.RegisterGradient and gradient_override_map, tf.map_fn, gradient processors that scale
and summarize, the callbacks given as extra_callbacks, and an OfflinePredictor after."""

import argparse

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils import gradproc, optimizer, summary, varreplace
from tensorpack.utils import logger

SIZE = 8
CLASSES = 3
Reduction = tf.losses.Reduction


class GlyphPairs(object):
    """[left, right, same, cls]: two glyphs shifted at random; same is 1 when they match."""

    def __init__(self, n, seed):
        self.n, self.seed = n, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def glyph(self, k):
        img = np.zeros((SIZE, SIZE, 1), 'float32')
        dy, dx = self.rng.randint(0, 3, size=2)
        if k == 0:
            img[2 + dy:4 + dy, 1:7] = 1.0
        elif k == 1:
            img[1:7, 2 + dx:4 + dx] = 1.0
        else:
            img[1 + dy:4 + dy, 1 + dx:4 + dx] = 1.0
        return img

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            cls = self.rng.randint(CLASSES, size=12)
            other = np.where(self.rng.rand(12) < 0.5, cls, (cls + 1) % CLASSES)
            left = np.stack([self.glyph(k) for k in cls])
            right = np.stack([self.glyph(k) for k in other])
            yield [left, right, (cls == other).astype('int32'), cls.astype('int32')]


@layer_register(log_shape=True)
def GridSample(inputs, border='repeat'):
    """Bilinear samples of an NHWC image at (y, x) coordinates of shape (N, H', W', 2)."""
    image, coords = inputs
    height, width = image.get_shape().as_list()[1:3]
    coords = tf.clip_by_value(coords, 0.0, [height - 1.0, width - 1.0])
    low = tf.floor(coords)
    frac = coords - low
    low = tf.cast(low, tf.int32)
    high = tf.minimum(low + 1, [height - 1, width - 1])
    batch = tf.shape(image)[0]
    index = tf.tile(tf.reshape(tf.range(batch), [-1, 1, 1, 1]), tf.concat([[1], tf.shape(coords)[1:3], [1]], 0))

    def at(y, x):
        return tf.gather_nd(image, tf.concat([index, y, x], 3))

    ly, lx = tf.split(low, 2, 3)
    hy, hx = tf.split(high, 2, 3)
    fy, fx = tf.split(frac, 2, 3)
    out = (at(ly, lx) * (1 - fy) * (1 - fx) + at(ly, hx) * (1 - fy) * fx
           + at(hy, lx) * fy * (1 - fx) + at(hy, hx) * fy * fx)
    return tf.identity(out, name='output')


@tf.RegisterGradient('GuidedReLU')
def _guided_relu_grad(op, grad):
    return tf.where(0. < grad, grad * tf.cast(op.outputs[0] > 0, grad.dtype), tf.zeros(tf.shape(grad)))


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, SIZE, SIZE, 1), tf.float32, 'input'),
                tf.TensorSpec((None, SIZE, SIZE, 1), tf.float32, 'input_y'),
                tf.TensorSpec((None,), tf.int32, 'same'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def transform(self, image):
        """Predict an affine map, then sample the image on the grid it moves."""
        with tf.variable_scope('STN'):
            theta = (LinearWrap(image)
                     .Conv2D('conv', 4, 3, activation=tf.nn.relu)
                     .FullyConnected('fc', 6, kernel_initializer=tf.zeros_initializer(),
                                     bias_initializer=tf.constant_initializer([1, 0, 0, 0, 1, 0]))())
            theta = tf.reshape(theta, [-1, 2, 3])
            ys, xs = np.meshgrid(np.arange(SIZE), np.arange(SIZE), indexing='ij')
            grid = np.stack([ys.ravel(), xs.ravel(), np.ones(SIZE * SIZE)]).astype('float32')
            coords = tf.matmul(theta, tf.tile(tf.constant(grid)[None], [tf.shape(image)[0], 1, 1]))
            coords = tf.reshape(tf.transpose(coords, [0, 2, 1]), [-1, SIZE, SIZE, 2])
            return GridSample('warp', [image, coords], border='repeat')

    def embed(self, x):
        with argscope(Conv2D, activation=tf.nn.relu, kernel_size=3):
            x = Conv2D('emb_conv', x, 8)
            x = MaxPooling('emb_pool', x, 2)
            return FullyConnected('emb_fc', x, 3)

    def center_loss(self, emb, label, alpha=0.9):
        centers = tf.get_variable('centers', [CLASSES, 3], initializer=tf.constant_initializer(0),
                                  trainable=False)
        batch_centers = tf.gather(centers, label)
        update = tf.scatter_sub(centers, label, (1 - alpha) * (batch_centers - emb))
        with tf.control_dependencies([update]):
            return tf.reduce_mean(tf.square(emb - batch_centers), name='center_loss')

    def perceptual_loss(self, a, b):
        """The distance of two images under a fixed random feature net."""
        with tf.variable_scope('features', reuse=tf.AUTO_REUSE), varreplace.freeze_variables():
            fa = Conv2D('conv', a, 4, 3, activation=tf.nn.relu)
            fb = Conv2D('conv', b, 4, 3, activation=tf.nn.relu)
        feature = tf.losses.mean_squared_error(fa, fb, reduction=Reduction.MEAN)
        patches_a = tf.space_to_batch_nd(a, [2, 2], [[0, 0], [0, 0]])
        patches_b = tf.space_to_batch_nd(b, [2, 2], [[0, 0], [0, 0]])
        texture = tf.losses.mean_squared_error(patches_a, patches_b, reduction=Reduction.MEAN)
        return tf.add(feature, texture, name='perceptual_loss')

    def build_graph(self, x, y, same, label):
        x = tf.map_fn(lambda im: im - tf.reduce_mean(im), x)
        aligned = self.transform(x)
        emb_x = self.embed(aligned)
        with tf.variable_scope(tf.get_variable_scope(), reuse=True):
            emb_y = self.embed(self.transform(y))
            tf.identity(self.embed(self.transform(x)), name='emb')
        with tf.name_scope('loss'):
            dist = tf.sqrt(tf.reduce_sum(tf.square(emb_x - emb_y), 1) + 1e-6)
            is_same = tf.cast(same, tf.float32)
            contrastive = tf.reduce_mean(is_same * tf.square(dist)
                                         + (1 - is_same) * tf.square(tf.maximum(1.0 - dist, 0.)),
                                         name='contrastive')
            close = tf.count_nonzero(tf.where(tf.equal(same, 1), dist < 0.5, dist >= 0.5))
            pair_acc = tf.truediv(close, tf.size(dist, out_type=tf.int64), name='pair_accuracy')
        center = self.center_loss(emb_x, label)

        small = AvgPooling('down', x, 2)
        upsampled = tf.image.resize_bicubic(small, [SIZE, SIZE], align_corners=True)
        restored = Conv2D('restore', upsampled, 1, 3)
        perceptual = self.perceptual_loss(restored, x)

        with tf.get_default_graph().gradient_override_map({'Relu': 'GuidedReLU'}):
            with tf.variable_scope(tf.get_variable_scope(), reuse=True):
                score = tf.reduce_sum(tf.square(self.embed(x)), 1)
        tf.identity(tf.gradients(score, x)[0], name='saliency')

        cost = tf.add_n([contrastive, 0.1 * center, perceptual], name='cost')
        summary.add_moving_summary(contrastive, center, perceptual, pair_acc, cost)
        return cost

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=5e-3, trainable=False)
        opt = tf.train.AdamOptimizer(lr)
        return optimizer.apply_grad_processors(
            opt, [gradproc.ScaleGradient(('STN.*', 0.3)), gradproc.SummaryGradient()])


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=int, default=2)
    args = parser.parse_args()
    logger.auto_set_dir(action='k')
    config = TrainConfig(
        model=Model(),
        dataflow=GlyphPairs(8, 0),
        callbacks=[ModelSaver(), ScheduledHyperParamSetter('learning_rate', [(2, 1e-3)])],
        extra_callbacks=[MovingAverageSummary(), ProgressBar(['cost']), MergeAllSummaries(), RunUpdateOps()],
        max_epoch=args.epochs,
    )
    launch_train_with_config(config, SimpleTrainer())

    pred = OfflinePredictor(PredictConfig(
        session_init=SmartInit(tf.train.latest_checkpoint('train_log/stn_embeddings')),
        model=Model(), input_names=['input'], output_names=['emb', 'saliency']))
    df = GlyphPairs(1, 2)
    df.reset_state()
    left = next(iter(df))[0]
    emb, saliency = pred(left)
    print('embeddings', emb.shape, 'saliency', saliency.shape, bool(np.isfinite(saliency).all()))
