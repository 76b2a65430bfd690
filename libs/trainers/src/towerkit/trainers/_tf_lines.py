"""TensorFlow's C++ log lines while towerkit builds a session or stops an input: hidden unless asked for."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping

__all__ = [
    "VERBOSE_ENV",
    "NoiseFilter",
    "release_standard_error",
    "tensorflow_lines_hidden",
    "verbose",
    "without_tensorflow_noise",
]

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
    keep = NoiseFilter()
    return [line for line in lines if keep(line)]


def verbose(environ: Mapping[str, str]) -> bool:
    """Whether `environ` asks for TensorFlow's lines (``TOWERKIT_VERBOSE`` set, not 0).

    Examples:
        >>> verbose({}), verbose({"TOWERKIT_VERBOSE": "1"}), verbose({"TOWERKIT_VERBOSE": "0"})
        (False, True, False)
    """
    return environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


class NoiseFilter:
    """`without_tensorflow_noise` a line at a time: whether each line, in order, is kept.

    Examples:
        >>> keep = NoiseFilter()
        >>> [keep(line) for line in [
        ...     "I0000 00:00:1795.4 17192 cpu_feature_guard.cc:227] This TensorFlow binary is optimized",
        ...     "To enable the following instructions: AVX2 FMA",
        ...     "epoch 1/2  0.1 s",
        ... ]]
        [False, False, True]
    """

    def __init__(self) -> None:
        self._hiding = False

    def __call__(self, line: str) -> bool:
        noise = _is_noise(line)
        if noise is None:
            if self._hiding and _CONTINUATION.match(line):
                return False
            self._hiding = False
            return True
        self._hiding = noise
        return not noise


class _Relay:
    """Descriptor 2 sent through a pipe; a thread writes what comes, less the noise, to the real one.

    Line by line as it comes, so a line logged while a session start blocks (a task
    found dead, a stack dump) shows at once, and nothing is left behind when the
    process ends in a hurry (`release_standard_error`).
    """

    def __init__(self) -> None:
        sys.stderr.flush()
        self._real = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self._read_end = read_end
        self._lock = threading.Lock()
        self._ended = False
        self._thread = threading.Thread(target=self._pump, name="stderr-relay", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        keep = NoiseFilter()
        pending = b""
        while True:
            try:
                chunk = os.read(self._read_end, 65536)
            except OSError:
                chunk = b""
            if not chunk:  # every write end is closed: descriptor 2 is the real one again
                break
            *lines, pending = (pending + chunk).split(b"\n")
            self._write(b"".join(x + b"\n" for x in lines if keep(x.decode("utf-8", "replace"))))
        if pending and keep(pending.decode("utf-8", "replace")):
            self._write(pending)
        # the end: descriptor 2 is the real one again, and no process keeps a copy of the pipe
        os.close(self._read_end)
        os.close(self._real)

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(self._real, data) :]

    def end(self, wait_s: float = 1.0) -> None:
        """Put the real descriptor 2 back and write what is still in the pipe (`wait_s` at most).

        A process started in the block holds a copy of the pipe as its standard error: the
        thread then relays its lines until it closes it, past `wait_s`.
        """
        with self._lock:
            if self._ended:
                return
            self._ended = True
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(self._real, 2)  # closes the pipe's last write end: the thread reads to its end
        self._thread.join(wait_s)


_RELAYS: list[_Relay] = []
"""The relays in force, innermost last."""


def release_standard_error() -> None:
    """End every `tensorflow_lines_hidden` block's relay now: before the process exits at once.

    A process leaving with ``os._exit`` (a task lost, a second Ctrl-C, a preemption's
    grace run out) while a session starts would otherwise lose the lines still in the
    relay's pipe; the real descriptor 2 is back afterwards.
    """
    for relay in reversed(list(_RELAYS)):
        relay.end(wait_s=2.0)


@contextlib.contextmanager
def tensorflow_lines_hidden() -> Iterator[None]:
    """While the block runs, write what the process writes to standard error without TensorFlow's chatter.

    TensorFlow's C++ libraries write to file descriptor 2 directly, so descriptor 2 is
    a pipe while the block runs, and a thread writes each line that is not
    `without_tensorflow_noise` to the real standard error as it comes. When the block
    ends (also by an error) the real descriptor is put back. With
    ``TOWERKIT_VERBOSE=1`` (or no descriptor 2) nothing is filtered.
    """
    if verbose(os.environ):
        yield
        return
    try:
        relay = _Relay()
    except (OSError, ValueError):
        yield
        return
    _RELAYS.append(relay)
    try:
        yield
    finally:
        relay.end()
        _RELAYS.remove(relay)
