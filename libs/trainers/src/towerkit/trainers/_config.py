"""`TrainConfig` and `AutoResumeTrainConfig`: every option of a training run in one object."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from towerkit.callbacks import Callback
from towerkit.trainers._base import _as_callback_list, _reject_monitors
from towerkit.trainers._model import ModelDescBase
from towerkit.trainers._resume import (
    LOGDIR_ACTIONS,
    LogdirSnapshot,
    ResumePlan,
    resume_plan,
    take_snapshot,
)

logger = logging.getLogger("towerkit.trainers")


def _check_epochs(starting_epoch: Any, max_epoch: Any, steps_per_epoch: Any) -> None:
    bad = []
    if (
        not isinstance(starting_epoch, int)
        or isinstance(starting_epoch, bool)
        or starting_epoch < 1
    ):
        bad.append(f"'starting_epoch' must be an int >= 1 (1-based); got {starting_epoch!r}")
    if not isinstance(max_epoch, int) or isinstance(max_epoch, bool):
        bad.append(f"'max_epoch' must be an int; got {max_epoch!r}")
    elif isinstance(starting_epoch, int) and max_epoch < starting_epoch - 1:
        bad.append(
            f"'max_epoch' must be >= starting_epoch - 1 (inclusive range); got "
            f"max_epoch={max_epoch}, starting_epoch={starting_epoch}"
        )
    if steps_per_epoch is not None and (
        not isinstance(steps_per_epoch, int)
        or isinstance(steps_per_epoch, bool)
        or steps_per_epoch <= 0
    ):
        bad.append(f"'steps_per_epoch' must be an int > 0 or None; got {steps_per_epoch!r}")
    if bad:
        raise ValueError("; ".join(bad))


class TrainConfig:
    """Every option of a single-cost training run, for `launch_train_with_config`.

    Args:
        dataflow: a data flow to read from; wrapped in a prefetching input source.
        data: an `InputSource`. Give either `dataflow` or `data`.
        model: the `ModelDesc` to train.
        callbacks: callbacks to use.
        extra_callbacks: callbacks added after `callbacks`; ``DEFAULT_CALLBACKS()``
            when None. Pass ``[]`` to use none of the defaults.
        monitors: where statistics go; ``DEFAULT_MONITORS()`` when None (they write
            files, so they need `logdir`).
        session_creator: makes the session; ``NewSessionCreator`` with `session_config`
            (or the default session config) when None.
        session_config: a ``tf.compat.v1.ConfigProto`` for the default session
            creator; only without `session_creator`.
        session_init: loads values into the session (e.g. ``SmartInit(path)``), or None.
        starting_epoch: the first epoch (1-based).
        steps_per_epoch: steps in each epoch; the input's size when None.
        max_epoch: the last epoch, inclusive.
        logdir: the directory the run writes to (checkpoints, statistics, events);
            None writes nothing.
        logdir_action: what to do when `logdir` already holds files: ``"error"``
            (the default: refuse), ``"overwrite"`` (move it aside to
            ``<logdir>.old-<timestamp>``) or ``"keep"`` (write into it).

    Raises:
        TypeError: an option of the wrong kind, or an unknown keyword.
        ValueError: an option with a bad value, or options that exclude each other.
    """

    def __init__(
        self,
        dataflow: Any = None,
        data: Any = None,
        model: ModelDescBase | None = None,
        callbacks: Sequence[Callback] | None = None,
        extra_callbacks: Sequence[Callback] | None = None,
        monitors: Sequence[Callback] | None = None,
        session_creator: Any = None,
        session_config: Any = None,
        session_init: Any = None,
        starting_epoch: int = 1,
        steps_per_epoch: int | None = None,
        max_epoch: int = 99999,
        *,
        logdir: str | os.PathLike[str] | None = None,
        logdir_action: str = "error",
        **kwargs: Any,
    ) -> None:
        if kwargs:
            msg = f"TrainConfig got unknown options {sorted(kwargs)}"
            raise TypeError(msg)
        if dataflow is not None and data is not None:
            msg = "TrainConfig takes 'dataflow' or 'data', not both"
            raise ValueError(msg)
        if data is not None and not callable(getattr(data, "get_input_tensors", None)):
            msg = f"'data' must be an InputSource; got {type(data).__name__}"
            raise TypeError(msg)
        if model is not None and not isinstance(model, ModelDescBase):
            msg = f"'model' must be a ModelDesc; got {type(model).__name__}"
            raise TypeError(msg)
        if session_creator is not None and session_config is not None:
            msg = "TrainConfig takes 'session_creator' or 'session_config', not both"
            raise ValueError(msg)
        if session_creator is not None and not callable(
            getattr(session_creator, "create_session", None)
        ):
            msg = f"'session_creator' must have a create_session() method; got {type(session_creator).__name__}"
            raise TypeError(msg)
        if session_init is not None and not callable(getattr(session_init, "init", None)):
            msg = f"'session_init' must have an init(sess) method or be None; got {type(session_init).__name__}"
            raise TypeError(msg)
        _check_epochs(starting_epoch, max_epoch, steps_per_epoch)
        if logdir_action not in LOGDIR_ACTIONS:
            msg = f"'logdir_action' must be one of {LOGDIR_ACTIONS}; got {logdir_action!r}"
            raise ValueError(msg)
        if logdir is not None and not isinstance(logdir, (str, os.PathLike)):
            msg = f"'logdir' must be a path or None; got {type(logdir).__name__}"
            raise TypeError(msg)
        self.dataflow = dataflow
        self.data = data
        self.model = model
        self.callbacks = _as_callback_list("callbacks", callbacks)
        _reject_monitors("callbacks", self.callbacks)
        self.extra_callbacks = (
            None
            if extra_callbacks is None
            else _as_callback_list("extra_callbacks", extra_callbacks)
        )
        _reject_monitors("extra_callbacks", self.extra_callbacks or [])
        self.monitors = None if monitors is None else _as_callback_list("monitors", monitors)
        self.session_creator = session_creator
        self.session_config = session_config
        self.session_init = session_init
        self.starting_epoch = starting_epoch
        self.steps_per_epoch = steps_per_epoch
        self.max_epoch = max_epoch
        self.logdir = None if logdir is None else os.path.abspath(os.fspath(logdir))
        self.logdir_action = logdir_action

    def _resolve(self, steps_per_epoch: int) -> ResumePlan | None:
        """The resume plan for a run of `steps_per_epoch` steps per epoch; None: no resuming."""
        del steps_per_epoch
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
    middle of an epoch) continues training: the newest checkpoint that is
    consistent with the statistics file is restored (``session_init``), the epoch
    after it is the ``starting_epoch``, and statistics written after that
    checkpoint are dropped (the old file is kept as ``stats.json.bak``), so the
    global step, the epoch numbers, the hyper-parameters (restored with the
    variables) and ``stats.json`` continue from one consistent moment. See
    `resume_plan` for the exact rule.

    With no checkpoint in `logdir`, training starts as the options say.

    ``session_init`` and ``starting_epoch`` are set at construction when
    ``steps_per_epoch`` is given, else when the run is launched (the input's size
    is known then); ``resume`` holds the plan.

    Args:
        always_resume: when True, a checkpoint found wins over the ``session_init``
            and ``starting_epoch`` given; when False, each of those two given by the
            user wins over what resuming would set. The usual case for True: a run
            starting from a pre-trained model (``session_init``) must load it the
            first time, and its own checkpoint after a restart.
        kwargs: as for `TrainConfig`; ``logdir`` is required, and ``logdir_action``
            is ``"keep"`` (the directory is resumed from).

    Raises:
        ValueError: no `logdir`, or a ``logdir_action`` other than ``"keep"``.
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
        super().__init__(**kwargs)
        self.always_resume = bool(always_resume)
        self._user_session_init = self.session_init
        self._user_starting_epoch = self.starting_epoch
        self._gave_session_init = kwargs.get("session_init") is not None
        self._gave_starting_epoch = "starting_epoch" in kwargs
        self.snapshot = self._scan()
        self.resume: ResumePlan | None = None
        if self.steps_per_epoch is not None:
            self._resolve(self.steps_per_epoch)

    def _scan(self) -> LogdirSnapshot:
        from towerkit.sessinit import get_all_checkpoints

        logdir = str(self.logdir)
        if not os.path.isdir(logdir):
            return LogdirSnapshot()
        found = get_all_checkpoints(logdir)
        return take_snapshot(
            logdir, [(os.path.join(logdir, os.path.basename(p)), s) for p, s in found]
        )

    def _resolve(self, steps_per_epoch: int) -> ResumePlan:
        """Compute the resume plan for `steps_per_epoch` and set ``session_init``/``starting_epoch``."""
        from towerkit.sessinit import SaverRestore

        plan = resume_plan(
            self.snapshot,
            steps_per_epoch=steps_per_epoch,
            starting_epoch=self._user_starting_epoch,
            user_session_init=self._gave_session_init,
            user_starting_epoch=self._gave_starting_epoch,
            always_resume=self.always_resume,
        )
        if plan != self.resume:
            logger.info("AutoResumeTrainConfig: %s", plan.reason)
        self.resume = plan
        self.session_init = (
            SaverRestore(plan.checkpoint)
            if plan.checkpoint is not None
            else self._user_session_init
        )
        self.starting_epoch = plan.starting_epoch
        return plan
