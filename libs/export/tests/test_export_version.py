"""The lib's version and public names."""

import importlib
import importlib.metadata

import towerkit.export as lib


class TestVersion:
    """`__version__` matches the installed distribution."""

    def test_matches_metadata(self):
        """The module's version is the distribution's version."""
        assert lib.__version__ == importlib.metadata.version("towerkit-export")


class TestAll:
    """Every name in `__all__` is importable from the lib."""

    def test_in_all(self):
        """Each `__all__` entry resolves to an attribute."""
        mod = importlib.import_module("towerkit.export")
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert missing == []
        assert len(set(mod.__all__)) == len(mod.__all__)
