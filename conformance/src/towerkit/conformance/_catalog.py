"""The named scenarios of the suite's checks, in the order a multi-process job runs them."""

from __future__ import annotations

from towerkit.callbacks import EventKind
from towerkit.conformance._scenario import (
    AutoResumeSpec,
    BestSaverSpec,
    EnableIfSpec,
    FuncSpec,
    LoopSpec,
    MarkerSpec,
    PeriodicCallbackSpec,
    PeriodicTriggerSpec,
    ProbeSpec,
    SaverSpec,
    Scenario,
    ScheduleSpec,
    StatMonitorSpec,
    StatSpec,
    TowersSpec,
    VariablesSpec,
)

# -- the loop ------------------------------------------------------------------------------

LOOP = Scenario(
    name="loop",
    loop=LoopSpec(starting_epoch=2, max_epoch=4, steps_per_epoch=3),
    callbacks=[ProbeSpec(name="later")],
)
RUNS_PER_STEP = {
    n: Scenario(
        name=f"loop-{n}-runs-per-step",
        loop=LoopSpec(starting_epoch=1, max_epoch=2, steps_per_epoch=3, run_step_repeats=n),
    )
    for n in (0, 2)
}
STEPS_PER_CALL = {
    k: Scenario(
        name=f"loop-{k}-steps-per-call",
        loop=LoopSpec(starting_epoch=1, max_epoch=2, steps_per_epoch=4, steps_per_execution=k),
        callbacks=[ProbeSpec(name="later")],
    )
    for k in (2, 4)
}
STEPS_PER_CALL_RESTORED = Scenario(
    name="loop-2-steps-per-call-restored",
    loop=LoopSpec(
        starting_epoch=3, max_epoch=4, steps_per_epoch=2, start_global_step=4, steps_per_execution=2
    ),
)
RESTORED = Scenario(
    name="loop-restored-global-step",
    loop=LoopSpec(starting_epoch=3, max_epoch=4, steps_per_epoch=2, start_global_step=10),
)
PLAIN_RUNS = Scenario(
    name="loop-plain-session-runs",
    loop=LoopSpec(starting_epoch=1, max_epoch=2, steps_per_epoch=2),
    plain_runs=True,
)
STOP_POINTS = {
    EventKind.BEFORE_TRAIN: 0,
    EventKind.BEFORE_EPOCH: 1,
    EventKind.BEFORE_RUN: 4,
    EventKind.AFTER_RUN: 2,
    EventKind.TRIGGER_STEP: 3,
    EventKind.AFTER_EPOCH: 0,
    EventKind.TRIGGER_EPOCH: 1,
}
STOPS = {
    kind: Scenario(
        name=f"stop-in-{kind.value}",
        loop=LoopSpec(starting_epoch=1, max_epoch=3, steps_per_epoch=3),
        stop_at=(kind, nth),
        callbacks=[ProbeSpec(name="later")],
    )
    for kind, nth in STOP_POINTS.items()
}
CHIEF = {
    chief: Scenario(
        name="chief" if chief else "non-chief",
        loop=LoopSpec(starting_epoch=1, max_epoch=1, steps_per_epoch=2),
        non_chief=not chief,
        callbacks=[ProbeSpec(name="chief_only", chief_only=True), ProbeSpec(name="everywhere")],
    )
    for chief in (True, False)
}

# -- triggers and schedules -------------------------------------------------------------------

