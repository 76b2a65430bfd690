"""Anchors, box coding, the RPN and the box head, in the manner of FasterRCNN's modules."""

import functools

import numpy as np
import tensorflow as tf

from tensorpack.models import Conv2D, FullyConnected
from tensorpack.tfutils.argscope import argscope
from tensorpack.tfutils.compat import tfv1
from tensorpack.tfutils.scope_utils import auto_reuse_variable_scope, under_name_scope

from config import config as cfg


@functools.lru_cache(maxsize=None)
def get_all_anchors(stride, sizes, feature_size):
    """(feature_size * feature_size * len(sizes), 4) float32 anchors, x1y1x2y2, row-major."""
    centers = (np.arange(feature_size) + 0.5) * stride
    cy, cx = np.meshgrid(centers, centers, indexing='ij')
    anchors = []
    for y, x in zip(cy.ravel(), cx.ravel()):
        for s in sizes:
            anchors.append([x - s / 2.0, y - s / 2.0, x + s / 2.0, y + s / 2.0])
    return np.asarray(anchors, 'float32')


def np_iou(a, b):
    """Pairwise IoU of (N, 4) and (M, 4) boxes: (N, M)."""
    tl = np.maximum(a[:, None, :2], b[None, :, :2])
    br = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(br - tl, 0, None), axis=2)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=1)
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def get_anchor_labels(anchors, gt_boxes):
    """1 for anchors that match a box, 0 for background, -1 ignored; and each one's box."""
    iou = np_iou(anchors, gt_boxes)
    best_gt = iou.argmax(axis=1)
    best_iou = iou.max(axis=1)
    labels = -np.ones(len(anchors), 'int32')
    labels[best_iou < cfg.RPN.NEGATIVE_IOU] = 0
    labels[best_iou >= cfg.RPN.POSITIVE_IOU] = 1
    labels[iou.argmax(axis=0)] = 1  # every box gets its best anchor
    return labels, gt_boxes[best_gt].astype('float32')


@under_name_scope()
def encode_bbox_target(boxes, anchors):
    """The deltas (dx, dy, log dw, log dh) that take `anchors` to `boxes`."""
    x1, y1, x2, y2 = tf.split(boxes, 4, axis=1)
    ax1, ay1, ax2, ay2 = tf.split(anchors, 4, axis=1)
    aw, ah = ax2 - ax1, ay2 - ay1
    w, h = x2 - x1, y2 - y1
    dx = ((x1 + x2) - (ax1 + ax2)) * 0.5 / aw
    dy = ((y1 + y2) - (ay1 + ay2)) * 0.5 / ah
    return tf.concat([dx, dy, tf.math.log(w / aw), tf.math.log(h / ah)], axis=1)


@under_name_scope()
def decode_bbox_target(deltas, anchors):
    """The boxes `deltas` make of `anchors`, clipped to the image."""
    dx, dy, dw, dh = tf.split(deltas, 4, axis=1)
    ax1, ay1, ax2, ay2 = tf.split(anchors, 4, axis=1)
    aw, ah = ax2 - ax1, ay2 - ay1
    cx = (ax1 + ax2) * 0.5 + dx * aw
    cy = (ay1 + ay2) * 0.5 + dy * ah
    w = tf.exp(tf.clip_by_value(dw, -cfg.BBOX_CLIP, cfg.BBOX_CLIP)) * aw
    h = tf.exp(tf.clip_by_value(dh, -cfg.BBOX_CLIP, cfg.BBOX_CLIP)) * ah
    boxes = tf.concat([cx - w * 0.5, cy - h * 0.5, cx + w * 0.5, cy + h * 0.5], axis=1)
    return tf.clip_by_value(boxes, 0.0, float(cfg.IMAGE_SIZE))


