"""Callbacks around each step: the progress bar, tensor printing, session-call timeouts."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import tqdm

from towerkit.callbacks._base import Callback
from towerkit.callbacks._console_stream import CONSOLE
from towerkit.callbacks._graph import ProcessTensors, fetchable_tensors, tensor_names
from towerkit.callbacks._numbers import whole_number
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")


def display_name(name: str) -> str:
    """A tensor name without its ``:0`` output index (other indices are kept).

    Examples:
        >>> display_name("tower0/loss:0"), display_name("split:1"), display_name("cost")
        ('tower0/loss', 'split:1', 'cost')
    """
    return name[:-2] if name.endswith(":0") else name


def format_value(value: Any) -> str:
    """A fetched value in a few characters: numbers with 4 significant digits.

    Examples:
        >>> format_value(np.float32(0.123456)), format_value(3), format_value(np.array([1.0, 2.0]))
        ('0.1235', '3', '[1. 2.]')
    """
    arr = np.asarray(value)
    if arr.ndim == 0 and np.issubdtype(arr.dtype, np.number):
        return f"{arr.item():.4g}"
    return str(value)


def stderr_is_terminal() -> bool:
    """Whether standard error is a terminal (where a progress bar can redraw its line)."""
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def training_cost(trainer: Any) -> Any:
    """The cost tensor of the trainer's first training tower, or None when it has none.

    It is what the tower function returned in that tower when that is one scalar
    floating tensor (a ``SingleCostTrainer``'s cost); None otherwise.
    """
    func = getattr(trainer, "tower_func", None)
    towers = getattr(func, "towers", None)
    if towers is None:
        return None
    for handle in towers.training():
        out = handle.outputs
        if isinstance(out, tf1.Tensor) and out.dtype.is_floating and out.shape.rank in (0, None):
            return out
        return None
    return None


class ProgressBar(Callback):
    """A tqdm progress bar per epoch (``steps_per_epoch`` steps), showing the cost or tensors.

    The bar shows the latest values of the tensors named in ``names``; without
    ``names``, the training cost (the tensor the tower function returns, in the first
    training tower) when the trainer has one and runs one step per session call. They
    are fetched with a step's session call only when the bar is about to redraw (at
    most every ``mininterval`` = 0.5 seconds), so the other steps fetch nothing more. The bar is cleared when its epoch
    ends, so the epoch's line (`ScalarPrinter`) takes its place.

    The bar is drawn only when standard error is a terminal: in a log file or a pipe
    there are no bar frames, only the lines of the monitors (one per epoch with the
    default `ScalarPrinter`), and nothing is fetched. It runs on every worker.

    Args:
        names: names of (scalar) tensors to show on the bar.

    Raises:
        TypeError: ``names`` is not a name or a sequence of names.

    .. versionchanged:: 0.2
        The training cost is shown by default; no bar without a terminal; the bar is
        cleared at the end of its epoch.
    """

    _chief_only = False
    mininterval = 0.5
    """Seconds between two updates of the shown values."""
    terminal: bool | None = None
    """Draw the bar (True) or not (False); None: when standard error is a terminal."""

    def __init__(self, names: str | Sequence[str] = ()) -> None:
        self._given = tensor_names(names) if names else ()
        self._names: tuple[str, ...] = self._given
        self._tags = tuple(display_name(n) for n in self._names)
        self._args: Any = None
        self._bar: Any = None
        self._next_fetch = 0.0
        self._terminal = False
        self._stride = 1

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the shown tensors (the cost's, once set up, when none were given)."""
        return self._names

    def has_hook(self, method: str) -> bool:
        if method in ("_before_run", "_after_run"):
            return bool(self._names) and self._terminal
        if method in ("_before_epoch", "_trigger_step", "_after_epoch", "_after_train"):
            return self._terminal
        return super().has_hook(method)

    def _setup_graph(self) -> None:
        self._terminal = stderr_is_terminal() if self.terminal is None else bool(self.terminal)
        if not self._given and getattr(self.trainer, "steps_per_execution", 1) > 1:
            # the cost is inside the K-step loop: the default bar counts steps only
            self._names = self._tags = ()
        elif not self._given:
            cost = training_cost(self.trainer)
            self._names = () if cost is None else (cost.name,)
            self._tags = tuple(display_name(n) for n in self._names)
        if self._names and self._terminal:
            self._args = tf1.train.SessionRunArgs(fetches=fetchable_tensors(self, self._names))

    def _before_epoch(self) -> None:
        self._close()
        self._bar = tqdm.tqdm(
            total=self.trainer.steps_per_epoch,
            desc=f"epoch {self.trainer.epoch_num}/{self.trainer.max_epoch}",
            unit="step",
            dynamic_ncols=True,
            mininterval=self.mininterval,
            leave=False,
            file=CONSOLE,  # a console that fails never ends the run
        )
        self._next_fetch = 0.0
        self._stride = getattr(self.trainer, "steps_per_execution", 1)

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        if time.monotonic() >= self._next_fetch:
            return self._args
        return None

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context
        values = run_values.results
        if values is None or self._bar is None:
            return
        self._next_fetch = time.monotonic() + self.mininterval
        self._bar.set_postfix_str(
            ", ".join(f"{t}={format_value(v)}" for t, v in zip(self._tags, values)), refresh=False
        )

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        # counting K steps per call is fine; tensors of the K-step loop cannot be fetched
        if steps_per_execution == 1 or not self._given:
            return []
        return [
            f"{self} fetches {', '.join(self._names)} with a step: with several steps per "
            "session call they are inside the training loop; use names=()"
        ]

    def _trigger_step(self) -> None:
        if self._bar is not None:
            self._bar.update(self._stride)

    def _after_epoch(self) -> None:
        self._close()

    def _after_train(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class TensorPrinter(ProcessTensors):
    """Log the values of some tensors after every step (at INFO level).

    Args:
        names: names of the tensors to print.

    Raises:
        TypeError: ``names`` is not a name or a sequence of names.
        ValueError: ``names`` is empty.
    """

    def __init__(self, names: str | Sequence[str]) -> None:
        super().__init__(names, self._log)

    def _log(self, *values: Any) -> None:
        for name, value in zip(self.names, values):
            logger.info("%s: %s", name, value)


class SessionRunTimeout(Callback):
    """Give every ``hooked_sess.run`` call a deadline.

    A call that runs longer fails with ``tf.errors.DeadlineExceededError``.

    Args:
        timeout_in_ms: the deadline in milliseconds (> 0).

    Raises:
        TypeError: not an int.
        ValueError: not positive.
    """

    _chief_only = False

    def __init__(self, timeout_in_ms: int) -> None:
        given, timeout_in_ms = timeout_in_ms, whole_number(timeout_in_ms)  # type: ignore[assignment]
        if timeout_in_ms is None:
            msg = f"'timeout_in_ms' must be an int; got {type(given).__name__} {given!r}"
            raise TypeError(msg)
        if timeout_in_ms <= 0:
            msg = f"'timeout_in_ms' must be > 0 (milliseconds); got {timeout_in_ms}"
            raise ValueError(msg)
        self._timeout = int(timeout_in_ms)
        self._args = tf1.train.SessionRunArgs(
            fetches=None, options=tf1.RunOptions(timeout_in_ms=self._timeout)
        )

    @property
    def timeout_in_ms(self) -> int:
        """The deadline of each call, in milliseconds."""
        return self._timeout

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        return self._args
