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


def _shell_classes():
    """Every callback class of the lib that describes its firing by a trigger record."""
    import towerkit.callbacks as cb

    out = {}
    for name in cb.__all__:
        obj = getattr(cb, name)
        if isinstance(obj, type) and issubclass(obj, cb.Callback) and "trigger_record" in dir(obj):
            out[name] = obj
    return out


def _acting_in(methods):
    """A callback that acts in exactly `methods` (and in trigger())."""
    from towerkit.callbacks import Callback

    hooks = {f"_{m}" for m in methods}

    class Acts(Callback):
        def _trigger(self):
            pass

        def has_hook(self, method):
            return method in hooks or (method == "_trigger" and not hooks)

        def __str__(self):
            return f"Acts({sorted(hooks)})"

    return Acts()


def _shell(kind, args):
    """The lib's shell of `kind` built from the same arguments as a description table."""
    import towerkit.callbacks as cb

    args = dict(args)
    if kind == "Callback":
        return _acting_in(["trigger_epoch"])
    if kind == "PeriodicTrigger":
        return cb.PeriodicTrigger(_acting_in([]), **args)
    if kind == "PeriodicCallback":
        return cb.PeriodicCallback(_acting_in(args.pop("methods", ["trigger_epoch"])), **args)
    if kind == "EnableCallbackIf":
        return cb.EnableCallbackIf(_acting_in(args.pop("methods", ["trigger_epoch"])), **args)
    return cb.ScheduledHyperParamSetter("learning_rate", **args)


def _samples():
    from towerkit.callbacks import AtLastStep, EveryK, any_of

    return {
        "Callback": [{}],
        "PeriodicTrigger": [
            {"every_k_epochs": 2},
            {"every_k_steps": 3, "before_train": True},
            {"every_k_steps": 5, "every_k_epochs": 1},
        ],
        "PeriodicCallback": [
            {"every_k_epochs": 2},
            {"every_k_steps": 4, "methods": ["before_run", "trigger_step"]},
            {"every_k_steps": 2, "every_k_epochs": 3, "methods": ["before_epoch", "after_epoch"]},
        ],
        "EnableCallbackIf": [
            {"pred": EveryK(epochs=3)},
            {"pred": any_of(EveryK(steps=2), AtLastStep()), "methods": ["trigger_step"]},
        ],
        "ScheduledHyperParamSetter": [
            {"schedule": [[0, 0.1], [3, 0.01]]},
            {"schedule": [[2, 1.0], [6, 3.0]], "interp": "linear", "set_at_beginning": False},
            {"schedule": [[10, 0.5]], "step_based": True},
        ],
    }


def test_every_trigger_shell_is_described_by_the_tool():
    """Each shell of the lib with a trigger record is a type of the tool, and the tool's
    entry equals what the lib reads from the shell itself (record and event kinds)."""
    from towerkit.callbacks.plumbing import timeline_entry

    shells = _shell_classes()
    assert {"PeriodicTrigger", "PeriodicCallback", "ScheduledHyperParamSetter"} <= set(shells)
    missing = sorted(set(shells) - set(tool.CALLBACK_TYPES))
    assert not missing, f"shells the timeline tool cannot describe: {missing}"
    samples = _samples()
    assert set(samples) == set(tool.CALLBACK_TYPES)
    for kind in tool.CALLBACK_TYPES:
        for args in samples[kind]:
            entry, got_kind = tool.entry_from_table({"name": "x", "type": kind, **args})
            lib = timeline_entry(_shell(kind, args))
            assert got_kind == kind
            assert (entry.trigger, entry.kinds) == (lib.trigger, lib.kinds), (kind, args)


def test_every_trigger_record_is_in_a_python_description():
    """Every trigger record class the lib exports can be used in a Python description."""
    import towerkit.callbacks as cb

    records = {
        name
        for name in cb.__all__
        if isinstance(getattr(cb, name), type) and issubclass(getattr(cb, name), cb.Trigger)
    }
    assert {"EveryK", "OnSchedule", "AnyOf"} <= records
    namespace = tool._python_namespace()
    missing = sorted(records - set(namespace))
    assert not missing, f"trigger records a Python description does not see: {missing}"
    for name in records:
        assert namespace[name] is getattr(cb, name)
