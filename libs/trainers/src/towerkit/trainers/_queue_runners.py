"""The graph's queue runners: started with the session, stopped before it closes.

A graph that reads through TensorFlow 1's queues (``tf.compat.v1.train.range_input_producer``,
``string_input_producer``, ``tf.compat.v1.train.batch``, a ``QueueRunner`` of the program's
own) declares the threads that fill them in the ``QUEUE_RUNNERS`` collection; a dequeue
blocks for ever until they run. tensorpack's trainers started them through the
``MonitoredSession`` they hooked the callbacks on; towerkit's trainers start them here.
"""

from __future__ import annotations

import logging
from typing import Any

from towerkit.towers.compat import tf1

__all__ = ["QueueRunnerThreads", "start_queue_runners"]

logger = logging.getLogger("towerkit.trainers")

STOP_GRACE_SECONDS = 30.0
"""How long stopping waits for the runners' threads before it leaves them (daemon threads)."""


class QueueRunnerThreads:
    """The threads of a graph's queue runners and the coordinator that stops them."""

    def __init__(self, coord: Any, threads: list[Any]) -> None:
        self._coord = coord
        self._threads = threads

    @property
    def threads(self) -> list[Any]:
        """The running threads (each runner's enqueue threads and its closer)."""
        return list(self._threads)

    def failure(self) -> BaseException | None:
        """The exception a runner stopped on (it closed its queue), or None."""
        try:
            self._coord.raise_requested_exception()
        except Exception as err:  # whatever a runner stopped on is handed back
            return err
        return None

    def stop(self) -> BaseException | None:
        """Ask every runner to stop, wait for its threads; the exception one stopped on, or None.

        Call it while the session is open: a runner's closer cancels the enqueues in flight
        through the session.
        """
        self._coord.request_stop()
        try:
            self._coord.join(
                self._threads, stop_grace_period_secs=STOP_GRACE_SECONDS, ignore_live_threads=True
            )
        except Exception as err:  # a runner's error, re-raised by the coordinator
            return err
        return None


def start_queue_runners(sess: Any) -> QueueRunnerThreads | None:
    """Start every queue runner of ``sess.graph``'s ``QUEUE_RUNNERS`` collection, or None if none.

    The threads are daemons, so a process that ends without stopping them still exits.
    """
    runners = sess.graph.get_collection(tf1.GraphKeys.QUEUE_RUNNERS)
    if not runners:
        return None
    coord = tf1.train.Coordinator()
    threads: list[Any] = []
    for runner in runners:
        threads.extend(runner.create_threads(sess, coord=coord, daemon=True, start=True))
    logger.info("started %d queue runner(s) of the graph (%d threads)", len(runners), len(threads))
    return QueueRunnerThreads(coord, threads)
