"""towerkit.callbacks: callbacks, monitors, hyper-parameter setters, schedules and triggers.

The lib has two layers. The functional core (the loop's event stream, triggers,
schedules, stat-monitor decisions, inference statistics and the timeline) needs only
attrs and NumPy. The callbacks, monitors and hooks (the shells over that core) need
TensorFlow. Every public name is declared once, in ``__init__.pyi`` beside this file,
as an import from the module that defines it; type checkers read that stub, and at run
time each name's module is imported the first time the name is looked up
(``towerkit.callbacks.ModelSaver``, ``from towerkit.callbacks import ModelSaver``), so
a program that uses only the core (the ``timeline`` tool) runs without TensorFlow.
"""

import importlib
import warnings

from towerkit.callbacks import _lazy

_PUBLIC = _lazy.LazyNames(__name__, __file__)
__all__ = _PUBLIC.names

_MOVED = (
    "check_steps_per_execution",
    "coarse_step_faults",
    "periodic_record",
    "stop_process_group",
    "timeline_entry",
    "trainer_event",
)
"""Plumbing moved to `towerkit.callbacks.plumbing`: still found here, with a
DeprecationWarning, for one release (see CHANGELOG.md)."""


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use (PEP 562)."""
    if name in _MOVED:
        warnings.warn(
            f"towerkit.callbacks.{name} moved to towerkit.callbacks.plumbing (plumbing for "
            "towerkit's own libs, no stability promise); the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"{__name__}.plumbing"), name)
    return _PUBLIC.load(name)


def __dir__() -> list[str]:
    return _PUBLIC.listing()
