"""towerkit.sessinit."""

from towerkit.sessinit._version import __version__

__all__ = ["__version__"]
