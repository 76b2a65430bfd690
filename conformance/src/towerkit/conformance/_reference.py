"""The reference model: what each recorder of a scenario must see, from the pure loop semantics.

Everything here is computed from `towerkit.callbacks.loop_events` (the documented
loop as a stream of events), the trigger records with `fires`, and the schedule
functions `value_at`/`value_in_effect`; nothing runs TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from towerkit.callbacks import (
    AtLastStep,
    EpochMultiple,
    EventKind,
    EveryK,
    GlobalStepMultiple,
    LoopEvent,
    StatMonitorState,
    Trigger,
    advance,
    any_of,
    fires,
    piecewise_schedule,
    value_at,
    value_in_effect,
)
from towerkit.conformance._scenario import (
    CLOCK,
    BestSaverSpec,
    EnableIfSpec,
    FuncSpec,
    LoopSpec,
    PeriodicCallbackSpec,
    PeriodicTriggerSpec,
    ProbeSpec,
    SaverSpec,
    Scenario,
    ScheduleSpec,
    StatMonitorSpec,
    StatSpec,
)
from towerkit.conformance._trace import TraceEvent

GATED = frozenset(
    {
        EventKind.BEFORE_EPOCH,
        EventKind.AFTER_EPOCH,
        EventKind.BEFORE_RUN,
        EventKind.AFTER_RUN,
        EventKind.TRIGGER_STEP,
        EventKind.TRIGGER_EPOCH,
    }
)
"""The methods `EnableCallbackIf` and `PeriodicCallback` gate; the others always run."""

TRIGGER_KINDS = frozenset({EventKind.BEFORE_TRAIN, EventKind.TRIGGER_STEP, EventKind.TRIGGER_EPOCH})
"""Where a `PeriodicTrigger` may call ``trigger()``."""

READ_KINDS = (EventKind.BEFORE_TRAIN, EventKind.TRIGGER_STEP, EventKind.TRIGGER_EPOCH)
"""Where the suite's readers record a hyper-parameter's value (after the setter acted)."""

ValueTrace = tuple[tuple[TraceEvent, float], ...]


def full_stream(loop: LoopSpec, runs_per_step: int) -> list[LoopEvent]:
    """Every event of the run when nothing stops it.

    Args:
        loop: the loop parameters.
        runs_per_step: ``hooked_sess.run`` calls per step of the trainer's own
            ``run_step`` (multiplied by ``loop.run_step_repeats``).

    Examples:
        >>> len(full_stream(LoopSpec(max_epoch=1, steps_per_epoch=2), 1))
        11
        >>> len(full_stream(LoopSpec(max_epoch=1, steps_per_epoch=2, run_step_repeats=0), 1))
        7
    """
    return list(
        loop.bounds.events(
            start_global_step=loop.start_global_step,
            runs_per_step=runs_per_step * loop.run_step_repeats,
            steps_per_execution=loop.steps_per_execution,
        )
    )


def stop_index(events: Sequence[LoopEvent], stop_at: tuple[EventKind, int] | None) -> int | None:
    """Index in `events` of the nth (0-based) event of a kind; None when there is none.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=1, steps_per_epoch=2), 1)
        >>> stop_index(events, (EventKind.TRIGGER_STEP, 1))
        7
        >>> stop_index(events, (EventKind.TRIGGER_STEP, 5)) is None
        True
    """
    if stop_at is None:
        return None
    kind, nth = stop_at
    seen = -1
    for i, e in enumerate(events):
        if e.kind is kind:
            seen += 1
            if seen == nth:
                return i
    return None


def seen_by(events: Sequence[LoopEvent], stop: int | None, *, first: bool) -> list[LoopEvent]:
    """The events a callback sees when the first callback raises `StopTraining` at ``events[stop]``.

    `StopTraining` ends the loop at once: the first callback saw the raising event,
    the callbacks after it did not; everyone's ``after_train`` then runs, at the
    position where the loop stopped. Raised in ``after_epoch`` or ``trigger_epoch``, it
    ends the loop once the epoch is whole: every callback sees that epoch's
    ``trigger_epoch`` first.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=1, steps_per_epoch=1), 1)
        >>> [e.kind.value for e in seen_by(events, 2, first=True)]
        ['before_train', 'before_epoch', 'before_run', 'after_train']
        >>> [e.kind.value for e in seen_by(events, 2, first=False)]
        ['before_train', 'before_epoch', 'after_train']
        >>> [e.kind.value for e in seen_by(events, 5, first=False)][-3:]
        ['after_epoch', 'trigger_epoch', 'after_train']
    """
    if stop is None:
        return list(events)
    if events[stop].kind in (EventKind.AFTER_EPOCH, EventKind.TRIGGER_EPOCH):
        # a stop at an epoch's end waits until the epoch is whole: everyone sees its trigger_epoch
        end = next(i for i in range(stop, len(events)) if events[i].kind is EventKind.TRIGGER_EPOCH)
        return [*events[: end + 1], LoopEvent(EventKind.AFTER_TRAIN, events[end].position)]
    kept = list(events[: stop + 1] if first else events[:stop])
    return [*kept, LoopEvent(EventKind.AFTER_TRAIN, events[stop].position)]


def periodic_trigger_calls(
    events: Sequence[LoopEvent], spec: PeriodicTriggerSpec
) -> tuple[TraceEvent, ...]:
    """Where ``PeriodicTrigger`` calls the wrapped callback's ``trigger()``.

    Spec 003 (PeriodicTrigger): when ``global_step % every_k_steps == 0`` (after a
    step), when ``epoch_num % every_k_epochs == 0`` (after an epoch), and in
    ``before_train`` when asked.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=2, steps_per_epoch=2), 1)
        >>> spec = PeriodicTriggerSpec(name="t", every_k_steps=3, before_train=True)
        >>> [str(e) for e in periodic_trigger_calls(events, spec)]
        ['before_train (epoch_num 0, local_step -1, global_step 0)', 'trigger_step (epoch_num 2, local_step 0, global_step 3)']
    """
    record = EveryK(
        steps=spec.every_k_steps, epochs=spec.every_k_epochs, before_train=spec.before_train
    )
    return tuple(
        TraceEvent.from_loop_event(e)
        for e in events
        if e.kind in TRIGGER_KINDS and fires(record, e)
    )


def periodic_callback_record(spec: PeriodicCallbackSpec) -> Trigger:
    """When ``PeriodicCallback`` enables the wrapped callback, as a trigger record.

    Spec 003 (PeriodicCallback): ``global_step % every_k_steps == 0`` or ``epoch_num %
    every_k_epochs == 0``, and with ``every_k_epochs`` also when the last step
    finishes (``epoch_num == max_epoch and local_step == steps_per_epoch - 1``).

    Examples:
        >>> periodic_callback_record(PeriodicCallbackSpec(name="p", every_k_steps=4))
        AnyOf(triggers=(GlobalStepMultiple(k=4),))
    """
    parts: list[Trigger] = []
    if spec.every_k_steps is not None:
        parts.append(GlobalStepMultiple(spec.every_k_steps))
    if spec.every_k_epochs is not None:
        parts += [EpochMultiple(spec.every_k_epochs), AtLastStep()]
    return any_of(*parts)


def gated_trace(events: Sequence[LoopEvent], record: Trigger) -> tuple[TraceEvent, ...]:
    """What a recorder wrapped by ``EnableCallbackIf`` (with a trigger record) sees.

    The gated methods run when the record fires at their event, except
    ``after_run``, which runs exactly when the ``before_run`` before it ran (spec 003,
    EnableCallbackIf: with before/after_run, the predicate is evaluated only in
    before_run). ``before_train`` and ``after_train`` always run.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=1, steps_per_epoch=2), 1)
        >>> [(e.kind.value, e.global_step) for e in gated_trace(events, GlobalStepMultiple(2))][2:5]
        [('before_run', 0), ('after_run', 1), ('trigger_step', 2)]
    """
    out = []
    run_enabled = False
    for e in events:
        if e.kind is EventKind.AFTER_RUN:
            keep = run_enabled
        elif e.kind in GATED:
            keep = fires(record, e)
            if e.kind is EventKind.BEFORE_RUN:
                run_enabled = keep
        else:
            keep = True
        if keep:
            out.append(TraceEvent.from_loop_event(e))
    return tuple(out)


def predicate_calls(events: Sequence[LoopEvent]) -> tuple[TraceEvent, ...]:
    """Where ``EnableCallbackIf`` evaluates its predicate: at each gated method but ``after_run``.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=1, steps_per_epoch=1), 1)
        >>> [e.kind.value for e in predicate_calls(events)]
        ['before_epoch', 'before_run', 'trigger_step', 'after_epoch', 'trigger_epoch']
    """
    return tuple(
        TraceEvent.from_loop_event(e)
        for e in events
        if e.kind in GATED and e.kind is not EventKind.AFTER_RUN
    )


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def scheduled_values(events: Sequence[LoopEvent], spec: ScheduleSpec) -> ValueTrace:
    """The values a reader after ``ScheduledHyperParamSetter`` sees, at each read event.

    Spec 003 (ScheduledHyperParamSetter): a pair ``(p, v)`` sets ``v`` after the
    completion of epoch ``p`` (global step ``p`` when step-based; ``p = 0`` before the
    first epoch); with ``interp='linear'`` every trigger between two points sets the
    interpolation, without extrapolation; at the start, ``set_at_beginning`` sets the
    value the schedule implies at the starting point even off a scheduled point.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=3, steps_per_epoch=1), 1)
        >>> spec = ScheduleSpec(name="lr", points=[(0, 1.0), (2, 0.5)], initial=9.0)
        >>> [(e.kind.value, e.epoch_num, v) for e, v in scheduled_values(events, spec)]
        [('before_train', 0, 1.0), ('trigger_step', 1, 1.0), ('trigger_epoch', 1, 1.0), ('trigger_step', 2, 1.0), ('trigger_epoch', 2, 0.5), ('trigger_step', 3, 0.5), ('trigger_epoch', 3, 0.5)]
    """
    schedule = piecewise_schedule(
        spec.points, interp=spec.interp, unit="step" if spec.step_based else "epoch"
    )
    value = spec.initial
    out = []
    for e in events:
        if e.kind not in READ_KINDS:
            continue
        point = e.global_step if spec.step_based else e.epoch_num
        new: float | None = None
        if e.kind is EventKind.BEFORE_TRAIN:
            pick = value_in_effect if spec.set_at_beginning else value_at
            new = pick(schedule, point)
        elif (e.kind is EventKind.TRIGGER_STEP) == spec.step_based:
            new = value_at(schedule, point)
        if new is not None:
            value = new
        out.append((TraceEvent.from_loop_event(e), value))
    return tuple(out)


def func_values(events: Sequence[LoopEvent], spec: FuncSpec) -> ValueTrace:
    """The values a reader after ``HyperParamSetterWithFunc`` sees.

    Spec 003 (HyperParamSetterWithFunc): on each trigger (after every epoch) the value
    becomes ``func(epoch_num, old_value)``, ``epoch_num`` being the number of epochs
    finished.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=4, steps_per_epoch=1), 1)
        >>> spec = FuncSpec(name="lr", factor=0.5, every=2, initial=1.0)
        >>> [v for e, v in func_values(events, spec) if e.kind.value == "trigger_epoch"]
        [1.0, 0.5, 0.5, 0.25]
    """
    value = spec.initial
    out = []
    for e in events:
        if e.kind not in READ_KINDS:
            continue
        if e.kind is EventKind.TRIGGER_EPOCH and e.epoch_num % spec.every == 0:
            value = value * spec.factor
        out.append((TraceEvent.from_loop_event(e), value))
    return tuple(out)


def stat_monitor_values(
    events: Sequence[LoopEvent], spec: StatMonitorSpec, stat: StatSpec
) -> ValueTrace:
    """The values a reader after ``StatMonitorParamSetter`` sees, the statistic put by `stat`.

    Spec 003 (StatMonitorParamSetter): on each trigger it takes the latest value of
    the statistic; when the statistic stopped improving by `threshold` over the last
    `last_k` observations, the value becomes ``value_func(old)`` (the decision is the
    pure ``advance``/``should_change`` of the callbacks lib).

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=5, steps_per_epoch=1), 1)
        >>> stat = StatSpec(name="err", values=[3, 2, 2, 2, 2])
        >>> spec = StatMonitorSpec(name="lr", stat="err", last_k=2, factor=0.1, initial=1.0)
        >>> [v for e, v in stat_monitor_values(events, spec, stat) if e.kind.value == "trigger_epoch"]
        [1.0, 1.0, 1.0, 0.1, 0.1]
    """
    value = spec.initial
    state = StatMonitorState()
    out = []
    for e in events:
        if e.kind not in READ_KINDS:
            continue
        if e.kind is EventKind.TRIGGER_EPOCH:
            state, change = advance(
                state,
                e.global_step,
                stat.value_in(e.epoch_num),
                threshold=spec.threshold,
                last_k=spec.last_k,
                reverse=spec.reverse,
            )
            if change:
                value = value * spec.factor
        out.append((TraceEvent.from_loop_event(e), value))
    return tuple(out)


@attrs.frozen(kw_only=True)
class ExpectedRun:
    """What every recorder of a scenario must see.

    Attributes:
        traces: ``(recorder name, events)`` pairs: the suite's first recorder
            (``"loop"``), probes, the callbacks wrapped by ``PeriodicCallback`` and
            ``EnableCallbackIf``, the ``trigger()`` calls of ``PeriodicTrigger``, and
            the predicate calls of ``EnableCallbackIf`` (``"<name>.pred"``).
        values: ``(reader name, ((event, value), ...))`` pairs, one per hyper-parameter
            setter; ``"loop.global_step"`` is the TensorFlow global step variable read
            in each ``trigger_epoch``.
        saved_steps: the global steps at which ``ModelSaver`` saves, in order.
    """

    traces: tuple[tuple[str, tuple[TraceEvent, ...]], ...]
    values: tuple[tuple[str, ValueTrace], ...]
    saved_steps: tuple[int, ...] = ()

    def trace(self, name: str) -> tuple[TraceEvent, ...]:
        """The events recorder `name` must see."""
        return dict(self.traces)[name]

    def value_trace(self, name: str) -> ValueTrace:
        """The values reader `name` must see."""
        return dict(self.values)[name]


def expected_run(
    scenario: Scenario, *, runs_per_step: int = 1, is_chief: bool = True
) -> ExpectedRun:
    """What each recorder of `scenario` must see on a trainer that follows the spec.

    Args:
        scenario: the run.
        runs_per_step: ``hooked_sess.run`` calls made by one call of the trainer's
            ``run_step`` (1 for the shipped trainers).
        is_chief: whether the process is the chief (``chief_only`` callbacks run only there).

    Examples:
        >>> from towerkit.conformance._scenario import LoopSpec, Scenario
        >>> run = expected_run(Scenario(name="s", loop=LoopSpec(max_epoch=1, steps_per_epoch=1)))
        >>> [e.kind.value for e in run.trace("loop")]
        ['before_train', 'before_epoch', 'before_run', 'after_run', 'trigger_step', 'after_epoch', 'trigger_epoch', 'after_train']
        >>> [v for _, v in run.value_trace("loop.global_step")]
        [1.0]
    """
    events = full_stream(scenario.loop, runs_per_step)
    stop = stop_index(events, scenario.stop_at)
    first = seen_by(events, stop, first=True)
    later = seen_by(events, stop, first=False)
    traces: list[tuple[str, tuple[TraceEvent, ...]]] = [
        (CLOCK, tuple(TraceEvent.from_loop_event(e) for e in first))
    ]
    values: list[tuple[str, ValueTrace]] = [
        (
            f"{CLOCK}.global_step",
            tuple(
                (TraceEvent.from_loop_event(e), float(e.global_step))
                for e in first
                if e.kind is EventKind.TRIGGER_EPOCH
            ),
        )
    ]
    saved: list[int] = []
    stats = {s.name: s for s in scenario.callbacks if isinstance(s, StatSpec)}
    for spec in scenario.callbacks:
        if isinstance(spec, ProbeSpec):
            seen = (
                ()
                if (spec.chief_only and not is_chief)
                else tuple(TraceEvent.from_loop_event(e) for e in later)
            )
            traces.append((spec.name, seen))
        elif isinstance(spec, PeriodicTriggerSpec):
            traces.append((spec.name, periodic_trigger_calls(later, spec)))
        elif isinstance(spec, PeriodicCallbackSpec):
            traces.append((spec.name, gated_trace(later, periodic_callback_record(spec))))
        elif isinstance(spec, EnableIfSpec):
            record = _remainder_record(spec)
            traces.append((spec.name, gated_trace(later, record)))
            traces.append((f"{spec.name}.pred", predicate_calls(later)))
        elif isinstance(spec, ScheduleSpec):
            values.append((spec.name, scheduled_values(later, spec)))
        elif isinstance(spec, FuncSpec):
            values.append((spec.name, func_values(later, spec)))
        elif isinstance(spec, StatMonitorSpec):
            values.append((spec.name, stat_monitor_values(later, spec, stats[spec.stat])))
        elif isinstance(spec, SaverSpec) and is_chief:
            saved = saver_steps(later, spec)
    return ExpectedRun(traces=tuple(traces), values=tuple(values), saved_steps=tuple(saved))


@attrs.frozen
class _Remainder(Trigger):
    """True when the event's global step is ``remainder`` modulo ``modulus``."""

    modulus: int
    remainder: int

    def _fires(self, event: LoopEvent) -> bool:
        return event.global_step % self.modulus == self.remainder


