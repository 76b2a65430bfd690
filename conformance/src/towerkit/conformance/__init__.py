"""towerkit.conformance."""

from towerkit.conformance._version import __version__

__all__ = ["__version__"]
