"""The trigger kinds and the gated methods are one list each, and the shells follow them."""

import pytest
from test_periodic import run

from towerkit.callbacks import (
    Callback,
    EnableCallbackIf,
    EventKind,
    PeriodicTrigger,
)
from towerkit.callbacks._base import HOOK_METHODS
from towerkit.callbacks._timeline import DEFAULT_KINDS
from towerkit.callbacks.plumbing import GATE_KINDS, GATED_KINDS, TRIGGER_KINDS


class EveryHook(Callback):
    """Records each loop method it is called in, by kind."""

    def __init__(self):
        self.seen = set()

    def _before_train(self):
        self.seen.add(EventKind.BEFORE_TRAIN)

    def _before_epoch(self):
        self.seen.add(EventKind.BEFORE_EPOCH)

    def _after_epoch(self):
        self.seen.add(EventKind.AFTER_EPOCH)

    def _before_run(self, ctx):
        self.seen.add(EventKind.BEFORE_RUN)

    def _after_run(self, ctx, values):
        self.seen.add(EventKind.AFTER_RUN)

    def _trigger_step(self):
        self.seen.add(EventKind.TRIGGER_STEP)

    def _trigger_epoch(self):
        self.seen.add(EventKind.TRIGGER_EPOCH)

    def _after_train(self):
        self.seen.add(EventKind.AFTER_TRAIN)


@pytest.mark.parametrize("enabled", [False, True])
def test_enable_callback_if_gates_exactly_the_gated_kinds(enabled):
    """In a real loop, a closed gate silences exactly GATED_KINDS; an open one lets all run."""
    probe = EveryHook()
    run([EnableCallbackIf(probe, lambda _self: enabled)], steps=2, max_epoch=2)
    ungated = set(EventKind) - set(GATED_KINDS)
    assert probe.seen == (set(EventKind) if enabled else ungated)


def test_gated_lists_are_the_one_list():
    """The gated kinds are callback methods; the gate is evaluated at all but after_run; a
    wrapper reports the gated methods its callback has."""
    assert {f"_{k.value}" for k in GATED_KINDS} <= set(HOOK_METHODS)
    assert tuple(k for k in GATED_KINDS if k is not EventKind.AFTER_RUN) == GATE_KINDS
    assert EnableCallbackIf(EveryHook(), lambda _s: True).trigger_kinds == GATE_KINDS


def test_trigger_kinds_are_the_one_list():
    """PeriodicTrigger evaluates its record at TRIGGER_KINDS, a timeline entry by default too."""
    assert DEFAULT_KINDS is TRIGGER_KINDS
    assert PeriodicTrigger(EveryHook(), every_k_epochs=1).trigger_kinds == TRIGGER_KINDS
