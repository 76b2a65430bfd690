"""TensorFlow's C++ log lines while towerkit builds a session or stops an input: hidden unless asked for."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping

__all__ = ["VERBOSE_ENV", "tensorflow_lines_hidden", "verbose", "without_tensorflow_noise"]

VERBOSE_ENV = "TOWERKIT_VERBOSE"
"""The environment variable that shows TensorFlow's lines: ``TOWERKIT_VERBOSE=1``."""

_CPP_LINE = re.compile(r"^([IWEF])\d{4} \d+:\d+:\d+\.\d+\s+\d+ \S+:\d+\] (.*)$")
"""A line of TensorFlow's C++ log: level, date, time, thread, file:line, message."""

_NOISE = (
    # an expected CUDA probe on a machine without a GPU
    re.compile(r"failed call to cuInit"),
    # the input's own queue closed at the end of a run, cancelling the enqueue that waited
    re.compile(r"CANCELLED: Enqueue operation was cancelled"),
)
"""Warning and error lines (level W or E) that say nothing wrong happened."""

_CONTINUATION = re.compile(r"^(\t \[\[\{\{node .*\}\}\]\]|To enable the following instructions)")
"""The lines TensorFlow writes after a log line as part of it (the node at fault, the CPU flags)."""

_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
"""The line absl prints before the first C++ log line of a library."""


def _is_noise(line: str) -> bool | None:
    """True: a line to hide; False: a log line to keep; None: not a log line (a continuation?)."""
    text = line.rstrip("\r\n")
    if text == _BANNER:
        return True
    match = _CPP_LINE.match(text)
    if match is None:
        return None
    level, message = match.groups()
    if level == "I":
        return True
    return level in "WE" and any(p.search(message) for p in _NOISE)


def without_tensorflow_noise(lines: Iterable[str]) -> list[str]:
    r"""`lines` without TensorFlow's start-up and shutdown chatter.

    Hidden: absl's banner, TensorFlow's C++ lines of level I (information: CPU
    features, the MLIR pass, devices created), the ``failed call to cuInit`` error of a
    machine without a GPU, the ``CANCELLED ... Enqueue operation was cancelled``
    warning of an input queue closed at the end of a run, and the lines that continue a
    hidden line (the node at fault, ``To enable the following instructions``). Every other
    line is kept, in order.

    Examples:
        >>> without_tensorflow_noise([
        ...     "I0000 00:00:1795.4 17192 mlir_graph_optimization_pass.cc:437] MLIR V1 optimization pass is not enabled",
        ...     "W0000 00:00:1795.7 17708 local_rendezvous.cc:412] Local rendezvous is aborting with status: CANCELLED: Enqueue operation was cancelled",
        ...     "\t [[{{node IterableInput/enqueue}}]]",
        ...     "epoch 1/2  0.1 s",
        ...     "E0000 00:00:1795.9 17192 saver.cc:10] Not found: model-3.index",
        ... ])
        ['epoch 1/2  0.1 s', 'E0000 00:00:1795.9 17192 saver.cc:10] Not found: model-3.index']
    """
    kept: list[str] = []
    hiding = False
    for line in lines:
        noise = _is_noise(line)
        if noise is None:
            if hiding and _CONTINUATION.match(line):
                continue
            hiding = False
            kept.append(line)
        else:
            hiding = noise
            if not noise:
                kept.append(line)
    return kept


def verbose(environ: Mapping[str, str]) -> bool:
    """Whether `environ` asks for TensorFlow's lines (``TOWERKIT_VERBOSE`` set, not 0).

    Examples:
        >>> verbose({}), verbose({"TOWERKIT_VERBOSE": "1"}), verbose({"TOWERKIT_VERBOSE": "0"})
        (False, True, False)
    """
    return environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def tensorflow_lines_hidden() -> Iterator[None]:
    """Hold back what the process writes to standard error in the block; then write it without TensorFlow's chatter.

    TensorFlow's C++ libraries write to file descriptor 2 directly, so descriptor 2 is
    sent to a temporary file while the block runs; when it ends (also by an error),
    `without_tensorflow_noise` of what was written goes to the real standard error.
    With ``TOWERKIT_VERBOSE=1`` (or no descriptor 2) nothing is held back.
    """
    if verbose(os.environ):
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            kept = "".join(without_tensorflow_noise(text.splitlines(keepends=True)))
            if kept:
                os.write(2, kept.encode("utf-8"))
