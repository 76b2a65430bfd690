"""`Trainer.train` and `Trainer.train_with_defaults`: the documented signatures, as adapters.

Each checks its arguments, takes the log directory and builds the loop's record
(`LoopBounds`), then hands over to ``Trainer._train``, which ``launch_train_with_config``
calls with its config's record.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from towerkit.towers import Precision, precision_policy
from towerkit.trainers._defaults import callbacks_with_defaults
from towerkit.trainers._sesscreate import default_session_creator
from towerkit.trainers._traceback import filter_traceback

if TYPE_CHECKING:
    from towerkit.callbacks import Callback, LoopBounds, MonitorBase, Monitors
    from towerkit.sessinit import SessionInit
    from towerkit.trainers._run_dir import RunDir
    from towerkit.trainers._sesscreate import SessionCreatorLike


class TrainCalls:
    """The mixin of `Trainer` holding ``train`` and ``train_with_defaults``."""

    if TYPE_CHECKING:  # what they use of `Trainer`
        _phase: str
        _run_dir: RunDir

        def set_logdir(
            self, logdir: str | os.PathLike[str] | None, logdir_action: str = "error"
        ) -> None: ...

        def _check_built_for(self, k: int | None, precision: Precision | None) -> None: ...

        def _bounds_for(
            self, steps_per_epoch: int, starting_epoch: int, max_epoch: int
        ) -> LoopBounds: ...

        def _train(
            self,
            bounds: LoopBounds,
            callbacks: Sequence[Callback] | None,
            monitors: Sequence[MonitorBase] | Monitors | None,
            session_creator: SessionCreatorLike,
            session_init: SessionInit | None,
        ) -> None: ...

    @filter_traceback
    def train_with_defaults(
        self,
        _sentinel: Any = None,
        callbacks: Sequence[Callback] | None = None,
        monitors: Sequence[MonitorBase] | Monitors | None = None,
        session_creator: SessionCreatorLike | None = None,
        session_init: SessionInit | None = None,
        steps_per_epoch: int | None = None,
        starting_epoch: int = 1,
        max_epoch: int = 9999999,
        extra_callbacks: Sequence[Callback] | None = None,
        *,
        logdir: str | os.PathLike[str] | None = None,
        logdir_action: str = "error",
        steps_per_execution: int | None = None,
        precision: str | Precision | None = None,
    ) -> None:
        """``train`` with defaults for every option but ``steps_per_epoch``.

        Callbacks are ``callbacks + extra_callbacks`` (default ``DEFAULT_CALLBACKS()``);
        ``monitors`` default to ``DEFAULT_MONITORS()`` (they write files: a ``logdir``
        is needed), ``session_creator`` to ``NewSessionCreator`` with the default
        config, ``session_init`` to none, ``steps_per_epoch`` to the input's size. Keywords only.

        Raises:
            TypeError: positional arguments.
            ValueError: no ``steps_per_epoch`` and no input size to take it from, or
                default monitors without a ``logdir``.
        """
        if _sentinel is not None:
            msg = "train_with_defaults() takes keyword arguments only"
            raise TypeError(msg)
        if steps_per_epoch is None:
            steps_per_epoch = self._default_steps_per_epoch()
        cbs, monitors = callbacks_with_defaults(callbacks, monitors, extra_callbacks, logdir)
        if session_creator is None:
            session_creator = default_session_creator()
        self.train(
            cbs,
            monitors,
            session_creator,
            session_init,
            steps_per_epoch,
            starting_epoch,
            max_epoch,
            logdir=logdir,
            logdir_action=logdir_action,
            steps_per_execution=steps_per_execution,
            precision=precision,
        )

    def _default_steps_per_epoch(self) -> int:  # none for the base trainer
        msg = "'steps_per_epoch' is required: this trainer has no input whose size could give it"
        raise ValueError(msg)

    @filter_traceback
    def train(
        self,
        callbacks: Sequence[Callback] | None,
        monitors: Sequence[MonitorBase] | Monitors | None,
        session_creator: SessionCreatorLike,
        session_init: SessionInit | None,
        steps_per_epoch: int,
        starting_epoch: int = 1,
        max_epoch: int = 9999999,
        *,
        logdir: str | os.PathLike[str] | None = None,
        logdir_action: str = "error",
        steps_per_execution: int | None = None,
        precision: str | Precision | None = None,
    ) -> None:
        """Set the log directory, set up callbacks, initialize and run the loop.

        Same as ``set_logdir(logdir, logdir_action)``, ``setup_callbacks(callbacks,
        monitors)``, ``initialize(session_creator, session_init)``,
        ``main_loop(steps_per_epoch, starting_epoch, max_epoch)``. ``steps_per_execution``
        and ``precision``, when given, must be those the graph was built for.
        """
        self._check_built_for(
            steps_per_execution, None if precision is None else precision_policy(precision)
        )
        bounds = self._bounds_for(steps_per_epoch, starting_epoch, max_epoch)
        _train_logdir(self, logdir, logdir_action)
        self._train(bounds, callbacks, monitors, session_creator, session_init)


def _train_logdir(
    trainer: TrainCalls, logdir: str | os.PathLike[str] | None, logdir_action: str
) -> None:
    """``train(logdir=...)``: taken on a fresh trainer, else the one already taken (or None)."""
    if trainer._run_dir.check_train_logdir(logdir, fresh=trainer._phase == "new"):
        trainer.set_logdir(logdir, logdir_action)
