"""towerkit.callbacks."""

from towerkit.callbacks._version import __version__

__all__ = ["__version__"]
