"""File names that callbacks write under a directory: checked to stay inside it."""

from __future__ import annotations

import ntpath
import os
from typing import Any

__all__ = ["check_file_name", "file_name_problem"]


def file_name_problem(name: str) -> str | None:
    r"""Why `name` cannot name a file directly inside a directory, or None when it can.

    A name is refused when it is empty, is ``.`` or ``..``, holds a path separator
    (``/``, or ``\`` on Windows), a drive (``C:``) or a NUL character: each would
    write elsewhere than the directory, or nowhere.

    Examples:
        >>> file_name_problem("min-val.tfmodel") is None
        True
        >>> file_name_problem("../best"), file_name_problem("..")
        ("it holds a path separator ('/')", "it is '..', a directory")
    """
    if not name:
        return "it is empty"
    if name in (".", ".."):
        return f"it is {name!r}, a directory"
    for sep in dict.fromkeys(s for s in ("/", os.sep, os.altsep) if s):
        if sep in name:
            return f"it holds a path separator ({sep!r})"
    if "\0" in name:
        return "it holds a NUL character"
    if os.name == "nt" and ntpath.splitdrive(name)[0]:
        return "it names a drive"
    return None


def check_file_name(argument: str, value: Any) -> str:
    """`value` as a file name inside a directory; an error naming `argument` otherwise.

    Args:
        argument: the name of the argument that gave `value`, for the message.
        value: a ``str`` or path-like naming a file directly inside a directory.

    Raises:
        TypeError: `value` is not a string or path-like.
        ValueError: `value` would leave the directory (see `file_name_problem`).

    Examples:
        >>> check_file_name("filename", "best.tfmodel")
        'best.tfmodel'
        >>> check_file_name("filename", "../best")
        Traceback (most recent call last):
        ...
        ValueError: 'filename' must be a file name without directories; got '../best': it holds a path separator ('/') (the file must stay inside its directory)
    """
    try:
        name = os.fspath(value)
    except TypeError:
        msg = f"{argument!r} must be a file name (a str); got {type(value).__name__} {value!r}"
        raise TypeError(msg) from None
    if not isinstance(name, str):
        msg = f"{argument!r} must be a file name (a str); got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    problem = file_name_problem(name)
    if problem is not None:
        msg = (
            f"{argument!r} must be a file name without directories; got {value!r}: {problem} "
            "(the file must stay inside its directory)"
        )
        raise ValueError(msg)
    return name
