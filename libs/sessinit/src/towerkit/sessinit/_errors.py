"""Domain errors of towerkit.sessinit."""

from __future__ import annotations


class RestoreMismatchError(ValueError):
    """Variables differ in shape or dtype between a source and the graph they restore into."""


class CheckpointNotFoundError(FileNotFoundError):
    """A checkpoint, npz file or directory to restore from does not exist."""


class NotACheckpointError(ValueError):
    """A path exists but holds neither a TensorFlow checkpoint nor an npz file."""


class CorruptCheckpointError(NotACheckpointError):
    """A checkpoint's files exist, but their bytes are not what its index describes.

    A data file is missing, shorter than its index says (truncated), or holds values
    whose checksums do not match (overwritten or damaged after it was written).
    """


class GlobPathError(ValueError):
    """A checkpoint path holds characters TensorFlow reads as a glob pattern (``[``, ``]``...)."""


class CheckpointVanishedError(CheckpointNotFoundError):
    """A checkpoint was deleted while it was read: a saver pruned it, or it was moved aside.

    Not a damaged checkpoint: read the directory's newest one again.
    """


class NothingToRestoreError(ValueError):
    """A source with entries restores none of a graph's variables: no name matches.

    .. versionadded:: 0.2
    """


# Every error here is public: tracebacks and pickles name it where users import it from
# (``towerkit.<lib>.SomeError``), not by this private module.
for _error in [
    v for v in list(globals().values()) if isinstance(v, type) and v.__module__ == __name__
]:
    _error.__module__ = __name__.rpartition(".")[0]
del _error
