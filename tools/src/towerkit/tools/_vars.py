"""Variables of checkpoints and npz files for the tools: selection by regex, sizes, sources."""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Iterable, Sequence
from typing import Any

from towerkit.tools._files import ToolError

_ITEMSIZES = {
    "bool": 1,
    "bfloat16": 2,
    "qint8": 1,
    "quint8": 1,
    "qint16": 2,
    "quint16": 2,
    "qint32": 4,
}
"""Bytes per element of TensorFlow dtypes that NumPy does not name."""


def compile_patterns(patterns: Iterable[str] | None, what: str) -> tuple[re.Pattern[str], ...]:
    """Compile regexes given on the command line, naming every invalid one.

    Raises:
        ToolError: A pattern is not a valid regular expression.

    Examples:
        >>> [p.pattern for p in compile_patterns(["^fc/", "W$"], "--include")]
        ['^fc/', 'W$']
        >>> compile_patterns(["(", "a"], "--include")
        Traceback (most recent call last):
        ...
        towerkit.tools._files.ToolError: --include has invalid regular expressions: '(' (missing ), unterminated subpattern at position 0)
    """
    out, bad = [], []
    for pattern in patterns or ():
        try:
            out.append(re.compile(pattern))
        except re.error as err:
            bad.append(f"{pattern!r} ({err})")
    if bad:
        msg = f"{what} has invalid regular expressions: {', '.join(bad)}"
        raise ToolError(msg)
    return tuple(out)


def select_names(
    names: Iterable[str],
    include: Sequence[re.Pattern[str]] = (),
    exclude: Sequence[re.Pattern[str]] = (),
) -> list[str]:
    """The names that match any `include` regex (all when none) and no `exclude` regex.

    Regexes are searched anywhere in the name (``re.search``); anchor them with ``^``/``$``.

    Examples:
        >>> names = ["conv0/W", "conv0/b", "fc/W", "global_step"]
        >>> select_names(names, [re.compile("W$")])
        ['conv0/W', 'fc/W']
        >>> select_names(names, exclude=[re.compile("^global_step$"), re.compile("/b$")])
        ['conv0/W', 'fc/W']
    """
    return [
        n
        for n in names
        if (not include or any(p.search(n) for p in include))
        and not any(p.search(n) for p in exclude)
    ]


def itemsize(dtype: str) -> int | None:
    """Bytes per element of a dtype name, or None when elements have no fixed size (strings).

    Examples:
        >>> itemsize("float32"), itemsize("bfloat16"), itemsize("string")
        (4, 2, None)
    """
    if dtype in _ITEMSIZES:
        return _ITEMSIZES[dtype]
    if dtype in ("string", "resource", "variant"):
        return None
    import numpy as np

    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        return None
    if np_dtype.kind in "OSUV":
        return None
    return int(np_dtype.itemsize)


def var_bytes(shape: Sequence[int | None], dtype: str) -> int | None:
    """Bytes the values of a variable take in memory, or None when unknown.

    Examples:
        >>> var_bytes((3, 4), "float32")
        48
        >>> var_bytes((), "int64")
        8
        >>> var_bytes((2,), "string") is None
        True
    """
    size = itemsize(dtype)
    if size is None or any(d is None for d in shape):
        return None
    return size * math.prod(shape)  # type: ignore[arg-type]


def format_bytes(n: int | None) -> str:
    """A byte count for people: ``B``, ``KiB``, ``MiB``, ``GiB``.

    Examples:
        >>> format_bytes(12), format_bytes(1536), format_bytes(3 * 2**20), format_bytes(None)
        ('12 B', '1.5 KiB', '3.0 MiB', '?')
        >>> format_bytes(2**30 - 1)
        '1.0 GiB'
    """
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if round(value, 1) < 1024 or unit == "TiB":  # 1023.96 KiB shows as 1.0 MiB
            return f"{value:.1f} {unit}"
    msg = "unreachable"  # pragma: no cover
    raise AssertionError(msg)  # pragma: no cover


