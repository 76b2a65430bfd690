"""The tier plugin keeps ``flake_gate`` tests out of every run but the flake gate's.

A real pytest run over a small suite, with the plugin loaded as the noxfile loads it:
without ``TOWERKIT_FLAKE_GATE=1`` the marked tests (by function, by parameter, by
module) are deselected and the others run; with it, all run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.procs

PLUGINS = Path(__file__).parent / "plugins"

SUITE = textwrap.dedent(
    """
    import pytest

    def test_plain():
        pass

    @pytest.mark.flake_gate
    def test_gated():
        pass

    @pytest.mark.parametrize(
        "n", [0, pytest.param(1, marks=pytest.mark.flake_gate)]
    )
    def test_param(n):
        pass
    """
)

GATED_MODULE = "import pytest\n\npytestmark = pytest.mark.flake_gate\n\ndef test_all():\n    pass\n"


def run(tmp_path: Path, gate: str | None) -> str:
    (tmp_path / "test_gate_suite.py").write_text(SUITE)
    (tmp_path / "test_gate_module.py").write_text(GATED_MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    flake_gate: gate only\n")
    env = {k: v for k, v in os.environ.items() if k != "TOWERKIT_FLAKE_GATE"}
    env["PYTHONPATH"] = str(PLUGINS)
    if gate is not None:
        env["TOWERKIT_FLAKE_GATE"] = gate
    command = [sys.executable, "-m", "pytest", "-p", "towerkit_tiers", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-p", "no:xdist", "-v", "--strict-markers", "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def passed(out: str) -> set[str]:
    return {line.split(" ")[0].split("::", 1)[1] for line in out.splitlines() if " PASSED" in line}


def test_deselected_without_the_variable(tmp_path):
    """Only the unmarked tests run; the marked ones are reported deselected."""
    out = run(tmp_path, None)
    assert passed(out) == {"test_plain", "test_param[0]"}, out
    assert "3 deselected" in out, out


def test_deselected_unless_one(tmp_path):
    """A value other than ``1`` does not open the gate."""
    assert passed(run(tmp_path, "0")) == {"test_plain", "test_param[0]"}


def test_all_run_with_the_variable(tmp_path):
    """``TOWERKIT_FLAKE_GATE=1`` (the flake gate's run): every test runs."""
    out = run(tmp_path, "1")
    assert passed(out) == {"test_all", "test_plain", "test_gated", "test_param[0]", "test_param[1]"}
    assert "deselected" not in out, out