def _remainder_record(spec: EnableIfSpec) -> Trigger:
    return _Remainder(spec.modulus, spec.remainder)


def saver_steps(events: Sequence[LoopEvent], spec: SaverSpec) -> list[int]:
    """The global steps at which ``ModelSaver`` saves, in order, on the suite's clock.

    It saves in every ``trigger_epoch``; with ``every_n_minutes``, also in the
    ``trigger_step`` at which that many minutes (``trigger_step`` events of the run,
    one minute each) have passed since its last save or the start. A save at a step
    already saved is skipped (and does not restart the count).

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=2, steps_per_epoch=5), 1)
        >>> saver_steps(events, SaverSpec())
        [5, 10]
        >>> saver_steps(events, SaverSpec(every_n_minutes=2))
        [2, 4, 5, 7, 9, 10]
    """
    saved: list[int] = []
    minutes, last = 0, 0
    for e in events:
        due = e.kind is EventKind.TRIGGER_EPOCH
        if e.kind is EventKind.TRIGGER_STEP:
            minutes += 1
            if spec.every_n_minutes is not None and minutes - last >= spec.every_n_minutes:
                due, last = True, minutes
        if due and (not saved or saved[-1] != e.global_step):
            saved.append(e.global_step)
            last = minutes
    return saved


