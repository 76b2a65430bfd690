"""load-params: write the arrays of an npz file (selected by regexes) as a TensorFlow checkpoint."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from towerkit.tools._convert import add_selection_args, run

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="load-params",
        description=(
            "Write the arrays of an npz file as a TensorFlow checkpoint (readable by "
            "SaverRestore and tf.train.Saver), keeping those selected by --include/--exclude. "
            "The checkpoint is written atomically. The reverse of dump-params."
        ),
    )
    parser.add_argument("source", metavar="IN.npz", help="the npz file (or a checkpoint) to read")
    parser.add_argument(
        "target", metavar="OUT_PREFIX", help="the checkpoint prefix to write, such as out/model-0"
    )
    add_selection_args(parser)
    parser.add_argument(
        "--set-latest",
        action="store_true",
        help="also write the directory's 'checkpoint' state file naming it the latest",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 2 on a bad path, pattern or selection.
    """
    return run("load-params", argv, _parser(), "checkpoint")


if __name__ == "__main__":
    sys.exit(main())
