"""Tracebacks of the user's errors without towerkit's own frames, and the switch that shows them."""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from towerkit.trainers._errors import LogdirLockedError, TrainerStateError

__all__ = ["TRACEBACK_ENV", "filter_traceback", "hides_frames", "is_towerkit_module"]

TRACEBACK_ENV = "TOWERKIT_TRACEBACK"
"""The environment variable that shows towerkit's frames again: ``TOWERKIT_TRACEBACK=full``."""

USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    OSError,
    LogdirLockedError,
    TrainerStateError,
)
"""The kinds of error a user's input causes (logdir, paths, arguments, restore mismatches,
a trainer's methods called out of order)."""

NOTE = (
    f"(towerkit's own frames are left out of this traceback; set {TRACEBACK_ENV}=full to see them)"
)
"""The note added to an error whose traceback lost frames."""

F = TypeVar("F", bound=Callable[..., Any])


def is_towerkit_module(name: str) -> bool:
    """Whether a module of this `name` is towerkit's own (its frames are hidden).

    Examples:
        >>> [is_towerkit_module(n) for n in ("towerkit.trainers._base", "towerkit", "towerkits", "__main__")]
        [True, True, False, False]
    """
    return name == "towerkit" or name.startswith("towerkit.")


def hides_frames(error: BaseException, environ: Mapping[str, str]) -> bool:
    """Whether `error`'s traceback is shown without towerkit's frames under `environ`.

    Only errors of the user's making (`USER_ERRORS`) are filtered, and only while
    ``TOWERKIT_TRACEBACK`` is not ``full``.

    Examples:
        >>> hides_frames(ValueError("x"), {}), hides_frames(ValueError("x"), {"TOWERKIT_TRACEBACK": "full"})
        (True, False)
        >>> hides_frames(RuntimeError("a bug"), {})
        False
    """
    if environ.get(TRACEBACK_ENV, "").strip().lower() == "full":
        return False
    return isinstance(error, USER_ERRORS)


def kept_frames(modules: Iterable[str]) -> list[int]:
    """The positions of the frames kept, given each frame's module name, outermost first.

    Examples:
        >>> kept_frames(["__main__", "towerkit.trainers._launch", "my_model", "towerkit.towers._tower"])
        [0, 2]
    """
    return [i for i, name in enumerate(modules) if not is_towerkit_module(name)]


def _filtered(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A copy of the traceback `tb` without towerkit's frames."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    modules = [str(e.tb_frame.f_globals.get("__name__", "")) for e in entries]
    out: types.TracebackType | None = None
    for i in reversed(kept_frames(modules)):
        e = entries[i]
        out = types.TracebackType(out, e.tb_frame, e.tb_lasti, e.tb_lineno)
    return out


def _strip(error: BaseException) -> None:
    """Drop towerkit's frames from `error` and the errors it was raised from, once each."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.__traceback__ = _filtered(current.__traceback__)
        current = current.__cause__ or current.__context__
    notes = getattr(error, "__notes__", None) or []
    if NOTE not in notes and hasattr(error, "add_note"):
        error.add_note(NOTE)


def filter_traceback(func: F) -> F:
    """Wrap an entry point so that a user's error shows without towerkit's frames.

    An error of `USER_ERRORS` leaving `func` loses the frames of towerkit's modules
    (those of the user's code, TensorFlow and other libraries stay) and gets a note
    naming ``TOWERKIT_TRACEBACK=full``, which shows every frame again. The error itself
    (its type, message and cause) is unchanged.
    """

    @functools.wraps(func)
    def entry_point(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except USER_ERRORS as err:
            if not hides_frames(err, os.environ):
                raise
            _strip(err)
            raise  # the error as it came, its traceback now without towerkit's frames

    return entry_point  # type: ignore[return-value]
