"""Seeding a run: the one place ``TrainConfig(seed=..., deterministic=...)`` takes effect."""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["seed_run"]

logger = logging.getLogger("towerkit.trainers")


def seed_run(graph: Any, source: Any, seed: int | None, deterministic: bool) -> None:
    """Seed Python, NumPy, `graph` (the trainer's) and `source`'s workers; ops deterministic.

    Called before the graph is built, so that every initializer, dropout and shuffle
    that has no seed of its own takes one from the graph's. Nothing happens without a
    `seed` (`deterministic` needs one: `TrainSpec` refuses it alone).
    """
    if seed is None:
        return
    random.seed(seed)
    np.random.seed(seed)
    graph.seed = seed
    use = getattr(source, "use_run_seed", None)
    if callable(use) and use(seed):
        logger.info("the input's workers are seeded from the run's seed %d", seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
