"""Run one scenario with one trainer, in this process, and return what the recorders saw."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from towerkit.conformance._entries import TrainerEntry
from towerkit.conformance._model import SuiteModel
from towerkit.conformance._recorders import (
    Clock,
    Probe,
    Reader,
    Recording,
    StatSource,
    TowersRecorder,
    TriggerRecorder,
    VariablesRecorder,
    recording_predicate,
)
from towerkit.conformance._result import RunResult
from towerkit.conformance._scenario import (
    PARAM_SPECS,
    BestSaverSpec,
    EnableIfSpec,
    FuncSpec,
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

if TYPE_CHECKING:
    from towerkit.towers import Precision

logger = logging.getLogger("towerkit.conformance")


def make_trainer(
    entry: TrainerEntry,
    model: SuiteModel,
    *,
    setup: bool = True,
    k: int = 1,
    precision: Precision | None = None,
) -> Any:
    """A trainer of `entry` for `model`, in the default graph.

    A factory that takes the model builds the graph; otherwise the suite calls
    ``trainer.setup_graph`` (unless `setup` is False, for ``launch_train_with_config``).
    """
    factory = entry.load_factory()
    if entry.builds_graph:
        return factory(model)
    trainer = factory()
    if setup:
        trainer.setup_graph(
            model.input_signature,
            model.make_input(),
            model.build_cost,
            model.make_optimizer,
            **({} if k == 1 else {"steps_per_execution": k}),
            **({"precision": precision} if precision is not None and precision.mixed else {}),
        )
    return trainer


def build_callbacks(scenario: Scenario, rec: Recording) -> list[Any]:
    """The callbacks of `scenario`: the suite's clock first, then one or two per record."""
    from towerkit.callbacks import (
        EnableCallbackIf,
        EventKind,
        HyperParamSetterWithFunc,
        MaxSaver,
        MinSaver,
        ModelSaver,
        PeriodicCallback,
        PeriodicTrigger,
        ScheduledHyperParamSetter,
        StatMonitorParamSetter,
    )

    clock = Clock(rec, scenario.stop_at, scenario.plain_runs)
    cbs: list[Any] = [clock]
    if scenario.model == "layers":
        from towerkit.callbacks import RunUpdateOps

        # The one default extra callback a BatchNorm model needs: the scenarios run
        # with no extra callbacks, so the layers scenario adds it as a user's would.
        cbs.append(RunUpdateOps())
    for spec in scenario.callbacks:
        if isinstance(spec, ProbeSpec):
            cbs.append(Probe(spec.name, rec, chief_only=spec.chief_only))
        elif isinstance(spec, PeriodicTriggerSpec):
            cbs.append(
                PeriodicTrigger(
                    TriggerRecorder(spec.name, rec),
                    every_k_steps=spec.every_k_steps,
                    every_k_epochs=spec.every_k_epochs,
                    before_train=spec.before_train,
                )
            )
        elif isinstance(spec, PeriodicCallbackSpec):
            cbs.append(
                PeriodicCallback(
                    Probe(spec.name, rec),
                    every_k_steps=spec.every_k_steps,
                    every_k_epochs=spec.every_k_epochs,
                )
            )
        elif isinstance(spec, EnableIfSpec):
            pred = recording_predicate(spec.name, rec, spec.modulus, spec.remainder)
            cbs.append(EnableCallbackIf(Probe(spec.name, rec), pred))
        elif isinstance(spec, ScheduleSpec):
            cbs.append(
                ScheduledHyperParamSetter(
                    spec.name,
                    list(spec.points),
                    interp=spec.interp,
                    step_based=spec.step_based,
                    set_at_beginning=spec.set_at_beginning,
                )
            )
            cbs.append(Reader(spec.name, rec))
        elif isinstance(spec, FuncSpec):
            cbs.append(HyperParamSetterWithFunc(spec.name, _decay_every(spec.factor, spec.every)))
            cbs.append(Reader(spec.name, rec))
        elif isinstance(spec, StatSpec):
            cbs.append(StatSource(spec.name, spec.value_in))
        elif isinstance(spec, StatMonitorSpec):
            factor = spec.factor
            cbs.append(
                StatMonitorParamSetter(
                    spec.name,
                    spec.stat,
                    _scale(factor),
                    threshold=spec.threshold,
                    last_k=spec.last_k,
                    reverse=spec.reverse,
                )
            )
            cbs.append(Reader(spec.name, rec))
        elif isinstance(spec, MarkerSpec):
            cbs.append(Reader(spec.name, rec))
        elif isinstance(spec, SaverSpec):
            cbs.append(
                ModelSaver(
                    max_to_keep=spec.max_to_keep,
                    every_n_minutes=spec.every_n_minutes,
                    # the suite's clock: a minute per session call of the loop
                    clock=lambda: 60.0 * clock.count(EventKind.TRIGGER_STEP),
                    background=spec.background,
                )
            )
        elif isinstance(spec, BestSaverSpec):
            kind = MaxSaver if spec.reverse else MinSaver
            cbs.append(kind(spec.stat, top_k=spec.top_k))
        elif isinstance(spec, VariablesSpec):
            cbs.append(VariablesRecorder(rec))
        elif isinstance(spec, TowersSpec):
            cbs.append(TowersRecorder(rec))
        else:  # pragma: no cover - every record type is handled above
            msg = f"no callback for record {spec!r}"
            raise TypeError(msg)
    return cbs


