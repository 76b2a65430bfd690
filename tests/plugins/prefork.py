"""Start test programs as forks of a process that has imported TensorFlow once.

Every Python process that imports TensorFlow pays 10 to 20 s of CPU for it on a
2-core CI machine, and the multi-process tests start hundreds of them. A pytest
worker that calls `run` or `popen` here starts, once, a server process (this file run
as a script) that imports TensorFlow and NumPy and then waits on a Unix socket; each
program is then a fork of that server: a real process with its own pid, its own
session when asked (``start_new_session``), the caller's files as its stdin, stdout
and stderr, the caller's working directory, environment and ``sys.argv``, run as
``__main__`` (a script, ``-m module`` or ``-c code``), with the exit status a fresh
interpreter would have (``-N`` for a signal). Signals go straight to that pid.

It is used only where that is the same as a fresh interpreter:

- the program's environment must equal the server's in every variable read when
  Python or TensorFlow starts (``TF_*``, ``PYTHON*`` but ``PYTHONUNBUFFERED`` and
  ``PYTHONPATH``, which are applied in the fork, ``LD_*``, ``OMP_*``, ``KMP_*``,
  ``MKL*``, ``CUDA*``, ``XLA*``); otherwise, or when ``TOWERKIT_PREFORK=0``, or when
  the server cannot start, the program starts as a fresh interpreter (`subprocess`);
- a test that reads what TensorFlow prints while it is imported (the start-up lines)
  starts its programs with `subprocess`, never here: the server printed them once.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PREFORK_ENV = "TOWERKIT_PREFORK"
"""``0`` turns the server off: every program starts as a fresh interpreter."""

START_TIMEOUT_S = 300.0
"""How long a first call waits for the server to import TensorFlow (a busy machine)."""

_APPLIED_IN_FORK = {"PYTHONUNBUFFERED", "PYTHONPATH"}
_STARTUP_PREFIXES = ("TF_", "PYTHON", "LD_", "OMP_", "KMP_", "MKL", "CUDA", "XLA")


def startup_vars(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that act when Python or TensorFlow starts (see the module doc).

    Examples:
        >>> startup_vars({"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "HOME": "/"})
        {'TF_CPP_MIN_LOG_LEVEL': '2'}
    """
    return {
        k: v
        for k, v in env.items()
        if k.startswith(_STARTUP_PREFIXES) and k not in _APPLIED_IN_FORK
    }


def _target(argv: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """``(kind, what, sys.argv)`` for ``python ARGS``, or None where the fork cannot run it.

    Examples:
        >>> _target(["python", "train.py", "--epochs", "2"])
        ('path', 'train.py', ['train.py', '--epochs', '2'])
        >>> _target(["python", "-m", "pkg.mod", "x"])
        ('module', 'pkg.mod', ['pkg.mod', 'x'])
        >>> _target(["python", "-c", "print(1)", "a"])
        ('code', 'print(1)', ['-c', 'a'])
        >>> _target(["python", "-u", "x.py"]) is None
        True
    """
    args = list(argv[1:])
    if not args:
        return None
    if args[0] == "-m" and len(args) > 1:
        return "module", args[1], [args[1], *args[2:]]
    if args[0] == "-c" and len(args) > 1:
        return "code", args[1], ["-c", *args[2:]]
    if args[0].startswith("-"):
        return None
    return "path", args[0], list(args)


# -- the server ----------------------------------------------------------------------------


def _exit_code(err: BaseException | None) -> int:
    """The status a fresh interpreter exits with after `err` (None: normal end)."""
    if err is None:
        return 0
    if isinstance(err, SystemExit):
        code = err.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        print(code, file=sys.stderr)
        return 1
    _print_traceback(err)
    return 1


def _print_traceback(err: BaseException) -> None:
    """`err` through ``sys.excepthook``, its traceback starting in the program (not here)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FRAMES:
        tb = tb.tb_next
    sys.excepthook(type(err), err.with_traceback(tb), tb)


_OWN_FRAMES = {__file__, "<frozen runpy>", getattr(__import__("runpy"), "__file__", "")}


_OPEN: set[socket.socket] = set()
"""The server's connections to its clients (closed in each fork)."""


def _child(request: dict[str, Any], fds: list[int], ready: int) -> None:
    """In the fork: become the program of `request` and run it; never returns.

    `ready` (a pipe's write end) is closed once the fork has its session and streams,
    so the client sees the pid only when ``os.getpgid(pid) == pid`` holds (when asked).
    """
    code = 1
    try:
        for conn in list(_OPEN):
            conn.close()
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if request["new_session"]:
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.close(ready)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), line_buffering=False, write_through=unbuffered
        )
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), errors="backslashreplace", write_through=True
        )
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        kind, what, argv = request["target"]
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        first = str(Path(what).resolve().parent) if kind == "path" else os.getcwd()
        sys.path[:] = [first, *extra, *request["base_path"]]
        sys.argv = argv
        err: BaseException | None = None
        try:
            import runpy

            if kind == "path":
                runpy.run_path(what, run_name="__main__")
            elif kind == "module":
                runpy.run_module(what, run_name="__main__", alter_sys=True)
            else:
                exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
        except KeyboardInterrupt as caught:
            # as the interpreter does: the traceback, the exit handlers, then death by SIGINT
            _print_traceback(caught)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _finish()
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException as caught:  # the program's own end, as the interpreter reports it
            err = caught
        code = _exit_code(err)
        _finish()
    finally:
        os._exit(code)