def is_npz(path: str) -> bool:
    """Whether `path` names an npz file: its name ends with ``.npz`` or it is a zip file.

    Examples:
        >>> is_npz("params.npz"), is_npz("/no/such/model-10")
        (True, False)
    """
    if path.endswith(".npz"):
        return True
    return os.path.isfile(path) and zipfile.is_zipfile(path)


def check_source(path: str) -> None:
    """Check that `path` names an npz file or a checkpoint, reading no value and without TensorFlow.

    A tool calls it before loading TensorFlow (seconds), so a mistyped path is reported
    at once.

    Raises:
        ToolError: Nothing at `path`, or not a checkpoint (as for `list_source`).
    """
    from towerkit.sessinit import (
        CheckpointNotFoundError,
        GlobPathError,
        NotACheckpointError,
        resolve_checkpoint,
    )

    if is_npz(path):
        return
    try:
        resolve_checkpoint(path)
    except (CheckpointNotFoundError, NotACheckpointError, GlobPathError) as err:
        raise ToolError(str(err)) from None


def list_source(path: str) -> tuple[str, str, tuple[Any, ...]]:
    """Describe the variables stored at `path`, without reading their values.

    An npz file's entries come from their ``.npy`` headers, each checked against the
    size its member holds (a forged or damaged header is refused, a zip bomb is not
    inflated); a checkpoint's from its index, its data files checked for presence and size.

    Returns:
        ``(kind, resolved, infos)``: ``"npz"`` or ``"checkpoint"``, the file or prefix
        read, and the ``VarInfo`` records sorted by name.

    Raises:
        ToolError: Nothing at `path`, or not a checkpoint or npz file (the message names
            the file, and for an npz file the member at fault).
    """
    from towerkit.sessinit import (
        CheckpointNotFoundError,
        GlobPathError,
        NotACheckpointError,
        list_checkpoint_vars,
        list_npz_vars,
        resolve_checkpoint,
    )

    try:
        if is_npz(path):
            return "npz", path, tuple(list_npz_vars(path))
        prefix = resolve_checkpoint(path)
        return "checkpoint", prefix, tuple(list_checkpoint_vars(prefix))
    except (CheckpointNotFoundError, NotACheckpointError, GlobPathError) as err:
        raise ToolError(str(err)) from None


def verify_values(kind: str, resolved: str, names: Sequence[str]) -> None:
    """Read the values of `names` back and check them against their checksums, keeping none.

    An npz file's entries are read through a small buffer (`towerkit.sessinit.verify_npz`),
    so memory stays small whatever sizes the file declares; a checkpoint's one at a time.

    Raises:
        ToolError: A value does not match its checksum, or cannot be read.
    """
    from towerkit.sessinit import NotACheckpointError, verify_npz

    if kind == "npz":
        try:
            verify_npz(resolved, names)
        except NotACheckpointError as err:
            raise ToolError(str(err)) from None
        return
    for name in names:
        read_values(kind, resolved, [name])


def read_values(kind: str, resolved: str, names: Sequence[str]) -> dict[str, Any]:
    """Read the values of `names` from an npz file or a checkpoint prefix.

    Raises:
        ToolError: The values cannot be read back (a truncated or damaged file).
    """
    from towerkit.sessinit import (
        CheckpointNotFoundError,
        NotACheckpointError,
        load_checkpoint_vars,
        load_npz,
    )

    try:
        if kind == "npz":
            return load_npz(resolved, names)
        return load_checkpoint_vars(resolved, names)
    except (NotACheckpointError, CheckpointNotFoundError) as err:  # also pruned meanwhile
        raise ToolError(str(err)) from None


def files_of(kind: str, resolved: str) -> list[str]:
    """The files that hold a source: the npz file, or a checkpoint's index and data files."""
    if kind == "npz":
        return [resolved]
    directory = os.path.dirname(resolved) or "."
    base = os.path.basename(resolved)
    return sorted(
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if n == base + ".index" or n.startswith(base + ".data-")
    )
