"""Standard error for the loop's own lines: a write that fails never ends a run, and is told once."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

logger = logging.getLogger("towerkit.callbacks")


class ConsoleStream:
    """Standard error (read at each write, so a replaced ``sys.stderr`` is followed) that never raises.

    A write or flush that fails (a full disk or a closed pipe under standard error, a
    terminal gone) drops what it was given and returns as if written: the console is not
    the run's to lose. The first failure of the process is logged once as a warning on
    ``towerkit.callbacks`` (it reaches a log file the program configured; with nothing
    configured it is lost with the console) and kept in `failure`.

    The progress bars and the lines of the monitors, of the loop's start and stop write
    through `CONSOLE`, the one instance.

    .. versionadded:: 0.2
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failure: str | None = None

    @property
    def failure(self) -> str | None:
        """What made the first write fail (``"OSError: [Errno 28] ..."``), or None."""
        return self._failure

    def _failed(self, err: BaseException) -> None:
        with self._lock:
            if self._failure is not None:
                return
            self._failure = f"{type(err).__name__}: {err}"
        logger.warning(
            "standard error cannot be written (%s): console lines are dropped from here on; "
            "training goes on, and statistics still go to the monitors' files",
            self._failure,
        )

    def write(self, text: str) -> int:
        """Write `text` to standard error; on failure drop it (see the class)."""
        try:
            stream = sys.stderr
            if stream is not None:
                stream.write(text)
        except (OSError, ValueError) as err:  # ValueError: the stream was closed
            self._failed(err)
        return len(text)

    def flush(self) -> None:
        """Flush standard error; on failure drop what it held (see the class)."""
        try:
            stream = sys.stderr
            if stream is not None:
                stream.flush()
        except (OSError, ValueError) as err:
            self._failed(err)

    def isatty(self) -> bool:
        """Whether standard error is a terminal (False when that cannot be told)."""
        isatty = getattr(sys.stderr, "isatty", None)
        try:
            return bool(isatty and isatty())
        except (OSError, ValueError):
            return False

    @property
    def encoding(self) -> str:
        """Standard error's encoding (UTF-8 when it has none)."""
        return str(getattr(sys.stderr, "encoding", None) or "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stderr, name)

    def __repr__(self) -> str:
        return f"ConsoleStream(failure={self._failure!r})"


CONSOLE = ConsoleStream()
"""Standard error as the training loop writes to it (see `ConsoleStream`)."""


def console_lines(log: logging.Logger, lines: list[str]) -> None:
    """Show `lines` on the console: at INFO on `log` when logging is set up, else on `CONSOLE`.

    With a handler on `log` or a parent (``logging.basicConfig``), the program's logging
    configuration decides where they go; otherwise they are written to standard error
    above any progress bar, so that a program that configured nothing still sees them.
    """
    if log.hasHandlers():
        for line in lines:
            log.info("%s", line)
        return
    import tqdm

    for line in lines:
        try:
            tqdm.tqdm.write(line, file=CONSOLE)
        except (OSError, ValueError) as err:  # what tqdm itself does around the write
            CONSOLE._failed(err)
