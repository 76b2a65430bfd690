"""The callable seams of the trainers lib, named: optimizer and dataset factories."""

from __future__ import annotations

from typing import Any, Protocol


class OptimizerFactory(Protocol):
    """Makes the run's optimizer (``ModelDesc.optimizer``, ``setup_graph``'s ``get_opt_fn``).

    Called once, with no argument, while the trainer builds its graph, so variables it
    makes (a learning-rate variable for `ScheduledHyperParamSetter`) are the run's. It
    returns a ``tf.compat.v1.train.Optimizer``, which a trainer may wrap (gradient
    processors, loss scaling).

    Examples:
        >>> import tensorflow as tf
        >>> def opt():
        ...     return tf.compat.v1.train.GradientDescentOptimizer(0.1)
        >>> make: OptimizerFactory = opt
    """

    def __call__(self) -> Any:
        """A new optimizer."""


class DatasetFactory(Protocol):
    """Makes the run's ``tf.data.Dataset`` (``TrainConfig(data=fn)``).

    Called with no argument in the graph being built, so the dataset's ops belong to
    the run's graph; a dataset made beforehand in another graph could not be.

    Examples:
        >>> import tensorflow as tf
        >>> def batches():
        ...     return tf.data.Dataset.range(8).batch(2)
        >>> make: DatasetFactory = batches
    """

    def __call__(self) -> Any:
        """A new ``tf.data.Dataset``."""
