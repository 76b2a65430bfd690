"""The pure core of elastic horovod training: the committed loop position and its decisions.

An elastic job commits its state every ``commit_every_k_steps`` steps and at the end
of every epoch (after ``trigger_epoch``). A commit records where the loop stands: the
next step to run (`LoopCommit`). When a rank is lost, the survivors roll back to the
last commit and run the loop on from there (`remaining_epochs`), so the run ends at
the global step of an uninterrupted run and every epoch's end is passed once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

__all__ = [
    "LoopCommit",
    "check_commit_every",
    "commit_after_step",
    "final_global_step",
    "is_collective_failure",
    "reform_within",
    "remaining_epochs",
]


def _nonneg(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        msg = f"LoopCommit.{attribute.name} must be >= 0; got {value}"
        raise ValueError(msg)


@attrs.frozen
class LoopCommit:
    """Where the loop stands at a commit: the next step to run.

    Attributes:
        global_step: the global step at the commit (steps finished, checkpoints' included).
        epoch: the epoch the next step belongs to; ``max_epoch + 1`` once training is done.
        steps_done: steps of `epoch` already finished (0 at an epoch's start), always
            below ``steps_per_epoch``: a finished epoch commits as the next one at 0.

    Examples:
        >>> c = LoopCommit(global_step=10, epoch=3, steps_done=2)
        >>> LoopCommit.from_array(c.to_array()) == c
        True
    """

    global_step: int = attrs.field(converter=int, validator=_nonneg)
    epoch: int = attrs.field(converter=int, validator=_nonneg)
    steps_done: int = attrs.field(converter=int, validator=_nonneg)

    def to_array(self) -> np.ndarray:
        """The commit as the int64 vector that is broadcast between ranks."""
        return np.asarray([self.global_step, self.epoch, self.steps_done], np.int64)

    @classmethod
    def from_array(cls, values: Sequence[int] | np.ndarray) -> LoopCommit:
        """The commit a broadcast vector holds.

        Raises:
            ValueError: not 3 values.
        """
        vals = [int(v) for v in np.asarray(values).reshape(-1)]
        if len(vals) != 3:
            msg = f"a LoopCommit vector has 3 values (global_step, epoch, steps_done); got {vals}"
            raise ValueError(msg)
        return cls(vals[0], vals[1], vals[2])

    def after_step(self, steps_per_epoch: int) -> LoopCommit:
        """The position once the next step has run (an epoch's last step: the next epoch's start).

        >>> LoopCommit(5, 2, 3).after_step(4)
        LoopCommit(global_step=6, epoch=3, steps_done=0)
        """
        done = self.steps_done + 1
        if done >= steps_per_epoch:
            return attrs.evolve(
                self, global_step=self.global_step + 1, epoch=self.epoch + 1, steps_done=0
            )
        return attrs.evolve(self, global_step=self.global_step + 1, steps_done=done)


def check_commit_every(value: object) -> int:
    """``commit_every_k_steps`` checked: an int >= 1.

    >>> check_commit_every(5)
    5

    Raises:
        ValueError: anything else, named.
    """
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        msg = f"'commit_every_k_steps' must be an int >= 1; got {value!r}"
        raise ValueError(msg)
    return int(value)


def commit_after_step(steps_done: int, steps_per_epoch: int, every_k: int) -> bool:
    """Whether to commit once `steps_done` steps of the epoch have run (inside the epoch).

    Inside an epoch a commit comes every `every_k` steps; after its last step none
    (the epoch's end commits after ``trigger_epoch``, once its callbacks are done).

    >>> [commit_after_step(d, 5, 2) for d in range(1, 6)]
    [False, True, False, True, False]
    """
    return steps_done < steps_per_epoch and steps_done % every_k == 0


def remaining_epochs(
    commit: LoopCommit, starting_epoch: int, max_epoch: int, steps_per_epoch: int
) -> tuple[tuple[int, int], ...]:
    """``(epoch, first step)`` of each epoch still to run from `commit`, in order.

    >>> remaining_epochs(LoopCommit(9, 3, 1), 1, 4, 4)
    ((3, 1), (4, 0))
    >>> remaining_epochs(LoopCommit(16, 5, 0), 1, 4, 4)
    ()

    Raises:
        ValueError: a commit outside the loop (before `starting_epoch`, past
            ``max_epoch + 1``, or a step past the epoch's end).
    """
    if not starting_epoch <= commit.epoch <= max_epoch + 1 or commit.steps_done >= steps_per_epoch:
        msg = (
            f"the committed position (epoch {commit.epoch}, {commit.steps_done} steps done) is "
            f"outside the loop: epochs {starting_epoch}..{max_epoch} of {steps_per_epoch} steps"
        )
        raise ValueError(msg)
    if commit.epoch > max_epoch:
        return ()
    first = ((commit.epoch, commit.steps_done),)
    return first + tuple((e, 0) for e in range(commit.epoch + 1, max_epoch + 1))


def final_global_step(commit: LoopCommit, max_epoch: int, steps_per_epoch: int) -> int:
    """The global step at the end of the run, from any commit of it.

    >>> final_global_step(LoopCommit(9, 3, 1), 4, 4)
    16
    """
    left = (max_epoch + 1 - commit.epoch) * steps_per_epoch - commit.steps_done
    return commit.global_step + max(left, 0)


ELASTIC_TIMEOUT_DEFAULT = 600.0
"""horovod's own default of ``HOROVOD_ELASTIC_TIMEOUT`` (seconds)."""

GLOO_TIMEOUT_DEFAULT = 30.0
"""horovod's own default of ``HOROVOD_GLOO_TIMEOUT_SECONDS`` (seconds)."""


def reform_within(environ: Mapping[str, str]) -> float:
    """Seconds a rank may take from a failed collective to the re-formed ring's first sync.

    horovod's driver waits ``HOROVOD_ELASTIC_TIMEOUT`` seconds at most for enough hosts;
    the old ring's collectives fail, and the new ring's rendezvous completes, within
    ``HOROVOD_GLOO_TIMEOUT_SECONDS`` each. Past their sum the ring will not re-form.

    >>> reform_within({}), reform_within({"HOROVOD_ELASTIC_TIMEOUT": "60", "HOROVOD_GLOO_TIMEOUT_SECONDS": "20"})
    (660.0, 100.0)

    Raises:
        ValueError: a variable that is not a positive number of seconds, named.
    """
    seconds = []
    for name, default in (
        ("HOROVOD_ELASTIC_TIMEOUT", ELASTIC_TIMEOUT_DEFAULT),
        ("HOROVOD_GLOO_TIMEOUT_SECONDS", GLOO_TIMEOUT_DEFAULT),
    ):
        text = environ.get(name, "")
        try:
            value = float(text) if text.strip() else default
        except ValueError:
            value = -1.0
        if not value > 0 or value == float("inf"):
            msg = f"{name} must be a positive number of seconds; got {text!r}"
            raise ValueError(msg)
        seconds.append(value)
    return seconds[0] + 2 * seconds[1]


def is_collective_failure(err: BaseException) -> bool:
    """Whether a TensorFlow error comes from a failed horovod collective.

    Examples:
        >>> is_collective_failure(RuntimeError("Horovod has been shut down."))
        True
        >>> is_collective_failure(ValueError("NaN in fc/W"))
        False
    """
    text = str(err).lower()
    return "horovod" in text or "gloo" in text
