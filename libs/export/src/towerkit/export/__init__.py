"""towerkit.export."""

from towerkit.export._version import __version__

__all__ = ["__version__"]
