"""Small file helpers shared by the tools: atomic writes, TOML reading, errors as exit codes."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class ToolError(Exception):
    """A problem a tool reports as one line on stderr, exiting with status 2."""


@contextlib.contextmanager
def atomic_path(final_path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path beside `final_path`; rename it over `final_path` on success.

    Nothing half-written ever appears under `final_path`: on an exception the temporary
    file is removed and `final_path` is left as it was.

    Examples:
        >>> import tempfile, os
        >>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
        >>> with atomic_path(target) as tmp:
        ...     _ = open(tmp, "w").write("done")
        >>> open(target).read()
        'done'
    """
    final = os.fspath(final_path)
    directory = os.path.dirname(os.path.abspath(final))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(final)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        # mkstemp makes the file 0600; give it the mode a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


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
    """Print ``<tool>: error: <message>`` to stderr and return the exit status 2."""
    print(f"{tool}: error: {message}", file=sys.stderr)
    return 2
