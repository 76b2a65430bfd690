"""The summary table: one row per trainer, one column per group of checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

GROUPS = ("loop", "triggers", "checkpoints", "towers", "numerics", "layers")
"""The groups of checks, in the order of the spec's acceptance list."""


def cell(outcomes: Sequence[str]) -> str:
    """One table cell from the outcomes (``passed``, ``failed``, ``skipped``) of a group.

    Examples:
        >>> cell(["passed", "passed"]), cell(["passed", "failed"]), cell(["skipped"]), cell([])
        ('pass', 'FAIL 1/2', 'skip', '-')
        >>> cell(["passed", "skipped"])
        'pass (1 skipped)'
    """
    if not outcomes:
        return "-"
    failed = sum(o == "failed" for o in outcomes)
    skipped = sum(o == "skipped" for o in outcomes)
    if failed:
        return f"FAIL {failed}/{len(outcomes)}"
    if skipped == len(outcomes):
        return "skip"
    return "pass" if not skipped else f"pass ({skipped} skipped)"


def render_table(
    outcomes: Mapping[str, Mapping[str, Sequence[str]]], groups: Sequence[str] = GROUPS
) -> str:
    """The trainer x group table, as aligned text.

    Args:
        outcomes: ``{trainer: {group: [outcome, ...]}}``, trainers in row order.
        groups: the columns; groups found in `outcomes` but not listed are appended.

    Examples:
        >>> print(render_table({"SimpleTrainer": {"loop": ["passed"], "numerics": ["failed"]}},
        ...                    groups=["loop", "numerics"]))
        trainer        loop  numerics
        SimpleTrainer  pass  FAIL 1/1
    """
    columns = list(groups) + sorted(
        {g for per in outcomes.values() for g in per if g not in groups}
    )
    rows = [["trainer", *columns]]
    for trainer, per in outcomes.items():
        rows.append([trainer, *(cell(per.get(g, ())) for g in columns)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
