"""`TrainConfig` and `AutoResumeTrainConfig`: every option of a training run in one object."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from towerkit.callbacks import Callback, LoopBounds
from towerkit.towers import FLOAT32, Precision
from towerkit.trainers._model import ModelDescBase
from towerkit.trainers._resume import (
    LogdirSnapshot,
    ResumePlan,
    resume_plan,
    take_snapshot,
)
from towerkit.trainers._seams import DatasetFactory
from towerkit.trainers._train_spec import TrainSpec

if TYPE_CHECKING:
    import tensorflow as tf

    from towerkit.callbacks import MonitorBase
    from towerkit.sessinit import SessionInit
    from towerkit.trainers._sesscreate import SessionCreatorLike
    from towerkit.trainers.inputs._base import InputSource

logger = logging.getLogger("towerkit.trainers")

T = TypeVar("T")


class _Option(Generic[T]):
    """An option of a `TrainConfig`: read from its validated `TrainSpec`, settable.

    Setting one (``config.session_init = SmartInit(path)``) keeps the value; the spec is
    built again, with the constructor's checks, when an option is next read (at the
    latest when the run launches).
    """

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _Option[T]: ...

    @overload
    def __get__(self, obj: TrainConfig, objtype: type | None = None) -> T: ...

    def __get__(self, obj: TrainConfig | None, objtype: type | None = None) -> T | _Option[T]:
        if obj is None:
            return self
        value: T = getattr(obj.spec, self.name)
        return value

    def __set__(self, obj: TrainConfig, value: Any) -> None:
        obj._set_option(self.name, value)


class TrainConfig:
    """Every option of a single-cost training run, for `launch_train_with_config`.

    Args:
        dataflow: a data flow to read from; wrapped in a prefetching input source.
        data: an `InputSource`, or a ``tf.data.Dataset`` (built in the graph the
            trainer was made in) or a function of no argument building one, which
            becomes a prefetching `TFDatasetInput`. Give either `dataflow` or `data`.
        model: the `ModelDesc` to train.
        callbacks: callbacks to use.
        extra_callbacks: callbacks added after `callbacks`; ``DEFAULT_CALLBACKS()``
            when None. Pass ``[]`` to use none of the defaults.
        monitors: where statistics go; ``DEFAULT_MONITORS()`` when None (without a
            `logdir`, those of them that write no file: ``ScalarPrinter()``).
        session_creator: makes the session; ``NewSessionCreator`` with `session_config`
            (or the default session config) when None.
        session_config: a ``tf.compat.v1.ConfigProto`` for the default session
            creator; only without `session_creator`.
        session_init: loads values into the session (e.g. ``SmartInit(path)``), or None.
        starting_epoch: the first epoch (1-based).
        steps_per_epoch: steps in each epoch; the input's size when None; 0: an
            evaluation-only run (no step; the epoch's callbacks, an `InferenceRunner`,
            run once per epoch).
        max_epoch: the last epoch, inclusive.
        logdir: the directory the run writes to (checkpoints, statistics, events);
            None writes nothing.
        logdir_action: what to do when `logdir` already holds files: ``"error"``
            (the default: refuse), ``"overwrite"`` (move it aside to
            ``<logdir>.old-<timestamp>``) or ``"keep"`` (write into it).
        steps_per_execution: training steps per session call (K, dividing
            ``steps_per_epoch``): the trainer builds a K-step in-graph loop and the
            callbacks' per-step hooks run once per call (see the trainers README).

            .. versionadded:: 0.2
        precision: the mixed-precision policy of the training towers, a `Precision`
            or its name as Keras spells it: ``"float32"`` (the default), ``"mixed_bfloat16"``
            or ``"mixed_float16"`` (with dynamic loss scaling); see
            ``SingleCostTrainer.setup_graph``. ``config.precision`` is the record.

            .. versionadded:: 0.2
        seed: seeds the run, so that the same seed gives the same weights (see the
            trainers README, "Reproducible runs"): Python's ``random``, NumPy's global
            generator, the graph-level seed of the trainer's graph (every initializer,
            dropout and ``tf.data`` shuffle without a seed of its own) and the workers of
            an ``IterableInput`` given no ``seed``. None (the default) seeds nothing.

            .. versionadded:: 0.3
        deterministic: run TensorFlow's ops deterministically
            (``tf.config.experimental.enable_op_determinism()``, for the whole process);
            needs a `seed`. An op with no deterministic kernel then fails when it runs.

            .. versionadded:: 0.3
        xla: compile each training step's cost and gradients with XLA: False (the
            plain graph), True (XLA; a tower it cannot compile, such as one with a
            ``py_func``, ``numpy_function``, string op or summary, is refused at setup
            with an `XlaCompileError` naming the ops), ``"auto"`` (XLA where it
            compiles, else the plain graph and one warning saying why), or None (the
            default: the trainer's ``XLA_COMPILE``, False unless a subclass sets it;
            a value given here wins over it). See ``SingleCostTrainer.setup_graph``.
            XLA is not always faster: on 2 cores of an Intel Xeon (TensorFlow 2.21) it
            ran an LSTM at 1.39x the plain graph's steps/s, but an MLP at 0.89x and a
            small convnet at 0.20x (its CPU convolutions do not use oneDNN); see
            ``benchmarks/README.md``, "XLA". Measure before turning it on.

            .. versionadded:: 0.4

    Raises:
        TypeError: an option of the wrong kind, or an unknown keyword.
        ValueError: an option with a bad value, or options that exclude each other.
    """

    def __init__(
        self,
        dataflow: Iterable[Any] | None = None,
        data: InputSource | tf.data.Dataset | DatasetFactory | None = None,
        model: ModelDescBase | None = None,
        callbacks: Sequence[Callback] | None = None,
        extra_callbacks: Sequence[Callback] | None = None,
        monitors: Sequence[MonitorBase] | None = None,
        session_creator: SessionCreatorLike | None = None,
        session_config: Any = None,
        session_init: SessionInit | None = None,
        starting_epoch: int = 1,
        steps_per_epoch: int | None = None,
        max_epoch: int = 99999,
        *,
        logdir: str | os.PathLike[str] | None = None,
        logdir_action: str = "error",
        steps_per_execution: int = 1,
        precision: str | Precision = FLOAT32,
        seed: int | None = None,
        deterministic: bool = False,
        xla: bool | str | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            msg = f"TrainConfig got unknown options {sorted(kwargs)}"
            raise TypeError(msg)
        self._options: dict[str, Any] = dict(
            dataflow=dataflow,
            data=data,
            model=model,
            callbacks=callbacks,
            extra_callbacks=extra_callbacks,
            monitors=monitors,
            session_creator=session_creator,
            session_config=session_config,
            session_init=session_init,
            starting_epoch=starting_epoch,
            steps_per_epoch=steps_per_epoch,
            max_epoch=max_epoch,
            logdir=logdir,
            logdir_action=logdir_action,
            steps_per_execution=steps_per_execution,
            precision=precision,
            seed=seed,
            deterministic=deterministic,
            xla=xla,
        )
        self._spec: TrainSpec | None = TrainSpec(**self._options)

    # -- the options: settable after construction, as tensorpack's were --------------------

    @property
    def spec(self) -> TrainSpec:
        """The validated record of every option (`TrainSpec`), built anew after an option was set.

        Raises:
            TypeError, ValueError: an option set after construction is of the wrong kind
                or has a bad value (the messages of the constructor).
        """
        if self._spec is None:
            self._spec = TrainSpec(**self._options)
        return self._spec

    def _set_option(self, name: str, value: Any) -> None:
        self._options[name] = value
        self._spec = None

    def loop_bounds(self, input_size: int | None = None) -> LoopBounds:
        """The run's `LoopBounds`: ``steps_per_epoch``, or `input_size` when it is None."""
        return self.spec.loop_bounds(input_size)

    dataflow: _Option[Iterable[Any] | None] = _Option("The data flow to read from, or None.")
    data: _Option[InputSource | tf.data.Dataset | DatasetFactory | None] = _Option(
        "The input source, dataset or dataset function, or None."
    )
    model: _Option[ModelDescBase | None] = _Option("The model to train.")
    callbacks: _Option[tuple[Callback, ...]] = _Option("The callbacks (a tuple).")
    extra_callbacks: _Option[tuple[Callback, ...] | None] = _Option(
        "The callbacks after `callbacks`; None for ``DEFAULT_CALLBACKS()``."
    )
    monitors: _Option[tuple[MonitorBase, ...] | None] = _Option(
        "The monitors; None for ``DEFAULT_MONITORS()``."
    )
    session_creator: _Option[SessionCreatorLike | None] = _Option(
        "What makes the session; None for the default creator."
    )
    session_config: _Option[Any] = _Option(
        "The ``ConfigProto`` of the default session creator, or None."
    )
    session_init: _Option[SessionInit | None] = _Option(
        "What loads values into the session, or None."
    )
    starting_epoch: _Option[int] = _Option("The first epoch (1-based).")
    steps_per_epoch: _Option[int | None] = _Option("Steps in each epoch; None: the input's size.")
    max_epoch: _Option[int] = _Option("The last epoch, inclusive.")
    logdir: _Option[str | None] = _Option("The run's directory (absolute), or None.")
    logdir_action: _Option[str] = _Option("What to do with a non-empty `logdir`.")
    steps_per_execution: _Option[int] = _Option("Training steps per session call (K).")
    precision: _Option[Precision] = _Option("The mixed-precision policy (a `Precision` record).")
    seed: _Option[int | None] = _Option("The run's seed, or None.")
    deterministic: _Option[bool] = _Option("Whether TensorFlow's ops run deterministically.")
    xla: _Option[bool | str | None] = _Option(
        "Whether the towers compile with XLA: False, True, 'auto', or None (``XLA_COMPILE``)."
    )

    def plan_resume(self, steps_per_epoch: int, batch_size: int | None = None) -> ResumePlan | None:
        """How this run continues an earlier one; None for a `TrainConfig` (it never resumes).

        `launch_train_with_config` calls it once, when the run launches, and applies the
        plan; the config itself is never changed.

        Args:
            steps_per_epoch: the run's steps per epoch.
            batch_size: the input's batch size, when it says.
        """
        del steps_per_epoch, batch_size
        return None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={type(self.model).__name__ if self.model else None}, "
            f"steps_per_epoch={self.steps_per_epoch}, starting_epoch={self.starting_epoch}, "
            f"max_epoch={self.max_epoch}, logdir={self.logdir!r})"
        )


