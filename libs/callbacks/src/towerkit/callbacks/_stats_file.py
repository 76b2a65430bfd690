"""The strict JSON of ``stats.json``: NaN and infinities as strings, damaged files as clear errors."""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from towerkit.callbacks._errors import StatsFileError

__all__ = [
    "NON_FINITE_TOKENS",
    "decode_stat",
    "dumps_stats",
    "encode_stat",
    "loads_stats",
    "read_stats_file",
]

NON_FINITE_TOKENS: dict[str, float] = {
    "NaN": math.nan,
    "Infinity": math.inf,
    "-Infinity": -math.inf,
}
"""The JSON strings that stand for the floats strict JSON has no literal for."""

_EXPECTED = "expected a JSON list of statistics records (objects of numbers)"
_WS = re.compile(r"[ \t\n\r]*")
_TOKEN = re.compile(r'(?s)"(?:[^"\\]|\\.)*"|[\[\]{}]')
_RECORD_DEPTH = 2  # the list, then the records; values are scalars


def encode_stat(value: Any) -> Any:
    """A statistic's value as strict JSON holds it: NaN and infinities become strings.

    Finite numbers (``-0.0`` included) and every other value are returned as they are.

    Examples:
        >>> encode_stat(float("nan")), encode_stat(float("-inf")), encode_stat(0.5), encode_stat(3)
        ('NaN', '-Infinity', 0.5, 3)
    """
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        number = float(value)
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
    return value


def decode_stat(value: Any) -> Any:
    """The inverse of `encode_stat`: ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` become floats.

    Examples:
        >>> decode_stat("Infinity"), decode_stat(-0.0), decode_stat("cost")
        (inf, -0.0, 'cost')
    """
    if isinstance(value, str):
        return NON_FINITE_TOKENS.get(value, value)
    return value


def dumps_stats(records: Iterable[Mapping[str, Any]]) -> str:
    """The text of a ``stats.json`` holding `records`: strict JSON, one key a line.

    NaN and infinities are written as the strings of `NON_FINITE_TOKENS`, so any
    JSON parser reads the file; `loads_stats` turns them back into floats.

    Raises:
        ValueError: a value is not a JSON scalar (the message names the record and key).

    Examples:
        >>> print(dumps_stats([{"epoch_num": 1, "cost": float("nan")}]), end="")
        [
         {
          "epoch_num": 1,
          "cost": "NaN"
         }
        ]
    """
    out = []
    for i, rec in enumerate(records):
        encoded = {}
        for key, value in rec.items():
            value = encode_stat(value)
            if value is not None and not isinstance(value, str | int | float):
                msg = f"statistics record #{i}: {key!r} holds a {type(value).__name__}; expected a number"
                raise ValueError(msg)
            encoded[key] = value
        out.append(encoded)
    return json.dumps(out, indent=1, allow_nan=False) + "\n"


class _HugeNumber(Exception):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


_MAX_DIGITS = len(str(int(sys.float_info.max)))


def _parse_int(literal: str) -> int:
    if len(literal.lstrip("-")) > _MAX_DIGITS:
        raise _HugeNumber(literal)
    value = int(literal)
    if abs(value) > sys.float_info.max:
        raise _HugeNumber(literal)
    return value


def _parse_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _HugeNumber(literal)
    return value


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column} (char {pos})"


def _literal_position(text: str, literal: str) -> int:
    found = re.search(r"(?<![\w.+-])" + re.escape(literal) + r"(?![\w.])", text)
    return found.start() if found else 0


def _deep_position(text: str, limit: int) -> int:
    """Where a bracket first opens a level deeper than `limit` (strings skipped)."""
    depth = 0
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        elif token in "]}":
            depth -= 1
    return 0


