"""Compare recorded runs with the reference model; fail naming the semantic that broke."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from towerkit.conformance._diff import FIELDS, SEEDS, explain_trace, explain_values
from towerkit.conformance._entries import TrainerEntry
from towerkit.conformance._errors import ConformanceError
from towerkit.conformance._reference import expected_run
from towerkit.conformance._result import RunResult
from towerkit.conformance._scenario import (
    CLOCK,
    EnableIfSpec,
    FuncSpec,
    PeriodicCallbackSpec,
    PeriodicTriggerSpec,
    ProbeSpec,
    Scenario,
    ScheduleSpec,
    StatMonitorSpec,
)

VALUE_RULES = {
    ScheduleSpec: (
        "each (epoch, value) pair sets the value after the completion of that epoch (global "
        "step, when step-based; epoch 0 is before the first epoch); 'linear' interpolates "
        "at every trigger between points, without extrapolation; set_at_beginning sets the "
        "value the schedule implies at the start even off a scheduled point "
        f"[{SEEDS['callbacks']}, ScheduledHyperParamSetter]"
    ),
    FuncSpec: (
        "on every trigger (after each epoch) the value becomes func(epoch_num, old_value), "
        f"epoch_num being the number of finished epochs [{SEEDS['callbacks']}, "
        "HyperParamSetterWithFunc]"
    ),
    StatMonitorSpec: (
        "on every trigger it reads the latest value of the statistic; once the statistic has "
        "not improved by more than threshold over the last last_k observations, the value "
        f"becomes value_func(old_value) [{SEEDS['callbacks']}, StatMonitorParamSetter]"
    ),
}

GLOBAL_STEP_VARIABLE_RULE = (
    "the TensorFlow global step is how many times hooked_sess.run has been called "
    f"[{SEEDS['trainers']}, Trainer.global_step]"
)


def recorder_label(scenario: Scenario, name: str) -> str:
    """What a recorder of `scenario` is, in words, for messages.

    Examples:
        >>> from towerkit.conformance._scenario import LoopSpec
        >>> recorder_label(Scenario(name="s", loop=LoopSpec()), "loop")
        "probe 'loop' (the first callback)"
    """
    if name == CLOCK:
        return f"probe {CLOCK!r} (the first callback)"
    if name == f"{CLOCK}.global_step":
        return "the global step variable, read in trigger_epoch"
    base, _, suffix = name.partition(".")
    spec = scenario.find(base)
    if isinstance(spec, ProbeSpec):
        return f"probe {name!r} (chief_only={spec.chief_only})"
    if isinstance(spec, PeriodicTriggerSpec):
        return (
            f"trigger() calls of PeriodicTrigger(every_k_steps={spec.every_k_steps}, "
            f"every_k_epochs={spec.every_k_epochs}, before_train={spec.before_train})"
        )
    if isinstance(spec, PeriodicCallbackSpec):
        return (
            f"callback wrapped by PeriodicCallback(every_k_steps={spec.every_k_steps}, "
            f"every_k_epochs={spec.every_k_epochs})"
        )
    if isinstance(spec, EnableIfSpec):
        what = "predicate calls of" if suffix == "pred" else "callback wrapped by"
        return f"{what} EnableCallbackIf(pred: global_step % {spec.modulus} == {spec.remainder})"
    if isinstance(spec, ScheduleSpec):
        return (
            f"{name!r} set by ScheduledHyperParamSetter({list(spec.points)}, interp={spec.interp!r}, "
            f"step_based={spec.step_based}, set_at_beginning={spec.set_at_beginning})"
        )
    if isinstance(spec, FuncSpec):
        return (
            f"{name!r} set by HyperParamSetterWithFunc(x * {spec.factor} every {spec.every} epochs)"
        )
    if isinstance(spec, StatMonitorSpec):
        return (
            f"{name!r} set by StatMonitorParamSetter({spec.stat!r}, x * {spec.factor}, "
            f"threshold={spec.threshold}, last_k={spec.last_k}, reverse={spec.reverse})"
        )
    return repr(name)


def describe_scenario(scenario: Scenario, runs_per_step: int) -> str:
    """The run in one line, for messages.

    Examples:
        >>> from towerkit.conformance._scenario import LoopSpec
        >>> describe_scenario(Scenario(name="s", loop=LoopSpec()), 1)
        "scenario 's': epochs 1..2 (inclusive), 3 steps each, global step restored at 0, 1 hooked_sess.run per step"
    """
    loop = scenario.loop
    text = (
        f"scenario {scenario.name!r}: epochs {loop.starting_epoch}..{loop.max_epoch} "
        f"(inclusive), {loop.steps_per_epoch} steps each, global step restored at "
        f"{loop.start_global_step}, {runs_per_step * loop.run_step_repeats} hooked_sess.run per step"
    )
    if scenario.stop_at is not None:
        kind, nth = scenario.stop_at
        text += f", StopTraining raised in {kind.value} #{nth}"
    if scenario.plain_runs:
        text += ", plain sess.run calls in callbacks"
    if scenario.non_chief:
        text += ", is_chief=False"
    return text


def _who(entry: TrainerEntry, result: RunResult, ranks: int) -> str:
    return entry.name + (f" (rank {result.rank})" if ranks > 1 else "")


def check_run(
    entry: TrainerEntry,
    scenario: Scenario,
    results: Sequence[RunResult],
    *,
    recorders: Iterable[str] | None = None,
    fields: Sequence[str] = FIELDS,
    allow_error: bool = False,
) -> None:
    """Check every rank's recorders against the reference model.

    Args:
        entry: the trainer's row (its capabilities give the runs per step).
        scenario: the run.
        results: one result per process (rank).
        recorders: the recorders to check (all of them when None).
        fields: the counters compared in traces.
        allow_error: whether an exception may escape training.

    Raises:
        ConformanceError: a difference; the message names the trainer, the rank, the
            scenario, the recorder and the semantic broken.
    """
    __tracebackhide__ = True
    wanted = None if recorders is None else set(recorders)
    runs = entry.capabilities.runs_per_step
    problems: list[str] = []
    for result in results:
        who = _who(entry, result, len(results))
        if result.error is not None and not allow_error:
            problems.append(f"{who}: training raised {result.error}")
        is_chief = result.rank == 0 and not scenario.non_chief
        own_count = entry.capabilities.chief_by_role and result.rank > 0
        expected = expected_run(
            _from_found_step(scenario, result) if own_count else scenario,
            runs_per_step=runs,
            is_chief=is_chief,
        )
        for name, trace in expected.traces:
            if wanted is not None and name not in wanted:
                continue
            msg = explain_trace(
                trace,
                result.trace(name),
                who=f"{who}, {recorder_label(scenario, name)}",
                fields=fields,
            )
            if msg:
                problems.append(msg)
        for name, vals in expected.values:
            if wanted is not None and name not in wanted:
                continue
            if name == f"{CLOCK}.global_step":
                if own_count:
                    continue
                rule = GLOBAL_STEP_VARIABLE_RULE
            else:
                rule = VALUE_RULES[type(scenario.find(name))]
            msg = explain_values(
                vals,
                result.value_trace(name),
                who=f"{who}, {recorder_label(scenario, name)}",
                rule=rule,
            )
            if msg:
                problems.append(msg)
    if problems:
        head = describe_scenario(scenario, runs)
        raise ConformanceError(f"{problems[0]}\n  in {head}" + _more(problems))


def _from_found_step(scenario: Scenario, result: RunResult) -> Scenario:
    """`scenario` starting from the global step a non-chief cluster worker found at start.

    On a TensorFlow cluster the global step lives on the parameter server and counts
    the chief's runs; another worker's ``trainer.global_step`` counts its own runs
    from the value it read when its session started.
    """
    trace = result.trace(CLOCK)
    if not trace:
        return scenario
    return attrs.evolve(
        scenario, loop=attrs.evolve(scenario.loop, start_global_step=trace[0].global_step)
    )


def _more(problems: Sequence[str]) -> str:
    if len(problems) == 1:
        return ""
    rest = [p.splitlines()[0] for p in problems[1:6]]
    more = f"\n  ... and {len(problems) - 6} more" if len(problems) > 6 else ""
    return "\n  other differences:\n    " + "\n    ".join(rest) + more


def check_no_error(entry: TrainerEntry, results: Sequence[RunResult]) -> None:
    """Raise `ConformanceError` when training raised in some process."""
    __tracebackhide__ = True
    failed = [
        f"{_who(entry, r, len(results))}: training raised {r.error}" for r in results if r.error
    ]
    if failed:
        raise ConformanceError("\n".join(failed))


def require(condition: bool, message: str) -> None:
    """Raise `ConformanceError` with `message` unless `condition`."""
    __tracebackhide__ = True
    if not condition:
        raise ConformanceError(message)
