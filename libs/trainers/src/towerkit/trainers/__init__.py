"""towerkit.trainers."""

from towerkit.trainers._version import __version__

__all__ = ["__version__"]
