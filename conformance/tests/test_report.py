"""The summary table."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from towerkit.conformance import GROUPS, render_table
from towerkit.conformance._report import cell

outcomes = st.lists(st.sampled_from(["passed", "failed", "skipped"]), max_size=6)


class TestCell:
    """One cell of the table."""

    @given(outcomes)
    def test_failures_win(self, values):
        """Any failure shows as FAIL with the count."""
        text = cell(values)
        if "failed" in values:
            assert text == f"FAIL {values.count('failed')}/{len(values)}"
        elif not values:
            assert text == "-"
        else:
            assert text.startswith(("pass", "skip"))


class TestRenderTable:
    """The trainer x group table."""

    def test_columns(self):
        """Columns follow GROUPS; rows the trainers in order."""
        table = render_table({"B": {"loop": ["passed"]}, "A": {"towers": ["skipped"]}})
        lines = table.splitlines()
        assert lines[0].split() == ["trainer", *GROUPS]
        assert [line.split()[0] for line in lines[1:]] == ["B", "A"]
        assert lines[2].split()[1:] == ["-", "-", "-", "skip", "-", "-"]

    def test_extra_group(self):
        """A group not listed is appended."""
        assert render_table({"A": {"mine": ["passed"]}}, groups=["loop"]).splitlines()[
            0
        ].split() == [
            "trainer",
            "loop",
            "mine",
        ]
