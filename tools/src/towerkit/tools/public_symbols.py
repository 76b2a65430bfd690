"""public-symbols: list each lib's public names (``__all__``) and diff them against a git ref.

The names are read from each ``src/towerkit/<lib>/__init__.pyi`` (the names it imports
as themselves) or, for a lib without that stub, from ``__all__`` in its ``__init__.py``,
without importing it (no TensorFlow needed). ``diff`` exits with status 1 when a name was removed, since
removing a public name breaks users; additions are reported and pass.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from towerkit.tools._files import ToolError, fail
from towerkit.tools._workspace import Dist, find_root, load_dists, pick

__all__ = ["diff_names", "init_path", "main", "names_in_all", "names_in_stub"]


def names_in_all(source: str, filename: str = "<source>") -> list[str]:
    r"""The names a module's ``__all__`` lists, read from its source without running it.

    Handles ``__all__ = [...]`` (or a tuple, or annotated) and ``__all__ += [...]``.

    Raises:
        ToolError: the source does not parse, or ``__all__`` holds something other than
            string literals.

    Examples:
        >>> names_in_all('__all__ = ["b", "a"]\n__all__ += ("c",)\n')
        ['b', 'a', 'c']
        >>> names_in_all("x = 1")
        []
    """
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as err:
        msg = f"{filename!r} does not parse: {err}"
        raise ToolError(msg) from None
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value, extend = node.targets, node.value, False
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value, extend = [node.target], node.value, False
        elif isinstance(node, ast.AugAssign):
            targets, value, extend = [node.target], node.value, True
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        if not isinstance(value, ast.List | ast.Tuple) or not all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
        ):
            msg = f"{filename!r}: __all__ (line {node.lineno}) must be a list of string literals"
            raise ToolError(msg)
        listed = [e.value for e in value.elts]  # type: ignore[attr-defined]
        names = [*names, *listed] if extend else listed
    return names


def names_in_stub(source: str, filename: str = "<stub>") -> list[str]:
    r"""The names a package's ``__init__.pyi`` declares public, read without running it.

    A stub makes public the names it imports as themselves (``from m import A as A``);
    other imports and statements declare nothing.

    Raises:
        ToolError: the source does not parse.

    Examples:
        >>> names_in_stub("from m import A as A, B\nfrom n import c as c\nimport os\n")
        ['A', 'c']
    """
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as err:
        msg = f"{filename!r} does not parse: {err}"
        raise ToolError(msg) from None
    return [
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    ]


def public_names(
    read: Callable[[Path], str | None], init: Path, where: str = ""
) -> list[str] | None:
    """A lib's public names: its ``__init__.pyi`` stub's if it has one, else its ``__all__``.

    Args:
        read: Gives a file's text, or None when the file is absent.
        init: The lib's ``__init__.py``.
        where: What to put before a file's name in errors (``"main:"``).

    Returns:
        The names, or None when the lib has neither file.
    """
    stub = init.with_suffix(".pyi")
    text = read(stub)
    if text is not None:
        return names_in_stub(text, f"{where}{stub}")
    text = read(init)
    return None if text is None else names_in_all(text, f"{where}{init}")


def diff_names(old: Sequence[str] | None, new: Sequence[str] | None) -> dict[str, list[str]]:
    """Names added and removed between two ``__all__`` lists (None: the lib is absent).

    Examples:
        >>> diff_names(["a", "b"], ["b", "c"])
        {'added': ['c'], 'removed': ['a']}
        >>> diff_names(None, ["x"])
        {'added': ['x'], 'removed': []}
    """
    before, after = set(old or ()), set(new or ())
    return {"added": sorted(after - before), "removed": sorted(before - after)}


def init_path(dist: Dist) -> Path | None:
    """The ``__init__.py`` of a towerkit distribution's package, or None for others."""
    if dist.package is None:
        return None
    return dist.path / "src" / Path(*dist.package.split(".")) / "__init__.py"


def _read_file(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _git_show(root: Path, ref: str, path: Path) -> str | None:
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "show", f"{ref}:{rel}"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        msg = "git is not installed"
        raise ToolError(msg) from None
    if done.returncode == 0:
        return done.stdout
    err = done.stderr.strip()
    if "does not exist in" in err or "exists on disk, but not in" in err:
        return None
    msg = f"git show {ref}:{rel} failed: {err.splitlines()[-1] if err else done.returncode}"
    raise ToolError(msg)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="public-symbols",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1] + ".",
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--root", help="the workspace root (default: found from the current dir)")
    sub = parser.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="print each lib's __all__")
    ls.add_argument("libs", nargs="*", help="libs to list (default: all)")
    df = sub.add_parser("diff", help="compare each lib's __all__ with the one at a git ref")
    df.add_argument("libs", nargs="*", help="libs to compare (default: all)")
    df.add_argument("--ref", default="main", help="the git ref to compare with (default: main)")
    df.add_argument(
        "--allow-removals", action="store_true", help="exit 0 even when names were removed"
    )
    for p in (ls, df):
        p.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 1 when ``diff`` finds removed names, 2 on a usage, git or parse error.
    """
    args = _parser().parse_args(argv)
    try:
        root = Path(args.root) if args.root else find_root()
        dists = load_dists(root)
        chosen = [pick(dists, n) for n in args.libs] if args.libs else dists
        found = {d.name: init_path(d) for d in chosen}
        inits = {n: p for n, p in found.items() if p is not None}
        current = {n: public_names(_read_file, p) for n, p in inits.items()}
        if args.command == "list":
            if args.json:
                print(json.dumps(current, indent=1))
            else:
                for name, names in current.items():
                    shown = ", ".join(names or []) or "(no __init__.py)"
                    print(f"{name} ({len(names or [])}): {shown}")
            return 0
        report = {}
        for name, path in inits.items():
            old = public_names(lambda p: _git_show(root, args.ref, p), path, f"{args.ref}:")
            report[name] = diff_names(old, current[name])
    except ToolError as err:
        return fail("public-symbols", err)
    removed = {n: d["removed"] for n, d in report.items() if d["removed"]}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for name, d in report.items():
            if not d["added"] and not d["removed"]:
                print(f"{name}: unchanged since {args.ref}")
                continue
            for sym in d["added"]:
                print(f"{name}: + {sym}")
            for sym in d["removed"]:
                print(f"{name}: - {sym}  (removed: breaks users)")
    if removed and not args.allow_removals:
        total = sum(len(v) for v in removed.values())
        print(
            f"public-symbols: {total} public names removed since {args.ref}; "
            "keep them, or pass --allow-removals for a breaking release",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
