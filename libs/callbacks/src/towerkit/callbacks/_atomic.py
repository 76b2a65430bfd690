"""Files written atomically: a temporary name in the same directory, then ``os.replace``."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile


def _temp_beside(path: str) -> tuple[int, str]:
    directory = os.path.dirname(os.path.abspath(path))
    return tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so that readers see the old file or the new one.

    The text goes to a temporary file in the same directory, is flushed to disk, and
    replaces ``path`` in one ``os.replace``.
    """
    path = os.fspath(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Copy the file ``src`` to ``dst`` so that ``dst`` is never half-written."""
    dst = os.fspath(dst)
    fd, tmp = _temp_beside(dst)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
