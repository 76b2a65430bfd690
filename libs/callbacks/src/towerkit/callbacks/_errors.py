"""The callbacks lib's errors."""

from __future__ import annotations


class StopTraining(Exception):
    """Raise from any callback method (or ``run_step``) to end training cleanly.

    The loop stops, ``after_train`` still runs on every callback, monitors are
    flushed and the session is closed. Raised in ``after_epoch`` or
    ``trigger_epoch``, it stops training once the epoch is whole: the epoch's other
    callbacks (statistics writers, monitors, savers) still run first. The message says
    why; the console line that ends training names the callback that raised it.
    """

    stopped_by: str | None = None
    """The callback that raised it (set by the callback group that caught it first), or None.

    .. versionadded:: 0.2
    """


class CallbackError(RuntimeError):
    """A callback was used against its contract (wrong phase, missing trainer, ...)."""


class MissingStatError(KeyError):
    """A statistic was asked for that the monitors never received."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class StatsFileError(ValueError):
    """A ``stats.json`` is damaged; the message names the file, the position and what was expected."""


class ParallelWorkerError(RuntimeError):
    """A worker process of a `ParallelIterable` raised, or died; the message names it.

    Attributes:
        worker: the worker's id (0-based), or None when not known.
        index: the datapoint it was producing (its index in the source, or its position
            in the pass), or None when it died or was stopped.

    .. versionadded:: 0.2
    """

    def __init__(self, message: str, worker: int | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.worker = worker
        self.index = index


class ParallelTimeoutError(ParallelWorkerError):
    """No worker of a `ParallelIterable` gave a datapoint within the pool's ``timeout``.

    The message is the one `IterableInput`'s ``timeout`` gives (the pass, the datapoint
    waited for, how long); the pool's workers are stopped.

    .. versionadded:: 0.2
    """


class ParallelStartError(ParallelWorkerError):
    """A `ParallelIterable`'s worker could not start: the message says why and what to do.

    A process or file limit of the machine reached, or a main module that would run
    the training again in every worker (a script without ``if __name__ == "__main__":``).

    .. versionadded:: 0.2
    """


# Every error here is public: tracebacks and pickles name it where users import it from
# (``towerkit.<lib>.SomeError``), not by this private module.
for _error in [
    v for v in list(globals().values()) if isinstance(v, type) and v.__module__ == __name__
]:
    _error.__module__ = __name__.rpartition(".")[0]
del _error
