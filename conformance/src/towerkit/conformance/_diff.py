"""Explain how an observed trace breaks the reference: the first difference, the field, the rule."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from towerkit.callbacks import EventKind
from towerkit.conformance._reference import values_close
from towerkit.conformance._trace import TraceEvent

SEEDS = {
    "trainers": "spec 000 (tensorpack.train)",
    "loop": "spec 002 (Understand Trainer)",
    "callbacks": "spec 003 (tensorpack.callbacks)",
}
"""How messages cite the specification: tensorpack's documentation pages, by number and title."""

KIND_RULES: dict[EventKind, str] = {
    EventKind.BEFORE_TRAIN: (
        "before_train runs once, once the session is initialized and before the first "
        f"epoch [{SEEDS['callbacks']}, Callback._before_train]"
    ),
    EventKind.BEFORE_EPOCH: (
        "before_epoch runs right before each epoch; epochs run from starting_epoch to "
        f"max_epoch inclusive [{SEEDS['loop']}, the loop; {SEEDS['trainers']}, main_loop]"
    ),
    EventKind.BEFORE_RUN: (
        "before_run runs before every hooked_sess.run call, and only hooked_sess.run "
        f"triggers it [{SEEDS['callbacks']}, Callback._before_run; {SEEDS['loop']}, Write a Trainer]"
    ),
    EventKind.AFTER_RUN: (
        "after_run runs after every hooked_sess.run call, and only hooked_sess.run "
        f"triggers it [{SEEDS['callbacks']}, Callback._after_run; {SEEDS['loop']}, Write a Trainer]"
    ),
    EventKind.TRIGGER_STEP: (
        "trigger_step runs once after each run_step completes, steps_per_epoch times per "
        f"epoch [{SEEDS['callbacks']}, Callback._trigger_step]"
    ),
    EventKind.AFTER_EPOCH: (
        f"after_epoch runs right after the last step of each epoch [{SEEDS['callbacks']}, "
        "Callback._after_epoch]"
    ),
    EventKind.TRIGGER_EPOCH: (
        "trigger_epoch runs after the completion of every epoch, after after_epoch "
        f"[{SEEDS['callbacks']}, Callback._trigger_epoch]"
    ),
    EventKind.AFTER_TRAIN: (
        "after_train runs once when training ends, also when StopTraining ended it "
        f"[{SEEDS['callbacks']}, Callback._after_train; {SEEDS['trainers']}, StopTraining]"
    ),
}
"""For each callback method, the rule that says when the loop calls it."""

_EPOCH_RULE = (
    "epoch_num is the running epoch, from just before before_epoch until just after "
    f"trigger_epoch: in the trigger_epoch of epoch 3 it is 3 [{SEEDS['trainers']}, Trainer.epoch_num]"
)
_LOCAL_RULE = (
    "local_step is the 0-based index of the step in its epoch (the steps of the epoch "
    f"finished before it) [{SEEDS['trainers']}, Trainer.local_step; {SEEDS['loop']}, the loop]"
)
_GLOBAL_RULE = (
    "global_step is how many times hooked_sess.run has been called (restored ones "
    "included); it is incremented after each hooked_sess.run returns, and may move at "
    "another pace than local_step when run_step makes zero or several calls "
    f"[{SEEDS['trainers']}, Trainer.global_step]"
)


def describe_field(field: str, kind: EventKind) -> str:
    """What `field` (``epoch_num``, ``local_step``, ``global_step``) must be in method `kind`.

    Examples:
        >>> describe_field("local_step", EventKind.TRIGGER_STEP)
        'the 0-based index of the step in its epoch'
        >>> describe_field("global_step", EventKind.BEFORE_RUN)
        'the hooked_sess.run calls before the call about to run'
    """
    if field == "epoch_num":
        if kind is EventKind.BEFORE_TRAIN:
            return "starting_epoch - 1, before any epoch"
        if kind is EventKind.AFTER_TRAIN:
            return "the epoch running when training ended"
        return "the running epoch (1-based)"
    if field == "local_step":
        if kind in (EventKind.BEFORE_TRAIN, EventKind.BEFORE_EPOCH):
            return "-1, before the epoch's first step"
        if kind in (EventKind.AFTER_EPOCH, EventKind.TRIGGER_EPOCH):
            return "steps_per_epoch - 1, the index of the epoch's last step"
        if kind is EventKind.AFTER_TRAIN:
            return "the step running when training ended"
        return "the 0-based index of the step in its epoch"
    if kind is EventKind.BEFORE_RUN:
        return "the hooked_sess.run calls before the call about to run"
    return "the hooked_sess.run calls so far"


def field_rule(field: str) -> str:
    """The spec's rule for a counter.

    Examples:
        >>> field_rule("epoch_num").startswith("epoch_num is the running epoch")
        True
    """
    return {"epoch_num": _EPOCH_RULE, "local_step": _LOCAL_RULE, "global_step": _GLOBAL_RULE}[field]


def _context(events: Sequence[TraceEvent], index: int, width: int = 2) -> str:
    lo = max(0, index - width)
    hi = min(len(events), index + width + 1)
    lines = [f"      #{i}: {events[i]}" for i in range(lo, hi)]
    if hi < len(events):
        lines.append(f"      ... {len(events) - hi} more")
    return "\n".join(lines) if lines else "      (none)"


