"""The process sum of a horovod job: a float64 vector all-reduced (summed) over the ranks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.towers.compat import tf1
from towerkit.trainers._process_sum import ProcessSumFn, check_sum_name, sum_vector


def horovod_process_sum(hvd: Any, graph: Any, name: str, sess: Callable[[], Any]) -> ProcessSumFn:
    """Build a placeholder and its horovod sum over the ranks in `graph`; return the caller.

    The all-reduce is named after `name`, which is the same on every rank, so ranks
    meet in it; each rank must call the returned function the same number of times.

    Args:
        hvd: the ``horovod.tensorflow`` module.
        graph: the trainer's graph (not finalized yet).
        name: the sum's name.
        sess: gives the session to run the sum in (at call time).
    """
    check_sum_name(name)
    with graph.as_default(), graph.name_scope(None), tf1.device("/cpu:0"):
        feed = tf1.placeholder(tf.float64, [None], name=f"{name}_vector")
        total = hvd.allreduce(feed, op=hvd.Sum, name=name)

    def process_sum(vector: np.ndarray) -> np.ndarray:
        arr = sum_vector(vector, name)
        return np.asarray(sess().run(total, {feed: arr}), dtype=np.float64)

    return process_sum
