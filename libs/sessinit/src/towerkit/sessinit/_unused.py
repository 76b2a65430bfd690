"""Unused source variables by kind: optimizer state, moving averages, the rest (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["describe_unused", "unused_kinds"]

_OPTIMIZER_SLOT = re.compile(
    r"(^|/)beta[12]_power(_\d+)?$"
    r"|/(Adam|AdamW|Nadam|Momentum|RMSProp|Adagrad|AdagradDA|Adadelta|Ftrl|ProximalAdagrad"
    r"|Adafactor|LAMB|LARS|accumulator|AccumGrad)(_\d+)?$"
)
"""Names of the state optimizers keep per variable (slots) or per optimizer (Adam's powers)."""

_MOVING_AVERAGE = re.compile(r"(^|/)(EMA|ExponentialMovingAverage)(/|$)|/(biased|local_step)$")
"""Names of moving averages: add_moving_summary's ``EMA/...`` and TensorFlow's ``.../ExponentialMovingAverage``."""


def unused_kinds(names: Iterable[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Unused source entries sorted by kind: optimizer slots, moving averages, others.

    Only the kinds that occur are returned, in that order.

    Examples:
        >>> unused_kinds(["fc/W/Adam", "fc/W/Adam_1", "beta1_power", "EMA/cost/average", "lr"])
        (('optimizer slots', ('fc/W/Adam', 'fc/W/Adam_1', 'beta1_power')), ('moving averages', ('EMA/cost/average',)), ('others', ('lr',)))
    """
    kinds: dict[str, list[str]] = {"optimizer slots": [], "moving averages": [], "others": []}
    for name in names:
        if _OPTIMIZER_SLOT.search(name):
            kinds["optimizer slots"].append(name)
        elif _MOVING_AVERAGE.search(name):
            kinds["moving averages"].append(name)
        else:
            kinds["others"].append(name)
    return tuple((k, tuple(v)) for k, v in kinds.items() if v)


def describe_unused(names: Iterable[str]) -> str:
    """What `RestorePlan.summary` adds after the count of unused entries ("" when none is known).

    Examples:
        >>> describe_unused(["fc/W/Adam", "EMA/cost/average", "global_step", "learning_rate"])
        ' (1 optimizer slot, 1 moving average, 2 others: global_step, learning_rate)'
        >>> describe_unused(["a", "b"])
        ''
    """
    kinds = unused_kinds(names)
    if all(kind == "others" for kind, _ in kinds):
        return ""
    parts = []
    for kind, items in kinds:
        label = kind if len(items) != 1 else kind[:-1]
        text = f"{len(items)} {label}"
        if kind == "others" and len(items) <= 3:
            text += ": " + ", ".join(items)
        parts.append(text)
    return " (" + ", ".join(parts) + ")"
