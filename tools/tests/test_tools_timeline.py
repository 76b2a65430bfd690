"""Tests of the timeline tool: descriptions, firings, rendering, the command line, no TensorFlow."""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from pathlib import Path

import pytest
import tomllib
from hypothesis import given
from hypothesis import strategies as st
from support import run_blocked

from towerkit.callbacks import loop_events, timeline_firings
from towerkit.tools.timeline import (
    Description,
    LoopSpec,
    entry_from_table,
    iter_firings,
    load_description,
    main,
    periodic_callback_rule,
    render_json,
    render_text,
    run_timeline,
    summarize,
)

TOML = """
[loop]
steps_per_epoch = 100
max_epoch = 10

[[callbacks]]
name = "ModelSaver"
type = "PeriodicTrigger"
every_k_epochs = 2

[[callbacks]]
name = "InferenceRunner"
type = "PeriodicCallback"
every_k_epochs = 3

[[callbacks]]
name = "learning_rate"
schedule = [[0, 0.1], [5, 0.01], [8, 0.001]]

[[callbacks]]
name = "Evaluate"
every_k_steps = 250
"""

EXPECTED = [
    ("before_train", 0, 0, "learning_rate", 0.1),
    ("trigger_epoch", 2, 200, "ModelSaver", None),
    ("trigger_step", 3, 250, "Evaluate", None),
    ("trigger_epoch", 3, 300, "InferenceRunner", None),
    ("trigger_epoch", 4, 400, "ModelSaver", None),
    ("trigger_step", 5, 500, "Evaluate", None),
    ("trigger_epoch", 5, 500, "learning_rate", 0.01),
    ("trigger_epoch", 6, 600, "ModelSaver", None),
    ("trigger_epoch", 6, 600, "InferenceRunner", None),
    ("trigger_step", 8, 750, "Evaluate", None),
    ("trigger_epoch", 8, 800, "ModelSaver", None),
    ("trigger_epoch", 8, 800, "learning_rate", 0.001),
    ("trigger_epoch", 9, 900, "InferenceRunner", None),
    ("trigger_step", 10, 1000, "Evaluate", None),
    ("trigger_epoch", 10, 1000, "ModelSaver", None),
    ("trigger_epoch", 10, 1000, "InferenceRunner", None),
]
"""Worked out by hand from the documented semantics of each callback."""


def _tuples(firings) -> list[tuple]:
    return [(f.kind.value, f.epoch_num, f.global_step, f.name, f.value) for f in firings]


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(TOML)
    return path


class TestLoopSpec:
    """The loop parameters record."""

    def test_repr(self):
        """The repr names every field."""
        assert repr(LoopSpec(steps_per_epoch=3, max_epoch=2)) == (
            "LoopSpec(steps_per_epoch=3, max_epoch=2, starting_epoch=1, start_global_step=0, "
            "steps_per_execution=1)"
        )

    def test_fail(self):
        """A non-positive steps_per_epoch or an inverted epoch range is refused at construction."""
        with pytest.raises(ValueError, match=r"'steps_per_epoch' must be an int >= 0 .*; got -1"):
            LoopSpec(steps_per_epoch=-1, max_epoch=2)
        with pytest.raises(
            ValueError, match=r"'max_epoch' must be >= 'starting_epoch' - 1 \(an empty run\)"
        ):
            LoopSpec(steps_per_epoch=1, max_epoch=2, starting_epoch=5)

    @given(st.integers(1, 50), st.integers(1, 20), st.integers(-1, 20))
    def test_total_steps(self, spe, start, extra):
        """total_steps is the steps of the epochs from starting_epoch to max_epoch inclusive."""
        max_epoch = start + extra
        spec = LoopSpec(steps_per_epoch=spe, max_epoch=max_epoch, starting_epoch=start)
        assert spec.bounds.max_epoch == max_epoch
        assert spec.total_steps == spe * len(range(start, max_epoch + 1))


