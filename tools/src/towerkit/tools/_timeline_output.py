"""The timeline tool's output: the table, the per-callback summary, the JSON document."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from towerkit.tools.timeline import Description

__all__ = ["render_json", "render_text", "summarize"]


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def summarize(description: Description, firings: Iterable[Any]) -> list[dict[str, Any]]:
    """Per callback: how often it fires, first and last (epoch, global step), values set.

    Reads `firings` once, keeping only the counts, the first and the last firing of
    each callback and the values schedules set.

    Examples:
        >>> from towerkit.tools.timeline import load_description, run_timeline
        >>> d = load_description({"steps_per_epoch": 2, "max_epoch": 3}, [{"name": "cb"}])
        >>> summarize(d, run_timeline(d))
        [{'name': 'cb', 'type': 'Callback', 'count': 3, 'first': [1, 2], 'last': [3, 6], 'values': []}]
    """
    rows = {
        entry.name: {"name": entry.name, "type": kind, "count": 0, "first": None, "last": None}
        for entry, kind in zip(description.entries, description.types)
    }
    values: dict[str, list[float]] = {name: [] for name in rows}
    for f in firings:
        row = rows.get(f.name)
        if row is None:
            continue
        row["count"] += 1
        row["last"] = [f.epoch_num, f.global_step]
        if row["first"] is None:
            row["first"] = row["last"]
        if f.value is not None:
            values[f.name].append(f.value)
    return [{**row, "values": values[name]} for name, row in rows.items()]


def _take(firings: Iterable[Any], limit: int | None) -> tuple[list[Any], bool]:
    """The first `limit` firings (all when None) and whether the limit cut the run short."""
    if limit is None:
        return list(firings), False
    taken = list(itertools.islice(firings, limit))
    return taken, len(taken) == limit


def render_text(description: Description, firings: Iterable[Any], limit: int | None = None) -> str:
    """The table of firings and a summary per callback, as printed by the tool.

    Args:
        description: the loop and callbacks.
        firings: the firings, in loop order (what `iter_firings` or `run_timeline` gives).
        limit: take at most this many firings: the loop is walked no further than the
            last one taken, and the summary covers those taken.

    Examples:
        >>> from towerkit.tools.timeline import load_description, run_timeline
        >>> d = load_description({"steps_per_epoch": 2, "max_epoch": 2},
        ...                      [{"name": "lr", "schedule": [[1, 0.5]]}])
        >>> print(render_text(d, run_timeline(d)))
        loop: epochs 1..2, 2 steps per epoch, global steps 1..4 (4 steps)
        epoch  global_step  local_step  event          callback  value
            1            2           1  trigger_epoch  lr        0.5
        <BLANKLINE>
        lr (ScheduledHyperParamSetter): 1 time, first at epoch 1 (global step 2), last at epoch 1 (global step 2); values 0.5
    """
    spec = description.loop
    first = spec.start_global_step + 1
    last = spec.start_global_step + spec.total_steps
    lines = [
        f"loop: epochs {spec.starting_epoch}..{spec.max_epoch}, {spec.steps_per_epoch} steps "
        f"per epoch, global steps {first}..{last} ({spec.total_steps} steps)"
    ]
    shown, cut = _take(firings, limit)
    header = ("epoch", "global_step", "local_step", "event", "callback", "value")
    rows = [
        (
            str(f.epoch_num),
            str(f.global_step),
            str(f.local_step),
            f.kind.value,
            f.name,
            _fmt(f.value),
        )
        for f in shown
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = (True, True, True, False, False, False)

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)]
        return "  ".join(parts).rstrip()

    lines.append(line(header))
    lines += [line(r) for r in rows]
    if cut:
        lines.append(
            f"... stopped after {limit} firings (--limit {limit}): later ones are not computed"
        )
    lines.append("")
    if cut:
        lines.append(f"in the first {limit} firings:")
    for row in summarize(description, shown):
        count = row["count"]
        text = f"{row['name']} ({row['type']}): {count} time{'s' if count != 1 else ''}"
        if count:
            (e1, s1), (e2, s2) = row["first"], row["last"]
            text += (
                f", first at epoch {e1} (global step {s1}), last at epoch {e2} (global step {s2})"
            )
        if row["values"]:
            text += "; values " + " -> ".join(_fmt(v) for v in row["values"][:12])
            if len(row["values"]) > 12:
                text += f" -> ... ({len(row['values'])} values)"
        lines.append(text)
    return "\n".join(lines)


def render_json(description: Description, firings: Iterable[Any], limit: int | None = None) -> str:
    """The loop, the firings and the per-callback summary as one JSON document.

    With `limit`, at most that many firings are computed; ``"complete"`` says whether
    they are all the run's firings, and the summary covers those given.

    Examples:
        >>> from towerkit.tools.timeline import load_description, run_timeline
        >>> d = load_description({"steps_per_epoch": 1, "max_epoch": 1}, [{"name": "cb"}])
        >>> json.loads(render_json(d, run_timeline(d)))["firings"]
        [{'name': 'cb', 'event': 'trigger_epoch', 'epoch_num': 1, 'local_step': 0, 'global_step': 1, 'value': None}]
    """
    shown, cut = _take(firings, limit)
    doc = {
        "loop": attrs.asdict(description.loop),
        "firings": [
            {
                "name": f.name,
                "event": f.kind.value,
                "epoch_num": f.epoch_num,
                "local_step": f.local_step,
                "global_step": f.global_step,
                "value": f.value,
            }
            for f in shown
        ],
        "complete": not cut,
        "summary": summarize(description, shown),
    }
    return json.dumps(doc, indent=1)
