"""The README's quick start runs as written and trains its model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from example_modules import ROOT


def quick_start() -> str:
    """The first Python code block of README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.S)
    if match is None:
        msg = "README.md has no ```python block"
        raise AssertionError(msg)
    return match.group(1)


def test_quick_start_is_short():
    """The quick start stays about 20 lines of code."""
    code = [line for line in quick_start().splitlines() if line.strip()]
    assert len(code) <= 22


@pytest.mark.slow
def test_quick_start_trains(tmp_path):
    """Run as a script in an empty directory, it learns the weights and writes its logdir."""
    script = tmp_path / "quick_start.py"
    script.write_text(
        quick_start()
        + "\nr = tf.train.load_checkpoint('train_log/linear')\n"
        + "print('weights', r.get_tensor('w').ravel().round(2).tolist())\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "weights [1.0, -2.0, 0.5]" in done.stdout
    logdir = tmp_path / "train_log" / "linear"
    assert (logdir / "checkpoint").is_file()
    stats = json.loads((logdir / "stats.json").read_text())
    costs = [entry["cost"] for entry in stats]
    assert len(costs) == 20
    assert costs[-1] < 0.01 * costs[0], "the loss falls"
    shown = [
        float(line.split(": ")[1]) for line in done.stderr.splitlines() if line.startswith("cost: ")
    ]
    assert shown == pytest.approx(costs, rel=1e-4), "each epoch's cost is shown on the terminal"