class TestEntryFromTable:
    """Building entries from description tables."""

    def test_type_inferred(self):
        """Without 'type', the keys decide which callback a table stands for."""
        kinds = [
            entry_from_table(t)[1]
            for t in (
                {"name": "a"},
                {"name": "b", "every_k_steps": 3},
                {"name": "c", "schedule": [[1, 0.5]]},
            )
        ]
        assert kinds == ["Callback", "PeriodicTrigger", "ScheduledHyperParamSetter"]

    def test_periodic_callback_methods(self):
        """PeriodicCallback entries are evaluated at the methods given."""
        entry, _ = entry_from_table(
            {
                "name": "x",
                "type": "PeriodicCallback",
                "every_k_steps": 5,
                "methods": ["trigger_step"],
            }
        )
        assert [k.value for k in entry.kinds] == ["trigger_step"]

    def test_unknown_type(self):
        """An unknown type names the known ones."""
        with pytest.raises(ValueError, match=r"unknown type 'Saver'; expected one of \['Callback'"):
            entry_from_table({"name": "x", "type": "Saver"})

    def test_unknown_keys_all_listed(self):
        """Every unknown key is listed."""
        with pytest.raises(ValueError, match=r"unknown keys \['every', 'step'\]"):
            entry_from_table({"name": "x", "type": "PeriodicTrigger", "every": 1, "step": 2})

    def test_no_name(self):
        """An entry without a name is refused."""
        with pytest.raises(TypeError, match="needs a non-empty string 'name'"):
            entry_from_table({"every_k_steps": 1})

    def test_bad_schedule_entries_named(self):
        """A schedule out of order is refused with the callback and the entries named."""
        with pytest.raises(ValueError, match=r"callback 'lr' .*out of order: #1 \(2, 0.1\)"):
            entry_from_table({"name": "lr", "schedule": [[3, 1.0], [2, 0.1]]})

    def test_bad_methods(self):
        """Unknown gated methods are listed."""
        with pytest.raises(ValueError, match=r"wrong entries: \['after_train'\]"):
            entry_from_table(
                {
                    "name": "x",
                    "type": "PeriodicCallback",
                    "every_k_epochs": 1,
                    "methods": ["after_train"],
                }
            )

    def test_periodic_callback_rule_matches_callbacks_lib(self):
        """The PeriodicCallback rule is the record PeriodicCallback itself follows."""
        from towerkit.callbacks.plumbing import periodic_record

        for steps, epochs in ((None, 2), (5, None), (5, 3)):
            assert periodic_callback_rule(steps, epochs) == periodic_record(steps, epochs)


class TestLoadDescription:
    """Checking a description's loop and callbacks."""

    def test_overrides(self):
        """Command-line overrides replace the description's loop values."""
        d = load_description({"steps_per_epoch": 2, "max_epoch": 3}, [], {"max_epoch": 7})
        assert d.loop == LoopSpec(steps_per_epoch=2, max_epoch=7)

    def test_missing_loop_keys(self):
        """Missing loop values are named."""
        with pytest.raises(ValueError, match=r"'loop' needs \['steps_per_epoch', 'max_epoch'\]"):
            load_description({}, [])

    def test_unknown_loop_keys(self):
        """Unknown loop keys are named."""
        with pytest.raises(ValueError, match=r"unknown keys \['epochs'\]"):
            load_description({"steps_per_epoch": 1, "max_epoch": 1, "epochs": 3}, [])

    def test_duplicate_names(self):
        """Callback names must be unique."""
        with pytest.raises(ValueError, match=r"repeated: \['a'\]"):
            load_description({"steps_per_epoch": 1, "max_epoch": 1}, [{"name": "a"}, {"name": "a"}])

    def test_bad_item(self):
        """An item that is neither a table, a tuple nor a callback is refused with its index."""
        with pytest.raises(TypeError, match="callbacks #1: expected a table"):
            load_description({"steps_per_epoch": 1, "max_epoch": 1}, [{"name": "a"}, 42])

    def test_only(self):
        """Description.only keeps the matching entries with their types."""
        d = load_description(
            {"steps_per_epoch": 1, "max_epoch": 1},
            [{"name": "saver"}, {"name": "lr", "schedule": [[0, 1.0]]}],
        )
        kept = d.only(re.compile("^lr$"))
        assert ([e.name for e in kept.entries], kept.types) == (
            ["lr"],
            ("ScheduledHyperParamSetter",),
        )


