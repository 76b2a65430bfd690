"""The process sum of the TensorFlow-cluster trainers: two queues on the parameter server.

Every worker puts its vector into a queue on ``/job:ps/task:0``; the chief (worker 0)
takes the others' vectors from it, adds its own and puts the sum once per other worker
into a second queue, from which each of them takes it. A worker takes the sum of a round
before it can put the vector of the next one, and the chief takes every vector of a round
before it puts the sum, so rounds never mix. Each wait is bounded: a worker that never
comes ends the sum with an error naming the sum, the round and how long it waited.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.callbacks import CallbackError
from towerkit.towers.compat import tf1
from towerkit.trainers._process_sum import ProcessSumFn, check_sum_name, sum_vector

SUM_WAIT_S = 600.0
"""How long a worker waits for the others at a process sum (they evaluate their shards)."""


class ClusterProcessSum:
    """``make_process_sum`` of the cluster trainers: the workers meet on the parameter server.

    The trainer gives ``num_workers``, ``is_chief``, ``sess`` and ``graph``. Every worker
    must take part: a reducing callback runs on all of them (it is not chief-only), and
    training workers wait there for the slowest (a barrier at each round).
    """

    def make_process_sum(self, name: str) -> ProcessSumFn:
        """A function summing a float64 vector across the job's workers, built now.

        Builds two queues on the first parameter server (shared by name across the
        workers) and the ops that put and take vectors; the function runs them with the
        trainer's session, each wait bounded by `SUM_WAIT_S`.

        Raises:
            ValueError: `name` is empty or not fit for an op name.

        .. versionadded:: 0.3
        """
        check_sum_name(name)
        trainer: Any = self  # a cluster trainer: num_workers, is_chief, sess
        others = int(trainer.num_workers) - 1
        scope = f"process_sum_{name}"
        with tf1.name_scope(None), tf1.name_scope(scope):
            vector = tf1.placeholder(tf.float64, [None], name="vector")
        with tf1.device("/job:ps/task:0"), tf1.name_scope(None), tf1.name_scope(scope):
            queues = [
                tf1.FIFOQueue(
                    max(1, others),
                    [tf.float64],
                    shapes=None,
                    shared_name=f"{name}/{part}",
                    name=part,
                )
                for part in ("parts", "sums")
            ]
            put = [q.enqueue([vector]) for q in queues]
            take = [q.dequeue() for q in queues]
        wait = tf1.RunOptions(timeout_in_ms=int(SUM_WAIT_S * 1000))
        rounds = [0]

        def run(op: Any, value: np.ndarray | None, what: str) -> Any:
            feed = None if value is None else {vector: value}
            try:
                return trainer.sess.run(op, feed_dict=feed, options=wait)
            except tf.errors.DeadlineExceededError as err:
                msg = (
                    f"the process sum {name!r}, round {rounds[0]}: {what} for {SUM_WAIT_S:g} s; "
                    f"all {trainer.num_workers} workers must reach it (an InferenceRunner "
                    "with reduce=True runs on every worker)"
                )
                raise CallbackError(msg) from err

        def process_sum(values: np.ndarray) -> np.ndarray:
            mine = sum_vector(values, name)
            rounds[0] += 1
            if others == 0:
                return mine.copy()
            if trainer.is_chief:
                total = mine.copy()
                for k in range(others):
                    got = np.asarray(run(take[0], None, f"the chief waited for worker #{k + 1}"))
                    if got.shape != total.shape:
                        msg = (
                            f"the process sum {name!r}: a worker gave a vector of "
                            f"{got.shape[0]} values, the chief has {total.shape[0]}"
                        )
                        raise CallbackError(msg)
                    total += got
                for _ in range(others):
                    run(put[1], total, "the chief could not hand the sum out")
                return total
            run(put[0], mine, "this worker could not hand its vector to the chief")
            return np.asarray(run(take[1], None, "this worker waited for the chief's sum"))

        return process_sum
