"""The training loop's Python heap: what exists before the first step is frozen out of GC scans."""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator

logger = logging.getLogger("towerkit.trainers")


@contextlib.contextmanager
def frozen_heap() -> Iterator[bool]:
    """Collect once, then keep every object alive now out of the collector's scans.

    Building a graph and a session leaves about a million long-lived Python objects
    (TensorFlow's and the model's). Python's full collections scan all of them: one
    such collection, triggered by the few objects a step allocates, pauses training
    for some 200 ms at an unpredictable step. Inside this context those objects are
    in the permanent generation (``gc.freeze``), so the collections that run during
    training scan only what training allocated. On exit they are unfrozen and
    collectable again.

    Nothing happens when something else already froze objects (``gc.freeze`` is
    process-wide: their owner decides) or when the collector is disabled.

    Yields:
        Whether this context froze the heap.
    """
    if not gc.isenabled() or gc.get_freeze_count() > 0:
        yield False
        return
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    logger.debug(
        "froze %d objects out of GC scans (%.0f ms)",
        gc.get_freeze_count(),
        (time.perf_counter() - start) * 1e3,
    )
    try:
        yield True
    finally:
        gc.unfreeze()
