"""Numbers as tensorpack's entry points took them: ``int()`` and ``float()`` of what a user passed.

tensorpack converted its numeric arguments with ``int(x)`` and ``float(x)`` (a schedule's
``('25', '1e-5')``, ``TrainConfig(max_epoch=args.epochs)`` with a string from the command
line, ``steps_per_epoch=1e3``). These pure functions accept the same spellings, except
that a fractional number where an integer is wanted is refused rather than truncated.
"""

from __future__ import annotations

import math
import numbers


def whole_number(value: object) -> int | None:
    """`value` as an int, as tensorpack's ``int(value)`` took it; None when it is not one.

    An int (NumPy's included), a float with no fractional part (``3.0``), or a string
    ``int()`` parses (``"25"``). A bool, a fractional or non-finite float, and any other
    string or object give None (the caller names the argument in its error).

    .. versionadded:: 0.2

    Examples:
        >>> whole_number("25"), whole_number(3.0), whole_number(7)
        (25, 3, 7)
        >>> whole_number(2.5) is None, whole_number(True) is None, whole_number("2.0") is None
        (True, True, True)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        real = float(value)
        return int(real) if math.isfinite(real) and real.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def real_number(value: object) -> float | None:
    """`value` as a float, as tensorpack's ``float(value)`` took it; None when it is not one.

    A real number (NumPy's included) or a string ``float()`` parses (``"1e-5"``); a bool
    and any other object give None.

    .. versionadded:: 0.2

    Examples:
        >>> real_number("1e-5"), real_number(3)
        (1e-05, 3.0)
        >>> real_number(False) is None, real_number("fast") is None
        (True, True)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
