#!/usr/bin/env python
"""A one-box detector in the manner of tensorpack's FasterRCNN: a config module the others
import, anchors labelled in numpy through tf.py_func, an RPN whose proposals go through
tf.nn.top_k and non-maximum suppression, RoI features by crop_and_resize, a recall of its
own computed by an Inferencer, then a run that starts from an npz of the first one."""

import argparse
import os

import numpy as np
import tensorflow as tf

from tensorpack import *
from tensorpack.tfutils import get_tf_version_tuple
from tensorpack.tfutils.compat import tfv1
from tensorpack.tfutils.summary import add_moving_summary

import model as M
from config import config as cfg
from config import finalize_configs
from data import SquareBoxes


class DetectionModel(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((cfg.IMAGE_SIZE, cfg.IMAGE_SIZE, 1), tf.float32, 'image'),
                tf.TensorSpec((None, 4), tf.float32, 'gt_boxes')]

    def build_graph(self, image, gt_boxes):
        featuremap = M.backbone(tf.expand_dims(image, 0))
        anchors = tf.constant(M.get_all_anchors(cfg.BACKBONE_STRIDE, cfg.ANCHOR_SIZES, cfg.FEATURE_SIZE))
        with tfv1.variable_scope('rpn'):
            logits, deltas = M.rpn_head(featuremap, 16, cfg.NUM_ANCHOR)
        boxes = M.decode_bbox_target(deltas, anchors)
        proposals, _ = M.generate_proposals(boxes, tf.sigmoid(logits))
        if self.training:
            labels, matched = tf.py_func(M.get_anchor_labels, [anchors, gt_boxes], [tf.int32, tf.float32])
            labels.set_shape([None])
            matched.set_shape([None, 4])
            rpn_label_loss, rpn_box_loss, num_pos = M.rpn_losses(labels, matched, anchors, logits, deltas)
            rois = tf.concat([proposals, gt_boxes], axis=0)
            iou = M.pairwise_iou(rois, gt_boxes)
            best = tf.argmax(iou, axis=1)
            fg = tf.cast(tf.reduce_max(iou, axis=1) >= cfg.FRCNN.FG_IOU, tf.int64)
            head_logits, head_deltas = M.fastrcnn_head(featuremap, rois)
            cls_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=fg, logits=head_logits), name='fastrcnn_label_loss')
            fg_idx = tf.reshape(tf.where(fg > 0), [-1])
            target = M.encode_bbox_target(tf.gather(tf.gather(gt_boxes, best), fg_idx), tf.gather(rois, fg_idx))
            box_loss = tf.reduce_mean(tf.abs(target - tf.gather(head_deltas, fg_idx)), name='fastrcnn_box_loss')
            cost = tf.add_n([rpn_label_loss, rpn_box_loss, cls_loss, box_loss], name='total_cost')
            add_moving_summary(rpn_label_loss, rpn_box_loss, num_pos, cls_loss, box_loss, cost)
            return cost
        head_logits, head_deltas = M.fastrcnn_head(featuremap, proposals)
        with tf.name_scope('output'):
            tf.identity(M.decode_bbox_target(head_deltas, proposals), name='boxes')
            tf.identity(tf.nn.softmax(head_logits)[:, 1], name='scores')

    def optimizer(self):
        lr = tfv1.get_variable('learning_rate', initializer=float(cfg.TRAIN.LR), trainable=False)
        return tfv1.train.AdamOptimizer(lr)


class RecallEvaluator(Inferencer):
    """The fraction of images whose best-scored box overlaps the true one by IoU >= 0.5."""

    def _get_fetches(self):
        return ['output/boxes', 'output/scores', 'gt_boxes']

    def _before_inference(self):
        self.hits, self.total = 0, 0

    def _on_fetches(self, outputs):
        boxes, scores, gt = outputs
        self.total += 1
        if len(scores):
            best = boxes[np.argmax(scores)][None]
            self.hits += int(M.np_iou(best, gt).max() >= 0.5)

    def _after_inference(self):
        return {'recall': self.hits / max(self.total, 1)}


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--load', help='an npz or a checkpoint to start from')
    parser.add_argument('--logdir', default='train_log/detection')
    parser.add_argument('--lr', type=float)
    args = parser.parse_args()
    assert get_tf_version_tuple() >= (1, 6), 'crop_and_resize needs TensorFlow 1.6 or newer'
    if args.lr is not None:
        cfg.TRAIN.LR = args.lr
    finalize_configs()
    logger.set_logger_dir(args.logdir, action='d')

    config = TrainConfig(
        model=DetectionModel(),
        dataflow=SquareBoxes(cfg.TRAIN.STEPS_PER_EPOCH, 0),
        callbacks=[ModelSaver(), InferenceRunner(SquareBoxes(4, 7), [RecallEvaluator()])],
        session_init=SmartInit(args.load),
        steps_per_epoch=cfg.TRAIN.STEPS_PER_EPOCH,
        max_epoch=cfg.TRAIN.EPOCHS,
    )
    launch_train_with_config(config, SimpleTrainer())

    checkpoint = tf.train.latest_checkpoint(args.logdir)
    reader = tf.train.load_checkpoint(checkpoint)
    # the model's weights only: no optimizer slots, counters or moving averages of summaries
    skip = ('global_step', 'learning_rate', 'beta1_power', 'beta2_power')
    params = {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(checkpoint)
              if 'Adam' not in name and not name.startswith('EMA/') and name not in skip}
    np.savez(os.path.join(args.logdir, 'model.npz'), **params)

    pred = OfflinePredictor(PredictConfig(
        model=DetectionModel(), session_init=SmartInit(checkpoint),
        input_names=['image'], output_names=['output/boxes', 'output/scores']))
    df = SquareBoxes(1, 11)
    df.reset_state()
    img, gt = next(iter(df))
    boxes, scores = pred(img)
    print('detected', boxes.shape, scores.shape, 'gt', gt.tolist())
