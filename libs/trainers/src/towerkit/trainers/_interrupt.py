"""Ctrl-C during training: the first SIGINT asks the loop to stop at the next step boundary."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger("towerkit.trainers")


class InterruptState:
    """Whether a SIGINT arrived while the loop ran.

    Attributes:
        requested: True once the first SIGINT arrived; the loop then ends after the
            step (or epoch phase) it is in, runs ``after_train``, closes the session,
            and raises ``KeyboardInterrupt``.
    """

    __slots__ = ("requested",)

    def __init__(self) -> None:
        self.requested = False


@contextlib.contextmanager
def deferred_sigint() -> Iterator[InterruptState]:
    """Turn the first SIGINT into a request to stop; a second one interrupts at once.

    Python's default handler raises ``KeyboardInterrupt`` wherever the main thread
    is, which may be halfway through a callback writing a file. Inside this
    context the first SIGINT only sets ``requested``; the training loop checks it
    between steps. A second SIGINT raises ``KeyboardInterrupt`` immediately, for a
    step that hangs.

    The handler is installed only in the main thread and only when SIGINT still has
    Python's default handler (a handler the user installed is left alone); the
    previous handler is restored on exit.

    Yields:
        The `InterruptState` the loop polls.
    """
    state = InterruptState()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield state
        return

    def handler(signum: int, frame: Any) -> None:
        del frame
        if state.requested:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        state.requested = True
        logger.warning(
            "signal %d: training stops after the current step (press Ctrl-C again to abort now)",
            signum,
        )

    signal.signal(signal.SIGINT, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
