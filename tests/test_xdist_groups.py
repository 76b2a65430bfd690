"""`xdist_group` keeps a group's tests on one pytest-xdist worker, as the test tiers rely on.

Tests that share a module fixture which trains in processes (``test_tp_layers_models``,
the conformance suite's multi-process trainers...) are grouped so that each run is
made once; if the grouping silently stopped working (as it does with pytest 9.2 and
pytest-xdist 3.8), every worker would make each run again and CI would take longer
with every test still passing. This runs a real ``pytest -n 2 --dist loadgroup``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.procs

SUITE = textwrap.dedent(
    """
    import os, time
    import pytest

    def record(kind, n):
        path = os.path.join(os.environ["GROUPS_OUT"], f"{kind}-{n}")
        with open(path, "w") as f:
            f.write(os.environ.get("PYTEST_XDIST_WORKER", "none"))
        time.sleep(0.3)

    @pytest.mark.parametrize(
        "n", [pytest.param(n, marks=pytest.mark.xdist_group("shared")) for n in range(4)]
    )
    def test_param_marks(n):
        record("param", n)

    @pytest.mark.xdist_group("module")
    @pytest.mark.parametrize("n", range(4))
    def test_function_mark(n):
        record("function", n)

    @pytest.mark.parametrize("n", range(4))
    def test_free(n):
        record("free", n)
    """
)


def test_group_runs_on_one_worker(tmp_path):
    """Each group's tests all run on one worker; ungrouped tests may use both."""
    (tmp_path / "test_groups_suite.py").write_text(SUITE)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "GROUPS_OUT": str(out)}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2"]
    done = subprocess.run(
        [*command, "--dist", "loadgroup", "test_groups_suite.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = {}
    for path in out.iterdir():
        kind = path.name.split("-")[0]
        workers.setdefault(kind, set()).add(path.read_text())
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{k}-{n}" for k in ("param", "function", "free") for n in range(4)
    )
    assert len(workers["param"]) == 1, f"one group on several workers: {workers}"
    assert len(workers["function"]) == 1, f"one group on several workers: {workers}"
    assert workers["free"] <= {"gw0", "gw1"}, workers
