"""Hypothesis strategies of the suite: loop parameters, callback sets, trigger periods, schedules.

They draw `Scenario` records; the property checks run each one with a trainer and
compare what its recorders saw with the reference model. Reuse them to test your
own callbacks or trainers.
"""

from __future__ import annotations

from hypothesis import strategies as st

from towerkit.callbacks import EventKind
from towerkit.conformance._scenario import (
    CallbackSpec,
    EnableIfSpec,
    FuncSpec,
    LoopSpec,
    PeriodicCallbackSpec,
    PeriodicTriggerSpec,
    ProbeSpec,
    Scenario,
    ScheduleSpec,
    StatMonitorSpec,
    StatSpec,
)

__all__ = [
    "loop_scenarios",
    "loop_specs",
    "schedule_points",
    "stop_points",
    "trigger_scenarios",
]

STOP_KINDS = tuple(k for k in EventKind if k is not EventKind.AFTER_TRAIN)
"""The methods a callback may raise ``StopTraining`` from (``after_train`` ends training anyway)."""

periods = st.integers(1, 4)
"""Trigger periods, in steps or epochs."""

values = st.integers(1, 40).map(lambda k: k / 8)
"""Hyper-parameter values, exact in float32."""


@st.composite
def loop_specs(
    draw: st.DrawFn,
    *,
    max_epochs: int = 3,
    max_steps: int = 3,
    empty: bool = False,
    restored: bool = True,
    repeats: bool = False,
) -> LoopSpec:
    """Loop parameters: a starting epoch (1-3), a few epochs of a few steps each.

    Args:
        draw: the draw function `st.composite` passes in.
        max_epochs: epochs at most.
        max_steps: steps per epoch at most.
        empty: allow runs of no epoch (``max_epoch == starting_epoch - 1``).
        restored: sometimes start from a restored global step.
        repeats: sometimes make each step call ``run_step`` 0 or 2 times.
    """
    starting = draw(st.integers(1, 3))
    epochs = draw(st.integers(0 if empty else 1, max_epochs))
    steps = draw(st.integers(1, max_steps))
    start_gs = draw(st.sampled_from([0, 0, 4, 7])) if restored else 0
    rep = draw(st.sampled_from([1, 1, 0, 2])) if repeats else 1
    return LoopSpec(
        starting_epoch=starting,
        max_epoch=starting - 1 + epochs,
        steps_per_epoch=steps,
        start_global_step=start_gs,
        run_step_repeats=rep,
    )


def stop_points() -> st.SearchStrategy[tuple[EventKind, int] | None]:
    """Nothing, or ``(method, nth)``: raise ``StopTraining`` in the nth call of a method."""
    return st.none() | st.tuples(st.sampled_from(STOP_KINDS), st.integers(0, 4))


@st.composite
def loop_scenarios(draw: st.DrawFn, *, name: str = "loop-property") -> Scenario:
    """A run of the bare loop: loop parameters, a stop point, probes, plain session runs."""
    loop = draw(loop_specs(empty=True, repeats=True))
    chief_flags = draw(st.lists(st.booleans(), max_size=2))
    return Scenario(
        name=name,
        loop=loop,
        stop_at=draw(stop_points()),
        plain_runs=draw(st.booleans()),
        callbacks=[ProbeSpec(name=f"probe{i}", chief_only=c) for i, c in enumerate(chief_flags)],
    )


@st.composite
def schedule_points(draw: st.DrawFn, *, max_point: int = 6) -> list[tuple[int, float]]:
    """1 to 3 (point, value) pairs, points strictly increasing in ``0..max_point``."""
    points = draw(st.lists(st.integers(0, max_point), min_size=1, max_size=3, unique=True))
    return [(p, draw(values)) for p in sorted(points)]


@st.composite
def trigger_scenarios(draw: st.DrawFn, *, name: str = "triggers-property") -> Scenario:
    """A run with a drawn set of triggers and hyper-parameter setters (at least one)."""
    loop = draw(loop_specs(max_epochs=4))
    specs: list[CallbackSpec] = []
    if draw(st.booleans()):
        steps, epochs = draw(st.none() | periods), draw(st.none() | periods)
        before = draw(st.booleans()) or (steps is None and epochs is None)
        specs.append(
            PeriodicTriggerSpec(
                name="trigger", every_k_steps=steps, every_k_epochs=epochs, before_train=before
            )
        )
    if draw(st.booleans()):
        steps, epochs = draw(st.none() | periods), draw(st.none() | periods)
        if steps is None and epochs is None:
            epochs = 1
        specs.append(
            PeriodicCallbackSpec(name="periodic", every_k_steps=steps, every_k_epochs=epochs)
        )
    if draw(st.booleans()):
        modulus = draw(st.integers(1, 3))
        specs.append(
            EnableIfSpec(
                name="enabled", modulus=modulus, remainder=draw(st.integers(0, modulus - 1))
            )
        )
    if draw(st.booleans()):
        step_based = draw(st.booleans())
        specs.append(
            ScheduleSpec(
                name="scheduled",
                points=draw(schedule_points(max_point=12 if step_based else 6)),
                interp=draw(st.sampled_from([None, "linear"])),
                step_based=step_based,
                set_at_beginning=draw(st.booleans()),
                initial=draw(values),
            )
        )
    if draw(st.booleans()):
        specs.append(FuncSpec(name="by_func", factor=0.5, every=draw(periods)))
    if draw(st.booleans()) or not specs:
        stat = StatSpec(name="stat", values=draw(st.lists(values, min_size=1, max_size=4)))
        specs += [
            stat,
            StatMonitorSpec(
                name="on_plateau",
                stat="stat",
                threshold=draw(st.sampled_from([0.0, 0.25])),
                last_k=draw(st.integers(1, 2)),
                reverse=draw(st.booleans()),
            ),
        ]
    return Scenario(name=name, loop=loop, callbacks=specs)
