"""What the tracker tests share: the optional packages, the training script, an MLflow server.

The tracker packages are optional extras of the callbacks lib, installed by ``nox -s
trackers`` only: elsewhere their tests are skipped with a reason, except under ``CI=true``,
where a missing package fails them (CI must run them).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prefork
import pytest

HERE = Path(__file__).parent
SCRIPT = HERE / "trackers_train.py"


def need(module: str) -> Any:
    """Import `module`; skip the test without it, or fail it under ``CI=true``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        why = f"{module} is not installed: the tracker tests run in `nox -s trackers` ({err})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)


def train(
    logdir: Path, tracker: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the training script (a real process) and return its status and output."""
    full_env = {**os.environ, **(env or {})}
    return prefork.run(
        [sys.executable, str(SCRIPT), str(logdir), tracker, *args],
        env=full_env,
        cwd=str(logdir.parent),
        timeout=timeout,
    )


def run_id_of(proc: subprocess.CompletedProcess[str]) -> str:
    """The ``RUN_ID`` the script printed."""
    ids = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("RUN_ID ")]
    assert ids, f"no RUN_ID line:\n{proc.stdout}\n{proc.stderr}"
    return ids[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mlflow_server(
    folder: Path, start_timeout: float = 240
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real MLflow tracking server (its own process group) over SQLite in `folder`: (uri, process)."""
    need("mlflow")
    port = free_port()
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    log = open(folder / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--serve-artifacts",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"the MLflow server exited with {proc.returncode}:\n{(folder / 'server.log').read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the MLflow server did not answer in {start_timeout} s:\n{(folder / 'server.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield uri, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
