"""The callbacks and monitors a training run gets when none are given."""

from __future__ import annotations

from towerkit.callbacks import Callback


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


def DEFAULT_MONITORS() -> list[Callback]:
    """New instances of the default monitors, in order.

    ``TFEventWriter()``, ``JSONWriter()``, ``ScalarPrinter()``. The first two write
    into the trainer's ``logdir``, so a run using them needs one.
    """
    from towerkit.callbacks import JSONWriter, ScalarPrinter, TFEventWriter

    return [TFEventWriter(), JSONWriter(), ScalarPrinter()]
