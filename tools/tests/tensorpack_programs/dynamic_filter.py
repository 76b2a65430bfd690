"""The idioms of tensorpack's DynamicFilterNetwork: a layer of its own convolving each
image with the filter the network predicted for it (tf.unstack over a fixed batch), the
same filter applied through tf.extract_image_patches, the old ``nl=`` keyword, and a
callback drawing the predicted filters into the monitors each epoch."""

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.utils import logger

BATCH = 4
SHAPE = 12
K = 3


@layer_register()
def DynamicConvFilter(inputs, filters, out_channel, kernel_shape, stride=1, padding='SAME'):
    """Each image of `inputs` [b, h, w, 1] convolved with its own filter of `filters`."""
    batch_size, h, w, in_channel = inputs.get_shape().as_list()
    inputs = tf.unstack(inputs)
    filters = tf.reshape(filters, [batch_size, kernel_shape, kernel_shape, in_channel, out_channel])
    filters = tf.unstack(filters)
    rsl = [tf.nn.conv2d(tf.reshape(d, [1, h, w, in_channel]),
                        tf.reshape(k, [kernel_shape, kernel_shape, in_channel, out_channel]),
                        [1, stride, stride, 1], padding=padding) for d, k in zip(inputs, filters)]
    return tf.concat(rsl, axis=0, name='output')


def patch_filter(image, filters):
    """The same per-image filtering as a weighted sum of each pixel's neighbourhood."""
    patches = tf.extract_image_patches(image, ksizes=[1, K, K, 1], strides=[1, 1, 1, 1],
                                       rates=[1, 1, 1, 1], padding='SAME')
    weights = tf.reshape(filters, [BATCH, 1, 1, K * K])
    return tf.reduce_sum(patches * weights, axis=3, keep_dims=True)


def steer(theta):
    """The ground-truth filter for angle theta: a directional derivative."""
    d = np.array([[-1., 0., 1.]]) * np.array([[1.], [2.], [1.]]) / 4
    return np.cos(theta) * d + np.sin(theta) * d.T


class ThetaImages:
    """A DataFlow of its own: random images, an angle, and the images filtered at it."""

    def __init__(self, batches, seed):
        self.batches, self.seed = batches, seed

    def reset_state(self):
        self.rng = np.random.RandomState(self.seed)

    def __len__(self):
        return self.batches

    def __iter__(self):
        for _ in range(self.batches):
            theta = self.rng.uniform(0, 2 * np.pi, BATCH)
            images = self.rng.rand(BATCH, SHAPE, SHAPE)
            filters = np.stack([steer(t) for t in theta])
            padded = np.pad(images, [(0, 0), (1, 1), (1, 1)])
            gt = np.zeros_like(images)
            for dy in range(K):
                for dx in range(K):
                    gt += filters[:, dy, dx, None, None] * padded[:, dy:dy + SHAPE, dx:dx + SHAPE]
            yield [theta, images, gt, filters]


class OnlineTensorboardExport(Callback):
    """Shows the filters predicted for 4 fixed angles beside the true ones."""

    def __init__(self):
        self.theta = np.arange(BATCH) / BATCH * 2 * np.pi
        self.filters = np.array([steer(t) for t in self.theta])

    def _setup_graph(self):
        self.pred = self.trainer.get_predictor(['theta'], ['pred_filter'])

    def _trigger_epoch(self):
        def n(x):
            x = x - x.min()
            return x / max(x.max(), 1e-6)

        o = self.pred(self.theta)
        gt_filters = np.concatenate(list(self.filters), axis=0)
        pred_filters = np.concatenate([o[0][i, :, :, 0] for i in range(BATCH)], axis=0)
        canvas = np.concatenate([n(gt_filters), n(pred_filters)], axis=1)
        self.trainer.monitors.put_image('filter_export', canvas[..., None] * 255)


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((BATCH, ), tf.float32, 'theta'),
                tf.TensorSpec((BATCH, SHAPE, SHAPE), tf.float32, 'image'),
                tf.TensorSpec((BATCH, SHAPE, SHAPE), tf.float32, 'gt_image'),
                tf.TensorSpec((BATCH, K, K), tf.float32, 'gt_filter')]

    def _parameter_net(self, theta):
        with argscope(FullyConnected, nl=tf.nn.leaky_relu):
            net = FullyConnected('fc1', tf.concat([tf.cos(theta), tf.sin(theta)], 1), 16)
        pred_filter = FullyConnected('fc3', net, K ** 2, nl=tf.identity)
        pred_filter = tf.reshape(pred_filter, [BATCH, K, K, 1], name='pred_filter')
        logger.info('Parameter net output: {}'.format(pred_filter.get_shape().as_list()))
        return pred_filter

    def build_graph(self, theta, image, gt_image, gt_filter):
        theta = tf.reshape(theta, [BATCH, 1])
        image = tf.reshape(image, [BATCH, SHAPE, SHAPE, 1])
        gt_image = tf.reshape(gt_image, [BATCH, SHAPE, SHAPE, 1])

        pred_filter = self._parameter_net(theta)
        pred_image = DynamicConvFilter('dfn', image, pred_filter, 1, K)
        patch_image = tf.identity(patch_filter(image, pred_filter), name='patch_image')
        tf.reduce_max(tf.abs(patch_image - pred_image), name='patch_difference')

        with tf.name_scope('visualization'):
            gt_filter = tf.reshape(gt_filter, [BATCH, K, K, 1])
            filters = tf.concat([pred_filter, gt_filter], axis=2, name='filters')
            images = tf.concat([pred_image, gt_image], axis=2, name='images')
        tf.summary.image('pred_gt_filters', filters, max_outputs=2)
        tf.summary.image('pred_gt_images', images, max_outputs=2)

        cost = tf.reduce_mean(tf.squared_difference(pred_image, gt_image), name='cost')
        summary.add_moving_summary(cost)
        return cost

    def optimizer(self):
        return tf.train.AdamOptimizer(2e-2)


if __name__ == '__main__':
    logger.auto_set_dir()
    dataset_train = ThetaImages(30, seed=0)
    config = TrainConfig(
        dataflow=dataset_train,
        callbacks=[ModelSaver(), OnlineTensorboardExport()],
        model=Model(),
        steps_per_epoch=len(dataset_train),
        max_epoch=2,
    )
    launch_train_with_config(config, SimpleTrainer())
    pred = OfflinePredictor(PredictConfig(
        model=Model(),
        session_init=SmartInit('train_log/dynamic_filter'),
        input_names=['theta', 'image'],
        output_names=['dfn/output', 'patch_difference']))
    df = ThetaImages(1, seed=3)
    df.reset_state()
    theta, images, gt, _ = next(iter(df))
    out, diff = pred(theta, images)
    print('filtered', out.shape, 'same as patches', bool(diff < 1e-4))