def _finish() -> None:
    """What the interpreter does at exit: wait for threads, run atexit, flush the streams."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def _serve(path: str) -> None:
    """Import TensorFlow, then fork one program per connection to the socket at `path`."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: end with the pytest worker
    import numpy  # noqa: F401
    import tensorflow  # noqa: F401

    base_path = [p for p in sys.path[1:] if p]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)  # the socket appears only once it listens
    while True:
        conn, _ = listener.accept()
        msg, ancdata, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * 4))
        fds = array.array("i")
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % 4])
        request = json.loads(msg.decode())
        request["base_path"] = base_path
        sys.stdout.flush()
        sys.stderr.flush()
        wait_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            os.close(wait_r)
            _child(request, list(fds), ready_w)
        os.close(ready_w)
        os.read(wait_r, 1)  # EOF once the fork is set up (or has ended)
        os.close(wait_r)
        for fd in fds:
            os.close(fd)
        _OPEN.add(conn)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        threading.Thread(target=_report, args=(conn, pid), daemon=True).start()


def _report(conn: socket.socket, pid: int) -> None:
    """Wait for `pid` and send its exit status (``returncode`` as `subprocess` has it)."""
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        conn.sendall(json.dumps({"returncode": code}).encode() + b"\n")
    except OSError:
        pass  # the client has gone
    finally:
        _OPEN.discard(conn)
        conn.close()


# -- the client -----------------------------------------------------------------------------


class _Server:
    """This pytest worker's server: started on first use, stopped when the worker exits."""

    def __init__(self) -> None:
        self.path = ""
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.failed = False
        self.lock = threading.Lock()

    def ready(self) -> bool:
        with self.lock:
            if self.proc is None and not self.failed:
                self._start()
            return self.proc is not None

    def _start(self) -> None:
        folder = tempfile.mkdtemp(prefix="towerkit-prefork-")
        self.path = os.path.join(folder, "sock")
        self.env = dict(os.environ)
        sys.audit("subprocess.Popen", sys.executable, ["prefork server"], None, None)
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", self.path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(self.path):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                self.failed = True
                return
            time.sleep(0.1)
        self.proc = proc
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


_SERVER = _Server()


