"""A runner of the conformance suite in a separate pytest process, and its outcome."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).parent


class SuiteRun:
    """The outcome of one run of the conformance suite in its own pytest process."""

    def __init__(self, code: int, output: str, report: Path) -> None:
        self.code = code
        self.output = output
        self.cases = {}
        self.failures = {}
        self.properties = {}
        if report.is_file():
            for case in ET.parse(report).iter("testcase"):
                name = case.get("name")
                failure = case.find("failure")
                skipped = case.find("skipped")
                self.cases[name] = (
                    "failed"
                    if failure is not None
                    else "skipped"
                    if skipped is not None
                    else "passed"
                )
                if failure is not None:
                    self.failures[name] = (failure.get("message") or "") + (failure.text or "")
                self.properties[name] = {
                    p.get("name"): p.get("value") for p in case.iter("property")
                }

    def outcome(self, name: str) -> str:
        """The outcome of the test case `name` (``test_x[Trainer-param]``)."""
        return self.cases[name]


def run_suite(tmp_path: Path, *args: str, timeout: float = 600) -> SuiteRun:
    """Run ``pytest --pyargs towerkit.conformance.checks *args`` in a new process.

    The tests directory is on the path, so ``--trainer broken:...`` and
    ``--trainer example_trainers:...`` import from it; the JUnit report goes to
    ``tmp_path/report.xml`` through ``--conformance-report``.
    """
    report = tmp_path / "report.xml"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    argv += ["--pyargs", "towerkit.conformance.checks", "--conformance-report", str(report)]
    proc = subprocess.run(
        [*argv, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=timeout,
    )
    return SuiteRun(proc.returncode, proc.stdout + proc.stderr, report)
