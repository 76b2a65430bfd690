"""stats.json as strict JSON: NaN/Inf encoding, damaged files, file names, the best-value rule."""

import json
import math
import os
import re
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
    NON_FINITE_TOKENS,
    StatsFileError,
    check_file_name,
    decode_stat,
    dumps_stats,
    encode_stat,
    file_name_problem,
    improves,
    loads_stats,
    read_stats_file,
)


def strict_loads(text):
    """json.loads refusing the NaN/Infinity tokens, as strict parsers (JavaScript, jq) do."""

    def refuse(token):
        raise ValueError(f"non-standard token {token}")

    return json.loads(text, parse_constant=refuse)


def same_float(a, b):
    """Equal as IEEE values: NaN equals NaN, and the sign of zero counts."""
    return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))


any_float = st.floats(allow_nan=True, allow_infinity=True)
stat_names = st.text(min_size=1, max_size=8).filter(lambda k: k not in ("epoch_num", "global_step"))
records = st.lists(
    st.dictionaries(stat_names, any_float | st.integers(-(10**18), 10**18), max_size=5),
    max_size=6,
)


class TestEncodeStat:
    """NaN and the infinities as the strings of NON_FINITE_TOKENS; other values untouched."""

    @given(any_float)
    def test_round_trip(self, x):
        """decode(encode(x)) is x, NaN, infinities and -0.0 included; encoded is strict JSON."""
        encoded = encode_stat(x)
        assert same_float(decode_stat(encoded), x)
        text = json.dumps(encoded, allow_nan=False)
        assert same_float(decode_stat(strict_loads(text)), x)
        assert isinstance(encoded, str) == (not math.isfinite(x))

    def test_tokens(self):
        """The documented encoding."""
        assert [encode_stat(v) for v in (math.nan, math.inf, -math.inf)] == list(NON_FINITE_TOKENS)
        assert encode_stat(3) == 3
        assert encode_stat(True) is True
        assert decode_stat("cost") == "cost"
        assert decode_stat(None) is None


class TestDumpsLoads:
    """A stats.json text is strict JSON and reads back to the same records."""

    @given(records)
    def test_round_trip(self, recs):
        """loads(dumps(r)) == r value by value (NaN, Inf, -0.0); strict parsers read the text."""
        text = dumps_stats(recs)
        strict_loads(text)
        for back in (loads_stats(text), loads_stats(text.encode("utf-8"))):
            assert [list(r) for r in back] == [list(r) for r in recs]
            for got, want in zip(back, recs, strict=True):
                for key, value in want.items():
                    if isinstance(value, float):
                        assert isinstance(got[key], float)
                        assert same_float(got[key], value)
                    else:
                        assert got[key] == value
                        assert type(got[key]) is type(value)

    def test_legacy_tokens(self):
        """Files written before the strict encoding (bare NaN/Infinity) still read."""
        back = loads_stats('[{"a": NaN, "b": Infinity, "c": -Infinity}]')
        assert math.isnan(back[0]["a"])
        assert back[0]["b"] == math.inf
        assert back[0]["c"] == -math.inf

    def test_dumps_fail(self):
        """A value that is not a scalar is refused, naming the record and key."""
        with pytest.raises(ValueError, match=r"record #0: 'a' holds a list; expected a number"):
            dumps_stats([{"a": [1]}])


def write(tmp_path, body):
    path = tmp_path / "stats.json"
    path.write_bytes(body)
    return str(path)


