"""The lib's version and public names."""

import importlib
import importlib.metadata
import subprocess
import sys

import pytest

import towerkit.conformance as lib


class TestVersion:
    """`__version__` matches the installed distribution."""

    def test_matches_metadata(self):
        """The module's version is the distribution's version."""
        assert lib.__version__ == importlib.metadata.version("towerkit-conformance")


class TestAll:
    """Every name in `__all__` is importable from the lib."""

    def test_in_all(self):
        """Each `__all__` entry resolves to an attribute, once."""
        mod = importlib.import_module("towerkit.conformance")
        assert [n for n in mod.__all__ if not hasattr(mod, n)] == []
        assert len(set(mod.__all__)) == len(mod.__all__)


@pytest.mark.procs
class TestPlugin:
    """The pytest plugin is registered and light."""

    def test_entry_point(self):
        """pytest finds the plugin through the pytest11 entry point."""
        eps = importlib.metadata.entry_points(group="pytest11")
        assert "towerkit.conformance.plugin" in [e.value for e in eps]

    def test_import_does_not_load_tensorflow(self):
        """Loading the plugin (in every pytest run of the environment) does not import TensorFlow."""
        code = "import sys, towerkit.conformance.plugin; print('tensorflow' in sys.modules)"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "False"
