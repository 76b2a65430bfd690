"""towerkit-migrate: rewrite tensorpack programs into towerkit programs, and report what is left."""

from __future__ import annotations

import argparse
import ast
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from towerkit.tools._cli import load_tensorflow
from towerkit.tools._files import ToolError
from towerkit.tools._migrate_io import Source, check_outputs, read_source, write_outputs
from towerkit.tools._migrate_names import KEEP_TENSORPACK

if TYPE_CHECKING:
    from towerkit.tools._migrate_syntax import Migrated

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
            "1 something is, 2 bad usage or a source that cannot be read or parsed, 3 an internal "
            "error (nothing written on 2 or 3)."
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
    directory; with `out` None, files stay where they are (in place). A symlink to a
    directory is not followed: it is an entry of its own (copied as a symlink).

    Examples:
        >>> plan_outputs([Path("a/train.py")], Path("o"))
        [(PosixPath('a/train.py'), PosixPath('o/train.py'))]
    """
    pairs: list[tuple[Path, Path]] = []
    for src in sources:
        if src.is_dir():
            for root, dirs, files in os.walk(src):
                links = [d for d in dirs if (Path(root) / d).is_symlink()]
                dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and d not in links)
                for name in sorted([*files, *links]):
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


INTERNAL_ERROR = 3
"""The exit status when the command itself fails on a source (a bug to report)."""


def _fail(message: str) -> int:
    print(f"towerkit-migrate: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command.

    Returns:
        0 when nothing is left to do by hand, 1 when something is, 2 on bad usage or a
        source that cannot be read or parsed, `INTERNAL_ERROR` when the conversion of a
        file fails in the command itself. Nothing is written unless the status is 0 or 1.
    """
    args = _parser().parse_args(argv)
    sources = [Path(s) for s in args.sources]
    missing = [str(s) for s in sources if not s.exists()]
    if missing:
        return _fail(f"no such file or directory: {', '.join(missing)}")
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not args.overwrite:
        return _fail(f"output directory {str(out)!r} exists: pass --overwrite to write into it")
    pairs = plan_outputs(sources, out)
    try:
        check_outputs(sources, out, pairs)
        load_tensorflow("towerkit-migrate", args.verbose)
    except ToolError as err:
        return _fail(str(err))
    try:
        results = _convert_all(pairs)
    except ToolError as err:
        return _fail(str(err))
    except _InternalError as err:
        print(f"towerkit-migrate: internal error: {err}", file=sys.stderr)
        if args.verbose:
            traceback.print_exception(err.__cause__)
        return INTERNAL_ERROR
    changes = manual = 0
    tensorpack_files = 0
    for src, _, _, done in results:
        if isinstance(done, str):
            print(f"{src}:1: by hand: {done}")
            manual += 1
            continue
        if done is None:
            continue
        tensorpack_files += done.keeps_tensorpack
        for note in done.notes:
            kind = "by hand" if note.manual else "changed"
            print(f"{src}:{note.line}: {kind}: {note.text}")
            manual += note.manual
            changes += not note.manual
    try:
        write_outputs(
            [
                (s, d, r, m if m is None or isinstance(m, str) else m.source)
                for s, d, r, m in results
            ],
            out,
        )
    except ToolError as err:
        return _fail(str(err))
    files = sum(1 for _, _, r, _ in results if r is not None)
    if tensorpack_files:
        print(
            f"{tensorpack_files} file(s) still import tensorpack's DataFlows or utilities "
            f"(tensorpack.dataflow, tensorpack.utils): {KEEP_TENSORPACK}"
        )
    print(f"{files} file(s), {changes} change(s), {manual} left by hand")
    return 1 if manual else 0


class _InternalError(Exception):
    """The conversion of a file failed in the command itself."""


_NOTEBOOK = (
    "a notebook is not converted: export it as a script "
    "(jupyter nbconvert --to script) and migrate the script"
)


def _unparsable(src: Path, err: BaseException) -> str:
    """The message for a source Python compiles but cannot parse (nesting too deep, a NUL)."""
    why = (
        "it nests too deeply for the parser (a very long expression or deep nesting: split it)"
        if isinstance(err, (RecursionError, MemoryError))
        else str(err)
    )
    return f"{src}: cannot be parsed: {why}; nothing written"


def _convert_all(
    pairs: Sequence[tuple[Path, Path]],
) -> list[tuple[Path, Path, Source | None, Migrated | str | None]]:
    """Read and convert every ``.py`` file; other files are copied, notebooks reported."""
    import libcst

    from towerkit.tools._migrate_cst import migrate_source

    results: list[tuple[Path, Path, Source | None, Migrated | str | None]] = []
    for src, dst in pairs:
        if src.suffix == ".ipynb":
            results.append((src, dst, None, _NOTEBOOK))
            continue
        if src.suffix != ".py":
            results.append((src, dst, None, None))
            continue
        source = read_source(src)
        try:
            ast.parse(source.text, filename=str(src))
        except SyntaxError as err:
            msg = f"{src}:{err.lineno}:{err.offset}: invalid syntax: {err.msg}; nothing written"
            raise ToolError(msg) from None
        except (RecursionError, MemoryError, ValueError) as err:
            raise ToolError(_unparsable(src, err)) from None
        try:
            migrated = migrate_source(source.text, src.stem)
        except libcst.ParserSyntaxError as err:
            msg = f"{src}:{err.raw_line}:{err.raw_column}: invalid syntax: {err.message}; nothing written"
            raise ToolError(msg) from None
        except RecursionError as err:
            raise ToolError(_unparsable(src, err)) from None
        except Exception as err:
            msg = (
                f"converting {src} failed: {type(err).__name__}: {err}; nothing written "
                "(rerun with -v for the traceback, and report it)"
            )
            raise _InternalError(msg) from err
        results.append((src, dst, source, migrated))
    return results


if __name__ == "__main__":
    sys.exit(main())
