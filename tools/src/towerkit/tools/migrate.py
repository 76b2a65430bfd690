"""towerkit-migrate: rewrite tensorpack programs into towerkit programs, and report what is left."""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from towerkit.tools._cli import load_tensorflow
from towerkit.tools._files import ToolError

if TYPE_CHECKING:
    from towerkit.tools._migrate_cst import Migrated

__all__ = ["main", "plan_outputs"]

SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".nox", ".venv", "train_log"})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="towerkit-migrate",
        description=(
            "Rewrite tensorpack programs (files or whole trees) into towerkit programs: "
            "imports to the towerkit lib holding each name, the logger's log directory into "
            "logdir=, QueueInput into IterableInput, TensorFlow 1 calls by TensorFlow's own "
            "upgrader rules. Comments and layout are kept. Prints each change and each edit "
            "left to do by hand with its file and line. Exit status: 0 nothing left by hand, "
            "1 something is, 2 bad usage or a source that does not parse (nothing written)."
        ),
    )
    parser.add_argument("sources", nargs="+", metavar="SOURCE", help="a .py file or a directory")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="DIR", help="write the migrated copies under DIR")
    where.add_argument("--in-place", action="store_true", help="rewrite the sources themselves")
    parser.add_argument(
        "--overwrite", action="store_true", help="write into an --out DIR that already exists"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show TensorFlow's start-up")
    return parser


def plan_outputs(sources: Sequence[Path], out: Path | None) -> list[tuple[Path, Path]]:
    """Each source file (``.py`` or not) and where its migrated copy goes.

    A file goes to ``out/<its name>``, a directory's files to ``out/<dir name>/<relative
    path>`` when there are several sources and to ``out/<relative path>`` for a single
    directory; with `out` None, files stay where they are (in place).

    Examples:
        >>> plan_outputs([Path("a/train.py")], Path("o"))
        [(PosixPath('a/train.py'), PosixPath('o/train.py'))]
    """
    pairs: list[tuple[Path, Path]] = []
    for src in sources:
        if src.is_dir():
            for root, dirs, files in os.walk(src):
                dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
                for name in sorted(files):
                    path = Path(root) / name
                    rel = path.relative_to(src)
                    if out is None:
                        pairs.append((path, path))
                    elif len(sources) == 1:
                        pairs.append((path, out / rel))
                    else:
                        pairs.append((path, out / src.resolve().name / rel))
        else:
            pairs.append((src, src if out is None else out / src.name))
    return pairs


def _fail(message: str) -> int:
    print(f"towerkit-migrate: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command.

    Returns:
        0 when nothing is left to do by hand, 1 when something is, 2 on bad usage or a
        source that does not parse.
    """
    args = _parser().parse_args(argv)
    sources = [Path(s) for s in args.sources]
    missing = [str(s) for s in sources if not s.exists()]
    if missing:
        return _fail(f"no such file or directory: {', '.join(missing)}")
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not args.overwrite:
        return _fail(f"output directory {str(out)!r} exists: pass --overwrite to write into it")
    try:
        load_tensorflow("towerkit-migrate", args.verbose)
    except ToolError as err:
        return _fail(str(err))
    import libcst

    from towerkit.tools._migrate_cst import migrate_source

    pairs = plan_outputs(sources, out)
    results: list[tuple[Path, Path, Migrated | None]] = []
    for src, dst in pairs:
        if src.suffix != ".py":
            results.append((src, dst, None))
            continue
        text = src.read_text(encoding="utf-8")
        try:
            ast.parse(text, filename=str(src))
        except SyntaxError as err:
            return _fail(
                f"{src}:{err.lineno}:{err.offset}: invalid syntax: {err.msg}; nothing written"
            )
        try:
            migrated = migrate_source(text, src.stem)
        except libcst.ParserSyntaxError as err:
            return _fail(
                f"{src}:{err.raw_line}:{err.raw_column}: invalid syntax: {err.message}; nothing written"
            )
        results.append((src, dst, migrated))
    changes = manual = 0
    for src, _, done in results:
        if done is None:
            continue
        for note in done.notes:
            kind = "by hand" if note.manual else "changed"
            print(f"{src}:{note.line}: {kind}: {note.text}")
            manual += note.manual
            changes += not note.manual
    _write(results, out, args.in_place)
    files = sum(1 for _, _, m in results if m is not None)
    print(f"{files} file(s), {changes} change(s), {manual} left by hand")
    return 1 if manual else 0


def _write(results: list[tuple[Path, Path, Any]], out: Path | None, in_place: bool) -> None:
    """Write every output; a new --out directory appears whole or not at all."""
    from towerkit.sessinit import atomic_write_text

    if in_place:
        for src, _, migrated in results:
            if migrated is not None and migrated.source != src.read_text(encoding="utf-8"):
                atomic_write_text(src, migrated.source)
        return
    assert out is not None
    fresh = not out.exists()
    root = (
        Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent or ".")) if fresh else out
    )
    try:
        for src, dst, migrated in results:
            target = root / dst.relative_to(out)
            target.parent.mkdir(parents=True, exist_ok=True)
            if migrated is None:
                shutil.copy2(src, target)
            else:
                atomic_write_text(target, migrated.source)
        if fresh:
            os.replace(root, out)
    except BaseException:
        if fresh:
            shutil.rmtree(root, ignore_errors=True)
        raise


if __name__ == "__main__":
    sys.exit(main())
