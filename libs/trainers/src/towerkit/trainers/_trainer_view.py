"""The trainer's state: the parts it holds, its settings, and the read-only view callbacks get.

`TrainerState` is the first layer of `Trainer`: its ``__init__`` declares every field of
a trainer, once (the parts: the run directory `RunDir`, the loop driver `LoopDriver`;
the callbacks; the phase; the preemption policy), and it answers what
`towerkit.callbacks.TrainerView` asks (counters, bounds, monitors, logdir), the steps per
session call (kept by the loop driver, checked by ``_multistep``'s functions), and the
resume and preemption settings. `Trainer` (``_base``) adds the phases and the loop's
run; it declares no field of its own but the session's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from towerkit.callbacks import Callbacks, LoopBounds
from towerkit.towers import FLOAT32, Precision
from towerkit.towers.compat import tf1
from towerkit.trainers._errors import TrainerStateError
from towerkit.trainers._loop_driver import LoopDriver
from towerkit.trainers._multistep import (
    check_k,
    global_step_increment,
    k_after_setting,
    train_k_refusal,
)
from towerkit.trainers._precision import built_in_refusal
from towerkit.trainers._preempt import PreemptionPolicy
from towerkit.trainers._run_dir import RunDir

if TYPE_CHECKING:
    from towerkit.callbacks import Callback, Monitors
    from towerkit.towers import TowerFunc, TowerTensorHandles
    from towerkit.trainers._interrupt import StopControl
    from towerkit.trainers._queue_runners import QueueRunnerThreads

__all__ = ["TrainerState"]

_PHASES = ("new", "callbacks", "initialized", "running", "done")


class TrainerState:
    """The fields of a trainer, its settings and the view callbacks read (see the module).

    Attributes:
        is_chief: whether this process is the chief worker (it owns the logdir).
        train_op: the op the default ``run_step`` runs.
        sess: the ``tf.compat.v1.Session``, from ``initialize`` on.
        hooked_sess: the `HookedSession` whose ``run`` calls the callbacks'
            ``before_run``/``after_run``, from ``initialize`` on.
    """

    is_chief: bool = True
    SUPPORTS_STEPS_PER_EXECUTION: bool = True
    """Whether the trainer can run several steps per session call (``steps_per_execution``)."""
    PREEMPT_EVERYWHERE: bool = False
    """Whether every process of the job takes the preemption signals and they agree on
    when to stop (horovod's `PreemptionVote`, a cluster's `PreemptionFlag`); else the
    chief's alone."""

    def __init__(self) -> None:
        self._graph = tf1.get_default_graph()
        self.train_op: Any = None
        self.sess: Any = None
        self.hooked_sess: Any = None
        self._phase = "new"
        self._registered: list[Callback] = []
        self._callbacks: Callbacks = Callbacks(())
        self._monitors: Monitors | None = None
        self._driver = LoopDriver()
        self._global_step_var: Any = None
        self._step_op: Any = None
        self._queue_runners: QueueRunnerThreads | None = None
        self._interrupt: StopControl | None = None
        self._failure: BaseException | None = None
        self._run_dir = RunDir(self._stepped)
        self._preemption = PreemptionPolicy()
        self._preempted = False

    # -- the view of `towerkit.callbacks.TrainerView` ----------------------------------

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
        return self._driver.global_step(hs.run_calls if hs is not None else 0)

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
        return self._failure

    @property
    def callbacks(self) -> tuple[Callback, ...]:
        """The callbacks registered so far, in the order they are called."""
        return tuple(self._registered)

    @property
    def precision(self) -> Precision:
        """The mixed-precision policy the graph was built in (float32: a trainer without towers)."""
        return FLOAT32

    @property
    def run_dir(self) -> RunDir:
        """The trainer's run directory part (`RunDir`); plumbing, no stability promise.

        It holds the logdir, its lock, the resume position and what a failing start
        gives back; ``launch_train_with_config`` wraps its own start in
        ``run_dir.failed_start_cleanup()``.
        """
        return self._run_dir

    # -- steps per session call (K), kept by the loop driver ----------------------------

    @property
    def steps_per_execution(self) -> int:
        """Training steps per session call (K): each ``hooked_sess.run`` advances the global step by K.

        .. versionadded:: 0.2
        """
        return self._driver.steps_per_execution

    def _bounds_for(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> LoopBounds:
        """The loop's record of these bounds (validated); the steps per call must divide."""
        return self._driver.bounds_for(steps_per_epoch, starting_epoch, max_epoch)

    def _set_steps_per_execution(self, value: object) -> int:
        """Set K while the graph is being built; refuse it for a trainer that cannot run it."""
        k = k_after_setting(
            value,
            type(self).__name__,
            supported=self.SUPPORTS_STEPS_PER_EXECUTION,
            refusal=self._k_refusal,
            built=self._built_k,
        )
        self._driver.steps_per_execution = k
        return k

    def _built_k(self) -> int | None:
        """The K the graph's global step increment is built for; None before it is built."""
        return None if self._step_op is None else self._driver.steps_per_execution

    def _ensure_global_step(self) -> None:
        """Create the global step variable and the op that advances it by K with every run."""
        if self._step_op is None:
            k = self._driver.steps_per_execution
            self._global_step_var, self._step_op = global_step_increment(self._graph, k)

    def _k_refusal(self) -> str:
        """Why the trainer cannot run several steps per call (for the error message)."""
        return "it has no K-step training loop"

    def _check_built_for(self, k: int | None, precision: Precision | None) -> None:
        """``train(steps_per_execution=..., precision=...)`` must name what the graph was built for."""
        name = type(self).__name__
        if precision is not None:
            refusal = built_in_refusal(precision, self.precision, name)
            if refusal is not None:
                raise ValueError(refusal)
        if k is not None:
            refusal = train_k_refusal(check_k(k), self._driver.steps_per_execution, name)
            if refusal is not None:
                raise ValueError(refusal)

    # -- resuming at a step, preemption ---------------------------------------------------

    def set_resume_position(self, steps_in_epoch: int = 0, data_steps: int | None = 0) -> None:
        """Start the first epoch of ``main_loop`` after `steps_in_epoch` of its steps.

        A run resumed from a checkpoint saved inside an epoch (`AutoResumeTrainConfig`
        calls this) runs only the rest of that epoch: ``before_epoch`` runs, then the
        steps from ``local_step == steps_in_epoch`` on, then the epoch's end as usual.

        Args:
            steps_in_epoch: the steps of the first epoch done already (>= 0, a multiple
                of ``steps_per_execution``, less than or equal to ``steps_per_epoch``).
            data_steps: the global steps whose data the input produced before this
                run (its input skips them: `InputSource.skip_steps`), or None when
                unknown. It is recorded with each checkpoint (``positions.json``).

        Raises:
            ValueError: a negative count.
            TrainerStateError: the loop started already.
        """
        if self._phase in ("running", "done"):
            msg = "set_resume_position() must be called before main_loop"
            raise TrainerStateError(msg)
        self._run_dir.set_resume_position(steps_in_epoch, data_steps)

    @property
    def resumed_steps_in_epoch(self) -> int:
        """The steps of the first epoch that an earlier run did (`set_resume_position`)."""
        return self._run_dir.resumed_in_epoch

    def set_preemption(
        self, signals: Sequence[str | int] | None = None, grace_s: float | None = None
    ) -> None:
        """Choose the signals that preempt training and the grace the run has (`PreemptionPolicy`).

        Args:
            signals: signal names or numbers (default ``("SIGTERM", "SIGUSR1")``);
                empty: none (a SIGTERM then ends the process as Python's default does).
            grace_s: seconds from the signal to the exit (default 30).
        """
        changes: dict[str, Any] = {}
        if signals is not None:
            changes["signals"] = signals
        if grace_s is not None:
            changes["grace_s"] = grace_s
        self._preemption = attrs.evolve(self._preemption, **changes)

    @property
    def preempted(self) -> bool:
        """Whether a preemption signal stopped the loop (``main_loop`` then raises `TrainingPreempted`)."""
        return self._preempted

    def _preemption_here(self) -> tuple[PreemptionPolicy | None, bool]:
        """The policy this process installs, and whether the job's processes agree on the step.

        The chief's alone by default; every process's, agreeing, where the trainer says
        so (`PREEMPT_EVERYWHERE`).
        """
        if self.PREEMPT_EVERYWHERE:
            return self._preemption, True
        return (self._preemption if self.is_chief else None), False

    # -- a run that fails before its first step, and the phases ----------------------------

    def _stepped(self) -> bool:
        """Whether a step of this run has finished (read once, when the run fails)."""
        if self.hooked_sess is not None and self.global_step != self._driver.start_global_step:
            return True
        return self._phase in ("running", "done") and self._driver.stepped()

    def _require_phase(self, what: str, phase: str) -> None:
        if self._phase != phase:
            order = " -> ".join(_PHASES)
            msg = (
                f"{type(self).__name__}.{what}() needs the trainer in phase {phase!r} "
                f"({order}); it is in phase {self._phase!r}"
            )
            raise TrainerStateError(msg)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(phase={self._phase!r}, logdir={self._run_dir.path!r})"
