"""The test programs forked by ``plugins/prefork.py`` behave as fresh interpreters would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import prefork
import pytest

pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("prefork")]

PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    import tensorflow.compat.v1 as tf
    tf.disable_eager_execution()
    with tf.Session() as s:
        print("sum", s.run(tf.reduce_sum(tf.ones([3]))))
    print("argv", sys.argv[1:], "cwd", os.getcwd(), "leader", os.getpgid(0) == os.getpid())
    print("path0", sys.path[0])
    how = sys.argv[1]
    if how == "raise":
        raise RuntimeError("boom")
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "message":
        sys.exit("went wrong")
    if how == "sleep":
        time.sleep(120)
    sys.exit(int(how))
    """
)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return path


def run(program, *args, **kwargs):
    return prefork.run([sys.executable, str(program), *args], timeout=120, **kwargs)


def test_exit_status_output_and_place(program, tmp_path):
    """The status, stdout, argv, working directory and sys.path[0] of a fresh interpreter."""
    (tmp_path / "elsewhere").mkdir()
    done = run(program, "3", cwd=tmp_path / "elsewhere")
    assert done.returncode == 3, done.stderr
    assert "sum 3.0" in done.stdout
    assert f"argv ['3'] cwd {tmp_path / 'elsewhere'} leader False" in done.stdout
    assert f"path0 {tmp_path}" in done.stdout


def test_exception_message_and_interrupt(program):
    """A traceback that starts in the program; sys.exit(str); Ctrl-C's death by SIGINT."""
    raised = run(program, "raise")
    assert raised.returncode == 1
    first = f'Traceback (most recent call last):\n  File "{program}", line '
    assert first in raised.stderr, raised.stderr
    assert "prefork" not in raised.stderr, raised.stderr
    assert "runpy" not in raised.stderr, raised.stderr
    assert raised.stderr.rstrip().endswith("RuntimeError: boom")
    message = run(program, "message")
    assert message.returncode == 1
    assert message.stderr.endswith("\nwent wrong\n") or message.stderr == "went wrong\n"
    interrupted = run(program, "interrupt")
    assert interrupted.returncode == -signal.SIGINT
    assert interrupted.stderr.rstrip().endswith("KeyboardInterrupt"), interrupted.stderr


def test_signals_reach_the_real_pid_in_its_own_session(program, tmp_path):
    """popen gives the program's own pid, leading its session when asked; SIGKILL is -9."""
    with open(tmp_path / "out.log", "w") as out:
        proc = prefork.popen(
            [sys.executable, str(program), "sleep"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    assert isinstance(proc, prefork.ForkedProcess)
    assert os.getpgid(proc.pid) == proc.pid
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def test_pipes(program):
    """stdout and stderr through pipes, read with communicate, as text."""
    proc = prefork.popen(
        [sys.executable, str(program), "raise"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "sum 3.0" in out
    assert err.rstrip().endswith("RuntimeError: boom")


def test_start_up_variables_that_differ_get_a_fresh_interpreter(program):
    """A TF_ variable unlike the server's: subprocess.Popen, not a fork."""
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "1" if os.environ.get("TF_CPP_MIN_LOG_LEVEL") != "1" else "0",
    }
    proc = prefork.popen([sys.executable, str(program), "0"], env=env, stdout=subprocess.DEVNULL)
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(timeout=300) == 0
    assert prefork.startup_vars({"TF_X": "1", "PYTHONUNBUFFERED": "1", "PATH": "/"}) == {
        "TF_X": "1"
    }
