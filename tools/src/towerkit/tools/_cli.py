"""What every tool does around its work: a quiet TensorFlow start, errors as one line and status 2."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

from towerkit.tools._files import ToolError

VERBOSE_ENV = "TOWERKIT_VERBOSE"
"""Set to 1 by ``-v``: the trainers then show TensorFlow's lines while they build a session."""

QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
"""Set (where the user has not set them) before TensorFlow loads, unless ``-v`` is given."""


def add_verbose_arg(parser: argparse.ArgumentParser) -> None:
    """``-v/--verbose``: let TensorFlow print its start-up and C++ log lines."""
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show TensorFlow's start-up and C++ log lines (hidden by default)",
    )


@contextlib.contextmanager
def stderr_captured() -> Iterator[list[str]]:
    r"""Send what this process writes to file descriptor 2 into a list instead of the terminal.

    TensorFlow's C++ libraries write their start-up lines (``All log messages before
    absl::InitializeLog()``, oneDNN notices) straight to descriptor 2 when they load,
    whatever ``TF_CPP_MIN_LOG_LEVEL`` says; Python's ``sys.stderr`` goes the same way.
    The list is filled when the block ends.

    Examples:
        >>> with stderr_captured() as lines:
        ...     os.write(2, b"hidden\n")
        7
        >>> lines
        ['hidden']
    """
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode("utf-8", "replace").splitlines())


def import_tensorflow_quietly(verbose: bool = False) -> None:
    """Import TensorFlow without its start-up lines, for a script that wants them gone.

    Call it before anything imports TensorFlow (first thing in a script, after
    deciding whether ``-v`` was given). With `verbose`, ``TOWERKIT_VERBOSE=1`` is set
    too (where unset), so the lines TensorFlow prints while towerkit builds a session
    show as well. Unless `verbose`, ``TF_CPP_MIN_LOG_LEVEL`` is
    set to 2 where the user has not set it, and the lines TensorFlow's C++ libraries
    write while they load are dropped. An import error still reaches the terminal.
    Does nothing when TensorFlow is already imported.
    """
    if verbose:
        os.environ.setdefault(VERBOSE_ENV, "1")  # towerkit's later TensorFlow lines too
    if "tensorflow" in sys.modules:
        return
    if verbose:
        import tensorflow

        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    with stderr_captured():
        import tensorflow  # noqa: F401


def _load_sessinit() -> None:
    import towerkit.sessinit

    _ = towerkit.sessinit.SmartInit  # a name that imports TensorFlow, checking its version


def load_tensorflow(tool: str, verbose: bool = False) -> None:
    """Import TensorFlow and the towerkit libs that need it, quietly unless `verbose`.

    Call before anything imports TensorFlow. Without `verbose`, TensorFlow's C++ log
    level is raised (``TF_CPP_MIN_LOG_LEVEL=2`` unless already set) and its start-up
    lines are hidden.

    Raises:
        ToolError: TensorFlow (or a towerkit lib) cannot be imported; the message is the
            import error's, in one line.
    """
    if verbose:
        os.environ.setdefault(VERBOSE_ENV, "1")
    if "tensorflow" in sys.modules:
        return
    if not verbose:
        for key, value in QUIET_ENV.items():
            os.environ.setdefault(key, value)
    try:
        # towerkit.sessinit loads TensorFlow at the first use of a name that needs it
        # (its session initializers): touch one here, so the tool fails (or TensorFlow
        # prints its start-up lines) now rather than later.
        if verbose:
            _load_sessinit()
        else:
            with stderr_captured():
                _load_sessinit()
    except ImportError as err:
        message = " ".join(str(err).split()) or f"cannot import {err.name}"
        msg = f"TensorFlow cannot be imported: {message}"
        raise ToolError(msg) from None
    import tensorflow as tf

    if not verbose:
        tf.get_logger().setLevel("ERROR")
