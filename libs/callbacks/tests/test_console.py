"""The console's pure formatters: the epoch line and the table of trainable variables."""

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import VariableRow, epoch_line, format_stat, variable_table

stat_names = st.from_regex(r"[a-z][a-z_/]{0,12}", fullmatch=True)
stat_values = st.one_of(st.integers(-(10**9), 10**9), st.floats(-1e12, 1e12, allow_nan=False))


class TestFormatStat:
    """A statistic in 4 significant digits."""

    @given(st.floats(-1e300, 1e300, allow_nan=False))
    def test_reads_back(self, x):
        """A formatted float reads back within 4 significant digits."""
        assert float(format_stat(x)) == pytest.approx(x, rel=1e-3, abs=1e-300)

    @given(st.integers(-(10**12), 10**12))
    def test_integers_exact(self, n):
        """Integers are shown as they are."""
        assert format_stat(n) == str(n)

    def test_non_finite(self):
        """NaN and infinities are shown, not hidden."""
        assert [format_stat(v) for v in (math.nan, math.inf, -math.inf)] == ["nan", "inf", "-inf"]


class TestEpochLine:
    """One line per epoch."""

    @given(
        st.integers(1, 10**4),
        st.integers(0, 10**4),
        st.one_of(st.none(), st.floats(0, 10**6)),
        st.lists(st.tuples(stat_names, stat_values), max_size=8),
    )
    def test_parts_in_order(self, epoch, more, seconds, stats):
        """The epoch, the time when known, then each statistic in the order given, two spaces apart."""
        line = epoch_line(epoch, epoch + more, seconds, stats)
        parts = line.split("  ")
        assert parts[0] == f"epoch {epoch}/{epoch + more}"
        if seconds is not None:
            assert re.fullmatch(r"\d+\.\d s|\d+m \d\ds|\d+h \d\dm", parts[1]), parts[1]
            parts = parts[1:]
        assert parts[1:] == [f"{n} {format_stat(v)}" for n, v in stats]
        assert "\n" not in line

    def test_example(self):
        """The line of the documentation."""
        line = epoch_line(3, 12, 1.94, [("cost", 0.231), ("val_error", 0.041), ("lr", 0.001)])
        assert line == "epoch 3/12  1.9 s  cost 0.231  val_error 0.041  lr 0.001"


rows = st.builds(
    VariableRow,
    name=st.from_regex(r"(tower[0-3]/)?[a-z]{1,6}(/[A-Za-z]{1,3})?", fullmatch=True),
    shape=st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(0, 50)), max_size=4)),
    dtype=st.sampled_from(["float32", "float16", "int64"]),
    itemsize=st.sampled_from([2, 4, 8]),
)


class TestVariableTable:
    """The table printed when training starts."""

    @given(st.lists(rows, max_size=12))
    def test_rows_and_total(self, given_rows):
        """One line per variable but the tower copies, then the total of their counts."""
        kept = [r for r in given_rows if not re.match(r"tower[1-9]", r.name)]
        lines = variable_table(given_rows)
        if not kept:
            assert lines == ["no trainable variables"]
            return
        assert len(lines) == len(kept) + 3
        assert [line.split()[0] for line in lines[2:-1]] == [r.name for r in kept]
        total = sum(r.count or 0 for r in kept)
        assert lines[-1].startswith(f"{len(kept)} trainable variable")
        assert f" {total:,} parameter" in lines[-1]
        assert ("dtype" in lines[1]) == any(r.dtype != "float32" for r in kept)

    def test_repr(self):
        """The row record prints its fields."""
        assert repr(VariableRow(name="w", shape=[3, 1])) == (
            "VariableRow(name='w', shape=(3, 1), dtype='float32', itemsize=4)"
        )
        assert VariableRow(name="w", shape=(None, 2)).count is None
