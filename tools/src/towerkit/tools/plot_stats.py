"""plot-stats: draw the curves of a training run's ``stats.json``, training and validation together."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from towerkit.callbacks import StatsFileError, read_stats_file
from towerkit.sessinit import atomic_path
from towerkit.tools._files import ToolError, fail, require_file_output
from towerkit.tools._plot_layout import (
    PANEL_INCHES,
    check_image_size,
    grid_shape,
    image_size,
)

__all__ = [
    "PANEL_INCHES",
    "STATS_FILENAME",
    "TRAINING_PREFIXES",
    "VALIDATION_PREFIXES",
    "X_KEYS",
    "best_point",
    "collect_series",
    "find_savers",
    "grid_shape",
    "held_series",
    "image_size",
    "log_scale_panels",
    "main",
    "panel_groups",
    "plot_stats",
    "read_stats",
    "stats_figure",
]

STATS_FILENAME = "stats.json"
"""The file ``JSONWriter`` writes in the logdir: a JSON list of records."""

X_KEYS = {"epoch": "epoch_num", "step": "global_step"}
"""The x axes and the record key each reads."""

MATPLOTLIB_MISSING = (
    "plot-stats needs matplotlib, which is not installed: pip install 'towerkit-tools[plot]'"
)


def read_stats(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a ``stats.json`` file, given the file or the logdir holding it.

    NaN and infinities (written as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``) are read
    back as floats, and left out of the curves.

    Raises:
        ToolError: no such file, or a damaged one (bytes that are not UTF-8, invalid
            JSON, not a list of objects, values nested too deeply, a number a float
            cannot hold): the message names the file, the position and what was expected.
    """
    path = os.fspath(path)
    file = os.path.join(path, STATS_FILENAME) if os.path.isdir(path) else path
    if not os.path.isfile(file):
        where = f"logdir {path!r} has no {STATS_FILENAME!r}" if os.path.isdir(path) else None
        msg = where or f"{path!r} does not exist: expected a logdir or its {STATS_FILENAME!r}"
        raise ToolError(msg)
    try:
        return read_stats_file(file) or []
    except (StatsFileError, OSError) as err:
        raise ToolError(str(err)) from None


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= sys.float_info.max
    return math.isfinite(value)


def collect_series(
    records: Sequence[Mapping[str, Any]], keys: str | None = None, x: str = "epoch"
) -> dict[str, tuple[list[float], list[float]]]:
    """The curves in `records`: ``{statistic: (xs, ys)}``, names sorted.

    Every numeric, finite entry other than the x keys is a statistic; records without
    the x key are skipped.

    Args:
        records: the records of ``stats.json``.
        keys: a regex; only statistics whose name matches (``re.search``) are kept.
        x: ``"epoch"`` (``epoch_num``, 1-based) or ``"step"`` (``global_step``).

    Raises:
        ValueError: unknown `x`, or an invalid `keys` regex.

    Examples:
        >>> recs = [{"epoch_num": 1, "global_step": 10, "cost": 0.9, "val_error": 0.2},
        ...         {"epoch_num": 2, "global_step": 20, "cost": 0.5, "val_error": 0.1}]
        >>> collect_series(recs)
        {'cost': ([1, 2], [0.9, 0.5]), 'val_error': ([1, 2], [0.2, 0.1])}
        >>> collect_series(recs, keys="error$", x="step")
        {'val_error': ([10, 20], [0.2, 0.1])}
    """
    if x not in X_KEYS:
        msg = f"'x' must be one of {sorted(X_KEYS)}; got {x!r}"
        raise ValueError(msg)
    try:
        pattern = re.compile(keys) if keys is not None else None
    except re.error as err:
        msg = f"--keys {keys!r} is not a valid regular expression ({err})"
        raise ValueError(msg) from None
    x_key = X_KEYS[x]
    series: dict[str, tuple[list[float], list[float]]] = {}
    for rec in records:
        xv: Any = rec.get(x_key)
        if not _number(xv):
            continue
        for name, value in rec.items():
            if name in X_KEYS.values() or not _number(value):
                continue
            if pattern is not None and not pattern.search(name):
                continue
            xs, ys = series.setdefault(name, ([], []))
            xs.append(xv)
            ys.append(value)
    return dict(sorted(series.items()))