class AutoResumeTrainConfig(TrainConfig):
    """A `TrainConfig` that continues the run found in its `logdir`.

    Running the same command again after the process died (even by SIGKILL in the
    middle of an epoch) or was preempted (SIGTERM) continues training: the newest
    checkpoint it can continue exactly is restored (the ``session_init`` of the run):
    one saved at the end of an epoch that is consistent with the statistics file, the
    epoch after it being the ``starting_epoch``, or one saved inside an epoch whose
    position `ModelSaver` recorded (``positions.json``), that epoch then continuing at
    the next step with the input skipping the data already trained on; and
    statistics written after that checkpoint are dropped (the old file is kept as
    ``stats.json.bak``), so the global step, the epoch numbers, the hyper-parameters
    (restored with the variables) and ``stats.json`` continue from one consistent
    moment, and the run ends at exactly the global step of an uninterrupted one,
    whatever the schedule of the saves (`ModelSaver` keeps the epoch-end checkpoints
    this needs). See `resume_plan` for the exact rule.

    With no checkpoint in `logdir`, training starts as the options say.

    The log directory is read when the run launches (`plan_resume`, called by
    `launch_train_with_config`), not at construction, and the config keeps the
    options as given: ``session_init`` and ``starting_epoch`` are the user's.

    Args:
        always_resume: when True, a checkpoint found wins over the ``session_init``
            and ``starting_epoch`` given; when False, each of those two given by the
            user wins over what resuming would set. The usual case for True: a run
            starting from a pre-trained model (``session_init``) must load it the
            first time, and its own checkpoint after a restart.
        kwargs: as for `TrainConfig`; ``logdir`` is required, and ``logdir_action``
            is ``"keep"`` (the directory is resumed from).

    Raises:
        ValueError: no `logdir`, a ``logdir_action`` other than ``"keep"``, or
            ``steps_per_epoch=0`` (an evaluation-only run resumes nothing).
    """

    def __init__(self, always_resume: bool = True, **kwargs: Any) -> None:
        if kwargs.get("logdir") is None:
            msg = "AutoResumeTrainConfig needs 'logdir': the directory to resume from and write to"
            raise ValueError(msg)
        action = kwargs.setdefault("logdir_action", "keep")
        if action != "keep":
            msg = (
                f"AutoResumeTrainConfig resumes from its logdir, so 'logdir_action' must be "
                f"'keep'; got {action!r}"
            )
            raise ValueError(msg)
        if kwargs.get("steps_per_epoch") == 0:
            msg = (
                "AutoResumeTrainConfig continues training, and steps_per_epoch=0 (an "
                "evaluation-only run) trains nothing: evaluate a checkpoint with "
                "TrainConfig(session_init=SmartInit(path), steps_per_epoch=0, max_epoch=1)"
            )
            raise ValueError(msg)
        super().__init__(**kwargs)
        self.always_resume = bool(always_resume)
        self._gave_session_init = kwargs.get("session_init") is not None
        self._gave_starting_epoch = "starting_epoch" in kwargs

    def _set_option(self, name: str, value: Any) -> None:
        super()._set_option(name, value)
        if name == "session_init":
            self._gave_session_init = value is not None
        elif name == "starting_epoch":
            self._gave_starting_epoch = True

    def snapshot(self) -> LogdirSnapshot:
        """What the log directory holds now (its checkpoints and statistics records)."""
        from towerkit.sessinit import get_all_checkpoints

        logdir = str(self.logdir)
        if not os.path.isdir(logdir):
            return LogdirSnapshot()
        found = get_all_checkpoints(logdir)
        return take_snapshot(
            logdir, [(os.path.join(logdir, os.path.basename(p)), s) for p, s in found]
        )

    def plan_resume(self, steps_per_epoch: int, batch_size: int | None = None) -> ResumePlan:
        """The `ResumePlan` for a run of `steps_per_epoch` steps per epoch, read from the logdir now.

        `batch_size`: the input's, when it says (a position saved with another one
        makes the input skip the same datapoints).
        """
        return resume_plan(
            self.snapshot(),
            steps_per_epoch=steps_per_epoch,
            starting_epoch=self.starting_epoch,
            user_session_init=self._gave_session_init,
            user_starting_epoch=self._gave_starting_epoch,
            always_resume=self.always_resume,
            writes_stats=self._writes_stats(),
            batch_size=batch_size,
        )

    def _writes_stats(self) -> bool:
        from towerkit.callbacks import JSONWriter

        if self.monitors is None:
            return True  # DEFAULT_MONITORS() holds a JSONWriter
        return any(isinstance(m, JSONWriter) for m in self.monitors)
