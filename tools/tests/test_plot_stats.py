"""Tests of plot-stats: real stats.json files to real PNG files."""

from __future__ import annotations

import json
import os
import re
import stat
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import run_blocked

from towerkit.tools.plot_stats import (
    MATPLOTLIB_MISSING,
    best_point,
    collect_series,
    find_savers,
    grid_shape,
    held_series,
    image_size,
    log_scale_panels,
    main,
    panel_groups,
    plot_stats,
    read_stats,
    stats_figure,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    """Width and height from a PNG's header, after checking its signature and IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def write_stats(directory, epochs: int = 6, steps_per_epoch: int = 20) -> list[dict]:
    """A stats.json as JSONWriter writes it: one record per epoch."""
    records = [
        {
            "epoch_num": e,
            "global_step": e * steps_per_epoch,
            "cost": 2.0 / e,
            "train_error": 0.5 / e,
            "validation_error": 0.4 / e,
            "learning_rate": 0.1 if e < 4 else 0.01,
        }
        for e in range(1, epochs + 1)
    ]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "stats.json").write_text(json.dumps(records))
    return records


class TestCollectSeries:
    """Curves from records."""

    @given(
        st.lists(
            st.fixed_dictionaries(
                {"epoch_num": st.integers(1, 99), "global_step": st.integers(0, 10**6)},
                optional={
                    "a": st.floats(allow_nan=False, allow_infinity=False),
                    "b": st.integers(-5, 5),
                    "note": st.text(max_size=3),
                    "flag": st.booleans(),
                },
            ),
            max_size=20,
        )
    )
    def test_numeric_entries_only(self, records):
        """Each numeric entry (not bools, not strings) lands in its series, in record order."""
        series = collect_series(records, x="step")
        for name in ("a", "b"):
            expected = [(r["global_step"], r[name]) for r in records if name in r]
            got = list(zip(*series[name])) if name in series else []
            assert got == expected
        assert not {"note", "flag", "epoch_num", "global_step"} & set(series)

    def test_records_without_x_are_skipped(self):
        """Records lacking the x key are not plotted."""
        assert collect_series([{"cost": 1.0}, {"epoch_num": 2, "cost": 0.5}]) == {
            "cost": ([2], [0.5])
        }

    def test_non_finite_values_skipped(self):
        """NaN and infinite values are left out."""
        recs = [
            {"epoch_num": 1, "c": float("nan")},
            {"epoch_num": 2, "c": float("inf")},
            {"epoch_num": 3, "c": 1.0},
        ]
        assert collect_series(recs) == {"c": ([3], [1.0])}

    def test_huge_ints_skipped(self):
        """An int no float holds is left out, not an OverflowError."""
        recs = [{"epoch_num": 1, "c": 10**400}, {"epoch_num": 2, "c": 1}, {"epoch_num": 10**400}]
        assert collect_series(recs) == {"c": ([2], [1])}

    def test_bad_x(self):
        """An unknown x axis is refused."""
        with pytest.raises(ValueError, match=r"'x' must be one of \['epoch', 'step'\]; got 'time'"):
            collect_series([], x="time")

    def test_bad_keys(self):
        """An invalid --keys regex is named."""
        with pytest.raises(ValueError, match=r"--keys '\(' is not a valid regular expression"):
            collect_series([], keys="(")


class TestHeldSeries:
    """Sparse statistics drawn as held steps."""

    @given(st.lists(st.integers(1, 50), min_size=2, unique=True))
    def test_held_until_the_end(self, run):
        """A series recorded at some points holds its last value up to the run's last point."""
        run = sorted(run)
        xs = run[:-1][::2]
        ys = [float(i) for i in range(len(xs))]
        held = held_series(xs, ys, run)
        assert held is not None
        hx, hy = held
        assert (hx[-1], hy[-1]) == (run[-1], ys[-1])
        assert hx[: len(xs)] == xs

    @given(st.lists(st.integers(1, 50), min_size=1, unique=True))
    def test_dense_series_untouched(self, run):
        """A series present at every point of the run is not sparse."""
        assert held_series(run, [0.0] * len(run), run) is None


class TestLogScalePanels:
    """`log_scale_panels` says which panels a log axis can show."""

    @given(st.lists(st.lists(st.lists(st.floats(-10, 10), max_size=5), max_size=3), max_size=5))
    def test_property(self, panels):
        """A panel gets a log axis exactly when it has values and all are > 0."""
        got = log_scale_panels(panels)
        assert got == [
            any(ys for ys in curves) and all(v > 0 for ys in curves for v in ys)
            for curves in panels
        ]


class TestGrid:
    """Panel layout and image size."""

    @given(st.integers(1, 40), st.integers(1, 6))
    def test_grid_holds_every_panel(self, panels, columns):
        """The grid has room for every panel and no empty row."""
        cols, rows = grid_shape(panels, columns)
        assert cols * rows >= panels > cols * (rows - 1)
        assert cols <= columns
        assert rows == -(-panels // columns), "the fewest rows"
        assert cols * rows - panels < rows, "fewer empty cells than rows: no empty column"

    def test_bad_grid(self):
        """Zero panels is refused."""
        with pytest.raises(ValueError, match="'panels' and 'columns' must be >= 1; got panels=0"):
            grid_shape(0)


@pytest.mark.procs
class TestPlot:
    """PNG files on disk."""

    def test_png_written_with_expected_size(self, tmp_path):
        """train_error and validation_error share a panel: 3 panels in 3 columns, 1200x300 at 100 dpi."""
        write_stats(tmp_path / "run")
        path = plot_stats(tmp_path / "run")
        assert path == str(tmp_path / "run" / "stats.png")
        assert png_size(tmp_path / "run" / "stats.png") == image_size(3) == (1200, 300)

    def test_per_stat_layout(self, tmp_path):
        """--per-stat: one panel per statistic, 4 statistics make a 2x2 grid, 800x600, no empty cell."""
        write_stats(tmp_path / "run")
        assert main([str(tmp_path / "run"), "--per-stat"]) == 0
        assert png_size(tmp_path / "run" / "stats.png") == image_size(4) == (800, 600)

    @pytest.mark.parametrize("umask", [0o022, 0o027])
    def test_png_mode_follows_umask(self, tmp_path, umask):
        """The PNG gets the mode any other new file gets (0644 under umask 022), not 0600."""
        write_stats(tmp_path / "run")
        previous = os.umask(umask)
        try:
            path = plot_stats(tmp_path / "run")
        finally:
            os.umask(previous)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask

    def test_log_scale(self, tmp_path):
        """--log draws a log y axis where every value is > 0 (a PNG is written either way)."""
        write_stats(tmp_path / "run")
        assert main([str(tmp_path / "run"), "--log", "-o", str(tmp_path / "log.png")]) == 0
        assert png_size(tmp_path / "log.png") == image_size(3)
        fig = stats_figure(read_stats(tmp_path / "run"), log=True)
        scales = {ax.get_title(): ax.get_yscale() for ax in fig.axes if ax.get_visible()}
        assert set(scales.values()) == {"log"}, scales
        linear = stats_figure(read_stats(tmp_path / "run"))
        assert {ax.get_yscale() for ax in linear.axes} == {"linear"}

    def test_keys_columns_dpi(self, tmp_path):
        """--keys picks statistics; --columns and --dpi set the layout and size."""
        write_stats(tmp_path / "run")
        out = tmp_path / "errors.png"
        assert (
            main(
                [
                    str(tmp_path / "run"),
                    "-o",
                    str(out),
                    "--keys",
                    "error$",
                    "--x",
                    "step",
                    "--columns",
                    "1",
                    "--dpi",
                    "50",
                ]
            )
            == 0
        )
        assert png_size(out) == (200, 150), "the two errors share one panel"

    def test_from_records(self, tmp_path):
        """Records may be given directly, with an explicit output."""
        records = write_stats(tmp_path / "run")
        out = tmp_path / "r.png"
        plot_stats(records, out, keys="cost")
        assert png_size(out) == (400, 300)

    def test_stats_file_path(self, tmp_path, capsys):
        """The stats.json file itself may be given; the PNG goes beside it."""
        write_stats(tmp_path / "run")
        assert main([str(tmp_path / "run" / "stats.json")]) == 0
        assert png_size(tmp_path / "run" / "stats.png") == (1200, 300)
        assert "plot-stats: wrote" in capsys.readouterr().out

    def test_dry_run(self, tmp_path, capsys):
        """--dry-run names the panels and the size, and writes nothing."""
        write_stats(tmp_path / "run", epochs=3)
        assert main([str(tmp_path / "run"), "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "  cost: 3 points" in out
        assert "  error: train_error 3 points, validation_error 3 points" in out
        assert "would draw 3 panels (1200x300 pixels)" in out
        assert not (tmp_path / "run" / "stats.png").exists()

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            (None, "has no 'stats.json'"),
            ("{not json", "is not valid JSON"),
            ('{"a": 1}', "must hold a JSON list of records .*got an object at line 1, column 1"),
            (
                '[{"epoch_num": 1, "note": "x"}]',
                r"no numeric statistics with 'epoch_num' in 1 records; names found: \['note'\]",
            ),
        ],
    )
    def test_bad_stats(self, tmp_path, capsys, content, message):
        """A logdir without usable stats gives one error line, status 2, no PNG."""
        if content is not None:
            (tmp_path / "stats.json").write_text(content)
        assert main([str(tmp_path)]) == 2
        assert re.search(message, capsys.readouterr().err)
        assert not (tmp_path / "stats.png").exists()

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            (
                b'[{"epoch_num": 1, "c\x80": 1}]',
                r"is not UTF-8 text: byte 0x80 at byte offset 20 \(line 1, column 21\)",
            ),
            (
                b"[" * 100_000 + b"]" * 100_000,
                r"nests values too deeply for the parser: .* column 3 ",
            ),
            (
                b'[{"epoch_num": 1, "c": ' + b"7" * 5000 + b"}]",
                r"holds a number a float cannot hold \(7{20}\.\.\., 5000 characters\) at line 1, "
                r"column 24",
            ),
            (b'[{"epoch_num": 1, "c": 1e400}]', r"holds a number a float cannot hold \(1e400"),
            (b'[{"epoch_num": 1},\n [2]]', r"record #1 at line 2, column 2 \(char 20\) is a list"),
        ],
        ids=["undecodable", "deep", "huge-int", "huge-float", "wrong-record"],
    )
    def test_damaged_stats(self, tmp_path, capsys, content, message):
        """A damaged stats.json: one line naming the file, the position and what was expected; status 2."""
        (tmp_path / "stats.json").write_bytes(content)
        for argv in ([str(tmp_path)], [str(tmp_path), "--dry-run"]):
            assert main(argv) == 2
            captured = capsys.readouterr()
            lines = captured.err.splitlines()
            assert len(lines) == 1, captured.err
            assert lines[0].startswith(f"plot-stats: error: {str(tmp_path / 'stats.json')!r}")
            assert re.search(message, lines[0]), lines[0]
            assert captured.out == ""
        assert not (tmp_path / "stats.png").exists()

    def test_non_finite_stats_plotted(self, tmp_path, capsys):
        """A stats.json holding "NaN"/"Infinity" (as JSONWriter writes them) plots its finite points."""
        recs = [
            {"epoch_num": e, "global_step": e, "cost": c}
            for e, c in enumerate(["NaN", 2.0, "Infinity", 1.0], start=1)
        ]
        (tmp_path / "stats.json").write_text(json.dumps(recs))
        assert main([str(tmp_path), "--dry-run"]) == 0
        assert "cost: 2 points" in capsys.readouterr().out
        assert main([str(tmp_path)]) == 0
        assert png_size(tmp_path / "stats.png") == (400, 300)

    def test_missing_logdir(self, tmp_path, capsys):
        """A path that does not exist is named."""
        assert main([str(tmp_path / "nowhere")]) == 2
        assert "nowhere' does not exist" in capsys.readouterr().err

    def test_missing_output_dir(self, tmp_path, capsys):
        """An output in a missing directory is refused."""
        write_stats(tmp_path / "run")
        assert main([str(tmp_path / "run"), "-o", str(tmp_path / "no" / "x.png")]) == 2
        assert "output directory" in capsys.readouterr().err

    def test_read_stats(self, tmp_path):
        """read_stats returns the records as written."""
        records = write_stats(tmp_path)
        assert read_stats(tmp_path) == records

    @pytest.mark.slow
    def test_without_matplotlib(self, tmp_path):
        """Without matplotlib the tool says which extra to install, and writes nothing."""
        write_stats(tmp_path / "run")
        done = run_blocked(
            "towerkit.tools.plot_stats", [str(tmp_path / "run")], ["matplotlib"], tmp_path
        )
        assert done.returncode == 2
        assert done.stderr.strip() == f"plot-stats: error: {MATPLOTLIB_MISSING}"
        assert "towerkit-tools[plot]" in MATPLOTLIB_MISSING
        assert not (tmp_path / "run" / "stats.png").exists()