def _decay_every(factor: float, every: int) -> Callable[[int, Any], Any]:
    """``f(epoch_num, x) = x * factor`` when ``epoch_num % every == 0``, else ``x``."""

    def func(epoch_num: int, value: Any) -> Any:
        return value * factor if epoch_num % every == 0 else value

    return func


def _scale(factor: float) -> Callable[[Any], Any]:
    """``f(x) = x * factor``."""

    def func(value: Any) -> Any:
        return value * factor

    return func


def _repeat_run_step(trainer: Any, repeats: int) -> None:
    own = trainer.run_step

    def run_step() -> None:
        for _ in range(repeats):
            own()

    trainer.run_step = run_step


def _create_params(scenario: Scenario) -> None:
    import tensorflow as tf

    from towerkit.towers.compat import tf1

    for spec in scenario.callbacks:
        if isinstance(spec, PARAM_SPECS):
            tf1.get_variable(
                spec.name,
                initializer=tf.constant(spec.initial, tf.float32),
                trainable=False,
            )


def _train(
    trainer: Any,
    entry: TrainerEntry,
    scenario: Scenario,
    model: SuiteModel,
    rec: Recording,
    logdir: str | None,
) -> None:
    from towerkit.callbacks import JSONWriter
    from towerkit.sessinit import DictRestore

    loop = scenario.loop
    callbacks = build_callbacks(scenario, rec)
    monitors = [JSONWriter()] if scenario.json_writer else []
    if scenario.auto_resume is not None:
        _auto_resume(trainer, entry, scenario, model, callbacks, monitors, logdir)
        return
    init = (
        DictRestore({"global_step": np.int64(loop.start_global_step)})
        if loop.start_global_step
        else None
    )
    trainer.train_with_defaults(
        callbacks=callbacks,
        monitors=monitors,
        session_init=init,
        steps_per_epoch=loop.steps_per_epoch,
        starting_epoch=loop.starting_epoch,
        max_epoch=loop.max_epoch,
        extra_callbacks=[],
        logdir=logdir,
        logdir_action="keep",
    )


def _auto_resume(
    trainer: Any,
    entry: TrainerEntry,
    scenario: Scenario,
    model: SuiteModel,
    callbacks: list[Any],
    monitors: list[Any],
    logdir: str | None,
) -> None:
    from towerkit.sessinit import DictRestore, SaverRestore
    from towerkit.trainers import AutoResumeTrainConfig, launch_train_with_config

    spec = scenario.auto_resume
    if spec is None:
        msg = f"scenario {scenario.name!r} does not resume"
        raise ValueError(msg)
    options: dict[str, Any] = {}
    if spec.starting_epoch is not None:
        options["starting_epoch"] = spec.starting_epoch
    if scenario.precision.mixed:
        options["precision"] = scenario.precision
    if spec.marker is not None:
        marker = next(s for s in scenario.callbacks if isinstance(s, MarkerSpec))
        options["session_init"] = DictRestore({marker.name: np.float32(spec.marker)})
    config = AutoResumeTrainConfig(
        always_resume=spec.always_resume,
        model=model.as_model_desc(),
        data=model.make_input(),
        callbacks=callbacks,
        extra_callbacks=[],
        monitors=monitors,
        steps_per_epoch=scenario.loop.steps_per_epoch,
        max_epoch=scenario.loop.max_epoch,
        logdir=logdir,
        **options,
    )
    if not entry.builds_graph:
        launch_train_with_config(config, trainer)
        return
    plan = config.plan_resume(scenario.loop.steps_per_epoch)
    trainer.train_with_defaults(
        callbacks=config.callbacks,
        monitors=config.monitors,
        session_init=config.session_init
        if plan.checkpoint is None
        else SaverRestore(plan.checkpoint),
        steps_per_epoch=config.steps_per_epoch,
        starting_epoch=plan.starting_epoch,
        max_epoch=config.max_epoch,
        extra_callbacks=[],
        logdir=config.logdir,
        logdir_action="keep",
    )


