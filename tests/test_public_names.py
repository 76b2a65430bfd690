"""Every lib's public names (its ``__all__``) are the recorded set; a change shows in its changelog.

``tests/public_names.json`` records each lib's ``__all__``. A change to a lib's public
names fails here until the record is updated with it, in the same commit as the
lib's changelog entry that tells users: moving modules inside a lib (the trainers'
``inputs/`` and ``parallel/``) changed none.
"""

from __future__ import annotations

import importlib
import json

import pytest
from example_modules import ROOT

RECORD = json.loads((ROOT / "tests" / "public_names.json").read_text())

RENOVATION_CHANGES = {
    "callbacks": {
        "removed": [
            "check_steps_per_execution",
            "coarse_step_faults",
            "periodic_record",
            "stop_process_group",
            "timeline_entry",
            "trainer_event",
        ],
        "added": ["StatMonitorRule"],
    },
}
"""What the renovation changed in the public names, against the names before it."""


@pytest.mark.parametrize("lib", sorted(RECORD))
def test_public_names_as_recorded(lib):
    """``towerkit.<lib>.__all__`` is the recorded set, and each name imports."""
    module = importlib.import_module(f"towerkit.{lib}")
    names = set(module.__all__)
    assert names - set(RECORD[lib]) == set(), (
        "new public names: record them, and say so in the changelog"
    )
    assert set(RECORD[lib]) - names == set(), (
        "public names gone: record it, and say so in the changelog"
    )
    assert len(module.__all__) == len(names), "a name listed twice"
    missing = [n for n in sorted(names) if n != "__version__" and not hasattr(module, n)]
    assert missing == []


@pytest.mark.parametrize("lib", sorted(RENOVATION_CHANGES))
def test_changes_in_the_changelog(lib):
    """Each name the renovation added or removed is named in the lib's changelog."""
    changelog = (ROOT / "libs" / lib / "CHANGELOG.md").read_text()
    changed = RENOVATION_CHANGES[lib]
    assert set(changed["removed"]).isdisjoint(RECORD[lib])
    assert set(changed["added"]) <= set(RECORD[lib])
    unnamed = [n for n in changed["removed"] + changed["added"] if f"`{n}`" not in changelog]
    assert unnamed == []
