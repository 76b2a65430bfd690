"""`launch_train_with_config`: the classic one-call interface over a `TrainConfig` and a trainer."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import attrs

from towerkit.callbacks.plumbing import console_lines
from towerkit.trainers._config import TrainConfig
from towerkit.trainers._defaults import callbacks_with_defaults
from towerkit.trainers._lock import LOCK_FILENAME
from towerkit.trainers._model import ModelDesc
from towerkit.trainers._resume import plan_logdir, truncate_stats
from towerkit.trainers._seeding import seed_run
from towerkit.trainers._sesscreate import default_session_creator
from towerkit.trainers._tower import SingleCostTrainer
from towerkit.trainers._traceback import filter_traceback

if TYPE_CHECKING:
    from towerkit.callbacks import LoopBounds

logger = logging.getLogger("towerkit.trainers")


@filter_traceback
def launch_train_with_config(config: TrainConfig, trainer: SingleCostTrainer) -> None:
    """Train ``config.model`` on ``config.data`` (or ``config.dataflow``) with `trainer`.

    It does three things, which you can do yourself for more control:

    1. wrap the input with ``apply_default_prefetch`` (a data flow gets a
       prefetching input source; an input source is used as it is, with prefetching
       added where it helps);
    2. ``trainer.setup_graph(model.get_input_signature(), input, model.build_graph,
       model.get_optimizer)`` (with the config's ``steps_per_execution``, ``precision``
       and ``xla`` where they are given);
    3. ``trainer.train_with_defaults(...)`` with the other options of `config`
       (``steps_per_epoch`` defaults to the input's size; for an `AutoResumeTrainConfig`,
       ``config.plan_resume(steps_per_epoch)`` reads the logdir now and the plan's
       checkpoint and starting epoch are used, the config left as it is).

    Raises:
        TypeError: `config` is not a `TrainConfig`, or `trainer` not a `SingleCostTrainer`.
        ValueError: the config has no model or no data.
        InputSizeUnknownError: no ``steps_per_epoch`` and an input of unknown size.
        LogdirNotEmptyError: the logdir holds files and ``logdir_action`` is ``"error"``
            (checked before the graph is built).

    An error of the user's making (these, a path, a restore mismatch) shows without
    towerkit's own frames; ``TOWERKIT_TRACEBACK=full`` shows them (`filter_traceback`).
    """
    from towerkit.trainers.inputs._staging import apply_default_prefetch

    if not isinstance(config, TrainConfig):
        msg = f"'config' must be a TrainConfig; got {type(config).__name__}"
        raise TypeError(msg)
    if not isinstance(trainer, SingleCostTrainer):
        msg = (
            f"'trainer' must be a SingleCostTrainer (e.g. SimpleTrainer()); got "
            f"{type(trainer).__name__}: other trainers are driven with trainer.train(...)"
        )
        raise TypeError(msg)
    missing = [
        name
        for name, value in (
            ("model", config.model),
            ("data or dataflow", config.data if config.data is not None else config.dataflow),
        )
        if value is None
    ]
    if missing:
        msg = f"launch_train_with_config needs a config with {' and '.join(missing)}"
        raise ValueError(msg)
    model = config.model
    if not isinstance(model, ModelDesc):
        msg = f"'config.model' must be a ModelDesc (with optimizer()) to train; got {type(model).__name__}"
        raise TypeError(msg)
    if config.logdir is not None and trainer.is_chief:
        _check_logdir(str(config.logdir), config.logdir_action)
    data = config.data if config.data is not None else config.dataflow
    seed_run(trainer.graph, data, config.seed, config.deterministic)
    source = apply_default_prefetch(
        config.data if config.data is not None else config.dataflow, trainer
    )
    options: dict[str, Any] = dict(_k_kwargs(config.steps_per_execution))
    if config.precision.mixed:  # as a keyword only when asked (trainers of other signatures)
        options["precision"] = config.precision
    if config.xla is not None:
        options["xla"] = config.xla
    trainer.setup_graph(
        model.get_input_signature(), source, model.build_graph, model.get_optimizer, **options
    )
    if config.steps_per_epoch is None:
        bounds = config.loop_bounds(input_size=source.size())
        logger.info("steps_per_epoch not given: using the input's size, %d", bounds.steps_per_epoch)
    else:
        bounds = config.loop_bounds()
    # the trainer takes the directory (and, as the chief, its lock) here, the one place it
    # is taken: the resume plan reads it and may rewrite stats.json, not while another run
    # writes it; a failure before the first step gives it back
    trainer.set_logdir(config.logdir, config.logdir_action)
    with trainer.run_dir.failed_start_cleanup():
        _launch(config, trainer, bounds)


def _skip_input(trainer: SingleCostTrainer, data_steps: int | None) -> int:
    """Make the trainer's input skip `data_steps` steps' data; the steps it skipped (0: none)."""
    source = trainer.input_source
    if not data_steps or source is None:
        return 0
    if source.skip_steps(data_steps):
        return data_steps
    logger.warning(
        "%s cannot skip the data of the %d steps the interrupted run trained on: the resumed "
        "run reads it from its first datapoint",
        source,
        data_steps,
    )
    return 0


def _check_logdir(logdir: str, action: str) -> None:
    """Refuse a logdir the run may not write to now, before the graph is built (seconds later)."""
    path = os.path.abspath(logdir)
    if os.path.isdir(path):
        entries = [n for n in os.listdir(path) if n != LOCK_FILENAME]
        plan_logdir(entries, action, path=path)


def _launch(config: TrainConfig, trainer: SingleCostTrainer, bounds: LoopBounds) -> None:
    """Train over `bounds` (the config's, moved to where a resumed run starts)."""
    session_init = config.session_init
    batch = getattr(trainer.input_source, "batch_size", None)
    plan = config.plan_resume(
        bounds.steps_per_epoch,
        batch if isinstance(batch, int) and not isinstance(batch, bool) else None,
    )
    if plan is not None:
        said = f"{type(config).__name__}: {plan.reason}"
        if plan.ignored:
            logger.warning("%s", said)
        elif trainer.is_chief:  # one console line, also where logging is not set up
            console_lines(logger, [said])
        else:
            logger.info("%s", said)
        for note in plan.notes:
            logger.warning("%s: %s", type(config).__name__, note)
        if plan.checkpoint is not None:
            from towerkit.sessinit import SaverRestore

            session_init = SaverRestore(plan.checkpoint)
            trainer.set_resume_position(plan.starting_step, _skip_input(trainer, plan.data_steps))
        bounds = attrs.evolve(bounds, starting_epoch=plan.starting_epoch)
        if plan.keep_stats_until_step is not None and trainer.is_chief:
            truncate_stats(str(config.logdir), plan.keep_stats_until_step)
    session_creator = config.session_creator
    if session_creator is None:
        session_creator = default_session_creator(config.session_config)
    callbacks, monitors = callbacks_with_defaults(
        config.callbacks, config.monitors, config.extra_callbacks, config.logdir
    )
    # as tensorpack's launcher, through the trainer's train: it took the logdir above, and
    # its graph must be built for the config's steps per call and precision (the record)
    k, precision = config.steps_per_execution, config.precision
    trainer.train(
        callbacks,
        monitors,
        session_creator,
        session_init,
        bounds.steps_per_epoch,
        bounds.starting_epoch,
        bounds.max_epoch,
        steps_per_execution=k if k != 1 else None,
        precision=precision if precision.mixed else None,
    )


def _k_kwargs(k: int) -> dict[str, int]:
    """``steps_per_execution`` as a keyword only when it is not 1 (trainers of other signatures)."""
    return {} if k == 1 else {"steps_per_execution": k}
