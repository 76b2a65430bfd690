"""What the console shows: the one-line epoch summary and the table of trainable variables."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

import attrs

__all__ = [
    "VariableRow",
    "epoch_line",
    "format_stat",
    "variable_table",
]


def format_stat(value: float | int) -> str:
    """A statistic in a few characters: 4 significant digits; integers as they are.

    The console shows this; ``stats.json`` keeps the full precision.

    Examples:
        >>> format_stat(0.23145678), format_stat(0.001), format_stat(3e-05), format_stat(12)
        ('0.2315', '0.001', '3e-05', '12')
        >>> format_stat(float("nan")), format_stat(1234567.0)
        ('nan', '1.235e+06')
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{float(value):.4g}"


def _seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def epoch_line(
    epoch: int,
    max_epoch: int,
    seconds: float | None,
    stats: Mapping[str, float | int] | Iterable[tuple[str, float | int]],
) -> str:
    """The one line `ScalarPrinter` prints after an epoch.

    Args:
        epoch: the epoch that ended (1-based).
        max_epoch: the run's last epoch.
        seconds: the epoch's wall time (its steps and the callbacks after them), or
            None when unknown.
        stats: ``(name, value)`` pairs, shown in the order given.

    Examples:
        >>> epoch_line(3, 12, 1.93, [("cost", 0.23112), ("val_error", 0.0412), ("lr", 0.001)])
        'epoch 3/12  1.9 s  cost 0.2311  val_error 0.0412  lr 0.001'
        >>> epoch_line(1, 1, 75.2, {})
        'epoch 1/1  1m 15s'
        >>> epoch_line(2, 5, None, {"acc": 1})
        'epoch 2/5  acc 1'
    """
    items = stats.items() if isinstance(stats, Mapping) else stats
    parts = [f"epoch {epoch}/{max_epoch}"]
    if seconds is not None:
        parts.append(_seconds(seconds))
    parts.extend(f"{name} {format_stat(value)}" for name, value in items)
    return "  ".join(parts)


def _shape(shape: Sequence[int | None] | None) -> tuple[int | None, ...] | None:
    return None if shape is None else tuple(shape)


@attrs.frozen(kw_only=True)
class VariableRow:
    """One trainable variable as the table shows it.

    Attributes:
        name: the variable's name, without the ``:0``.
        shape: its dimensions (None for an unknown one), or None when the rank is unknown.
        dtype: the name of its dtype (``"float32"``).
        itemsize: bytes per element.
    """

    name: str
    shape: tuple[int | None, ...] | None = attrs.field(converter=_shape)
    dtype: str = "float32"
    itemsize: int = 4

    @property
    def count(self) -> int | None:
        """Elements in the variable, or None when its shape is not fully known."""
        if self.shape is None or any(d is None for d in self.shape):
            return None
        return math.prod(d for d in self.shape if d is not None)


_REPLICA = re.compile(r"tower[1-9]\d*/")
"""The prefix of the copies data-parallel trainers make of tower 0's variables."""


def _size(nbytes: int) -> str:
    """Bytes in the largest binary unit that keeps the number at 1 or more (up to GiB)."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    value = nbytes / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def variable_table(rows: Iterable[VariableRow]) -> list[str]:
    """The lines of the table of trainable variables shown when training starts.

    One line per variable (name, shape, element count; the dtype too when they are
    not all float32), then the total. Copies of the variables that data-parallel
    trainers keep per tower (``tower1/...``, ``tower2/...``) are left out, as they
    repeat tower 0's.

    Examples:
        >>> for line in variable_table([VariableRow(name="fc/W", shape=(256, 10)),
        ...                             VariableRow(name="fc/b", shape=(10,))]):
        ...     print(line)
        trainable variables:
          name  shape   count
          fc/W  256x10  2,560
          fc/b  10         10
        2 trainable variables, 2,570 parameters (10.0 KiB)
        >>> variable_table([])
        ['no trainable variables']
    """
    kept = [r for r in rows if not _REPLICA.match(r.name)]
    if not kept:
        return ["no trainable variables"]
    show_dtype = any(r.dtype != "float32" for r in kept)
    header = ["name", "shape", "count"] + (["dtype"] if show_dtype else [])
    table = [header]
    total = nbytes = 0
    for r in kept:
        shape = "?" if r.shape is None else "x".join("?" if d is None else str(d) for d in r.shape)
        count = r.count
        total += count or 0
        nbytes += (count or 0) * r.itemsize
        cells = [r.name, shape or "scalar", "?" if count is None else f"{count:,}"]
        table.append(cells + ([r.dtype] if show_dtype else []))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["trainable variables:"]
    for row in table:
        cells = [
            cell.rjust(widths[i]) if i == 2 else cell.ljust(widths[i]) for i, cell in enumerate(row)
        ]
        lines.append(("  " + "  ".join(cells)).rstrip())
    noun = "variable" if len(kept) == 1 else "variables"
    params = "parameter" if total == 1 else "parameters"
    lines.append(f"{len(kept)} trainable {noun}, {total:,} {params} ({_size(nbytes)})")
    return lines
