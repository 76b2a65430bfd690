"""A console that cannot be written (a full disk under standard error) never ends a run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from towerkit.callbacks import read_stats_file

SCRIPT = os.path.join(os.path.dirname(__file__), "console_script.py")

pytestmark = pytest.mark.procs


@contextlib.contextmanager
def full_tmpfs(where):
    """A 64 KiB tmpfs mounted at `where` and filled up (root only); unmounted afterwards."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace')}")
    try:
        with contextlib.suppress(OSError), open(where / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def run_with_stderr(logdir, stderr_path):
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.path.dirname(__file__),
    )
    with open(stderr_path, "w") as err:
        return subprocess.run(
            [sys.executable, SCRIPT, str(logdir)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )


def check_run(proc, logdir):
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    assert "DONE 12" in lines, proc.stdout
    assert "CONSOLE OSError: [Errno 28] No space left on device" in lines, proc.stdout
    assert [r["epoch_num"] for r in read_stats_file(logdir / "stats.json")] == [1, 2, 3]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_dev_full(tmp_path):
    """Standard error on /dev/full (every write: ENOSPC): training runs to its end."""
    logdir = tmp_path / "log"
    check_run(run_with_stderr(logdir, "/dev/full"), logdir)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")
def test_full_tmpfs(tmp_path):
    """Standard error on a file of a full 64 KiB tmpfs: training runs to its end."""
    logdir = tmp_path / "log"
    with full_tmpfs(tmp_path / "fs") as fs:
        check_run(run_with_stderr(logdir, fs / "stderr.txt"), logdir)