def kept_checkpoints(saved_steps: Sequence[int], max_to_keep: int) -> tuple[int, ...]:
    """The steps whose checkpoints ``ModelSaver(max_to_keep)`` keeps (0 keeps all).

    Examples:
        >>> kept_checkpoints([3, 6, 9], 2)
        (6, 9)
        >>> kept_checkpoints([3, 6, 9], 0)
        (3, 6, 9)
    """
    steps = tuple(saved_steps)
    return steps if max_to_keep == 0 else steps[-max_to_keep:]


def best_epoch_step(events: Sequence[LoopEvent], stat: StatSpec, spec: BestSaverSpec) -> int | None:
    """The global step of the checkpoint ``MinSaver``/``MaxSaver`` keeps a copy of.

    The first epoch with the lowest (highest, for ``MaxSaver``) value of the statistic
    wins; the copy is of the checkpoint saved in that epoch's ``trigger_epoch``.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=3, steps_per_epoch=2), 1)
        >>> stat = StatSpec(name="err", values=[3, 1, 1])
        >>> best_epoch_step(events, stat, BestSaverSpec(name="m", stat="err"))
        4
        >>> best_epoch_step(events, stat, BestSaverSpec(name="m", stat="err", reverse=True))
        2
    """
    best: tuple[float, int] | None = None
    for e in events:
        if e.kind is not EventKind.TRIGGER_EPOCH:
            continue
        v = stat.value_in(e.epoch_num)
        if best is None or (v > best[0] if spec.reverse else v < best[0]):
            best = (v, e.global_step)
    return None if best is None else best[1]