class TestTimeline:
    """Firings over a whole run."""

    def test_known_callback_list(self):
        """The firings of a known callback list are those worked out by hand."""
        doc = tomllib.loads(TOML)
        d = load_description(doc["loop"], doc["callbacks"])
        assert _tuples(run_timeline(d)) == EXPECTED

    def test_resumed_run(self):
        """A run resumed at epoch 6 starts with the schedule's value in effect."""
        d = load_description(
            {"steps_per_epoch": 10, "max_epoch": 8, "starting_epoch": 6, "start_global_step": 50},
            [{"name": "lr", "schedule": [[0, 0.1], [5, 0.01], [7, 0.001]]}],
        )
        assert _tuples(run_timeline(d)) == [
            ("before_train", 5, 50, "lr", 0.01),
            ("trigger_epoch", 7, 70, "lr", 0.001),
        ]

    def test_step_based_linear_schedule(self):
        """A step-based linear schedule sets an interpolated value after every step between points."""
        d = load_description(
            {"steps_per_epoch": 2, "max_epoch": 2},
            [
                {
                    "name": "lr",
                    "schedule": [[1, 1.0], [3, 0.0]],
                    "interp": "linear",
                    "step_based": True,
                }
            ],
        )
        assert [(f.global_step, f.value) for f in run_timeline(d)] == [
            (1, 1.0),
            (2, 0.5),
            (3, 0.0),
        ]

    @given(st.integers(1, 6), st.integers(1, 12), st.integers(1, 5))
    def test_every_k_epochs_count(self, k, max_epoch, spe):
        """A PeriodicTrigger every k epochs fires once per epoch divisible by k."""
        d = load_description(
            {"steps_per_epoch": spe, "max_epoch": max_epoch},
            [{"name": "t", "every_k_epochs": k}],
        )
        firings = run_timeline(d)
        assert [f.epoch_num for f in firings] == [e for e in range(1, max_epoch + 1) if e % k == 0]
        assert all(f.global_step == f.epoch_num * spe for f in firings)

    @given(st.integers(1, 6), st.integers(1, 8), st.integers(1, 5))
    def test_periodic_callback_sees_last_epoch(self, k, max_epoch, spe):
        """A PeriodicCallback every k epochs also acts in the last epoch."""
        d = load_description(
            {"steps_per_epoch": spe, "max_epoch": max_epoch},
            [{"name": "t", "type": "PeriodicCallback", "every_k_epochs": k}],
        )
        epochs = [f.epoch_num for f in run_timeline(d)]
        assert epochs == [e for e in range(1, max_epoch + 1) if e % k == 0 or e == max_epoch]