class ForkedProcess:
    """A program forked by the server, with the parts of `subprocess.Popen` tests use."""

    def __init__(
        self, args: Sequence[str], conn: socket.socket, stdout: Any = None, stderr: Any = None
    ) -> None:
        self.args = list(args)
        self.stdin = None
        self.stdout = stdout
        self.stderr = stderr
        self._conn = conn
        self._buf = b""
        line = self._line(None)
        if line is None:
            msg = "the prefork server closed the connection before starting the program"
            raise OSError(msg)
        self.pid: int = json.loads(line)["pid"]
        self.returncode: int | None = None

    def _line(self, timeout: float | None) -> bytes | None:
        """The server's next message; None when `timeout` (0: do not wait) passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._conn.settimeout(left)
            try:
                chunk = self._conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                return None
            if not chunk:
                msg = "the prefork server went away while the program ran"
                raise OSError(msg)
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def poll(self) -> int | None:
        if self.returncode is None:
            line = self._line(0.0)
            if line is not None:
                self._done(line)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            line = self._line(timeout)
            if line is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._done(line)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read the pipes to their end, then wait: ``(stdout, stderr)`` as `subprocess` gives them."""
        found: dict[str, Any] = {}
        readers = [
            threading.Thread(target=lambda n=name, f=f: found.__setitem__(n, f.read()), daemon=True)
            for name, f in (("out", self.stdout), ("err", self.stderr))
            if f is not None
        ]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        return found.get("out"), found.get("err")

    def _done(self, line: bytes) -> None:
        self.returncode = int(json.loads(line)["returncode"])
        self._conn.close()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _fileno(value: Any, default: int) -> int:
    """A new descriptor for a child's stream (None: this process's own `default` one)."""
    if value is None:
        return os.dup(default)
    if value == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR)
    if isinstance(value, int):
        return os.dup(value)
    return os.dup(value.fileno())


def popen(
    args: Sequence[str],
    *,
    stdin: Any = subprocess.DEVNULL,
    stdout: Any = None,
    stderr: Any = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    start_new_session: bool = False,
    text: bool = False,
) -> Any:
    """``subprocess.Popen(args, ...)`` for ``[sys.executable, ...]``, forked from the server.

    `stdout` and `stderr` are None, ``subprocess.DEVNULL``, ``subprocess.PIPE``, a file
    or a descriptor (``stderr=subprocess.STDOUT`` joins them); pipes are read through
    ``.stdout``/``.stderr`` or `ForkedProcess.communicate`, as text when `text`.
    Falls back to `subprocess.Popen` as the module docstring says.
    """
    env = dict(os.environ if env is None else env)
    target = _target(args)
    forkable = (
        os.environ.get(PREFORK_ENV, "1") != "0"
        and target is not None
        and Path(args[0]).resolve() == Path(sys.executable).resolve()
    )
    if forkable and _SERVER.ready() and startup_vars(env) == startup_vars(_SERVER.env):
        sys.audit("subprocess.Popen", args[0], list(args), cwd, env)
        pipes: dict[str, Any] = {}

        def child_end(value: Any, default: int, name: str) -> int:
            if value != subprocess.PIPE:
                return _fileno(value, default)
            read, write = os.pipe()
            pipes[name] = os.fdopen(read, "r" if text else "rb")
            return write

        out = child_end(stdout, 1, "out")
        err = os.dup(out) if stderr == subprocess.STDOUT else child_end(stderr, 2, "err")
        inp = _fileno(stdin, 0)
        request = {
            "target": target,
            "env": env,
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "new_session": start_new_session,
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(_SERVER.path)
        fds = array.array("i", [inp, out, err])
        try:
            conn.sendmsg(
                [json.dumps(request).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
            )
        finally:
            for fd in fds:
                os.close(fd)
        return ForkedProcess(args, conn, pipes.get("out"), pipes.get("err"))
    return subprocess.Popen(
        list(args),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=env,
        cwd=cwd,
        start_new_session=start_new_session,
        text=text,
    )


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    text: bool = True,
    capture_output: bool = True,
    check: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(args, capture_output=True, ...)``, forked from the server where it can be.

    On `timeout` the program is killed and `subprocess.TimeoutExpired` raised, as
    `subprocess.run` does. The output is always captured and never checked (the
    arguments are there so that a call reads as the `subprocess.run` it replaces).
    """
    if not capture_output or check:
        msg = "prefork.run always captures the output and never checks the status"
        raise ValueError(msg)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = popen(args, stdout=out, stderr=err, env=env, cwd=cwd)
        try:
            code = proc.wait(timeout=timeout)
        except BaseException:  # a timeout, or the test's own timeout or Ctrl-C
            proc.kill()
            proc.wait()
            raise
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if text:
        return subprocess.CompletedProcess(
            list(args), code, stdout.decode(errors="replace"), stderr.decode(errors="replace")
        )
    return subprocess.CompletedProcess(list(args), code, stdout, stderr)


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    _serve(sys.argv[2])