def best_k_steps(events: Sequence[LoopEvent], stat: StatSpec, spec: BestSaverSpec) -> list[int]:
    """The global steps of the checkpoints ``MinSaver(top_k=k)`` keeps, best first.

    Epochs rank by their statistic (lowest first; highest for ``MaxSaver``), equal values
    by their epoch (the earlier first); the first k are kept.

    Examples:
        >>> events = full_stream(LoopSpec(max_epoch=4, steps_per_epoch=2), 1)
        >>> stat = StatSpec(name="err", values=[3, 1, 2, 1])
        >>> best_k_steps(events, stat, BestSaverSpec(name="m", stat="err", top_k=3))
        [4, 8, 6]
        >>> best_k_steps(events, stat, BestSaverSpec(name="m", stat="err", reverse=True, top_k=2))
        [2, 6]
    """
    ends = [
        (stat.value_in(e.epoch_num), e.global_step)
        for e in events
        if e.kind is EventKind.TRIGGER_EPOCH
    ]
    ranked = sorted(ends, key=lambda p: (-p[0] if spec.reverse else p[0], p[1]))
    return [step for _, step in ranked[: spec.top_k]]


def values_close(a: float, b: float) -> bool:
    """Whether two parameter values are equal up to float32 rounding.

    Examples:
        >>> values_close(0.1, 0.10000000149011612), values_close(0.1, 0.2)
        (True, False)
    """
    return _close(float(a), float(b))
