"""Helper callbacks: start processes or threads, open a debugging shell, estimate the time left."""

from __future__ import annotations

import collections
import logging
import multiprocessing.process
import os
import threading
import time
from typing import Any

from towerkit.callbacks._base import Callback
from towerkit.callbacks._stats import estimate_time_left

logger = logging.getLogger("towerkit.callbacks")


def format_duration(seconds: float) -> str:
    """A duration in seconds as a short readable string.

    Examples:
        >>> format_duration(42.4)
        '42s'
        >>> format_duration(3725)
        '1h 02m 05s'
        >>> format_duration(2 * 86400 + 60)
        '2d 0h 01m 00s'
    """
    total = round(max(0.0, float(seconds)))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes:02d}m {secs:02d}s"
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


class StartProcOrThread(Callback):
    """Start processes or threads before training, and optionally stop them after it.

    Args:
        startable: an object with a ``start()`` method (a ``multiprocessing.Process``,
            a ``threading.Thread``, ...) or a list of them.
        stop_at_last: after training, terminate the processes (``Process.terminate()``,
            then wait up to 5 seconds for each) and call ``stop()`` on threads that
            have one; plain threads and other objects are left alone.

    Raises:
        TypeError: some objects have no ``start()`` method; all of them are listed.
    """

    _chief_only = False

    def __init__(self, startable: Any, stop_at_last: bool = True) -> None:
        items = list(startable) if isinstance(startable, (list, tuple)) else [startable]
        if not items:
            msg = "'startable' is empty: expected at least one process or thread"
            raise ValueError(msg)
        bad = [
            f"#{i}: {type(x).__name__}"
            for i, x in enumerate(items)
            if not callable(getattr(x, "start", None))
        ]
        if bad:
            msg = f"'startable' must hold objects with a start() method; entries at fault: {', '.join(bad)}"
            raise TypeError(msg)
        self._items = tuple(items)
        self._stop = bool(stop_at_last)

    @property
    def startables(self) -> tuple[Any, ...]:
        """The objects started."""
        return self._items

    def _before_train(self) -> None:
        for item in self._items:
            logger.info("%s: starting %s", self, item)
            item.start()

    def _after_train(self) -> None:
        if not self._stop:
            return
        for item in self._items:
            if isinstance(item, multiprocessing.process.BaseProcess):
                if item.is_alive():
                    logger.info("%s: terminating %s", self, item)
                    item.terminate()
                    item.join(5.0)
                continue
            stop = getattr(item, "stop", None)
            if isinstance(item, threading.Thread) and callable(stop):
                logger.info("%s: stopping %s", self, item)
                stop()

    def has_hook(self, method: str) -> bool:
        if method == "_after_train":
            return self._stop
        return super().has_hook(method)


_SHELLS = ("ipython", "pdb")


class InjectShell(Callback):
    """Pause training in a debugging shell when a file exists.

    On every ``trigger`` (after each epoch by default) it checks whether ``file``
    exists and if so opens an IPython shell, or pdb. In the shell ``self`` is this
    callback and ``self.trainer`` the trainer; leave the shell (``exit`` in
    IPython, ``c`` in pdb) to continue training. The file is not removed: delete
    it to stop the shell from opening again.

    Examples:
        ``InjectShell("/path/to/pause-training.tmp")`` in the callbacks, then
        ``touch /path/to/pause-training.tmp`` opens a shell once the epoch ends.

    Args:
        file: the file to watch. A relative path is taken under the trainer's
            logdir when it has one, else under the current directory.
        shell: ``"ipython"`` (falls back to pdb, with a warning, when IPython is not
            installed) or ``"pdb"``.

    Raises:
        ValueError: an unknown shell, or an empty file name.
    """

    def __init__(
        self, file: str | os.PathLike[str] = "INJECT_SHELL.tmp", shell: str = "ipython"
    ) -> None:
        file = os.fspath(file)
        if not file:
            msg = "'file' must be a non-empty path"
            raise ValueError(msg)
        if shell not in _SHELLS:
            msg = f"'shell' must be one of {_SHELLS}; got {shell!r}"
            raise ValueError(msg)
        self._file = file
        self._shell = shell
        self._path = os.path.abspath(file)

    @property
    def path(self) -> str:
        """The absolute path of the watched file (known from ``setup_graph`` on)."""
        return self._path

    def _setup_graph(self) -> None:
        logdir = self.trainer.logdir
        if logdir is not None and not os.path.isabs(self._file):
            self._path = os.path.abspath(os.path.join(logdir, self._file))
        logger.info(
            "%s: create %s to open a %s shell after an epoch", self, self._path, self._shell
        )

    def _trigger(self) -> None:
        if os.path.isfile(self._path):
            logger.info("%s: found %s, opening a %s shell", self, self._path, self._shell)
            self._open_shell()

    def _open_shell(self) -> None:
        trainer = self.trainer  # noqa: F841 (a name for the shell's user)
        if self._shell == "ipython":
            try:
                import IPython
            except ImportError:
                logger.warning("%s: IPython is not installed; opening pdb instead", self)
            else:
                IPython.embed(
                    header=f"towerkit {self}: `self` is the callback, `trainer` the trainer"
                )
                return
        import pdb

        pdb.Pdb().set_trace()


class EstimatedTimeLeft(Callback):
    """Log an estimate of the training time left after each epoch.

    An epoch's duration is the wall time from one ``trigger_epoch`` to the next
    (the first from ``before_train``), so callbacks run after epochs count. The
    estimate is ``epochs left x`` the mean or median of the last ``last_k_epochs``
    durations.

    Args:
        last_k_epochs: how many recent epochs to use (>= 1).
        median: use their median (robust to an occasional slow epoch) instead of their mean.

    Raises:
        ValueError: ``last_k_epochs`` < 1.
    """

    _chief_only = False

    def __init__(self, last_k_epochs: int = 5, median: bool = True) -> None:
        if isinstance(last_k_epochs, bool) or not isinstance(last_k_epochs, int):
            msg = f"'last_k_epochs' must be an int; got {type(last_k_epochs).__name__}"
            raise TypeError(msg)
        if last_k_epochs < 1:
            msg = f"'last_k_epochs' must be >= 1; got {last_k_epochs}"
            raise ValueError(msg)
        self._k = last_k_epochs
        self._median = bool(median)
        self._durations: collections.deque[float] = collections.deque(maxlen=last_k_epochs)
        self._last = 0.0
        self.last_estimate: float | None = None
        """The last estimate, in seconds (None before the first epoch ends, or after the last)."""

    def _before_train(self) -> None:
        self._durations.clear()
        self._last = time.perf_counter()

    def _trigger_epoch(self) -> None:
        now = time.perf_counter()
        self._durations.append(now - self._last)
        self._last = now
        left = self.trainer.max_epoch - self.trainer.epoch_num
        if left <= 0:
            self.last_estimate = None
            return
        self.last_estimate = estimate_time_left(tuple(self._durations), left, self._median)
        logger.info("Estimated time left: %s", format_duration(self.last_estimate))
