"""The trainer's read-only view for callbacks: its graph, counters, bounds, monitors and logdir."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from towerkit.callbacks import Callback, LoopBounds, Monitors
    from towerkit.towers import TowerFunc, TowerTensorHandles
    from towerkit.trainers._loop_driver import LoopDriver
    from towerkit.trainers._run_dir import RunDir

__all__ = ["TrainerViewMixin"]


class TrainerViewMixin:
    """The properties of `towerkit.callbacks.TrainerView` over a trainer's private fields.

    `Trainer` sets the fields; this mixin only reads them.
    """

    _graph: Any
    _driver: LoopDriver
    _monitors: Monitors | None
    _run_dir: RunDir
    _registered: list[Callback]
    hooked_sess: Any

    @property
    def graph(self) -> Any:
        """The ``tf.Graph`` the trainer builds and runs."""
        return self._graph

    @property
    def epoch_num(self) -> int:
        """The running epoch (1-based); ``starting_epoch - 1`` before the first ``before_epoch``."""
        return self._driver.epoch_num

    @property
    def local_step(self) -> int:
        """0-based index of the current step in its epoch; -1 before an epoch's first step."""
        return self._driver.local_step

    @property
    def global_step(self) -> int:
        """``hooked_sess.run`` calls so far, counting those restored from a checkpoint.

        It is the count after the call that just returned (in ``after_run`` and
        ``trigger_step``) and before the call about to run (in ``before_run``).
        """
        hs = self.hooked_sess
        runs = hs.run_calls if hs is not None else 0
        return self._driver.global_step(runs)

    @property
    def data_steps(self) -> int | None:
        """The global steps whose data the input has produced since it started from its first datapoint.

        None when unknown (a run resumed from a checkpoint without a position record).
        """
        return self._run_dir.data_steps(self.global_step - self._driver.start_global_step)

    @property
    def loop_bounds(self) -> LoopBounds | None:
        """The run's `LoopBounds`, validated once by ``main_loop``; None before it."""
        return self._driver.bounds

    @property
    def steps_per_epoch(self) -> int:
        """Steps (``run_step`` calls) in each epoch (``loop_bounds``); 0 before ``main_loop``."""
        bounds = self._driver.bounds
        return 0 if bounds is None else bounds.steps_per_epoch

    @property
    def starting_epoch(self) -> int:
        """The first epoch of this run, 1-based (``loop_bounds``); 1 before ``main_loop``."""
        bounds = self._driver.bounds
        return 1 if bounds is None else bounds.starting_epoch

    @property
    def max_epoch(self) -> int:
        """The last epoch of this run, inclusive (``loop_bounds``); 0 before ``main_loop``."""
        bounds = self._driver.bounds
        return 0 if bounds is None else bounds.max_epoch

    @property
    def monitors(self) -> Monitors | None:
        """The `Monitors` group statistics go to; set by ``setup_callbacks``."""
        return self._monitors

    @property
    def logdir(self) -> str | None:
        """The directory this run writes to, or None when it writes no files."""
        return self._run_dir.path

    @property
    def tower_func(self) -> TowerFunc | None:
        """The tower function; None for a trainer without one."""
        return None

    @property
    def towers(self) -> TowerTensorHandles | None:
        """The tower handles; None for a trainer without a tower function."""
        return None

    @property
    def run_failure(self) -> BaseException | None:
        """The exception that is ending the run (``KeyboardInterrupt`` for Ctrl-C), or None.

        Set when the loop fails, before ``after_train``: a callback saving there reads it
        to tell a failure from an end (the epochs done, or `StopTraining`).

        .. versionadded:: 0.2
        """
        return getattr(self, "_failure", None)

    @property
    def callbacks(self) -> tuple[Callback, ...]:
        """The callbacks registered so far, in the order they are called."""
        return tuple(self._registered)