def _panels(fig):
    """``{title: [curve labels]}`` of the visible panels of a figure, in drawing order."""
    out = {}
    for ax in fig.axes:
        if ax.get_visible():
            out[ax.get_title()] = [
                line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")
            ]
    return out


names = st.lists(
    st.from_regex(r"(train_|val_|validation_|val-)?[a-c]{1,2}", fullmatch=True),
    unique=True,
    max_size=12,
)


class TestPanels:
    """Which statistics share a panel, and what is marked on it (read from the figure)."""

    @given(names, st.booleans())
    def test_every_statistic_in_one_panel(self, stats, separate):
        """Each statistic is drawn in exactly one panel; with separate, each alone."""
        panels = panel_groups(stats, separate=separate)
        drawn = [n for _, group in panels for n in group]
        assert sorted(drawn) == sorted(stats)
        if separate:
            assert all(len(group) == 1 for _, group in panels)

    @given(names)
    def test_groups_share_a_stem_and_hold_a_validation_statistic(self, stats):
        """A panel of several statistics holds one stem, and a validation statistic drawn last."""
        for title, group in panel_groups(stats):
            if len(group) > 1:
                stems = {re.sub(r"^(train_|val_|validation_|val-)", "", n) for n in group}
                assert stems == {title}
                assert re.match(r"(val_|validation_|val-)", group[-1])

    def test_pairs_by_name(self):
        """A pair the user names shares a panel titled by its names."""
        assert panel_groups(["cost", "l2", "lr"], pairs=[("cost", "l2")]) == [
            ("cost, l2", ("cost", "l2")),
            ("lr", ("lr",)),
        ]

    def test_bad_pairs(self):
        """A pair naming an unknown statistic, or a single one, is an error listing each."""
        with pytest.raises(
            ValueError, match=r"\['cost', 'nope'\]: no statistic 'nope'; \['l2'\]: fewer than two"
        ):
            panel_groups(["cost", "l2"], pairs=[("cost", "nope"), ("l2",)])

    def test_figure_pairs_and_best_marks(self, tmp_path):
        """The figure's panels: cost with val_cost, the errors together, the best epochs starred."""
        records = [
            {
                "epoch_num": e,
                "global_step": 10 * e,
                "cost": 1 / e,
                "val_cost": v,
                "train_error": 0.5 / e,
                "validation_error": w,
                "learning_rate": 0.1,
            }
            for e, v, w in [(1, 0.9, 0.30), (2, 0.5, 0.20), (3, 0.6, 0.10), (4, 0.7, 0.15)]
        ]
        fig = stats_figure(
            records, savers=[("min", "validation_error"), ("max", "val_cost")], title="run"
        )
        assert _panels(fig) == {
            "cost": ["cost", "val_cost", "best (max) epoch 1"],
            "learning_rate": ["learning_rate"],
            "error": ["train_error", "validation_error", "best (min) epoch 3"],
        }
        error_panel = next(ax for ax in fig.axes if ax.get_title() == "error")
        star = next(ln for ln in error_panel.get_lines() if ln.get_label().startswith("best"))
        assert list(star.get_xdata()) == [3]
        assert list(star.get_ydata()) == [0.10]

    def test_savers_found_in_the_logdir(self, tmp_path):
        """MinSaver/MaxSaver copies in the logdir are found by their default names."""
        write_stats(tmp_path / "run")
        for name in (
            "min-validation_error.tfmodel.index",
            "max-a_b.tfmodel.index",
            "model-3.index",
        ):
            (tmp_path / "run" / name).write_bytes(b"")
        assert find_savers(tmp_path / "run") == [("max", "a_b"), ("min", "validation_error")]
        assert find_savers(tmp_path / "missing") == []
        # the best k: the record names the statistic, the copies are not statistics of their own
        for name in (
            "min-top-5.tfmodel.json",
            "min-top-5-12.tfmodel.index",
            "max-c-3.tfmodel.index",
        ):
            (tmp_path / "run" / name).write_bytes(b"")
        assert find_savers(tmp_path / "run") == [
            ("max", "a_b"),
            ("max", "c-3"),
            ("min", "top-5"),
            ("min", "validation_error"),
        ]
        assert main([str(tmp_path / "run"), "--pair", "cost,learning_rate"]) == 0
        assert png_size(tmp_path / "run" / "stats.png") == (800, 300)

    def test_pair_flag_needs_two(self, tmp_path, capsys):
        """--pair with one name is a usage error."""
        write_stats(tmp_path / "run")
        with pytest.raises(SystemExit):
            main([str(tmp_path / "run"), "--pair", "cost"])
        assert "two or more statistics" in capsys.readouterr().err

    @given(st.lists(st.floats(-10, 10), min_size=1, max_size=20), st.sampled_from(["min", "max"]))
    def test_best_point_is_the_first_extreme(self, ys, kind):
        """The best point is the first index holding the extreme value."""
        xs = list(range(1, len(ys) + 1))
        best = min(ys) if kind == "min" else max(ys)
        assert best_point(xs, ys, kind) == (ys.index(best) + 1, best)
