"""The python blocks of the libs' READMEs run as written."""

from __future__ import annotations

import os
import re
import sys

import prefork
import pytest
from example_modules import ROOT

pytestmark = [
    pytest.mark.procs,
    pytest.mark.timeout(600),
]  # timeout: runs every lib README's blocks in a venv

BLOCKS = {
    "callbacks": ("`stats.json`, NaN and the best model", ["0.2"]),
    "trainers": (
        "Write a multi-device trainer",
        ["tower 0: [1.0, -2.0, 0.5]", "tower 1: [1.0, -2.0, 0.5]"],
    ),
    "towers": ("Graph-mode layers", ["(None, 10) 2"]),
    "layers": (
        "Quick start",
        [
            "fc1/output:0 infer/fc1/output:0",
            "['bn0/beta', 'bn0/gamma', 'bn0/mean/EMA', 'bn0/variance/EMA']",
            "(2, 10)",
        ],
    ),
}
"""Per lib: the README section whose python block runs, and lines its output must hold."""


def section_block(lib: str, heading: str) -> str:
    """The first ```python block after ``## <heading>`` in ``libs/<lib>/README.md``."""
    text = (ROOT / "libs" / lib / "README.md").read_text(encoding="utf-8")
    start = text.find(f"## {heading}\n")
    if start < 0:
        msg = f"libs/{lib}/README.md has no section {heading!r}"
        raise AssertionError(msg)
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    if match is None:
        msg = f"section {heading!r} of libs/{lib}/README.md has no ```python block"
        raise AssertionError(msg)
    return match.group(1)


@pytest.mark.slow
@pytest.mark.parametrize("lib", sorted(BLOCKS))
def test_block_runs(lib, tmp_path):
    """Run as a script in an empty directory, the block exits 0 and prints what the text says."""
    if lib == "towers":
        pytest.importorskip("tf_keras", reason="the layers section needs towerkit-towers[layers]")
    heading, expected = BLOCKS[lib]
    script = tmp_path / f"{lib}_readme.py"
    script.write_text(section_block(lib, heading))
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    done = prefork.run([sys.executable, str(script)], cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for line in expected:
        assert line in lines, done.stdout
