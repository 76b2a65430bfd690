"""The trainers' side of parallel Python input: the worker pool's callback, and its statistics."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from towerkit.callbacks import ParallelIterable
from towerkit.trainers.inputs._callbacks import _InputCallback

__all__ = ["WorkerPool", "parallel_source"]


def parallel_source(
    iterable: Any,
    workers: int | None,
    *,
    ordered: bool | None,
    seed: int,
    start_method: str | None,
    capacity: int,
) -> Iterable[Any]:
    """`iterable` itself without `workers`, else a `ParallelIterable` of `workers` processes.

    Raises:
        TypeError: `workers` given for a `ParallelIterable` (it has its workers already).
    """
    if workers is None:
        return iterable  # type: ignore[no-any-return]
    if isinstance(iterable, ParallelIterable):
        msg = (
            f"'workers' given for {iterable}, which has its workers already: give either "
            "IterableInput(source, workers=N) or IterableInput(ParallelIterable(source, N))"
        )
        raise TypeError(msg)
    return ParallelIterable(
        iterable,
        workers,
        ordered=ordered,
        seed=seed,
        start_method=start_method,
        capacity=capacity,
    )


class WorkerPool(_InputCallback):
    """The worker processes of a Python input: their statistics, and their end.

    At each epoch's end it puts the pool's statistics into the monitors (so into
    ``stats.json``): ``<prefix>/queue_fill``, the mean fraction of the workers' queues
    holding datapoints when one was taken (near 1: the model is the bottleneck; near
    0: the input is), ``<prefix>/datapoints_per_s`` delivered over the epoch, and
    ``<prefix>/worker<k>_datapoints_per_s``, each worker's speed while busy. After
    training (also after an error, `StopTraining` or Ctrl-C) it stops the workers;
    when the process ends without it (SIGTERM, SIGKILL), each worker sees the pipe
    it watches close and exits, so no process outlives the run. It runs on every worker, chief or not.

    Args:
        pool: the source's workers.
        prefix: the statistics' name prefix.
    """

    def __init__(self, pool: ParallelIterable, prefix: str = "IterableInput") -> None:
        self._pool = pool
        self._prefix = prefix

    @property
    def pool(self) -> ParallelIterable:
        """The source's workers."""
        return self._pool

    def _trigger_epoch(self) -> None:
        for name, value in sorted(self._pool.stats().items()):
            self.trainer.monitors.put_scalar(f"{self._prefix}/{name}", float(value))

    def _after_train(self) -> None:
        self._pool.close()

    def __str__(self) -> str:
        return f"WorkerPool({self._pool})"