@under_name_scope()
def pairwise_iou(a, b):
    ax1, ay1, ax2, ay2 = tf.split(a, 4, axis=1)
    bx1, by1, bx2, by2 = tf.split(b, 4, axis=1)
    iw = tf.maximum(tf.minimum(ax2, tf.transpose(bx2)) - tf.maximum(ax1, tf.transpose(bx1)), 0.)
    ih = tf.maximum(tf.minimum(ay2, tf.transpose(by2)) - tf.maximum(ay1, tf.transpose(by1)), 0.)
    inter = iw * ih
    union = (ax2 - ax1) * (ay2 - ay1) + tf.transpose((bx2 - bx1) * (by2 - by1)) - inter
    return inter / union


@under_name_scope()
def roi_align(featuremap, boxes, resolution):
    """Features of each box, (N, resolution, resolution, C), by tf.image.crop_and_resize."""
    x1, y1, x2, y2 = tf.split(boxes, 4, axis=1)
    norm = float(cfg.IMAGE_SIZE)
    normalized = tf.concat([y1 / norm, x1 / norm, y2 / norm, x2 / norm], axis=1)
    box_ind = tf.zeros([tf.shape(boxes)[0]], dtype=tf.int32)
    return tf.image.crop_and_resize(featuremap, tf.stop_gradient(normalized), box_ind,
                                    [resolution, resolution])


def backbone(image):
    with argscope(Conv2D, activation=tf.nn.relu, kernel_size=3, padding='same'):
        x = Conv2D('conv0', image, 8, strides=2)
        return Conv2D('conv1', x, 16, strides=2)


@auto_reuse_variable_scope
def rpn_head(featuremap, channel, num_anchors):
    """Objectness logits (H*W*A,) and box deltas (H*W*A, 4) of every anchor."""
    with argscope(Conv2D, padding='same', kernel_initializer=tf.random_normal_initializer(stddev=0.01)):
        hidden = Conv2D('conv0', featuremap, channel, 3, activation=tf.nn.relu)
        logits = Conv2D('class', hidden, num_anchors, 1)
        deltas = Conv2D('box', hidden, num_anchors * 4, 1)
    return tf.reshape(logits, [-1]), tf.reshape(deltas, [-1, 4])


@under_name_scope()
def generate_proposals(boxes, scores):
    """The top-scoring boxes, then those non-maximum suppression keeps."""
    topk = tf.minimum(cfg.RPN.PRE_NMS_TOPK, tf.size(scores))
    top_scores, top_idx = tf.nn.top_k(scores, k=topk, sorted=False)
    top_boxes = tf.gather(boxes, top_idx)
    keep = tf.image.non_max_suppression(top_boxes, top_scores, cfg.RPN.POST_NMS_TOPK,
                                        iou_threshold=cfg.RPN.NMS_IOU)
    proposals = tf.gather(top_boxes, keep)
    return tf.stop_gradient(proposals, name='boxes'), tf.stop_gradient(tf.gather(top_scores, keep), name='scores')


def rpn_losses(labels, matched_boxes, anchors, logits, deltas):
    with tfv1.name_scope('rpn_losses'):
        valid = tf.reshape(tf.where(labels >= 0), [-1])
        valid_labels = tf.gather(labels, valid)
        label_loss = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(valid_labels, tf.float32), logits=tf.gather(logits, valid))
        label_loss = tf.reduce_mean(label_loss, name='label_loss')
        pos = tf.reshape(tf.where(tf.equal(labels, 1)), [-1])
        target = encode_bbox_target(tf.gather(matched_boxes, pos), tf.gather(anchors, pos))
        box_loss = tf.reduce_mean(tf.abs(target - tf.gather(deltas, pos)), name='box_loss')
        num_pos = tf.cast(tf.size(pos), tf.float32, name='num_pos')
    return label_loss, box_loss, num_pos


def fastrcnn_head(featuremap, boxes):
    """Foreground logits (N, 2) and box deltas (N, 4) of the RoIs."""
    feature = roi_align(featuremap, boxes, cfg.FRCNN.ROI_SIZE)
    with tfv1.variable_scope('fastrcnn'):
        hidden = FullyConnected('fc', feature, 32, activation=tf.nn.relu)
        logits = FullyConnected('class', hidden, 2)
        deltas = FullyConnected('box', hidden, 4, kernel_initializer=tf.random_normal_initializer(stddev=0.001))
    return logits, deltas
