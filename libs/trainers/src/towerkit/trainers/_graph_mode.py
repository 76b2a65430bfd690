"""Trainers built at the top level of a program: their constructor runs in a graph of their own."""

from __future__ import annotations

import abc
from typing import Any

import tensorflow as tf


class TrainerMeta(abc.ABCMeta):
    """The metaclass of `Trainer`: outside every graph, construction runs in a new one.

    TensorFlow 2 runs top-level code eagerly, where ``tf.compat.v1.placeholder``, input
    sources and tower functions cannot be built. tensorpack programs create their
    trainers at the top level and build the model in the constructor; so when no graph
    is entered (``tf.executing_eagerly()``), the whole construction of a trainer
    (``__init__`` of the subclass included) runs under ``tf.Graph().as_default()``, and
    that graph becomes the trainer's ``graph``. Inside ``with graph.as_default():``
    nothing changes: the trainer takes that graph.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not tf.executing_eagerly():
            return super().__call__(*args, **kwargs)
        with tf.Graph().as_default():
            return super().__call__(*args, **kwargs)
