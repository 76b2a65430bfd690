"""The command line: ``install-horovod`` and ``python -m towerkit.tools.install_horovod``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from towerkit.tools.install_horovod._records import (
    DEFAULT_VERSION,
    WHEEL_CACHE_ENV,
    BuildOptions,
    HorovodInstallError,
    HorovodPatchError,
)
from towerkit.tools.install_horovod._run import _install

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="install-horovod",
        description=(
            "Build horovod from its sdist against the TensorFlow installed in an interpreter "
            "(gloo controller; MPI and NCCL on request), then check a 2-process allreduce."
        ),
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter of the target environment (default: this one)",
    )
    parser.add_argument("--version", default=DEFAULT_VERSION, help="horovod release to build")
    parser.add_argument(
        "--with-mpi", action="store_true", help="also build the MPI controller (needs MPI)"
    )
    parser.add_argument(
        "--gpu", action="store_true", help="GPU collectives through NCCL (needs CUDA and NCCL)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="parallel compile jobs (default: the CPU count)",
    )
    parser.add_argument(
        "--workdir",
        default=None,
        help="where to download and build (kept); default: a temporary directory, removed after",
    )
    parser.add_argument(
        "--keep-workdir", action="store_true", help="keep the temporary working directory"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the environment and steps, run nothing"
    )
    parser.add_argument("--skip-verify", action="store_true", help="no 2-process check after")
    parser.add_argument(
        "--force",
        action="store_true",
        help="rebuild even if a fitting horovod is installed or cached (replaces the cached wheel)",
    )
    parser.add_argument(
        "--wheel-cache",
        default=None,
        metavar="DIR",
        help=(
            "build a wheel, keep it under DIR/<key>/ and install from there; a later run whose "
            "key matches (horovod version, Python tag, platform, TensorFlow distribution and "
            f"version, controllers) installs it without compiling (default: ${WHEEL_CACHE_ENV}; "
            "unset or '' builds and installs without a cache)"
        ),
    )
    parser.add_argument(
        "--verify-timeout",
        type=float,
        default=300.0,
        help="seconds the 2-process check may take (default: 300)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=300.0,
        help="seconds importing tensorflow and horovod may take (default: 300)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the installer.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when a step failed.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        options = BuildOptions(
            version=args.version, with_mpi=args.with_mpi, gpu=args.gpu, jobs=args.jobs
        )
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    try:
        return _install(args, options)
    except (HorovodInstallError, HorovodPatchError) as err:
        print(f"install-horovod: error: {err}", file=sys.stderr)
        return 1
