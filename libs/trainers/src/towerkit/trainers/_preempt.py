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
from typing import Any

import attrs

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