def count_differences(expected: Sequence[TraceEvent], observed: Sequence[TraceEvent]) -> list[str]:
    """One line per method called a different number of times than expected.

    Examples:
        >>> e = [TraceEvent("before_train", 0, -1, 0), TraceEvent("after_train", 0, -1, 0)]
        >>> count_differences(e, e[:1])
        ['after_train is never called (expected 1 call)']
    """
    want = Counter(e.kind for e in expected)
    got = Counter(e.kind for e in observed)
    out = []
    for kind in EventKind:
        if want[kind] == got[kind]:
            continue
        if got[kind] == 0:
            out.append(
                f"{kind.value} is never called (expected {want[kind]} call{'s' * (want[kind] != 1)})"
            )
        else:
            out.append(f"{kind.value} is called {got[kind]} times, expected {want[kind]}")
    return out


FIELDS = ("epoch_num", "local_step", "global_step")
"""The loop counters a trace event holds."""


def _key(event: TraceEvent, fields: Sequence[str]) -> tuple[object, ...]:
    return (event.kind, *(getattr(event, f) for f in fields))


def explain_trace(
    expected: Sequence[TraceEvent],
    observed: Sequence[TraceEvent],
    *,
    who: str,
    fields: Sequence[str] = FIELDS,
) -> str | None:
    """Why `observed` is not `expected`, naming the semantic broken; None when they are equal.

    The first line names the semantic (a method's call count, the order of the
    callback methods, or ``<counter> in <method>``); then the rule from the spec, and
    the events around the first difference.

    Args:
        expected: the reference trace.
        observed: what the recorder saw.
        who: the recorder, for the message.
        fields: the counters compared (besides the method); the others are ignored.

    Examples:
        >>> exp = [TraceEvent("before_epoch", 1, -1, 0), TraceEvent("trigger_step", 1, 2, 3)]
        >>> obs = [TraceEvent("before_epoch", 1, -1, 0), TraceEvent("trigger_step", 1, 3, 3)]
        >>> print(explain_trace(exp, obs, who="probe").splitlines()[0])
        probe: local_step in trigger_step: expected the 0-based index of the step in its epoch (2), got 3 at epoch 1
    """
    expected, observed = list(expected), list(observed)
    fields = tuple(fields)
    if [_key(e, fields) for e in expected] == [_key(e, fields) for e in observed]:
        return None
    counts = count_differences(expected, observed)
    index = next(
        (
            i
            for i, (a, b) in enumerate(zip(expected, observed))
            if _key(a, fields) != _key(b, fields)
        ),
        min(len(expected), len(observed)),
    )
    detail: list[str] = []
    if index < len(expected) and index < len(observed):
        want, got = expected[index], observed[index]
        if want.kind is not got.kind:
            headline = (
                f"order of callback methods: event #{index} should be {want.kind.value} at "
                f"{want.where()}, got {got.kind.value} at {got.where()}"
            )
            rule = KIND_RULES[want.kind]
        else:
            field = next(f for f in fields if getattr(want, f) != getattr(got, f))
            where = f"epoch {want.epoch_num}"
            if field == "global_step":
                where += f", local_step {want.local_step}"
            headline = (
                f"{field} in {want.kind.value}: expected {describe_field(field, want.kind)} "
                f"({getattr(want, field)}), got {getattr(got, field)} at {where}"
            )
            rule = field_rule(field)
    elif index < len(expected):
        want = expected[index]
        headline = f"the trace ends after {len(observed)} events; expected next: {want}"
        rule = KIND_RULES[want.kind]
    else:
        got = observed[index]
        headline = (
            f"{len(observed) - len(expected)} extra events after the expected end; first: {got}"
        )
        rule = KIND_RULES[got.kind]
    if counts:
        detail.append("  calls per method: " + "; ".join(counts))
        headline = counts[0] + f" -- first difference: {headline}"
    detail.append(f"  rule: {rule}")
    detail.append(f"  expected (around event #{index}):\n{_context(expected, index)}")
    detail.append(f"  observed (around event #{index}):\n{_context(observed, index)}")
    return f"{who}: {headline}\n" + "\n".join(detail)


def explain_values(
    expected: Sequence[tuple[TraceEvent, float]],
    observed: Sequence[tuple[TraceEvent, float]],
    *,
    who: str,
    rule: str,
) -> str | None:
    """Why the values a reader saw are not the expected ones; None when they match.

    Values are compared up to float32 rounding, read by read; the counters of the
    read events are the trace checks' business, only their methods are compared here.

    Args:
        expected: ``(event, value)`` pairs of the reference.
        observed: what the reader saw.
        who: the reader, for the message.
        rule: the spec's rule, quoted in the message.

    Examples:
        >>> e = TraceEvent("trigger_epoch", 2, 0, 2)
        >>> print(explain_values([(e, 0.5)], [(e, 1.0)], who="lr", rule="r").splitlines()[0])
        lr: value at trigger_epoch (epoch_num 2, local_step 0, global_step 2): expected 0.5, got 1
    """
    for i, (want, got) in enumerate(zip(expected, observed)):
        if want[0].kind is not got[0].kind:
            return (
                f"{who}: read #{i} happened in {got[0].kind.value}, expected in "
                f"{want[0].kind.value} at {want[0].where()} (the reader reads in before_train, "
                f"trigger_step and trigger_epoch, right after the setter)\n  rule: {rule}"
            )
        if not values_close(want[1], got[1]):
            return f"{who}: value at {want[0]}: expected {want[1]:.7g}, got {got[1]:.7g}\n  rule: {rule}"
    if len(expected) != len(observed):
        return (
            f"{who}: {len(observed)} reads, expected {len(expected)} (one in before_train "
            f"and in each trigger_step and trigger_epoch)\n  rule: {rule}"
        )
    return None
