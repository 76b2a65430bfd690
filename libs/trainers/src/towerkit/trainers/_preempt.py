"""Preemption: a signal that ends the job (SIGTERM, SLURM's SIGUSR1) saves where the run is.

Clusters end jobs with a signal and a grace period before SIGKILL. The loop treats the
first preemption signal as a request to stop after the session call in flight (all of
its K steps), then `save_for_resume` saves a checkpoint at that global step with its
position in the epoch (`ModelSaver.save_now`), ``after_train`` flushes the statistics and
event files, and ``main_loop`` raises `TrainingPreempted`, a ``SystemExit`` whose status
is `PREEMPTED_EXIT_STATUS`. `AutoResumeTrainConfig` resumes at that step. A second
signal, or the grace running out, exits the process at once with the same status; every
file towerkit writes is written atomically, so nothing is left half-written.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from towerkit.trainers._errors import TrainerStateError

if TYPE_CHECKING:
    from towerkit.trainers._run_dir import RunDir

logger = logging.getLogger("towerkit.trainers")

PREEMPTED_EXIT_STATUS = 143
"""The exit status of a preempted run (128 + SIGTERM, what a shell reports for a SIGTERM)."""

DEFAULT_PREEMPTION_SIGNALS = ("SIGTERM", "SIGUSR1")
"""SIGTERM (SLURM before its kill, Kubernetes on eviction, spot reclaims) and SIGUSR1
(what ``sbatch --signal=USR1@90`` sends)."""


def signal_number(value: str | int) -> int:
    """The number of a signal given by name (``"SIGTERM"``, ``"TERM"``) or number.

    Raises:
        ValueError: an unknown signal, or SIGINT (Ctrl-C has its own handling) or
            SIGKILL/SIGSTOP (they cannot be handled).

    Examples:
        >>> signal_number("SIGTERM") == signal.SIGTERM, signal_number("USR1") == signal.SIGUSR1
        (True, True)
        >>> signal_number("SIGKILL")
        Traceback (most recent call last):
        ...
        ValueError: signal 'SIGKILL' cannot be a preemption signal: SIGINT is Ctrl-C's, and SIGKILL and SIGSTOP cannot be caught
    """
    if isinstance(value, bool):
        msg = f"a signal must be a name or a number; got {value!r}"
        raise TypeError(msg)
    if isinstance(value, int):
        try:
            sig = signal.Signals(value)
        except ValueError:
            msg = f"{value} is not a signal number of this platform"
            raise ValueError(msg) from None
    elif isinstance(value, str):
        name = value.upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        try:
            sig = signal.Signals[name]
        except KeyError:
            msg = f"unknown signal {value!r}: expected a name such as 'SIGTERM' or 'SIGUSR1'"
            raise ValueError(msg) from None
    else:
        msg = f"a signal must be a name or a number; got {type(value).__name__}"
        raise TypeError(msg)
    if sig in (signal.SIGINT, signal.SIGKILL, signal.SIGSTOP):
        msg = (
            f"signal {value!r} cannot be a preemption signal: SIGINT is Ctrl-C's, and "
            "SIGKILL and SIGSTOP cannot be caught"
        )
        raise ValueError(msg)
    return int(sig)


def _signals(value: Iterable[str | int]) -> tuple[int, ...]:
    if isinstance(value, (str, int)):
        value = (value,)
    return tuple(dict.fromkeys(signal_number(v) for v in value))


def _check_grace(_inst: object, _attr: Any, value: float) -> None:
    if not value > 0:
        msg = f"'grace_s' must be a number of seconds > 0; got {value!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class PreemptionPolicy:
    """Which signals preempt training, and how long the run has to save and exit.

    Attributes:
        signals: the signal numbers (names are converted); empty: none is handled.
        grace_s: seconds from the first signal to the exit: the run saves, runs
            ``after_train`` and exits well within it, or is exited at its end.

    Examples:
        >>> p = PreemptionPolicy(signals=["SIGTERM"], grace_s=60)
        >>> p.signals == (signal.SIGTERM,), p.grace_s
        (True, 60.0)
    """

    signals: tuple[int, ...] = attrs.field(default=DEFAULT_PREEMPTION_SIGNALS, converter=_signals)
    grace_s: float = attrs.field(default=30.0, converter=float, validator=_check_grace)

    def names(self) -> list[str]:
        """The signals' names, for messages."""
        return [signal.Signals(s).name for s in self.signals]


class TrainingPreempted(SystemExit):
    """Raised by ``main_loop`` after a preemption signal: the run saved and stopped.

    A ``SystemExit``: uncaught, the process exits quietly with status
    `PREEMPTED_EXIT_STATUS` (143), and ``except Exception`` does not swallow it.

    Attributes:
        global_step: the step the run stopped (and saved) at.
    """

    def __init__(self, global_step: int, policy: PreemptionPolicy | None = None) -> None:
        super().__init__(PREEMPTED_EXIT_STATUS)
        self.global_step = global_step
        self.policy = policy

    def __str__(self) -> str:
        return (
            f"training preempted at global step {self.global_step}: saved; run the same "
            f"command to resume there (exit status {PREEMPTED_EXIT_STATUS})"
        )


def save_for_resume(trainer: Any, callbacks: Sequence[Any]) -> list[str]:
    """Save every `ModelSaver` of `callbacks` at the trainer's global step; their directories.

    Logs a warning when there is none: the next run then resumes from the newest
    checkpoint there is.
    """
    from towerkit.callbacks import ModelSaver
    from towerkit.trainers._callback_checks import _flatten

    savers = [cb for cb in _flatten(callbacks) if isinstance(cb, ModelSaver)]
    if not savers and not trainer.is_chief:
        logger.info("preempted at global step %d: the chief saves", trainer.global_step)
        return []
    if not savers:
        logger.warning(
            "preempted at global step %d with no ModelSaver: nothing is saved; a resumed "
            "run starts from the newest checkpoint there is",
            trainer.global_step,
        )
        return []
    for saver in savers:
        saver.save_now()
    dirs = [str(s.checkpoint_dir) for s in savers]
    logger.warning(
        "preempted: saved at global step %d (epoch %d, %d of its %d steps done) in %s; "
        "the same command resumes there",
        trainer.global_step,
        trainer.epoch_num,
        trainer.local_step + 1,
        trainer.steps_per_epoch,
        ", ".join(dirs),
    )
    return dirs


class ResumeAndPreemption:
    """The trainer's part in resuming at a step and in preemption (a mixin of `Trainer`).

    `Trainer.__init__` sets the state these methods read: the run directory part
    (``_run_dir``: where a resumed run starts), ``_preemption`` and ``_preempted``.
    """

    is_chief: bool
    _phase: str
    _run_dir: RunDir
    _preemption: PreemptionPolicy
    _preempted: bool

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

    _preempt_everywhere = False
    """Whether every process of the job takes the signals and they agree on when to stop."""

    def _preemption_here(self) -> tuple[PreemptionPolicy | None, bool]:
        """The policy this process installs, and whether the job's processes agree on the step.

        The chief's alone by default; every process's, agreeing, where the trainer says
        so (`_preempt_everywhere`: horovod's `PreemptionVote`, a cluster's `PreemptionFlag`).
        """
        if self._preempt_everywhere:
            return self._preemption, True
        return (self._preemption if self.is_chief else None), False