TRIGGER_STEPS = Scenario(
    name="periodic-trigger-steps",
    loop=LoopSpec(starting_epoch=1, max_epoch=3, steps_per_epoch=3),
    callbacks=[PeriodicTriggerSpec(name="every_4_steps", every_k_steps=4)],
)
TRIGGER_EPOCHS = Scenario(
    name="periodic-trigger-epochs",
    loop=LoopSpec(starting_epoch=1, max_epoch=4, steps_per_epoch=2),
    callbacks=[PeriodicTriggerSpec(name="every_2_epochs", every_k_epochs=2)],
)
TRIGGER_BEFORE_TRAIN = Scenario(
    name="periodic-trigger-before-train",
    loop=LoopSpec(starting_epoch=2, max_epoch=4, steps_per_epoch=2),
    callbacks=[PeriodicTriggerSpec(name="before_and_3", every_k_epochs=3, before_train=True)],
)
CALLBACK_STEPS = Scenario(
    name="periodic-callback-steps",
    loop=LoopSpec(starting_epoch=1, max_epoch=2, steps_per_epoch=4),
    callbacks=[PeriodicCallbackSpec(name="every_3_steps", every_k_steps=3)],
)
CALLBACK_EPOCHS = Scenario(
    name="periodic-callback-epochs",
    loop=LoopSpec(starting_epoch=1, max_epoch=3, steps_per_epoch=2),
    callbacks=[PeriodicCallbackSpec(name="every_2_epochs", every_k_epochs=2)],
)
ENABLE_IF = Scenario(
    name="enable-callback-if",
    loop=LoopSpec(starting_epoch=1, max_epoch=2, steps_per_epoch=3),
    callbacks=[
        EnableIfSpec(name="even_steps", modulus=2, remainder=0),
        EnableIfSpec(name="odd_steps", modulus=2, remainder=1),
    ],
)
SCHEDULE_EPOCHS = Scenario(
    name="schedule-epochs",
    loop=LoopSpec(starting_epoch=1, max_epoch=4, steps_per_epoch=2),
    callbacks=[ScheduleSpec(name="lr", points=[(0, 1.0), (2, 0.5), (3, 0.25)], initial=9.0)],
)
SCHEDULE_LINEAR = Scenario(
    name="schedule-linear",
    loop=LoopSpec(starting_epoch=1, max_epoch=5, steps_per_epoch=1),
    callbacks=[ScheduleSpec(name="lr", points=[(1, 1.0), (4, 0.25)], interp="linear", initial=9.0)],
)
SCHEDULE_STEPS = Scenario(
    name="schedule-steps",
    loop=LoopSpec(starting_epoch=1, max_epoch=3, steps_per_epoch=3),
    callbacks=[
        ScheduleSpec(name="lr", points=[(0, 1.0), (3, 0.5), (7, 0.125)], step_based=True),
        ScheduleSpec(name="warmup", points=[(2, 0.0), (6, 1.0)], step_based=True, interp="linear"),
    ],
)
AFTER_SCHEDULE = {
    at_beginning: Scenario(
        name=f"schedule-started-after-{'set' if at_beginning else 'not-set'}",
        loop=LoopSpec(starting_epoch=4, max_epoch=5, steps_per_epoch=1),
        callbacks=[
            ScheduleSpec(
                name="lr",
                points=[(1, 1.0), (2, 0.5)],
                set_at_beginning=at_beginning,
                initial=9.0,
            )
        ],
    )
    for at_beginning in (True, False)
}
MIDDLE_OF_SCHEDULE = {
    interp: Scenario(
        name=f"schedule-started-in-the-middle-{interp or 'exact'}",
        loop=LoopSpec(starting_epoch=3, max_epoch=6, steps_per_epoch=1),
        callbacks=[
            ScheduleSpec(name="lr", points=[(1, 1.0), (5, 0.5)], interp=interp, initial=9.0)
        ],
    )
    for interp in (None, "linear")
}
STAT_MONITOR = Scenario(
    name="stat-monitor",
    loop=LoopSpec(starting_epoch=1, max_epoch=8, steps_per_epoch=1),
    callbacks=[
        StatSpec(name="val_error", values=[3.0, 2.0, 2.5, 2.0, 2.0, 1.0, 1.0, 1.0]),
        StatSpec(name="accuracy", values=[0.5, 0.75, 0.75, 0.75, 0.875, 0.875, 0.875, 0.875]),
        StatMonitorSpec(name="lr", stat="val_error", threshold=0.0, last_k=2, factor=0.5),
        StatMonitorSpec(
            name="momentum", stat="accuracy", threshold=0.0, last_k=2, reverse=True, factor=0.5
        ),
    ],
)
WITH_FUNC = Scenario(
    name="hyper-param-with-func",
    loop=LoopSpec(starting_epoch=1, max_epoch=5, steps_per_epoch=1),
    callbacks=[FuncSpec(name="lr", factor=0.5, every=2, initial=1.0)],
)

# -- checkpoints and resume -------------------------------------------------------------------

