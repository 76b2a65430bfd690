"""The conversion both dump-params and load-params run: select variables, check, write."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from towerkit.tools._cli import add_verbose_arg, load_tensorflow
from towerkit.tools._files import ToolError, fail, require_file_output
from towerkit.tools._vars import (
    compile_patterns,
    format_bytes,
    list_source,
    read_values,
    select_names,
    var_bytes,
)


def add_selection_args(parser: argparse.ArgumentParser) -> None:
    """The options both tools share: include/exclude regexes, dry run, overwrite."""
    parser.add_argument(
        "--include",
        action="append",
        metavar="REGEX",
        help="keep only variables whose name matches (re.search; repeatable: any of them)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        metavar="REGEX",
        help="drop variables whose name matches (repeatable; applied after --include)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be written, write nothing"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    add_verbose_arg(parser)


def convert(
    tool: str,
    source: str,
    target: str,
    target_kind: str,
    args: argparse.Namespace,
    set_latest: bool = False,
) -> int:
    """Copy the selected variables of `source` to `target` (an npz file or a checkpoint prefix).

    Returns:
        The exit status: 0 on success, 2 on a user error (printed).
    """
    try:
        load_tensorflow(tool, args.verbose)
        include = compile_patterns(args.include, "--include")
        exclude = compile_patterns(args.exclude, "--exclude")
        _check_target(target, target_kind, overwrite=args.overwrite)
        kind, resolved, infos = list_source(source)
        by_name = {i.name: i for i in infos}
        names = select_names(sorted(by_name), include, exclude)
        if not names:
            msg = (
                f"no variables of {resolved!r} are left after --include/--exclude; it holds "
                f"{sorted(by_name)[:20]}"
            )
            raise ToolError(msg)
    except ToolError as err:
        return fail(tool, err)
    total = sum(var_bytes(by_name[n].shape, by_name[n].dtype) or 0 for n in names)
    what = "npz file" if target_kind == "npz" else "checkpoint"
    verb = "would write" if args.dry_run else "wrote"
    if args.dry_run:
        for name in names:
            print(f"  {name}  {by_name[name].describe()}")
    else:
        try:
            values = read_values(kind, resolved, names)
        except ToolError as err:
            return fail(tool, err)
        _write(values, target, target_kind, set_latest)
    dropped = len(by_name) - len(names)
    print(
        f"{tool}: {verb} {len(names)} variables ({format_bytes(total)}) from {kind} "
        f"{resolved!r} to {what} {target!r}" + (f"; {dropped} left out" if dropped else "")
    )
    return 0


def _check_target(target: str, kind: str, *, overwrite: bool) -> None:
    if kind == "npz":
        if not target.endswith(".npz"):
            msg = f"output {target!r} must end with '.npz'"
            raise ToolError(msg)
        require_file_output(target, "params.npz")  # --overwrite replaces a file, never a directory
        exists = os.path.exists(target)
    else:
        if target.endswith(".npz"):
            msg = f"output {target!r} ends with '.npz': expected a checkpoint prefix such as 'out/model-0'"
            raise ToolError(msg)
        if target.endswith(("/", os.sep)) or os.path.isdir(target):
            msg = f"output {target!r} is a directory: expected a checkpoint prefix such as 'out/model-0'"
            raise ToolError(msg)
        from towerkit.sessinit import GlobPathError, require_globless

        try:
            require_globless(target, "output")
        except GlobPathError as err:
            raise ToolError(str(err)) from None
        exists = os.path.exists(target + ".index")
    if exists and not overwrite:
        msg = f"output {target!r} exists: pass --overwrite to replace it"
        raise ToolError(msg)
    parent = os.path.dirname(os.path.abspath(target))
    if kind == "npz" and not os.path.isdir(parent):
        msg = f"output directory {parent!r} does not exist"
        raise ToolError(msg)


def _write(values: Mapping[str, Any], target: str, kind: str, set_latest: bool) -> None:
    from towerkit.sessinit import (
        remove_stale_temporaries,
        save_checkpoint_vars,
        write_checkpoint_state,
    )

    base = os.path.basename(target)
    remove_stale_temporaries(
        os.path.dirname(os.path.abspath(target)),
        lambda n: n == base or n.startswith(base + "."),
        what=base,
    )

    save_checkpoint_vars(values, target)
    if kind == "checkpoint" and set_latest:
        write_checkpoint_state(os.path.dirname(os.path.abspath(target)), os.path.abspath(target))


def run(tool: str, argv: Sequence[str] | None, parser: argparse.ArgumentParser, kind: str) -> int:
    """Parse `argv` with `parser` and convert to `kind` (``"npz"`` or ``"checkpoint"``)."""
    args = parser.parse_args(argv)
    return convert(
        tool, args.source, args.target, kind, args, set_latest=getattr(args, "set_latest", False)
    )