class TestRender:
    """Text and JSON output."""

    def test_text_and_summary(self):
        """The text has one line per firing, then one summary line per callback."""
        d = load_description(
            {"steps_per_epoch": 5, "max_epoch": 2},
            [{"name": "saver"}, {"name": "never", "every_k_epochs": 3}],
        )
        text = render_text(d, run_timeline(d))
        assert text.splitlines()[-2:] == [
            "saver (Callback): 2 times, first at epoch 1 (global step 5), last at epoch 2 (global step 10)",
            "never (PeriodicTrigger): 0 times",
        ]

    def test_limit(self):
        """--limit truncates the table, says the rest is not computed, and sums up what it shows."""
        d = load_description({"steps_per_epoch": 1, "max_epoch": 5}, [{"name": "saver"}])
        text = render_text(d, iter_firings(d), limit=2)
        assert "... stopped after 2 firings (--limit 2): later ones are not computed" in text
        assert text.splitlines()[-2:] == [
            "in the first 2 firings:",
            "saver (Callback): 2 times, first at epoch 1 (global step 1), last at epoch 2 (global step 2)",
        ]

    def test_limit_not_reached(self):
        """A limit above the number of firings shows them all, with the full summary."""
        d = load_description({"steps_per_epoch": 1, "max_epoch": 3}, [{"name": "saver"}])
        assert render_text(d, iter_firings(d), limit=10) == render_text(d, run_timeline(d))

    def test_limit_walks_only_to_the_limit(self):
        """A per-step trigger over 1,000 steps x 99,999 epochs: --limit 3 reads a few events only."""
        d = load_description(
            {"steps_per_epoch": 1000, "max_epoch": 99_999},
            [{"name": "every_step", "every_k_steps": 1}, {"name": "saver"}],
        )
        read = []

        def counted(events):
            for event in events:
                read.append(event)
                yield event

        spec = d.loop
        kinds = {k for e in d.entries for k in e.kinds}
        events = loop_events(spec.starting_epoch, spec.max_epoch, spec.steps_per_epoch, kinds=kinds)
        text = render_text(d, timeline_firings(d.entries, counted(events)), limit=3)
        assert [line.split()[1] for line in text.splitlines()[2:5]] == ["1", "2", "3"]
        assert "global steps 1..99999000 (99999000 steps)" in text
        # before_train and the three trigger_step events of steps 1..3: nothing further
        assert [(e.kind.value, e.global_step) for e in read] == [
            ("before_train", 0),
            ("trigger_step", 1),
            ("trigger_step", 2),
            ("trigger_step", 3),
        ]

    def test_json_limit(self):
        """--json with a limit holds that many firings; 'complete' says the run was walked to its end."""
        d = load_description({"steps_per_epoch": 1, "max_epoch": 5}, [{"name": "saver"}])
        cut = json.loads(render_json(d, iter_firings(d), limit=2))
        full = json.loads(render_json(d, iter_firings(d), limit=6))
        assert (len(cut["firings"]), cut["complete"], cut["summary"][0]["count"]) == (2, False, 2)
        assert (len(full["firings"]), full["complete"], full["summary"][0]["count"]) == (5, True, 5)
        assert json.loads(render_json(d, iter_firings(d)))["complete"]

    @given(
        st.integers(1, 6),
        st.integers(1, 5),
        st.integers(1, 4),
        st.integers(1, 3),
        st.integers(0, 20),
    )
    def test_lazy_equals_eager(self, spe, max_epoch, k_steps, k_epochs, limit):
        """The first `limit` lazy firings are the first `limit` of the whole list."""
        d = load_description(
            {"steps_per_epoch": spe, "max_epoch": max_epoch},
            [
                {"name": "steps", "every_k_steps": k_steps},
                {"name": "epochs", "type": "PeriodicCallback", "every_k_epochs": k_epochs},
                {"name": "lr", "schedule": [[1, 0.1], [3, 0.01]], "interp": "linear"},
            ],
        )
        eager = run_timeline(d)
        assert list(itertools.islice(iter_firings(d), limit)) == eager[:limit]
        assert summarize(d, iter_firings(d)) == summarize(d, eager)

    def test_json_round_trip(self):
        """The JSON document holds the loop, the firings and the summary."""
        d = load_description({"steps_per_epoch": 1, "max_epoch": 2}, [{"name": "saver"}])
        firings = run_timeline(d)
        doc = json.loads(render_json(d, firings))
        assert (doc["loop"]["max_epoch"], len(doc["firings"]), doc["summary"]) == (
            2,
            2,
            summarize(d, firings),
        )

    def test_description_repr(self):
        """A Description prints its loop and entries."""
        d = load_description({"steps_per_epoch": 1, "max_epoch": 1}, [])
        assert repr(d).startswith("Description(loop=LoopSpec(steps_per_epoch=1")
        assert isinstance(d, Description)