def held_series(
    xs: Sequence[float], ys: Sequence[float], run_xs: Sequence[float]
) -> tuple[list[float], list[float]] | None:
    """A sparse series extended to the end of the run, or None when it is not sparse.

    A statistic recorded at only some points of the run (a hyper-parameter put when
    it is set) holds its value until the next record, so it is drawn as steps up to
    the run's last point.

    Args:
        xs: the series' x values.
        ys: its values.
        run_xs: every x value of the run.

    Examples:
        >>> held_series([1, 6], [0.1, 0.01], [1, 2, 3, 4, 5, 6, 7, 8])
        ([1, 6, 8], [0.1, 0.01, 0.01])
        >>> held_series([1, 2], [0.5, 0.4], [1, 2]) is None
        True
    """
    if not xs or len(set(xs)) >= len(set(run_xs)):
        return None
    last = max(run_xs)
    if xs[-1] >= last:
        return list(xs), list(ys)
    return [*xs, last], [*ys, ys[-1]]


TRAINING_PREFIXES = ("train_", "train-", "training_", "training-")
"""Prefixes of training statistics: ``train_error`` shares a panel with ``validation_error``."""

VALIDATION_PREFIXES = ("val_", "val-", "validation_", "validation-")
"""Prefixes of validation statistics: ``val_x`` shares a panel with ``x`` (or ``train_x``)."""


def _stem(name: str) -> tuple[str, bool]:
    """The name without a training or validation prefix, and whether it was a validation one."""
    for prefix in VALIDATION_PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :], True
    for prefix in TRAINING_PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :], False
    return name, False


def panel_groups(
    names: Sequence[str], pairs: Sequence[Sequence[str]] = (), separate: bool = False
) -> list[tuple[str, tuple[str, ...]]]:
    """The panels to draw: ``(title, statistics)``, in the order of their first statistic.

    A statistic and its validation counterpart share a panel: ``x`` with ``val_x`` (or
    ``val-x``, ``validation_x``), and ``train_x`` with ``val_x``; the panel is titled
    ``x``. Each group of `pairs` shares a panel too, titled by its names; a statistic
    of a pair is in no other panel. With `separate`, every statistic has its own panel.

    Args:
        names: the statistics, in drawing order.
        pairs: groups of statistics to draw together (the names must be in `names`).
        separate: one panel per statistic (and `pairs` ignored).

    Raises:
        ValueError: a group of `pairs` names a statistic that is not in `names`, or has
            fewer than two names; every one at fault is listed.

    Examples:
        >>> panel_groups(["cost", "learning_rate", "train_error", "val_cost", "validation_error"])
        [('cost', ('cost', 'val_cost')), ('learning_rate', ('learning_rate',)), ('error', ('train_error', 'validation_error'))]
        >>> panel_groups(["a", "b", "c"], pairs=[("a", "c")])
        [('a, c', ('a', 'c')), ('b', ('b',))]
        >>> panel_groups(["x", "val_x"], separate=True)
        [('x', ('x',)), ('val_x', ('val_x',))]
    """
    names = list(names)
    if separate:
        return [(n, (n,)) for n in names]
    known = set(names)
    bad = [
        f"{list(group)!r}: {'fewer than two names' if len(group) < 2 else 'no statistic ' + ', '.join(repr(n) for n in group if n not in known)}"
        for group in pairs
        if len(group) < 2 or any(n not in known for n in group)
    ]
    if bad:
        msg = f"each pair must name two or more statistics of the run ({sorted(known)[:30]}); wrong: {'; '.join(bad)}"
        raise ValueError(msg)
    owner: dict[str, tuple[str, tuple[str, ...]]] = {}
    for group in pairs:
        panel = (", ".join(group), tuple(dict.fromkeys(group)))
        for n in group:
            owner.setdefault(n, panel)
    stems: dict[str, list[str]] = {}
    for n in names:
        if n not in owner:
            stems.setdefault(_stem(n)[0], []).append(n)
    for stem, members in stems.items():
        if len(members) > 1 and any(_stem(m)[1] for m in members):
            ordered = tuple(sorted(members, key=lambda m: (_stem(m)[1], names.index(m))))
            panel = (stem, ordered)
        else:
            panel = None  # type: ignore[assignment]
        for m in members:
            owner[m] = panel if panel is not None else (m, (m,))
    panels: list[tuple[str, tuple[str, ...]]] = []
    for n in names:
        if owner[n] not in panels:
            panels.append(owner[n])
    return panels


