"""Domain errors of towerkit.sessinit."""

from __future__ import annotations


class RestoreMismatchError(ValueError):
    """Variables differ in shape or dtype between a source and the graph they restore into."""


class CheckpointNotFoundError(FileNotFoundError):
    """A checkpoint, npz file or directory to restore from does not exist."""


class NotACheckpointError(ValueError):
    """A path exists but holds neither a TensorFlow checkpoint nor an npz file."""
