"""ls-checkpoint: list the variables of a checkpoint or npz file with shapes, dtypes and sizes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from towerkit.tools._cli import add_verbose_arg, load_tensorflow
from towerkit.tools._files import ToolError, fail
from towerkit.tools._vars import (
    check_source,
    compile_patterns,
    files_of,
    format_bytes,
    list_source,
    select_names,
    var_bytes,
    verify_values,
)

__all__ = ["main", "render_listing", "rows_of", "verified_line"]


def rows_of(infos: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per variable: name, dtype, shape, number of elements and bytes.

    Args:
        infos: records with ``name``, ``shape`` and ``dtype`` (``VarInfo``).

    Examples:
        >>> from types import SimpleNamespace as V
        >>> rows_of([V(name="fc/W", shape=(3, 4), dtype="float32")])
        [{'name': 'fc/W', 'dtype': 'float32', 'shape': [3, 4], 'elements': 12, 'bytes': 48}]
    """
    rows = []
    for info in infos:
        shape = list(info.shape)
        elements = None if any(d is None for d in shape) else _prod(shape)
        rows.append(
            {
                "name": info.name,
                "dtype": info.dtype,
                "shape": shape,
                "elements": elements,
                "bytes": var_bytes(info.shape, info.dtype),
            }
        )
    return rows


def _prod(shape: Sequence[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def render_listing(rows: Sequence[dict[str, Any]], sort: str = "name") -> str:
    """The listing as printed: a table, then the totals.

    Args:
        rows: what `rows_of` returns.
        sort: ``"name"`` or ``"size"`` (largest first).

    Examples:
        >>> rows = [{"name": "b", "dtype": "float32", "shape": [2], "elements": 2, "bytes": 8},
        ...         {"name": "W", "dtype": "float32", "shape": [2, 3], "elements": 6, "bytes": 24}]
        >>> print(render_listing(rows, sort="size"))
        name  dtype    shape   elements  size
        W     float32  (2, 3)         6  24 B
        b     float32  (2,)           2  8 B
        2 variables, 8 elements, 32 B
    """
    if sort == "size":
        rows = sorted(rows, key=lambda r: (-(r["bytes"] or 0), r["name"]))
    else:
        rows = sorted(rows, key=lambda r: r["name"])
    header = ("name", "dtype", "shape", "elements", "size")
    cells = [
        (
            r["name"],
            r["dtype"],
            str(tuple(r["shape"])),
            "?" if r["elements"] is None else str(r["elements"]),
            format_bytes(r["bytes"]),
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(len(header))]
    right = (False, False, False, True, False)

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)]
        return "  ".join(parts).rstrip()

    lines = [line(header), *(line(c) for c in cells)]
    known = [r["bytes"] for r in rows if r["bytes"] is not None]
    elements = sum(r["elements"] or 0 for r in rows)
    total = format_bytes(sum(known))
    if len(known) < len(rows):
        total += f" (+ {len(rows) - len(known)} of unknown size)"
    noun = "variable" if len(rows) == 1 else "variables"
    lines.append(f"{len(rows)} {noun}, {elements} elements, {total}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ls-checkpoint",
        description=(
            "List the variables of a TensorFlow checkpoint or an npz file: names, dtypes, "
            "shapes, sizes, and the total size."
        ),
    )
    parser.add_argument(
        "path",
        help="a checkpoint prefix (train_log/model-1000), one of its files, a checkpoint "
        "directory (its latest checkpoint), or an .npz file",
    )
    parser.add_argument(
        "--include", action="append", metavar="REGEX", help="list only matching names (repeatable)"
    )
    parser.add_argument(
        "--exclude", action="append", metavar="REGEX", help="leave out matching names (repeatable)"
    )
    parser.add_argument("--sort", choices=("name", "size"), default="name", help="row order")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_verbose_arg(parser)
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also read every listed value back and check it against its checksum (an npz "
        "entry through a small buffer); without it no value is read: only the headers, "
        "and the files' presence and sizes, are checked",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 2 when the path is missing or not a checkpoint or npz file, or
        TensorFlow cannot be imported, or
        its files are damaged (a missing or truncated data file; with ``--verify``, any
        value whose bytes do not match their checksum).
    """
    args = _parser().parse_args(argv)
    try:
        # the arguments first: TensorFlow takes seconds to load
        include = compile_patterns(args.include, "--include")
        exclude = compile_patterns(args.exclude, "--exclude")
        check_source(args.path)
        load_tensorflow("ls-checkpoint", args.verbose)
        kind, resolved, infos = list_source(args.path)
        keep = set(select_names([i.name for i in infos], include, exclude))
        if args.verify:
            verify_values(kind, resolved, sorted(keep))
    except ToolError as err:
        return fail("ls-checkpoint", err)
    rows = rows_of([i for i in infos if i.name in keep])
    on_disk = sum(os.path.getsize(f) for f in files_of(kind, resolved))
    if args.json:
        doc = {"path": resolved, "kind": kind, "bytes_on_disk": on_disk, "variables": rows}
        if args.verify:
            doc["verified"] = len(rows)
        print(json.dumps(doc, indent=1))
        return 0
    print(f"{kind} {resolved} ({format_bytes(on_disk)} on disk)")
    print(render_listing(rows, sort=args.sort))
    if args.verify:
        print(verified_line(len(rows)))
    return 0


def verified_line(count: int) -> str:
    """What ``--verify`` prints when every value listed matches its checksum.

    Examples:
        >>> verified_line(1), verified_line(5)
        ('verified: the value matches its checksum', 'verified: all 5 values match their checksums')
    """
    if count == 1:
        return "verified: the value matches its checksum"
    return f"verified: all {count} values match their checksums"


if __name__ == "__main__":
    sys.exit(main())