SAVER_FILE = re.compile(r"(min|max)-(.+)\.tfmodel\.(?:index|json)")
"""The ``.index`` file of a `MinSaver`/`MaxSaver` copy with its default name, or the
record ``.json`` of the best k (``top_k > 1``)."""


def find_savers(logdir: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """The ``(kind, statistic)`` of each `MinSaver`/`MaxSaver` copy in `logdir`, sorted.

    Copies are found by their default names, ``min-<statistic>.tfmodel`` and
    ``max-<statistic>.tfmodel`` (a ``/`` of the statistic's name written ``_``), or
    for the best k by their record ``min-<statistic>.tfmodel.json`` (the copies
    ``min-<statistic>-<step>.tfmodel`` are not statistics of their own); a copy given
    another ``filename`` is not found.
    """
    try:
        names = os.listdir(logdir)
    except OSError:
        return []
    found = {(m.group(1), m.group(2)) for n in names if (m := SAVER_FILE.fullmatch(n)) is not None}
    records = {pair for pair in found if f"{pair[0]}-{pair[1]}.tfmodel.json" in names}
    copies = {
        (kind, stat)
        for kind, stat in found
        if (kind, re.sub(r"-\d+$", "", stat)) in records and re.search(r"-\d+$", stat)
    }
    return sorted(found - copies)


def best_point(xs: Sequence[float], ys: Sequence[float], kind: str) -> tuple[float, float] | None:
    """The point a `MinSaver` (``"min"``) or `MaxSaver` (``"max"``) keeps: the first best finite value.

    Examples:
        >>> best_point([1, 2, 3, 4], [0.5, 0.2, 0.2, 0.3], "min")
        (2, 0.2)
        >>> best_point([1, 2], [0.5, float("nan")], "max"), best_point([], [], "min")
        ((1, 0.5), None)
    """
    if kind not in ("min", "max"):
        msg = f"'kind' must be 'min' or 'max'; got {kind!r}"
        raise ValueError(msg)
    best: tuple[float, float] | None = None
    for x, y in zip(xs, ys):
        if not math.isfinite(y):
            continue
        if best is None or (y < best[1] if kind == "min" else y > best[1]):
            best = (x, y)
    return best


def _saver_of(name: str, savers: Sequence[tuple[str, str]]) -> str | None:
    safe = name.replace(os.sep, "_").replace("/", "_")
    for kind, stat in savers:
        if stat in (name, safe):
            return kind
    return None


def log_scale_panels(panels: Sequence[Sequence[Sequence[float]]]) -> list[bool]:
    """For each panel (its curves' y values), whether a log scale can show it: every value > 0.

    Examples:
        >>> log_scale_panels([[[0.3, 0.01], [0.2]], [[1.0, 0.0]], [[]]])
        [True, False, False]
    """
    out = []
    for curves in panels:
        values = [v for ys in curves for v in ys]
        out.append(bool(values) and all(v > 0 for v in values))
    return out


def _figure_class() -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ToolError(MATPLOTLIB_MISSING) from None
    return Figure, FigureCanvasAgg


def stats_figure(
    records: Sequence[Mapping[str, Any]],
    *,
    keys: str | None = None,
    x: str = "epoch",
    columns: int = 3,
    dpi: int = 100,
    title: str = "",
    pairs: Sequence[Sequence[str]] = (),
    separate: bool = False,
    savers: Sequence[tuple[str, str]] = (),
    log: bool = False,
) -> Any:
    """The matplotlib ``Figure`` of `plot_stats`, drawn but not written.

    One panel per group of `panel_groups` (one per statistic with `separate`), each
    curve labelled with its statistic; the best point of each statistic kept by a
    saver in `savers` (``(kind, statistic)`` pairs, as `find_savers` returns) is
    marked with a star and a dotted vertical line, labelled ``best (min) epoch N``.
    With `log`, the y axis of each panel whose values are all above 0 is logarithmic
    (a panel with a value <= 0 stays linear, see `log_scale_panels`).

    Raises:
        ToolError: no statistic matches, or matplotlib is missing.
        ValueError: bad `x`, `keys`, `columns`, `dpi` or `pairs`.
    """
    if dpi < 1:
        msg = f"'dpi' must be >= 1; got {dpi}"
        raise ValueError(msg)
    series = collect_series(records, keys=keys, x=x)
    if not series:
        found = sorted({k for r in records for k in r if k not in X_KEYS.values()})
        which = f"matching {keys!r} " if keys else ""
        msg = f"no numeric statistics {which}with {X_KEYS[x]!r} in {len(records)} records; names found: {found[:30]}"
        raise ToolError(msg)
    panels = panel_groups(list(series), pairs, separate)
    check_image_size(len(panels), columns, dpi)  # before matplotlib allocates it
    figure_cls, canvas_cls = _figure_class()
    from matplotlib.ticker import MaxNLocator as integer_ticks

    cols, rows = grid_shape(len(panels), columns)
    fig = figure_cls(figsize=(cols * PANEL_INCHES[0], rows * PANEL_INCHES[1]), dpi=dpi)
    canvas_cls(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    x_key = X_KEYS[x]
    x_label = "epoch" if x == "epoch" else "global step"
    run_xs = sorted({r[x_key] for r in records if _number(r.get(x_key))})
    for ax, (panel_title, names) in zip(axes.flat, panels):
        labelled = len(names) > 1
        for i, name in enumerate(names):
            xs, ys = series[name]
            color = f"C{i}"
            marker = "o" if len(xs) <= 30 else None
            held = held_series(xs, ys, run_xs)
            if held is None:
                ax.plot(xs, ys, marker=marker, markersize=3, linewidth=1.2, color=color, label=name)
            else:
                ax.plot(*held, drawstyle="steps-post", linewidth=1.2, color=color, label=name)
                ax.plot(xs, ys, "o", markersize=3, color=color)
            kind = _saver_of(name, savers)
            best = None if kind is None else best_point(xs, ys, kind)
            if best is not None:
                labelled = True
                ax.axvline(best[0], color=color, linestyle=":", linewidth=1.0)
                ax.plot(
                    [best[0]],
                    [best[1]],
                    "*",
                    markersize=11,
                    color=color,
                    markeredgecolor="black",
                    label=f"best ({kind}) {x_label} {best[0]}",
                )
        if log and log_scale_panels([[series[n][1] for n in names]]) == [True]:
            ax.set_yscale("log")
        ax.set_title(panel_title, fontsize=9)
        ax.set_xlabel(x_label, fontsize=8)
        ax.xaxis.set_major_locator(integer_ticks(integer=True))
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        if labelled:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_stats(
    source: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    out: str | os.PathLike[str] | None = None,
    *,
    keys: str | None = None,
    x: str = "epoch",
    columns: int = 3,
    dpi: int = 100,
    title: str | None = None,
    pairs: Sequence[Sequence[str]] = (),
    separate: bool = False,
    log: bool = False,
) -> str:
    """Draw the statistics of a run and write the PNG atomically.

    A statistic and its validation counterpart (``x`` and ``val_x``, ``train_x`` and
    ``validation_x``) share a panel, as do the groups in `pairs`; with `separate`, each
    statistic has a panel of its own. Given a logdir, the best epoch of each
    `MinSaver`/`MaxSaver` copy found in it (``min-<statistic>.tfmodel``) is marked on
    its statistic's curve. A statistic recorded at only some points (a
    hyper-parameter put when it is set) is drawn as steps held until the end of the
    run (see `held_series`). See `stats_figure` for the figure itself.

    Args:
        source: a logdir, its ``stats.json``, or the records themselves.
        out: the PNG to write; by default ``stats.png`` beside ``stats.json``.
        keys: a regex selecting statistics by name.
        x: ``"epoch"`` or ``"step"``.
        columns: panels per row at most.
        dpi: pixels per inch; each panel is 4 x 3 inches.
        title: a title over all panels (default: the logdir).
        pairs: groups of statistics to draw on one panel each.
        separate: one panel per statistic.
        log: a logarithmic y axis on each panel whose values are all above 0.

    Returns:
        The path written.

    Raises:
        ToolError: no stats, nothing matches `keys`, matplotlib is missing, or the output
            directory does not exist.
        ValueError: bad `x`, `keys`, `columns`, `dpi` or `pairs`.
    """
    records: list[Mapping[str, Any]]
    if isinstance(source, str | os.PathLike):
        src = os.fspath(source)
        records = list(read_stats(src))
        logdir = src if os.path.isdir(src) else os.path.dirname(src) or "."
    else:
        records, logdir = list(source), None
    if out is None:
        if logdir is None:
            msg = "plot_stats needs 'out' when given records instead of a logdir"
            raise ValueError(msg)
        out = os.path.join(logdir, "stats.png")
    out = os.fspath(out)
    require_file_output(out, "stats.png")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        msg = f"output directory {parent!r} does not exist"
        raise ToolError(msg)
    fig = stats_figure(
        records,
        keys=keys,
        x=x,
        columns=columns,
        dpi=dpi,
        title=title if title is not None else (logdir or ""),
        pairs=pairs,
        separate=separate,
        savers=find_savers(logdir) if logdir is not None else (),
        log=log,
    )
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    return out


def _pair(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if len(names) < 2:
        msg = f"--pair takes two or more statistics separated by commas; got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plot-stats",
        description=(
            "Draw the curves of a training run from its stats.json into a PNG: x and "
            "val_x (train_x and val_x) on one panel, the best epoch of each MinSaver/MaxSaver "
            "copy in the logdir marked. Needs matplotlib: pip install 'towerkit-tools[plot]'."
        ),
    )
    parser.add_argument("logdir", help="the run's logdir, or its stats.json")
    parser.add_argument("-o", "--out", help="the PNG to write (default: LOGDIR/stats.png)")
    parser.add_argument("--keys", metavar="REGEX", help="plot only statistics whose name matches")
    parser.add_argument(
        "--x", choices=sorted(X_KEYS), default="epoch", help="x axis: epochs or global steps"
    )
    parser.add_argument(
        "--pair",
        action="append",
        default=[],
        type=_pair,
        metavar="A,B",
        help="draw these statistics on one panel (repeatable)",
    )
    parser.add_argument(
        "--per-stat",
        action="store_true",
        help="one panel per statistic (no pairing)",
    )
    parser.add_argument(
        "--log",
        action="store_true",
        help="a logarithmic y axis (on each panel whose values are all above 0)",
    )
    parser.add_argument("--columns", type=int, default=3, help="panels per row (default 3)")
    parser.add_argument("--dpi", type=int, default=100, help="pixels per inch (default 100)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the panels that would be drawn"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 2 on a missing logdir, bad stats, no match, a bad pair, or
        missing matplotlib.
    """
    args = _parser().parse_args(argv)
    try:
        if args.columns < 1 or args.dpi < 1:
            msg = f"--columns and --dpi must be >= 1; got {args.columns} and {args.dpi}"
            raise ToolError(msg)
        if args.dry_run:
            series = collect_series(read_stats(args.logdir), keys=args.keys, x=args.x)
            if not series:
                msg = f"no numeric statistics to plot in {args.logdir!r}"
                raise ToolError(msg)
            panels = panel_groups(list(series), args.pair, args.per_stat)
            w, h = check_image_size(len(panels), args.columns, args.dpi)
            for title, names in panels:
                if names == (title,):
                    print(f"  {title}: {len(series[title][0])} points")
                else:
                    points = ", ".join(f"{n} {len(series[n][0])} points" for n in names)
                    print(f"  {title}: {points}")
            print(f"plot-stats: would draw {len(panels)} panels ({w}x{h} pixels)")
            return 0
        path = plot_stats(
            args.logdir,
            args.out,
            keys=args.keys,
            x=args.x,
            columns=args.columns,
            dpi=args.dpi,
            pairs=args.pair,
            separate=args.per_stat,
            log=args.log,
        )
    except (ToolError, ValueError) as err:
        return fail("plot-stats", err)
    print(f"plot-stats: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
