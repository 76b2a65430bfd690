"""The errors of the trainers, the configs and the log directory."""

from __future__ import annotations

from typing import Any


class LogdirNotEmptyError(FileExistsError):
    """A fresh run was asked to write into a log directory that already holds files."""


class TrainerStateError(RuntimeError):
    """A trainer method was called in the wrong phase (e.g. registering a callback after setup)."""


class UnregisteredInputError(TrainerStateError):
    """An input source gave tensors to a trainer's graph, but its callbacks are not registered."""


class TowerVariableMismatchError(ValueError):
    """Towers built different sets of variables, so their gradients cannot be paired."""


class CollectiveError(RuntimeError):
    """A collective operation across processes failed: another process died, hung or left."""


class InputDataError(ValueError):
    """A Python input yielded a datapoint that does not fit the input signature, or none at all."""


class InputProducerError(RuntimeError):
    """The iterable behind a Python input raised while producing datapoints; the cause is its error."""


class LogdirLockedError(RuntimeError):
    """Another run (a live process, or one on another host) holds the log directory's lock."""


class InputTimeoutError(InputProducerError):
    """The iterable behind a Python input gave no datapoint within the input's ``timeout``."""


class LossScaleError(FloatingPointError):
    """Mixed float16 training skipped every step at the minimum loss scale for too long.

    .. versionadded:: 0.2
    """


class TaskLostError(CollectiveError):
    """A task of the cluster died or stopped answering; the message names it.

    Attributes:
        task: the ``TaskAddress`` of the task lost.
    """

    def __init__(self, message: str, task: Any) -> None:
        super().__init__(message)
        self.task = task


class XlaCompileError(ValueError):
    """``xla=True`` was asked of a tower XLA cannot compile; the message names the ops at fault.

    .. versionadded:: 0.4
    """


# Every error here is public: tracebacks and pickles name it where users import it from
# (``towerkit.<lib>.SomeError``), not by this private module.
for _error in [
    v for v in list(globals().values()) if isinstance(v, type) and v.__module__ == __name__
]:
    _error.__module__ = __name__.rpartition(".")[0]
del _error
