"""Tests common to every tool: version, entry points, --help, the import blocker used elsewhere."""

from __future__ import annotations

import doctest
import importlib
import importlib.metadata
import shutil
import subprocess
import sys

import pytest
from support import run_blocked

import towerkit.tools

TOOLS = {
    "ls-checkpoint": "ls_checkpoint",
    "dump-params": "dump_params",
    "load-params": "load_params",
    "plot-stats": "plot_stats",
    "timeline": "timeline",
    "bump-version": "bump_version",
    "public-symbols": "public_symbols",
    "install-horovod": "install_horovod",
}
"""Console script -> module of towerkit.tools."""


def test_version_matches_metadata():
    """The package version is the installed distribution's."""
    assert towerkit.tools.__version__ == importlib.metadata.version("towerkit-tools")


def test_all_names_import():
    """Every name in __all__ imports."""
    for name in towerkit.tools.__all__:
        assert getattr(towerkit.tools, name) is not None


def test_entry_points_declared():
    """Each tool is a console script pointing at its module's main."""
    scripts = {
        ep.name: ep.value
        for ep in importlib.metadata.entry_points(group="console_scripts")
        if ep.value.startswith("towerkit.tools.")
    }
    assert scripts == {name: f"towerkit.tools.{mod}:main" for name, mod in TOOLS.items()}


@pytest.mark.parametrize("module", sorted(set(TOOLS.values()) - {"install_horovod"}))
def test_help_and_module_all(module, capsys):
    """Each tool answers --help with its usage and lists its names in __all__."""
    mod = importlib.import_module(f"towerkit.tools.{module}")
    for name in mod.__all__:
        assert hasattr(mod, name), name
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {module.replace('_', '-')}")


DOCTESTED = (
    "_files",
    "_vars",
    "_workspace",
    "bump_version",
    "ls_checkpoint",
    "plot_stats",
    "public_symbols",
    "timeline",
)
"""The modules of towerkit.tools whose docstrings hold examples."""


@pytest.mark.parametrize("module", DOCTESTED)
def test_doctests(module):
    """The examples in each module's docstrings hold."""
    mod = importlib.import_module(f"towerkit.tools.{module}")
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(mod, optionflags=flags)
    assert result.attempted > 0
    assert result.failed == 0


@pytest.mark.slow
def test_console_script_runs(tmp_path):
    """The installed console script runs and reports a bad path with status 2."""
    exe = shutil.which("plot-stats")
    if exe is None:
        pytest.skip("console scripts are not installed (the tools run from a source checkout)")
    done = subprocess.run(
        [exe, str(tmp_path / "nowhere")], capture_output=True, text=True, check=False, timeout=120
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("plot-stats: error: ")


@pytest.mark.slow
def test_blocker_blocks(tmp_path):
    """The import blocker the no-TensorFlow tests rely on does make TensorFlow unimportable."""
    done = run_blocked("towerkit.tools.ls_checkpoint", [str(tmp_path)], ["tensorflow"], tmp_path)
    assert done.returncode == 1
    assert "ImportError: tensorflow is blocked in this test" in done.stderr
    assert sys.modules.get("towerkit.tools") is towerkit.tools