class TestDamagedFiles:
    """Each kind of damage is a StatsFileError with the path, the position and what was expected."""

    def test_undecodable_byte(self, tmp_path):
        """A byte that is not UTF-8: its byte offset, line and column."""
        path = write(tmp_path, b'[\n {"a": 1, "b\xff": 2}\n]\n')
        with pytest.raises(StatsFileError) as info:
            read_stats_file(path)
        assert str(info.value) == (
            f"{path!r} is not UTF-8 text: byte 0xff at byte offset 14 (line 2, column 13) "
            "cannot be decoded; expected a JSON list of statistics records (objects of numbers)"
        )

    def test_invalid_json(self, tmp_path):
        """Truncated JSON: the line, column and what the parser expected."""
        path = write(tmp_path, b'[\n {"a": 1},\n {"a": ')
        with pytest.raises(
            StatsFileError,
            match=r"stats\.json' is not valid JSON at line 3, column 8 \(char 20\): Expecting value; "
            r"expected a JSON list",
        ):
            read_stats_file(path)

    def test_empty(self, tmp_path):
        """An empty file (a disk that lost the data) is invalid JSON at line 1."""
        with pytest.raises(
            StatsFileError, match=r"not valid JSON at line 1, column 1 \(char 0\): Expecting value"
        ):
            read_stats_file(write(tmp_path, b""))

    @pytest.mark.parametrize(
        ("body", "match"),
        [
            (b'{"a": 1}', r"got an object at line 1, column 1 \(char 0\)"),
            (b"  3", r"got int at line 1, column 3 \(char 2\)"),
            (b'[{"a": 1},\n "x"]', r"record #1 at line 2, column 2 \(char 12\) is str"),
            (
                b'[{"a": 1},\n {"a": {"b": 2}}]',
                r"record #1 at line 2, column 2 .* holds an object under 'a'",
            ),
        ],
    )
    def test_wrong_structure(self, tmp_path, body, match):
        """Not a list of flat objects: the record at fault and where it starts."""
        with pytest.raises(StatsFileError, match=r"must hold a JSON list of records .*" + match):
            read_stats_file(write(tmp_path, body))

    def test_deeply_nested(self, tmp_path):
        """Nesting beyond the parser's recursion limit: where the third level opens."""
        path = write(tmp_path, b'[{"a": 1},\n ' + b"[" * 200_000 + b"]" * 200_000 + b"]")
        with pytest.raises(
            StatsFileError,
            match=r"nests values too deeply for the parser: a third level of lists or objects "
            r"opens at line 2, column 3 \(char 13\)",
        ):
            read_stats_file(path)

    @pytest.mark.parametrize(
        ("number", "shown"),
        [
            (b"1e999", r"1e999, 5 characters"),
            (b"-2e308", r"-2e308, 6 characters"),
            (b"9" * 400, r"9{20}\.\.\., 400 characters"),
            (b"9" * 50_000, r"9{20}\.\.\., 50000 characters"),
        ],
    )
    def test_huge_numbers(self, tmp_path, number, shown):
        """A number no float holds (it would overflow to inf, or not convert at all)."""
        path = write(tmp_path, b'[{"epoch_num": 1},\n {"epoch_num": 2, "v": ' + number + b"}]")
        with pytest.raises(
            StatsFileError,
            match=rf"holds a number a float cannot hold \({shown}\) at line 2, column 24 "
            r"\(char 42\); expected numbers within",
        ):
            read_stats_file(path)

    def test_largest_numbers_read(self, tmp_path):
        """The largest float and an int just below it are fine."""
        big = int(1.7e308)
        back = read_stats_file(
            write(tmp_path, f'[{{"a": 1.7976931348623157e308, "b": {big}}}]'.encode())
        )
        assert back == [{"a": 1.7976931348623157e308, "b": big}]

    def test_missing(self, tmp_path):
        """No file: None."""
        assert read_stats_file(tmp_path / "stats.json") is None


class TestFileNames:
    """A file name a callback writes under its directory stays in that directory."""

    @given(st.text(max_size=12))
    def test_inside(self, name):
        """Any accepted name joined to a directory names a file directly inside it."""
        if file_name_problem(name) is None:
            root = os.path.abspath("somewhere")
            joined = os.path.normpath(os.path.join(root, name))
            assert os.path.dirname(joined) == root
            assert os.path.basename(joined) == name
            assert check_file_name("filename", name) == name
        else:
            with pytest.raises(
                ValueError, match=r"'filename' must be a file name without directories"
            ):
                check_file_name("filename", name)

    @pytest.mark.parametrize(
        ("name", "why"),
        [
            ("", "it is empty"),
            ("..", "it is '..', a directory"),
            (".", "it is '.', a directory"),
            ("../up", r"it holds a path separator \('/'\)"),
            ("/abs/best", r"it holds a path separator \('/'\)"),
            ("a\0b", "it holds a NUL character"),
        ],
    )
    def test_fail(self, name, why):
        """The message names the argument, the value and why."""
        with pytest.raises(
            ValueError,
            match=rf"'prefix' must be a file name .*; got {re.escape(repr(name))}: {why}",
        ):
            check_file_name("prefix", name)

    def test_kind(self):
        """A name that is not a string is a TypeError naming the argument."""
        with pytest.raises(TypeError, match=r"'filename' must be a file name \(a str\); got int 3"):
            check_file_name("filename", 3)


class TestImproves:
    """The best-value rule of MinSaver/MaxSaver: only finite values compete."""

    @given(st.lists(any_float, max_size=30), st.booleans())
    def test_fold_is_best_finite(self, values, reverse):
        """Folding `improves` over values keeps the min (max) of the finite ones, or None."""
        best, copies = None, []
        for i, v in enumerate(values):
            if improves(v, best, reverse):
                best = v
                copies.append(i)
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            assert best is None
            assert copies == []
        else:
            assert best == (max(finite) if reverse else min(finite))
            # the copy is the first value reaching the best: equal values keep the earlier one
            assert copies[-1] == next(i for i, v in enumerate(values) if v == best)
        assert all(math.isfinite(values[i]) for i in copies)

    @given(st.floats(allow_nan=False, allow_infinity=False) | st.none(), st.booleans())
    def test_never_non_finite(self, best, reverse):
        """NaN and the infinities never become the best, whatever the best so far."""
        for v in (math.nan, math.inf, -math.inf):
            assert not improves(v, best, reverse)
