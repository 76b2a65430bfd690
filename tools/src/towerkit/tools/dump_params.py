"""dump-params: copy the variables of a checkpoint (selected by regexes) into an npz file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from towerkit.tools._convert import add_selection_args, run

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dump-params",
        description=(
            "Copy the variables of a TensorFlow checkpoint into an npz file (loadable by "
            "SmartInit and DictRestore), keeping those selected by --include/--exclude. "
            "The file is written atomically. The reverse is load-params."
        ),
    )
    parser.add_argument(
        "source",
        metavar="CHECKPOINT",
        help="a checkpoint prefix, one of its files, a checkpoint directory, or an npz file",
    )
    parser.add_argument("target", metavar="OUT.npz", help="the npz file to write")
    add_selection_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 2 on a bad path, pattern or selection.
    """
    return run("dump-params", argv, _parser(), "npz")


if __name__ == "__main__":
    sys.exit(main())
