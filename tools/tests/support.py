"""Helpers shared by the tools' tests: a tool run in a process where some imports fail."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, runpy, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def __init__(self, names):
            self.names = names

        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in self.names:
                raise ImportError(f"{fullname} is blocked in this test")
            return None

    sys.meta_path.insert(0, Blocker(set(sys.argv[1].split(","))))
    module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    """
)
"""Run a module as ``__main__`` with some top-level packages made unimportable."""


def run_blocked(
    module: str, args: Sequence[str], blocked: Sequence[str], cwd: str | os.PathLike[str]
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module *args`` in a fresh process where `blocked` packages fail to import."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, ",".join(blocked), module, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
        check=False,
    )
