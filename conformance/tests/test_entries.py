"""Trainer entries, capabilities, and how ``--trainer`` loads them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.conformance import (
    BUILTIN_ENTRIES,
    Capabilities,
    EntryError,
    TrainerEntry,
    capabilities_of,
    entries_from,
    parse_target,
    select_entries,
    takes_model,
)


class TestCapabilities:
    """`Capabilities`: what a trainer promises."""

    def test_repr(self):
        """Defaults describe a single-tower, in-process trainer."""
        assert repr(Capabilities()) == (
            "Capabilities(num_towers=1, variables='shared', trains=True, gradients='average', "
            "synchronous=True, runs_per_step=1, launcher='inprocess', processes=1, towers=True, "
            "steps_per_execution=True, precision=True, plain_sgd=True)"
        )

    def test_fail(self):
        """Bad values are rejected with the field's name."""
        with pytest.raises(
            ValueError,
            match=r"Capabilities: 'launcher' must be one of \('inprocess', 'horovod', 'tf-distributed'\); got 'mpi'",
        ):
            Capabilities(launcher="mpi")
        with pytest.raises(TypeError, match="'num_towers' must be an int; got str"):
            Capabilities(num_towers="2")

    @given(st.integers(1, 8), st.integers(1, 4))
    def test_data_parallel_iff_several_towers(self, towers, processes):
        """A step is data-parallel exactly when it trains on more than one batch."""
        caps = Capabilities(num_towers=towers, processes=processes)
        assert caps.total_towers == towers * processes
        assert caps.is_data_parallel == (towers * processes > 1)

    def test_totals(self):
        """Towers over processes make a data-parallel step."""
        caps = Capabilities(num_towers=2, processes=2, launcher="horovod")
        assert (caps.total_towers, caps.is_data_parallel, caps.chief_by_role) == (4, True, False)
        assert Capabilities(launcher="tf-distributed").chief_by_role


class TestTrainerEntry:
    """`TrainerEntry`: a row of the table."""

    def test_fail_launcher_needs_a_path(self):
        """A multi-process row needs an importable factory path."""
        with pytest.raises(ValueError, match="'factory' must be a 'module:attr' string"):
            TrainerEntry(
                name="h", factory=lambda: None, capabilities=Capabilities(launcher="horovod")
            )

    def test_fail_name(self):
        """Names must fit a test id."""
        with pytest.raises(ValueError, match="without brackets or newlines"):
            TrainerEntry(name="a[b]", factory="m:f")

    def test_factory_path_of_a_function(self):
        """A module-level function can be imported back."""
        entry = TrainerEntry(name="p", factory=parse_target)
        assert entry.factory_path() == "towerkit.conformance._entries:parse_target"

    def test_factory_path_of_a_lambda(self):
        """A lambda cannot."""
        with pytest.raises(EntryError, match="cannot be imported by name"):
            TrainerEntry(name="l", factory=lambda: None).factory_path()

    def test_builtin_names_unique(self):
        """Each shipped trainer has one row."""
        names = [e.name for e in BUILTIN_ENTRIES]
        assert len(names) == len(set(names))


class TestTargets:
    """``--trainer MODULE:ATTR``."""

    def test_parse(self):
        """Dotted modules and attributes."""
        assert parse_target("a.b:c.d") == ("a.b", "c.d")

    def test_parse_fail(self):
        """The accepted forms are in the message."""
        with pytest.raises(EntryError, match="takes MODULE:ATTR"):
            parse_target("a.b")

    def test_missing_attribute(self):
        """An attribute that is not there is named."""
        with pytest.raises(EntryError, match="module 'example_trainers' has no attribute 'nope'"):
            entries_from("example_trainers:nope")

    def test_factory_with_capabilities(self):
        """A factory's attributes are its capabilities; its name is the row's."""
        (entry,) = entries_from("example_trainers:make_plain_trainer")
        assert entry.name == "make_plain_trainer"
        assert entry.capabilities.towers is False
        assert entry.builds_graph

    def test_entry_list(self):
        """A list of entries gives every row."""
        assert [e.name for e in entries_from("broken:ENTRIES")][:2] == [
            "HandLoopTrainer",
            "SkipsTriggerStep",
        ]

    def test_not_a_factory(self):
        """Other objects are rejected with their type."""
        with pytest.raises(EntryError, match="'broken:EXPECTED' is a dict"):
            entries_from("broken:EXPECTED")

    def test_takes_model(self):
        """More than one required argument is an error."""
        with pytest.raises(EntryError, match=r"requires \['a', 'b'\]"):
            takes_model(lambda a, b: None)

    def test_capabilities_fail(self):
        """Invalid declared capabilities are reported."""

        def make():
            return None

        make.variables = "mirrored"
        with pytest.raises(EntryError, match="capabilities declared on"):
            capabilities_of(make)


class TestSelect:
    """`select_entries` picks the rows to run."""

    rows = (TrainerEntry(name="A", factory="m:a"), TrainerEntry(name="B", factory="m:b"))

    def test_builtin_keyword(self):
        """'builtin' adds every built-in row; a module row is added after them."""
        got = select_entries(["builtin", "example_trainers:make_trainer"], self.rows)
        assert [e.name for e in got] == ["A", "B", "make_trainer"]

    def test_replace(self):
        """A later row with an earlier row's name replaces it."""
        got = select_entries(["A", "broken:ENTRIES", "B"], self.rows)
        assert [e.name for e in got][-1] == "B"
        assert len(got) == len({e.name for e in got})

    def test_unknown(self):
        """An unknown row is a clear error listing the built-in rows."""
        with pytest.raises(EntryError, match=r"names no built-in row \(they are \['A', 'B'\]"):
            select_entries(["C"], self.rows)
