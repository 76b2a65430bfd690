"""The file side of towerkit-migrate: reading sources, checking outputs, writing them whole."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tempfile
import tokenize
from collections.abc import Sequence
from pathlib import Path

import attrs

from towerkit.tools._files import ToolError


@attrs.frozen(kw_only=True)
class Source:
    """A source's text as Python reads it, and what writing it back must keep."""

    text: str
    encoding: str


def read_source(path: Path) -> Source:
    """The text of a ``.py`` file, decoded by its coding line (UTF-8 without one).

    Line endings are kept as they are (CRLF stays CRLF).

    Raises:
        ToolError: the file cannot be read (dangling symlink, symlink loop, permissions)
            or decoded; the message names the file.
    """
    try:
        data = path.read_bytes()
    except OSError as err:
        msg = f"{path}: cannot read: {err.strerror or err}; nothing written"
        raise ToolError(msg) from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as err:
        msg = f"{path}: cannot decode: {err}; nothing written"
        raise ToolError(msg) from None
    if encoding == "utf-8-sig":
        text = text.removeprefix("\ufeff")
    return Source(text=text, encoding=encoding)


def check_outputs(
    sources: Sequence[Path], out: Path | None, pairs: Sequence[tuple[Path, Path]]
) -> None:
    """Refuse an output plan that would change a source or lose a file.

    Raises:
        ToolError: `out` is a source or lies inside one, its parent is missing or not
            writable, or two sources would be written to the same output path.
    """
    if out is None:
        return
    target = out.resolve()
    for src in sources:
        real = src.resolve()
        if target == real or (src.is_dir() and target.is_relative_to(real)):
            msg = (
                f"--out {str(out)!r} is inside the source {str(src)!r}: pick a directory "
                "outside it (or rewrite the sources with --in-place)"
            )
            raise ToolError(msg)
    parent = target.parent
    if not parent.is_dir():
        msg = f"the parent of --out {str(out)!r} ({parent}) does not exist: create it first"
        raise ToolError(msg)
    if not os.access(parent, os.W_OK | os.X_OK):
        msg = f"the parent of --out {str(out)!r} ({parent}) is not writable"
        raise ToolError(msg)
    seen: dict[Path, Path] = {}
    for src, dst in pairs:
        if dst in seen:
            msg = (
                f"{seen[dst]} and {src} would both be written to {dst}: migrate them with "
                "separate --out directories (or pass their common directory)"
            )
            raise ToolError(msg)
        seen[dst] = src


def write_outputs(
    results: Sequence[tuple[Path, Path, Source | None, str | None]], out: Path | None
) -> None:
    """Write every output, or nothing.

    Each entry is ``(source, destination, read source, migrated text)``; a migrated text of
    None copies the file (a symlink is copied as a symlink). With `out` None the sources
    are rewritten in place: through a symlink to its target, keeping the file's mode
    bits and encoding. Otherwise everything is written into a temporary directory beside
    `out` first, then moved into place (a new `out` appears whole).

    Raises:
        ToolError: a file cannot be written; the message names it.
    """
    try:
        if out is None:
            _write_in_place(results)
        else:
            _write_out(results, out)
    except OSError as err:
        where = err.filename or out
        msg = f"{where}: cannot write: {err.strerror or err}; nothing written"
        raise ToolError(msg) from None


def _write_in_place(results: Sequence[tuple[Path, Path, Source | None, str | None]]) -> None:
    from towerkit.sessinit import atomic_write_bytes

    for src, _, source, new in results:
        if source is None or new is None or new == source.text:
            continue
        real = src.resolve()
        mode = stat.S_IMODE(real.stat().st_mode)
        atomic_write_bytes(real, new.encode(source.encoding))
        os.chmod(real, mode)


def _write_out(results: Sequence[tuple[Path, Path, Source | None, str | None]], out: Path) -> None:
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.resolve().parent))
    try:
        for src, dst, source, new in results:
            target = stage / dst.relative_to(out)
            target.parent.mkdir(parents=True, exist_ok=True)
            if source is None or new is None:
                shutil.copy2(src, target, follow_symlinks=False)
            else:
                target.write_bytes(new.encode(source.encoding))
                shutil.copymode(src, target)
        if not out.exists():
            os.replace(stage, out)
            return
        for _, dst, _, _ in results:
            final = out / dst.relative_to(out)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / dst.relative_to(out), final)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
