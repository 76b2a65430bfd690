"""Checkpoints and resuming: ModelSaver names and max_to_keep, MinSaver/MaxSaver, AutoResumeTrainConfig."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import pytest

from towerkit.conformance._catalog import (
    BEST_K,
    BEST_SAVERS,
    RESUME,
    RESUME_EPOCHS,
    SAVER,
    SAVER_KEEP,
    TIMED_SAVER,
)
from towerkit.conformance._checks import check_run, require
from towerkit.conformance._reference import (
    best_epoch_step,
    best_k_steps,
    expected_run,
    full_stream,
    kept_checkpoints,
)
from towerkit.conformance._scenario import CLOCK, BestSaverSpec, LoopSpec, SaverSpec, StatSpec

if TYPE_CHECKING:
    from towerkit.conformance._entries import TrainerEntry
    from towerkit.conformance._result import RunResult
    from towerkit.conformance._scenario import Scenario
    from towerkit.conformance.plugin import _Runner

pytestmark = pytest.mark.conformance_group("checkpoints")

_MODEL_FILE = re.compile(r"^model-(\d+)\.(index|data-\d{5}-of-\d{5}|meta)$")


def _chief(results: Sequence[RunResult]) -> RunResult:
    return next(r for r in results if r.rank == 0)


def _check_saver(entry: TrainerEntry, runner: _Runner, scenario: Scenario) -> None:
    __tracebackhide__ = True
    results = runner.run(scenario)
    check_run(entry, scenario, results, recorders=[CLOCK])
    result = _chief(results)
    saver = next(s for s in scenario.callbacks if isinstance(s, SaverSpec))
    saved = expected_run(scenario, runs_per_step=entry.capabilities.runs_per_step).saved_steps
    kept = kept_checkpoints(saved, saver.max_to_keep)
    found = sorted({int(m[1]) for f in result.files if (m := _MODEL_FILE.match(f))})
    rule = (
        "ModelSaver saves the model when triggered (after every epoch) as model-<global_step> "
        "in the checkpoint directory and keeps the max_to_keep most recent "
        "[spec 003 (tensorpack.callbacks), ModelSaver]"
    )
    require(
        found == list(kept),
        f"{entry.name}: ModelSaver(max_to_keep={saver.max_to_keep}) checkpoints on disk: "
        f"expected model-<step> for steps {list(kept)} (saved at {list(saved)}), got steps "
        f"{found}; files: {list(result.files)}\n  rule: {rule}",
    )
    for step in kept:
        for part in (f"model-{step}.index", f"model-{step}.data-00000-of-00001"):
            require(
                part in result.files,
                f"{entry.name}: checkpoint model-{step} lacks {part}; files: {list(result.files)}",
            )
    want_state = [f"model-{s}" for s in kept]
    require(
        list(result.checkpoint_state) == want_state,
        f"{entry.name}: the 'checkpoint' state file lists {list(result.checkpoint_state)}, "
        f"expected {want_state} (oldest first)\n  rule: {rule}",
    )


def test_model_saver_saves_model_global_step_every_epoch(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (ModelSaver): the model is saved each time the saver is triggered (every epoch), as model-<global_step>."""
    _check_saver(trainer_entry, conformance_runner, SAVER)


def test_model_saver_max_to_keep(trainer_entry: TrainerEntry, conformance_runner: _Runner) -> None:
    """Spec 003 (ModelSaver.max_to_keep): only the max_to_keep most recent checkpoints are kept, as with tf.train.Saver."""
    _check_saver(trainer_entry, conformance_runner, SAVER_KEEP)