def _element_starts(text: str) -> list[int]:
    """Where each element of the (valid) top-level JSON list of `text` starts."""
    decoder = json.JSONDecoder()
    i = _WS.match(text, 0).end() + 1  # type: ignore[union-attr]
    i = _WS.match(text, i).end()  # type: ignore[union-attr]
    starts: list[int] = []
    while text[i] != "]":
        starts.append(i)
        _, i = decoder.raw_decode(text, i)
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        if text[i] == ",":
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    return starts


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _check_structure(data: Any, text: str, source: str) -> None:
    if not isinstance(data, list):
        pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
        msg = (
            f"{source!r} must hold a JSON list of records (objects of numbers); got "
            f"{_kind(data)} at {_where(text, pos)}"
        )
        raise StatsFileError(msg)
    for i, rec in enumerate(data):
        fault = None
        if not isinstance(rec, dict):
            fault = f"is {_kind(rec)}"
        else:
            bad = [k for k, v in rec.items() if isinstance(v, dict | list)]
            if bad:
                fault = f"holds {_kind(rec[bad[0]])} under {bad[0]!r}"
        if fault is not None:
            pos = _element_starts(text)[i]
            msg = (
                f"{source!r} must hold a JSON list of records (objects of numbers): record "
                f"#{i} at {_where(text, pos)} {fault}"
            )
            raise StatsFileError(msg)


def loads_stats(data: str | bytes, source: str = "stats.json") -> list[dict[str, Any]]:
    """The records of a ``stats.json`` text, its NaN and infinities decoded.

    The strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` in a record become
    floats (see `encode_stat`); so do the bare ``NaN``/``Infinity`` tokens that older
    versions wrote. Every fault raises a `StatsFileError` naming `source`, the
    position (line, column and character offset; the byte offset for bytes that
    are not UTF-8) and what was expected: bytes that are not UTF-8, invalid JSON,
    a top level that is not a list, a record that is not an object or that holds a
    list or an object, values nested too deeply for the parser, and numbers a float
    cannot hold (beyond about 1.8e308).

    Args:
        data: the file's bytes (UTF-8) or text.
        source: the file's path, for messages.

    Raises:
        StatsFileError: (a ``ValueError``) the text is damaged.

    Examples:
        >>> loads_stats('[{"epoch_num": 1, "cost": "NaN", "acc": -0.0}]')
        [{'epoch_num': 1, 'cost': nan, 'acc': -0.0}]
        >>> loads_stats(b'[{"epoch_num": 1}, 3]', "log/stats.json")
        Traceback (most recent call last):
        ...
        towerkit.callbacks.StatsFileError: 'log/stats.json' must hold a JSON list of records (objects of numbers): record #1 at line 1, column 20 (char 19) is int
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            start = err.start
            line = data.count(b"\n", 0, start) + 1
            column = start - (data.rfind(b"\n", 0, start) + 1) + 1
            msg = (
                f"{source!r} is not UTF-8 text: byte 0x{data[start]:02x} at byte offset {start} "
                f"(line {line}, column {column}) cannot be decoded; {_EXPECTED}"
            )
            raise StatsFileError(msg) from None
    else:
        text = data
    try:
        parsed = json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except json.JSONDecodeError as err:
        msg = f"{source!r} is not valid JSON at {_where(text, err.pos)}: {err.msg}; {_EXPECTED}"
        raise StatsFileError(msg) from None
    except RecursionError:
        pos = _deep_position(text, _RECORD_DEPTH)
        msg = (
            f"{source!r} nests values too deeply for the parser: a third level of lists or "
            f"objects opens at {_where(text, pos)}; {_EXPECTED}"
        )
        raise StatsFileError(msg) from None
    except _HugeNumber as err:
        shown = err.literal if len(err.literal) <= 24 else err.literal[:20] + "..."
        pos = _literal_position(text, err.literal)
        msg = (
            f"{source!r} holds a number a float cannot hold ({shown}, {len(err.literal)} "
            f"characters) at {_where(text, pos)}; expected numbers within +/-{sys.float_info.max:.3g} "
            '(NaN and infinities are the strings "NaN", "Infinity", "-Infinity")'
        )
        raise StatsFileError(msg) from None
    _check_structure(parsed, text, source)
    return [{k: decode_stat(v) for k, v in rec.items()} for rec in parsed]


def read_stats_file(path: str | os.PathLike[str]) -> list[dict[str, Any]] | None:
    """The records of the ``stats.json`` at `path` (see `loads_stats`), or None when absent.

    Raises:
        StatsFileError: the file is damaged; the message names it and the position.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        data = f.read()
    return loads_stats(data, path)
