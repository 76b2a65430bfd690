"""Restoring exponential moving averages as the weights: which checkpoint entry each weight reads."""

from __future__ import annotations

from collections.abc import Iterable

from towerkit.sessinit._plan import VarInfo

__all__ = ["EMA_SUFFIX", "ema_sources"]

EMA_SUFFIX = "ExponentialMovingAverage"
"""The last name component of a moving average's entry (``fc0/W/ExponentialMovingAverage``),
as ``tf.compat.v1.train.ExponentialMovingAverage`` and towerkit's ``EMAOptimizer`` name them."""


def ema_sources(
    checkpoint_vars: Iterable[VarInfo], suffix: str = EMA_SUFFIX
) -> tuple[tuple[VarInfo, ...], dict[str, str]]:
    """The entries of a checkpoint as seen when restoring its moving averages as the weights.

    Each entry ``x`` that has an average ``x/<suffix>`` in the checkpoint is listed with
    the average's shape and dtype, and is read from the average; the averages
    themselves stay listed under their own names (a training graph that has them
    restores them as they are); every other entry is unchanged.

    Args:
        checkpoint_vars: the checkpoint's entries.
        suffix: the averages' last name component.

    Returns:
        ``(entries, read_from)``: the entries to plan with, and for each entry read from
        another one, that entry's name.

    Examples:
        >>> vs = [VarInfo(name=n, shape=(2,), dtype="float32")
        ...       for n in ("w", "w/ExponentialMovingAverage", "b", "global_step")]
        >>> entries, read_from = ema_sources(vs)
        >>> [e.name for e in entries], read_from
        (['w', 'w/ExponentialMovingAverage', 'b', 'global_step'], {'w': 'w/ExponentialMovingAverage'})
    """
    if not isinstance(suffix, str) or not suffix or "/" in suffix:
        msg = f"'suffix' must be a name component without '/'; got {suffix!r}"
        raise ValueError(msg)
    entries = list(checkpoint_vars)
    by_name = {e.name: e for e in entries}
    out, read_from = [], {}
    for entry in entries:
        average = by_name.get(f"{entry.name}/{suffix}")
        if average is None:
            out.append(entry)
            continue
        out.append(VarInfo(name=entry.name, shape=average.shape, dtype=average.dtype))
        read_from[entry.name] = average.name
    return tuple(out), read_from
