"""`EarlyStopping`: stop training when a monitored statistic stops improving."""

from __future__ import annotations

import logging
import os

from towerkit.callbacks._base import Callback
from towerkit.callbacks._errors import MissingStatError, StatsFileError, StopTraining
from towerkit.callbacks._stats import (
    EarlyStoppingState,
    advance_early_stopping,
    check_early_stopping,
    is_real_number,
)
from towerkit.callbacks._stats_file import read_stats_file

logger = logging.getLogger("towerkit.callbacks")


class EarlyStopping(Callback):
    """Stop training when a statistic has not improved for ``patience`` epochs.

    On each trigger (the end of every epoch, unless wrapped in a trigger) it reads the
    latest value of ``monitor`` from the monitors. A value improves when it is finite
    and beats the best so far by more than ``min_delta`` (lower with ``mode="min"``,
    higher with ``"max"``); NaN and infinities never do. After ``patience`` new values
    without improvement, it raises :class:`StopTraining`: the epoch ends whole (the
    epoch's later callbacks, statistics writers, monitors and savers still run, so
    ``stats.json`` holds it and a resumed run starts after it), ``after_train`` runs,
    and one console line says that training stopped, naming this callback, why and the
    best epoch. The decision is the pure
    :func:`~towerkit.callbacks.advance_early_stopping` (the same step-keyed
    observations as :class:`StatMonitorParamSetter`'s
    :func:`~towerkit.callbacks.advance`); :func:`~towerkit.callbacks.should_stop`
    gives it over a whole history.

    The best model is marked, not restored: put a :class:`MinSaver` (``mode="min"``)
    or :class:`MaxSaver` (``"max"``) of the same statistic before it, and the stop
    message names the checkpoint that holds the best epoch (``min-<monitor>.tfmodel``;
    load it with ``SmartInit``); `best_epoch` says which epoch that is. Put it after
    the callback that puts the statistic and after the savers, so the last epoch is
    saved before training stops. A statistic never put at a trigger is logged as a
    warning, naming the statistics that were, and nothing is decided.

    A resumed run (`AutoResumeTrainConfig`, at an epoch's end or inside an epoch)
    carries the wait and the best on: ``before_train`` replays the statistic's values
    that the logdir's ``stats.json`` holds for the epochs before the run's first, so
    training stops at the epoch an uninterrupted run would. The replay takes one value
    per epoch record, which is what the default trigger (every epoch's end) saw.

    Args:
        monitor: the statistic's name (``"validation_error"``).
        mode: ``"min"`` (lower is better) or ``"max"``.
        patience: epochs (new values) without improvement before stopping (>= 0; with
            0, the first value that does not improve stops training).
        min_delta: the least change that counts as an improvement (>= 0), in the
            statistic's units.

    Raises:
        TypeError: ``monitor`` is not a non-empty str.
        ValueError: ``mode``, ``patience`` or ``min_delta`` out of range (every one at
            fault is named).

    Examples::

        EarlyStopping("validation_error", mode="min", patience=3, min_delta=0.001)

    .. versionadded:: 0.2
    """

    def __init__(
        self, monitor: str, mode: str = "min", patience: int = 3, min_delta: float = 0.0
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            msg = f"'monitor' must be a statistic's name (a non-empty str); got {monitor!r}"
            raise TypeError(msg)
        check_early_stopping(mode, patience, min_delta)
        self._monitor = monitor
        self._mode = mode
        self._patience = patience
        self._min_delta = float(min_delta)
        self._state = EarlyStoppingState()
        self._best_epoch: int | None = None
        self._stopped_epoch: int | None = None

    @property
    def monitor(self) -> str:
        """The statistic watched."""
        return self._monitor

    @property
    def state(self) -> EarlyStoppingState:
        """The best value, its step and the wait so far."""
        return self._state

    @property
    def best(self) -> float | None:
        """The best value seen in this run, or None."""
        return self._state.best

    @property
    def best_epoch(self) -> int | None:
        """The epoch (1-based) whose end put the best value, or None."""
        return self._best_epoch

    @property
    def stopped_epoch(self) -> int | None:
        """The epoch after which training was stopped, or None when it was not."""
        return self._stopped_epoch

    def _before_train(self) -> None:
        self._state = EarlyStoppingState()
        self._best_epoch = None
        self._stopped_epoch = None
        self._replay_earlier_epochs()

    def _replay_earlier_epochs(self) -> None:
        """Take the values ``stats.json`` holds for the epochs before this run's first."""
        logdir = self.trainer.logdir
        path = os.path.join(logdir, "stats.json") if logdir else None
        if path is None or not os.path.isfile(path):
            return
        try:
            records = read_stats_file(path) or []
        except (OSError, StatsFileError) as err:
            logger.warning("%s: the epochs of the earlier runs are not known: %s", self, err)
            return
        start = self.trainer.starting_epoch
        for rec in records:
            epoch, step, value = (
                rec.get("epoch_num"),
                rec.get("global_step"),
                rec.get(self._monitor),
            )
            if not (isinstance(epoch, int) and epoch < start and isinstance(step, int)):
                continue
            if not is_real_number(value):
                continue
            old = self._state
            self._state, _ = advance_early_stopping(
                old,
                step,
                float(value),  # type: ignore[arg-type]
                mode=self._mode,
                patience=self._patience,
                min_delta=self._min_delta,
            )
            if self._state.best_step != old.best_step:
                self._best_epoch = epoch
        if self._state.best_step is not None or self._state.wait:
            logger.info(
                "%s: resumed from stats.json: best %s at epoch %s, %d epoch(s) without "
                "improvement since",
                self,
                self._state.best,
                self._best_epoch,
                self._state.wait,
            )

    def _trigger(self) -> None:
        try:
            step, value = self.trainer.monitors.get_history(self._monitor)[-1]
        except MissingStatError as err:
            logger.warning("%s: nothing to decide on at epoch %d: %s", self, self.epoch_num, err)
            return
        old = self._state
        self._state, stop = advance_early_stopping(
            old,
            step,
            value,
            mode=self._mode,
            patience=self._patience,
            min_delta=self._min_delta,
        )
        if self._state.best_step != old.best_step:
            self._best_epoch = self.epoch_num
        if stop:
            self._stopped_epoch = self.epoch_num
            msg = self.stop_message()  # the trainer's one line that training stopped says it
            raise StopTraining(msg)

    def stop_message(self) -> str:
        """What training stopping says: why, the best epoch, and the checkpoint holding it."""
        delta = f" by more than {self._min_delta:g}" if self._min_delta else ""
        text = f"{self}: {self._monitor} has not improved{delta} for {self._state.wait} epochs"
        if self._state.best is None:
            return f"{text} (no finite value yet)"
        text += f"; the best, {self._state.best:g}, was at epoch {self._best_epoch}"
        saver = self._saver()
        if saver is not None:
            text += f", kept in {saver}"
        return text

    def _saver(self) -> str | None:
        """The path of the MinSaver/MaxSaver copy of the monitored statistic, if one runs."""
        from towerkit.callbacks._best_savers import MinSaver

        for cb in getattr(self.trainer, "callbacks", ()) or ():
            inner = getattr(cb, "cb", cb)  # a callback wrapped in a trigger
            if (
                isinstance(inner, MinSaver)
                and inner.monitor_stat == self._monitor
                and inner.best_epoch == self._best_epoch
            ):
                return inner.path
        return None

    def __str__(self) -> str:
        return f"EarlyStopping({self._monitor!r}, mode={self._mode!r}, patience={self._patience})"