@pytest.mark.procs
class TestMain:
    """The command line."""

    def test_toml(self, toml_file, capsys):
        """A TOML description prints the table and the summary."""
        assert main([str(toml_file)]) == 0
        out = capsys.readouterr().out
        assert "learning_rate (ScheduledHyperParamSetter): 3 times" in out
        assert len(
            [ln for ln in out.splitlines() if "trigger_" in ln or "before_train" in ln]
        ) == len(EXPECTED)

    def test_python_description(self, tmp_path, capsys):
        """A Python description may build trigger trees from the predefined records."""
        path = tmp_path / "run.py"
        path.write_text(
            textwrap.dedent(
                """
                loop = {"steps_per_epoch": 10, "max_epoch": 3}
                callbacks = [
                    ("eval", any_of(GlobalStepMultiple(15), AtLastStep()), ["trigger_step"]),
                    {"name": "saver"},
                ]
                """
            )
        )
        assert main([str(path), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [(f["name"], f["global_step"]) for f in doc["firings"]] == [
            ("saver", 10),
            ("eval", 15),
            ("saver", 20),
            ("eval", 30),
            ("saver", 30),
        ]

    def test_overrides_and_only(self, toml_file, capsys):
        """Loop values given on the command line win; --only filters callbacks."""
        assert main([str(toml_file), "--max-epoch", "4", "--only", "^Model", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [f["epoch_num"] for f in doc["firings"]] == [2, 4]

    @pytest.mark.parametrize(
        ("name", "content", "message"),
        [
            ("missing.toml", None, "does not exist"),
            ("bad.toml", "[loop\n", "is not valid TOML"),
            ("run.txt", "x", "must end with '.toml' or '.py'"),
            ("nothing.toml", "a = 1\n", r"does not define \['loop', 'callbacks'\]"),
            ("boom.py", "raise RuntimeError('kaput')", "failed: RuntimeError: kaput"),
        ],
    )
    def test_bad_description(self, tmp_path, capsys, name, content, message):
        """Bad description files give one clear error line and status 2."""
        path = tmp_path / name
        if content is not None:
            path.write_text(content)
        assert main([str(path)]) == 2
        assert re.search(message, capsys.readouterr().err)

    def test_help(self, capsys):
        """--help describes the description format."""
        with pytest.raises(SystemExit) as exc:
            main(["--help"])
        assert exc.value.code == 0
        assert "[[callbacks]]" in capsys.readouterr().out

    @pytest.mark.slow
    def test_runs_without_tensorflow(self, toml_file, tmp_path):
        """The tool runs in a process where importing TensorFlow fails."""
        done = run_blocked(
            "towerkit.tools.timeline", [str(toml_file)], ["tensorflow", "tensorboard"], tmp_path
        )
        assert (done.returncode, done.stderr) == (0, "")
        assert "ModelSaver (PeriodicTrigger): 5 times" in done.stdout


class TestStepsPerExecution:
    """The timeline models K steps per session call."""

    def test_step_firings_at_call_ends(self, tmp_path, capsys):
        """Step periods fire at the calls' ends; epoch firings do not move."""
        path = tmp_path / "k.toml"
        path.write_text(
            "[loop]\nsteps_per_epoch = 100\nmax_epoch = 2\nsteps_per_execution = 50\n\n"
            '[[callbacks]]\nname = "saver"\ntype = "PeriodicTrigger"\nevery_k_steps = 100\n\n'
            '[[callbacks]]\nname = "stats"\ntype = "PeriodicTrigger"\nevery_k_epochs = 1\n'
        )
        assert main([str(path), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        got = [(f["name"], f["global_step"]) for f in out["firings"]]
        assert ("saver", 100) in got
        assert ("saver", 200) in got
        assert [g for n, g in got if n == "stats"] == [100, 200]

    def test_period_inside_a_call_refused(self, tmp_path, capsys):
        """A step period that is not a multiple of K is refused, named."""
        path = tmp_path / "k.toml"
        path.write_text(
            "[loop]\nsteps_per_epoch = 100\nmax_epoch = 2\n\n"
            '[[callbacks]]\nname = "saver"\ntype = "PeriodicTrigger"\nevery_k_steps = 30\n'
        )
        assert main([str(path), "--steps-per-execution", "50"]) == 2
        err = capsys.readouterr().err
        assert (
            "'saver': a period of 30 global steps is not a multiple of steps_per_execution=50"
            in err
        )

    def test_k_must_divide(self, tmp_path, capsys):
        """K must divide steps_per_epoch."""
        path = tmp_path / "k.toml"
        path.write_text("callbacks = []\n\n[loop]\nsteps_per_epoch = 100\nmax_epoch = 2\n")
        assert main([str(path), "--steps-per-execution", "30"]) == 2
        assert (
            "'steps_per_execution' 30 must divide 'steps_per_epoch' 100" in capsys.readouterr().err
        )
