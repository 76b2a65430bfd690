"""Tests common to every tool: version, entry points, --help, the import blocker used elsewhere."""

from __future__ import annotations

import doctest
import importlib
import importlib.metadata
import os
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
    "towerkit-migrate": "migrate",
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
    script = next(name for name, mod in TOOLS.items() if mod == module)
    assert capsys.readouterr().out.startswith(f"usage: {script}")


DOCTESTED = (
    "_files",
    "_plot_layout",
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


@pytest.mark.procs
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


@pytest.mark.procs
@pytest.mark.slow
def test_blocker_blocks(tmp_path):
    """The import blocker the no-TensorFlow tests rely on does make TensorFlow unimportable."""
    done = run_blocked("towerkit.sessinit._compat", [], ["tensorflow"], tmp_path)
    assert done.returncode == 1
    assert "ImportError: tensorflow is blocked in this test" in done.stderr
    assert sys.modules.get("towerkit.tools") is towerkit.tools


TF_TOOLS = {
    "ls-checkpoint": ["model-1"],  # its index file exists: the path check passes first
    "dump-params": ["nowhere", "out.npz"],
    "load-params": ["nowhere.npz", "out/model-0"],
}
"""The tools that need TensorFlow, with arguments that would otherwise be read."""


@pytest.mark.procs
@pytest.mark.slow
@pytest.mark.parametrize("tool", sorted(TF_TOOLS))
def test_without_tensorflow_one_line(tool, tmp_path):
    """Without TensorFlow, a tool prints one ``tool: error:`` line saying so and exits 2."""
    (tmp_path / "model-1.index").write_bytes(b"")  # ls-checkpoint checks its path first
    done = run_blocked(f"towerkit.tools.{TOOLS[tool]}", TF_TOOLS[tool], ["tensorflow"], tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"{tool}: error: TensorFlow cannot be imported: ")
    assert "towerkit-sessinit[cpu]" in done.stderr


def run_tool(module: str, args: list[str], cwd) -> subprocess.CompletedProcess[str]:
    """``python -m towerkit.tools.<module> *args`` with TensorFlow's log level left unset."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    return subprocess.run(
        [sys.executable, "-m", f"towerkit.tools.{module}", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.procs
@pytest.mark.slow
def test_quiet_unless_verbose(checkpoint, tmp_path):
    """A tool's stderr stays empty by default; -v shows TensorFlow's start-up lines."""
    quiet = run_tool("ls_checkpoint", [str(checkpoint)], tmp_path)
    assert (quiet.returncode, quiet.stderr) == (0, "")
    assert quiet.stdout.startswith(f"checkpoint {checkpoint} ")
    loud = run_tool("ls_checkpoint", ["-v", str(checkpoint)], tmp_path)
    assert loud.returncode == 0
    assert loud.stdout == quiet.stdout
    assert loud.stderr.strip(), "-v shows what TensorFlow prints when it loads"