def test_min_saver_and_max_saver_files(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 003 (MinSaver, MaxSaver): the checkpoint with the lowest (highest) statistic is kept as min-<stat>.tfmodel (max-<stat>.tfmodel)."""
    scenario = BEST_SAVERS
    results = conformance_runner.run(scenario)
    check_run(trainer_entry, scenario, results, recorders=[CLOCK])
    result = _chief(results)
    stat = next(s for s in scenario.callbacks if isinstance(s, StatSpec))
    events = full_stream(scenario.loop, trainer_entry.capabilities.runs_per_step)
    found = dict(result.best_steps)
    for spec in scenario.callbacks:
        if not isinstance(spec, BestSaverSpec):
            continue
        want = best_epoch_step(events, stat, spec)
        kind = "MaxSaver" if spec.reverse else "MinSaver"
        for part in (f"{spec.filename}.index", f"{spec.filename}.data-00000-of-00001"):
            require(
                part in result.files,
                f"{trainer_entry.name}: {kind}({spec.stat!r}) did not write {part}; files: "
                f"{list(result.files)}",
            )
        require(
            found.get(spec.filename) == want,
            f"{trainer_entry.name}: {kind}({spec.stat!r}) kept the checkpoint of global step "
            f"{found.get(spec.filename)}, expected {want} (the first epoch with the "
            f"{'highest' if spec.reverse else 'lowest'} {spec.stat} among {list(stat.values)})\n"
            f"  rule: the model with the best statistic is saved separately [spec 003, MinSaver]",
        )


@pytest.mark.parametrize("case", list(TIMED_SAVER), ids=list(TIMED_SAVER))
def test_model_saver_time_trigger_and_background(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, case: str
) -> None:
    """ModelSaver(every_n_minutes=N): also saves after the step at which N minutes passed since its last save; background=True writes the same checkpoints, each holding the state at its step while training goes on; with K steps per call and in mixed precision too."""
    scenario = TIMED_SAVER[case]
    _check_saver(trainer_entry, conformance_runner, scenario)
    result = _chief(conformance_runner.run(scenario))
    wrong = [(name, step) for name, step in result.saved_steps if name != f"model-{step}"]
    require(
        not wrong and bool(result.saved_steps),
        f"{trainer_entry.name}: checkpoints holding another global step than their name's "
        f"(name, global step held): {wrong or list(result.saved_steps)}\n"
        f"  rule: model-<step> is the state at that step, also when written in the background "
        f"[towerkit, ModelSaver.background]",
    )


@pytest.mark.parametrize("case", list(BEST_K), ids=list(BEST_K))
def test_best_k_savers(trainer_entry: TrainerEntry, conformance_runner: _Runner, case: str) -> None:
    """MinSaver/MaxSaver(top_k=k): the k checkpoints with the best statistic, each as <kind>-<stat>-<step>.tfmodel, listed best first in <filename>.json (ties to the earlier epoch); with K steps per call and in mixed precision too."""
    scenario = BEST_K[case]
    results = conformance_runner.run(scenario)
    check_run(trainer_entry, scenario, results, recorders=[CLOCK])
    result = _chief(results)
    stat = next(s for s in scenario.callbacks if isinstance(s, StatSpec))
    events = full_stream(scenario.loop, trainer_entry.capabilities.runs_per_step)
    for spec in scenario.callbacks:
        if not isinstance(spec, BestSaverSpec):
            continue
        want = best_k_steps(events, stat, spec)
        stem = spec.filename[: -len(".tfmodel")]
        want_names = [f"{stem}-{step}.tfmodel" for step in want]
        kind = "MaxSaver" if spec.reverse else "MinSaver"
        got = [(n, s) for n, s in result.best_steps if n.startswith(stem + "-")]
        require(
            got == list(zip(want_names, want, strict=True)),
            f"{trainer_entry.name}: {kind}({spec.stat!r}, top_k={spec.top_k}) keeps {got} "
            f"(name, global step held), expected {list(zip(want_names, want, strict=True))} "
            f"(the best {spec.top_k} of {list(stat.values)}, best first)\n"
            f"  rule: the k best checkpoints by the statistic are kept [towerkit, MinSaver.top_k]",
        )
        on_disk = sorted(
            f[: -len(".index")]
            for f in result.files
            if f.startswith(stem + "-") and f.endswith(".index")
        )
        require(
            on_disk == sorted(want_names),
            f"{trainer_entry.name}: {kind}(top_k={spec.top_k}) left {on_disk} on disk, "
            f"expected exactly {sorted(want_names)} (the displaced ones are deleted)",
        )


_RESUME_RULE = (
    "AutoResumeTrainConfig loads the checkpoint found in the log directory and continues "
    "from the epoch after the last one recorded in the JSON history; with always_resume=False "
    "the session_init and starting_epoch given by the user take priority "
    "[spec 000 (tensorpack.train), AutoResumeTrainConfig]"
)


@pytest.mark.parametrize("case", list(RESUME), ids=list(RESUME))
def test_auto_resume(trainer_entry: TrainerEntry, conformance_runner: _Runner, case: str) -> None:
    """Spec 000 (AutoResumeTrainConfig): a checkpoint and a JSON history in the log directory make the next run continue the epoch, global step and stats.json; always_resume decides whether the user's session_init/starting_epoch win. Also in mixed_bfloat16, whose checkpoints hold the float32 variables."""
    first, second = RESUME[case]
    auto = second.auto_resume
    if auto is None:
        msg = f"the resume case {case!r} describes no AutoResumeTrainConfig"
        raise TypeError(msg)
    first_results = conformance_runner.run(first)
    check_run(trainer_entry, first, first_results, recorders=[CLOCK])
    results = conformance_runner.run(second)
    steps = second.loop.steps_per_epoch
    runs = trainer_entry.capabilities.runs_per_step
    user_wins = case == "user_arguments_win"
    start = 1 if user_wins else RESUME_EPOCHS[0] + 1
    start_gs = 0 if user_wins else RESUME_EPOCHS[0] * steps * runs
    resumed = attrs.evolve(
        second,
        loop=LoopSpec(
            starting_epoch=start,
            max_epoch=second.loop.max_epoch,
            steps_per_epoch=steps,
            start_global_step=start_gs,
        ),
    )
    what = f"{trainer_entry.name}, AutoResumeTrainConfig({second.auto_resume})"
    check_run(trainer_entry, resumed, results, recorders=[CLOCK])
    marker_want = auto.marker if user_wins else 0.0
    # On a TensorFlow cluster, session_init runs on the chief (worker 0) only; the other
    # workers take the parameter servers' values, and the suite's marker variable is
    # created outside the trainer's device placement, on each worker.
    readers = results[:1] if trainer_entry.capabilities.chief_by_role else results
    for result in readers:
        reads = result.value_trace("conformance_marker")
        got = reads[0][1] if reads else None
        require(
            got is not None and marker_want is not None and abs(got - marker_want) < 1e-6,
            f"{what} (rank {result.rank}): the variable set by the user's session_init reads "
            f"{got} in before_train, expected {marker_want} ("
            f"{'the user session_init wins' if user_wins else 'the checkpoint is restored'})"
            f"\n  rule: {_RESUME_RULE}",
        )
    stat = next(s for s in second.callbacks if isinstance(s, StatSpec))
    want = [(e, e * steps * runs, stat.value_in(e)) for e in range(1, second.loop.max_epoch + 1)]
    records = _chief(results).stats_records() or []
    got_records = [(r.get("epoch_num"), r.get("global_step"), r.get(stat.name)) for r in records]
    require(
        got_records == want,
        f"{what}: stats.json after the second run holds (epoch_num, global_step, "
        f"{stat.name}) {got_records}, expected {want}\n  rule: {_RESUME_RULE}",
    )
