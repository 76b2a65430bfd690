"""towerkit.towers."""

from towerkit.towers._version import __version__

__all__ = ["__version__"]
