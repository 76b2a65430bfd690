"""The run directory, a part of every trainer: the logdir, its lock, where a resumed run starts.

`RunDir` holds what a trainer knows of the directory it writes to and of the run it
continues: the path, the directory as the run took it (`take_logdir`: its lock and what
was there), the steps of the first epoch an earlier run did and the data steps its input
produced. A run failing before its first step gives the directory back as it found it
(`RunDir.failed_start_cleanup`); one that ran releases the lock at the end of its loop
(`RunDir.release`). `Trainer` holds one and delegates its documented methods to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator

from towerkit.trainers._errors import TrainerStateError
from towerkit.trainers._lock import LockOwner
from towerkit.trainers._logdir import (
    _give_back,
    _LogdirTaken,
    release_logdir,
    take_logdir,
    take_over_logdir,
)
from towerkit.trainers._resume import plan_logdir

__all__ = ["RunDir"]

logger = logging.getLogger("towerkit.trainers")


class RunDir:
    """A trainer's run directory and resume position; what a failing start gives back.

    Args:
        stepped: tells, when a start fails, whether a step of the run has finished
            (then the directory is kept as the run left it).

    Attributes:
        path: the directory (absolute), or None: the run writes no files.
        resumed_in_epoch: the steps of the first epoch an earlier run did.
        data_steps_at_start: the global steps whose data the input produced before this
            run, or None when unknown.
    """

    def __init__(self, stepped: Callable[[], bool]) -> None:
        self.path: str | None = None
        self.resumed_in_epoch = 0
        self.data_steps_at_start: int | None = 0
        self._stepped = stepped
        self._taken: _LogdirTaken | None = None
        self._chosen = False

    @property
    def chosen(self) -> bool:
        """Whether the directory (or None) was chosen already; it is chosen once."""
        return self._chosen

    def take(
        self,
        logdir: str | os.PathLike[str] | None,
        logdir_action: str,
        *,
        lock: bool,
        path_only: bool = False,
    ) -> None:
        """Take `logdir` as `logdir_action` says (`take_logdir`); its lock too with `lock`.

        With `path_only` (a process other than the chief of a job whose chief owns the
        directory), keep its path only (`keep_path`).

        Raises:
            TrainerStateError: a directory was chosen already.
            LogdirNotEmptyError, LogdirLockedError, GlobPathError, ValueError: as
                `Trainer.set_logdir` documents.
        """
        if path_only and logdir is not None:
            self.keep_path(logdir, logdir_action)
            return
        self._choose(logdir)
        if logdir is None:
            plan_logdir(None, logdir_action)
            return
        taken = take_logdir(logdir, logdir_action, lock=lock)
        self.path = taken.path
        self._taken = taken

    def keep_path(self, logdir: str | os.PathLike[str], logdir_action: str) -> None:
        """Keep `logdir`'s path without creating, checking or locking it (a non-chief process)."""
        self._choose(logdir)
        plan_logdir(None, logdir_action)
        self.path = os.path.abspath(os.fspath(logdir))
        logger.info("not the chief: the logdir %s is left to the chief", self.path)

    def _choose(self, logdir: str | os.PathLike[str] | None) -> None:
        if self._chosen:
            msg = (
                f"set_logdir({os.fspath(logdir) if logdir is not None else None!r}): the log "
                f"directory is already set ({self.path!r}); set it once per trainer"
            )
            raise TrainerStateError(msg)
        self._chosen = True

    def check_train_logdir(self, logdir: str | os.PathLike[str] | None, fresh: bool) -> bool:
        """Whether ``train(logdir=...)`` is to take `logdir` now (a `fresh` trainer, none chosen).

        Raises:
            TrainerStateError: a `logdir` given to a trainer past its first phase, or
                one other than the directory already taken.
        """
        if fresh and not self._chosen:
            return True
        if logdir is not None and not fresh:
            msg = "train(logdir=...) needs a fresh trainer: callbacks are already set up"
            raise TrainerStateError(msg)
        if logdir is not None and os.path.abspath(logdir) != self.path:
            msg = (
                f"train(logdir={os.fspath(logdir)!r}) differs from the log directory "
                f"set_logdir took, {self.path!r}: give it once"
            )
            raise TrainerStateError(msg)
        return False

    def take_over(self) -> LockOwner | None:
        """Own the directory from here on, its owner lost (`take_over_logdir`); the owner named before."""
        if self.path is None:
            msg = "take_over(): this run writes no log directory, so it has none to take over"
            raise TrainerStateError(msg)
        self._taken, before = take_over_logdir(self.path)
        return before

    def release(self) -> None:
        """Give back the directory's lock (the end of the loop)."""
        release_logdir(self._taken)

    @contextlib.contextmanager
    def failed_start_cleanup(self) -> Iterator[None]:
        """On an exception before any step finished, remove what the run wrote to its logdir."""
        try:
            yield
        except BaseException:
            taken = self._taken
            if taken is not None and not self._stepped():
                self._taken = None
                _give_back(taken)  # releases the lock; release() does otherwise
            raise

    def set_resume_position(self, steps_in_epoch: int, data_steps: int | None) -> None:
        """Record where the run resumes (checked: `Trainer.set_resume_position`).

        Raises:
            ValueError: a negative count, or one that is not an int.
        """
        for name, value in (("steps_in_epoch", steps_in_epoch), ("data_steps", data_steps)):
            if value is None and name == "data_steps":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"'{name}' must be an int >= 0; got {value!r}"
                raise ValueError(msg)
        self.resumed_in_epoch = steps_in_epoch
        self.data_steps_at_start = data_steps

    def data_steps(self, steps_this_run: int) -> int | None:
        """The data steps since the input's first datapoint, after `steps_this_run`; None: unknown."""
        if self.data_steps_at_start is None:
            return None
        return self.data_steps_at_start + steps_this_run

    def check_resume_position(self, steps_per_epoch: int, starting_epoch: int, k: int) -> None:
        """ValueError when the resumed steps of the first epoch do not fit this loop."""
        done = self.resumed_in_epoch
        if done > steps_per_epoch or done % k:
            msg = (
                f"the run resumes after {done} steps of epoch {starting_epoch}, which cannot "
                f"continue with steps_per_epoch={steps_per_epoch} and steps_per_execution="
                f"{k}: resume with the steps_per_epoch and steps_per_execution of the "
                "interrupted run"
            )
            raise ValueError(msg)