SAVER = Scenario(
    name="model-saver",
    loop=LoopSpec(starting_epoch=1, max_epoch=3, steps_per_epoch=2),
    logdir="saver",
    callbacks=[SaverSpec()],
)
SAVER_KEEP = Scenario(
    name="model-saver-max-to-keep",
    loop=LoopSpec(starting_epoch=1, max_epoch=4, steps_per_epoch=1),
    logdir="saver_keep",
    callbacks=[SaverSpec(max_to_keep=2)],
)
BEST_SAVERS = Scenario(
    name="min-max-saver",
    loop=LoopSpec(starting_epoch=1, max_epoch=4, steps_per_epoch=1),
    logdir="best",
    callbacks=[
        StatSpec(name="val_error", values=[3.0, 1.0, 2.0, 1.0]),
        SaverSpec(),
        BestSaverSpec(name="min_saver", stat="val_error"),
        BestSaverSpec(name="max_saver", stat="val_error", reverse=True),
    ],
)

TIMED_SAVER = {
    case: Scenario(
        name=f"model-saver-timed-{case}",
        loop=LoopSpec(starting_epoch=1, max_epoch=3, steps_per_epoch=4, steps_per_execution=k),
        logdir="timed",
        callbacks=[SaverSpec(max_to_keep=0, every_n_minutes=3, background=background)],
        precision=precision,
    )
    for case, k, background, precision in [
        ("blocking", 1, False, None),
        ("background", 1, True, None),
        ("background-2-steps-per-call", 2, True, None),
        ("background-mixed_bfloat16", 1, True, "mixed_bfloat16"),
    ]
}
"""``ModelSaver(every_n_minutes=3)`` on the suite's clock (a minute per session call), saving
at every epoch end too; blocking, and in the background (also with 2 steps per session call
and in mixed bfloat16)."""

BEST_K = {
    case: Scenario(
        name=f"best-k-savers-{case}",
        loop=LoopSpec(starting_epoch=1, max_epoch=5, steps_per_epoch=2, steps_per_execution=k),
        logdir="bestk",
        callbacks=[
            StatSpec(name="val_error", values=[3.0, 1.0, 2.0, 1.0, 0.5]),
            SaverSpec(max_to_keep=1),
            BestSaverSpec(name="min_saver", stat="val_error", top_k=2),
            BestSaverSpec(name="max_saver", stat="val_error", reverse=True, top_k=3),
        ],
        precision=precision,
    )
    for case, k, precision in [
        ("plain", 1, None),
        ("2-steps-per-call", 2, None),
        ("mixed_bfloat16", 1, "mixed_bfloat16"),
    ]
}
"""``MinSaver(top_k=2)`` and ``MaxSaver(top_k=3)`` (ties included), beside a ModelSaver keeping
one; also with 2 steps per session call and in mixed bfloat16."""

EMA = {
    case: Scenario(
        name=f"ema-{case}",
        loop=LoopSpec(starting_epoch=1, max_epoch=1, steps_per_epoch=3, steps_per_execution=k),
        callbacks=[VariablesSpec()],
        ema_decay=0.5,
        precision=precision,
    )
    for case, k, precision in [
        ("plain", 1, None),
        ("3-steps-per-call", 3, None),
        ("mixed_bfloat16", 1, "mixed_bfloat16"),
    ]
}
"""Three SGD steps with ``EMAOptimizer(decay=0.5)``: the averages against the reference's path."""

RESUME_STATS = StatSpec(name="epoch_stat", values=[11.0, 12.0, 13.0, 14.0])
RESUME_EPOCHS = (2, 4)
"""Epochs of the first run, and the ``max_epoch`` of the run that resumes it."""


MIXED = "mixed_bfloat16"
"""The policy the mixed-precision scenarios run in: its name, the suite's one spelling of it
(a scenario makes it the record on use)."""


def _resume(
    name: str,
    logdir: str,
    max_epoch: int,
    spec: AutoResumeSpec,
    precision: str | None = None,
) -> Scenario:
    return Scenario(
        name=name,
        loop=LoopSpec(starting_epoch=1, max_epoch=max_epoch, steps_per_epoch=2),
        logdir=logdir,
        json_writer=True,
        auto_resume=spec,
        callbacks=[RESUME_STATS, SaverSpec(), MarkerSpec(initial=0.0)],
        precision=precision,
    )