def _files(logdir: str | None) -> list[str]:
    if logdir is None or not os.path.isdir(logdir):
        return []
    out = []
    for root, _, names in os.walk(logdir):
        for n in names:
            out.append(os.path.relpath(os.path.join(root, n), logdir))
    return sorted(out)


def _checkpoint_state(logdir: str | None) -> list[str]:
    from towerkit.towers.compat import tf1

    if logdir is None or not os.path.isfile(os.path.join(logdir, "checkpoint")):
        return []
    state = tf1.train.get_checkpoint_state(logdir)
    return [os.path.basename(p) for p in state.all_model_checkpoint_paths] if state else []


def _saved_steps(logdir: str | None) -> list[tuple[str, int]]:
    """``(model-<step>, global step stored in it)`` of each ModelSaver checkpoint in `logdir`."""
    import tensorflow as tf

    if logdir is None or not os.path.isdir(logdir):
        return []
    out = []
    for name in sorted(os.listdir(logdir)):
        if re.fullmatch(r"model-\d+\.index", name):
            prefix = name[: -len(".index")]
            step = int(tf.train.load_variable(os.path.join(logdir, prefix), "global_step"))
            out.append((prefix, step))
    return out


def _best_steps(scenario: Scenario, logdir: str | None) -> list[tuple[str, int]]:
    import tensorflow as tf

    out = []
    for spec in scenario.callbacks:
        if not isinstance(spec, BestSaverSpec) or logdir is None:
            continue
        if spec.top_k > 1:
            record = os.path.join(logdir, spec.filename + ".json")
            if os.path.isfile(record):
                with open(record, encoding="utf-8") as f:
                    for entry in json.load(f)["kept"]:
                        path = os.path.join(logdir, entry["name"])
                        step = int(tf.train.load_variable(path, "global_step"))
                        out.append((entry["name"], step))
            continue
        path = os.path.join(logdir, spec.filename)
        if os.path.isfile(path + ".index"):
            out.append((spec.filename, int(tf.train.load_variable(path, "global_step"))))
    return out


def execute(
    entry: TrainerEntry,
    scenario: Scenario,
    workdir: str | os.PathLike[str],
    *,
    rank: int = 0,
    container: str | None = None,
) -> RunResult:
    """Run `scenario` with a trainer of `entry` in a fresh graph; return what was recorded.

    An exception escaping training is recorded in the result (the checks report it
    with the traces), not raised.

    Args:
        entry: the trainer's row.
        scenario: the run.
        workdir: where the scenario's log directory goes (``workdir/<logdir>``).
        rank: the process's rank; its model reads data shard `rank`. Only rank 0 reads
            the log directory after the run (files, checkpoints, ``stats.json``).
        container: build the graph's stateful ops (variables, queues) in this
            resource container, so servers of a cluster hold fresh ones for each run.
    """
    import tensorflow as tf

    rec = Recording()
    model = SuiteModel(kind=scenario.model, shard=rank, ema_decay=scenario.ema_decay)
    logdir = None if scenario.logdir is None else str(Path(workdir) / scenario.logdir)
    error = None
    graph = tf.Graph()
    with graph.as_default(), graph.container(container or ""):
        try:
            _create_params(scenario)
            trainer = make_trainer(
                entry,
                model,
                setup=scenario.auto_resume is None,
                k=scenario.loop.steps_per_execution,
                precision=scenario.precision,
            )
            if scenario.non_chief:
                trainer.is_chief = False
            if scenario.loop.run_step_repeats != 1:
                _repeat_run_step(trainer, scenario.loop.run_step_repeats)
            _train(trainer, entry, scenario, model, rec, logdir)
        except Exception as err:  # recorded: the checks explain it with the traces
            logger.exception("scenario %s with %s failed", scenario.name, entry.name)
            error = f"{type(err).__name__}: {err}"
    # The log directory is the chief's, shared by every rank of a job: another rank that
    # ends first would read it while the chief's savers still write and delete files.
    seen = logdir if rank == 0 else None
    stats = "null"
    if seen is not None and os.path.isfile(os.path.join(seen, "stats.json")):
        stats = Path(seen, "stats.json").read_text(encoding="utf-8")
        json.loads(stats)
    return RunResult(
        scenario=scenario.name,
        rank=rank,
        traces=rec.traces,
        values=rec.values,
        error=error,
        files=_files(seen),
        checkpoint_state=_checkpoint_state(seen),
        best_steps=_best_steps(scenario, seen),
        saved_steps=_saved_steps(seen),
        stats=stats,
        variables=rec.variables,
        tower_calls=model.tower_calls,
        towers=rec.towers,
        predictor=rec.predictor,
    )
