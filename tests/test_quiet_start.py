"""Every example starts without TensorFlow's C++ start-up lines, and shows them with -v."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from example_modules import example_path

pytestmark = pytest.mark.procs
"""These tests spawn Python processes that load TensorFlow."""


EXAMPLES = ["digits", "gan", "gan_towers", "layers", "tp_style"]

START_UP = ("absl::InitializeLog", "oneDNN custom operations")
"""What TensorFlow's C++ libraries print when they load, whatever TF_CPP_MIN_LOG_LEVEL says."""


def run_help(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, str(example_path(name)), "--help", *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_quiet_by_default(name):
    """`--help` (after TensorFlow has loaded) prints usage and none of TensorFlow's lines."""
    done = run_help(name)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "-v, --verbose" in done.stdout
    for line in START_UP:
        assert line not in done.stderr, (name, done.stderr[-2000:])


def test_verbose_shows_them():
    """With -v the start-up lines go through (where this TensorFlow prints them)."""
    quiet, loud = run_help("gan"), run_help("gan", "-v")
    assert loud.returncode == 0
    assert len(loud.stderr) >= len(quiet.stderr)
    if (
        "oneDNN"
        in subprocess.run(
            [sys.executable, "-c", "import tensorflow"], capture_output=True, text=True, check=False
        ).stderr
    ):
        assert "oneDNN" in loud.stderr
