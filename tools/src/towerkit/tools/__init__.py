"""towerkit.tools."""

from towerkit.tools._version import __version__

__all__ = ["__version__"]
