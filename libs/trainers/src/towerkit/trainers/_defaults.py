"""The callbacks and monitors a training run gets when none are given."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from towerkit.callbacks import Callback
from towerkit.trainers._callback_checks import _as_callback_list

if TYPE_CHECKING:
    from towerkit.callbacks import MonitorBase, Monitors

logger = logging.getLogger("towerkit.trainers")


def DEFAULT_CALLBACKS() -> list[Callback]:
    """New instances of the default callbacks, in order.

    ``MovingAverageSummary()``, ``ProgressBar()``, ``MergeAllSummaries()``,
    ``RunUpdateOps()``.
    """
    from towerkit.callbacks import (
        MergeAllSummaries,
        MovingAverageSummary,
        ProgressBar,
        RunUpdateOps,
    )

    return [MovingAverageSummary(), ProgressBar(), MergeAllSummaries(), RunUpdateOps()]


def DEFAULT_MONITORS() -> list[MonitorBase]:
    """New instances of the default monitors, in order.

    ``TFEventWriter()``, ``JSONWriter()``, ``ScalarPrinter()``. The first two write
    into the trainer's ``logdir``, so a run using them needs one.
    """
    from towerkit.callbacks import JSONWriter, ScalarPrinter, TFEventWriter

    return [TFEventWriter(), JSONWriter(), ScalarPrinter()]


def _monitors_without_files() -> list[MonitorBase]:
    from towerkit.callbacks import ScalarPrinter

    logger.info("no logdir: the statistics are printed, no event file or stats.json is written")
    return [ScalarPrinter()]


def callbacks_with_defaults(
    callbacks: Sequence[Callback] | None,
    monitors: Sequence[MonitorBase] | Monitors | None,
    extra_callbacks: Sequence[Callback] | None,
    logdir: str | os.PathLike[str] | None,
) -> tuple[list[Callback], Sequence[MonitorBase] | Monitors]:
    """The callbacks and monitors of ``Trainer.train_with_defaults``, defaults filled in.

    The callbacks are ``callbacks + extra_callbacks``, ``extra_callbacks`` defaulting
    to ``DEFAULT_CALLBACKS()``; ``monitors`` defaults to ``DEFAULT_MONITORS()``.

    Raises:
        TypeError: entries that are not callbacks.
    """
    if monitors is None:
        monitors = DEFAULT_MONITORS() if logdir is not None else _monitors_without_files()
    if extra_callbacks is None:
        extra_callbacks = DEFAULT_CALLBACKS()
    cbs = _as_callback_list("callbacks", callbacks) + _as_callback_list(
        "extra_callbacks", extra_callbacks
    )
    return cbs, monitors
