"""The callbacks and monitors a training run gets when none are given."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from towerkit.callbacks import Callback
from towerkit.trainers._callback_checks import _as_callback_list

if TYPE_CHECKING:
    from towerkit.callbacks import MonitorBase, Monitors


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
        ValueError: default monitors (which write files) without a `logdir`.
    """
    if monitors is None:
        if logdir is None:
            msg = (
                "train_with_defaults(monitors=None) uses DEFAULT_MONITORS(), which write "
                "event and stats files: pass logdir=... or monitors=[...] (e.g. monitors=[])"
            )
            raise ValueError(msg)
        monitors = DEFAULT_MONITORS()
    if extra_callbacks is None:
        extra_callbacks = DEFAULT_CALLBACKS()
    cbs = _as_callback_list("callbacks", callbacks) + _as_callback_list(
        "extra_callbacks", extra_callbacks
    )
    return cbs, monitors
