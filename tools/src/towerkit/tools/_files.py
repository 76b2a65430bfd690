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
