"""The timeline tool reads the callbacks lib's own lists and builders: nothing to forget."""

from __future__ import annotations

import pytest

from towerkit.callbacks import EventKind
from towerkit.callbacks.plumbing import GATE_KINDS, TRIGGER_KINDS
from towerkit.tools import timeline as tool


def test_gated_methods_are_the_libs():
    """The tool offers the methods the lib gates, every one accepted, after_run refused."""
    assert tuple(k.value for k in GATE_KINDS) == tool.GATED_METHODS
    for kind in GATE_KINDS:
        entry, _ = tool.entry_from_table(
            {"name": "x", "type": "PeriodicCallback", "every_k_epochs": 1, "methods": [kind.value]}
        )
        assert entry.kinds == (kind,)
    with pytest.raises(ValueError, match=r"wrong entries: \['after_run'\]"):
        tool.entry_from_table(
            {"name": "x", "type": "PeriodicCallback", "every_k_epochs": 1, "methods": ["after_run"]}
        )


def test_trigger_kinds_are_the_libs():
    """A PeriodicTrigger entry is evaluated at the lib's trigger kinds."""
    entry, _ = tool.entry_from_table({"name": "t", "every_k_epochs": 1})
    assert entry.kinds == TRIGGER_KINDS
    assert EventKind.BEFORE_TRAIN in entry.kinds