RESUME = {
    "always_resume": (
        _resume("resume-first-run", "resume", RESUME_EPOCHS[0], AutoResumeSpec()),
        _resume(
            "resume-always",
            "resume",
            RESUME_EPOCHS[1],
            AutoResumeSpec(always_resume=True, starting_epoch=1, marker=7.0),
        ),
    ),
    "user_arguments_win": (
        _resume("resume-user-first-run", "resume_user", RESUME_EPOCHS[0], AutoResumeSpec()),
        _resume(
            "resume-user-wins",
            "resume_user",
            RESUME_EPOCHS[1],
            AutoResumeSpec(always_resume=False, starting_epoch=1, marker=7.0),
        ),
    ),
    "no_user_arguments": (
        _resume("resume-plain-first-run", "resume_plain", RESUME_EPOCHS[0], AutoResumeSpec()),
        _resume(
            "resume-plain", "resume_plain", RESUME_EPOCHS[1], AutoResumeSpec(always_resume=False)
        ),
    ),
    # a run in mixed precision saves float32 variables, and the next run resumes from them
    MIXED: (
        _resume(
            "resume-mixed-first-run",
            "resume_mixed",
            RESUME_EPOCHS[0],
            AutoResumeSpec(),
            MIXED,
        ),
        _resume(
            "resume-mixed",
            "resume_mixed",
            RESUME_EPOCHS[1],
            AutoResumeSpec(always_resume=False),
            MIXED,
        ),
    ),
}

# -- towers and numerics ------------------------------------------------------------------

TOWERS = Scenario(
    name="towers",
    loop=LoopSpec(starting_epoch=1, max_epoch=1, steps_per_epoch=2),
    callbacks=[TowersSpec(), VariablesSpec()],
)
NUMERICS = {
    (steps, kind): Scenario(
        name=f"numerics-{steps}-steps-{kind}",
        loop=LoopSpec(starting_epoch=1, max_epoch=1, steps_per_epoch=steps),
        model=kind,
        callbacks=[VariablesSpec()],
    )
    for steps in (1, 3)
    for kind in ("quadratic", "linear")
}
NUMERICS_MIXED = {
    kind: Scenario(
        name=f"numerics-{MIXED}-3-steps-{kind}",
        loop=LoopSpec(starting_epoch=1, max_epoch=1, steps_per_epoch=3),
        model=kind,
        callbacks=[VariablesSpec()],
        precision=MIXED,
    )
    for kind in ("quadratic", "linear")
}
LAYERS = {
    steps: Scenario(
        name=f"layers-{steps}-steps",
        loop=LoopSpec(starting_epoch=1, max_epoch=1, steps_per_epoch=steps),
        model="layers",
        callbacks=[VariablesSpec()],
    )
    for steps in (1, 3)
}


def named_scenarios() -> tuple[Scenario, ...]:
    """Every named scenario, in an order that runs the first run of a resume before its second."""
    out = [LOOP, *RUNS_PER_STEP.values(), RESTORED, PLAIN_RUNS, *STOPS.values(), *CHIEF.values()]
    out += [*STEPS_PER_CALL.values(), STEPS_PER_CALL_RESTORED]
    out += [
        TRIGGER_STEPS,
        TRIGGER_EPOCHS,
        TRIGGER_BEFORE_TRAIN,
        CALLBACK_STEPS,
        CALLBACK_EPOCHS,
        ENABLE_IF,
        SCHEDULE_EPOCHS,
        SCHEDULE_LINEAR,
        SCHEDULE_STEPS,
        *AFTER_SCHEDULE.values(),
        *MIDDLE_OF_SCHEDULE.values(),
        STAT_MONITOR,
        WITH_FUNC,
    ]
    out += [SAVER, SAVER_KEEP, BEST_SAVERS, *BEST_K.values(), *TIMED_SAVER.values()]
    for first, second in RESUME.values():
        out += [first, second]
    out += [*EMA.values()]
    out += [TOWERS, *NUMERICS.values(), *NUMERICS_MIXED.values(), *LAYERS.values()]
    return tuple(out)
