"""Small file helpers shared by the tools: TOML reading, errors as exit codes.

Atomic writes come from `towerkit.sessinit` (`atomic_path`, `atomic_write_text`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class ToolError(Exception):
    """A problem a tool reports as one line on stderr, exiting with status 2."""


def require_file_output(path: str, example: str) -> None:
    """Refuse an output path that names a directory: the tool writes a file there, not into it.

    Args:
        path: the output path as the user gave it.
        example: a file name to suggest inside it (``"params.npz"``).

    Raises:
        ToolError: `path` is a directory; the message names it as given.

    Examples:
        >>> require_file_output("no/such/file.npz", "params.npz")
        >>> require_file_output(".", "params.npz")
        Traceback (most recent call last):
        towerkit.tools._files.ToolError: output '.' is a directory: expected a file path such as './params.npz'
    """
    if os.path.isdir(path):
        msg = (
            f"output {path!r} is a directory: expected a file path such as "
            f"{os.path.join(path, example)!r}"
        )
        raise ToolError(msg)


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a TOML file.

    Raises:
        ToolError: The file does not exist or is not valid TOML.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        msg = f"{path!r} does not exist"
        raise ToolError(msg) from None
    except IsADirectoryError:
        msg = f"{path!r} is a directory: expected a TOML file"
        raise ToolError(msg) from None
    except tomllib.TOMLDecodeError as err:
        msg = f"{path!r} is not valid TOML: {err}"
        raise ToolError(msg) from None


def fail(tool: str, message: object) -> int:
    r"""Print ``<tool>: error: <message>`` to stderr and return the exit status 2.

    Examples:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     status = fail("ls-checkpoint", "'x' does not exist")
        >>> status, err.getvalue()
        (2, "ls-checkpoint: error: 'x' does not exist\n")
    """
    print(f"{tool}: error: {message}", file=sys.stderr)
    return 2
