"""The shell: the steps, each command in its own process; the wheel cache and its lock; the CLI."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from towerkit.callbacks.plumbing import stop_process_group
from towerkit.sessinit import atomic_path, atomic_write_text
from towerkit.tools.install_horovod import _core as c

_Env = dict[str, str] | None
PROBE_SCRIPT = """
import json, sys, sysconfig
from importlib import metadata
impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
tag = f"{impl}{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
report = {"python_tag": tag, "platform": sysconfig.get_platform(), "nccl_dists": sorted(
    [d.metadata["Name"], d.version] for d in metadata.distributions()
    if (d.metadata["Name"] or "").lower().startswith("nvidia-nccl"))}
report["tensorflow_dists"] = [[n, metadata.version(n)] for n in sorted(set(metadata.packages_distributions().get("tensorflow", [])))]
try:
    import tensorflow as tf
    report["tensorflow"] = tf.__version__
    info = dict(tf.sysconfig.get_build_info())
    report.update({k: str(info[k + "_version"]) for k in ("cuda", "cudnn") if info.get(k + "_version")})
except Exception as err:
    report.setdefault("tensorflow_error", f"{type(err).__name__}: {err}")
try:
    import horovod
    report["horovod"] = horovod.__version__
    import horovod.tensorflow as hvd
    report.update(gloo=bool(hvd.gloo_built()), mpi=bool(hvd.mpi_built()), nccl=bool(hvd.nccl_built()))
except Exception as err:
    if "horovod" in report:
        report["horovod_error"] = f"{type(err).__name__}: {err}"
print("TOWERKIT-HVD-PROBE", json.dumps(report))
"""

VERIFY_SCRIPT = """
import numpy as np
import tensorflow as tf
import horovod.tensorflow as hvd
tf1 = tf.compat.v1
hvd.init()
rank, size = hvd.rank(), hvd.size()
with tf1.Graph().as_default() as graph:
    x = tf1.constant([float(rank + 1)] * 4)
    total, mean = hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(x, op=hvd.Average)
    var = tf1.get_variable("v", initializer=tf1.constant(float(10 * rank + 7)))
    init, bcast = tf1.global_variables_initializer(), hvd.broadcast_global_variables(0)
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        got = dict(zip(("sum", "average"), sess.run([total, mean])))
        sess.run(bcast)
        got["broadcast"] = sess.run(var)
want = {"sum": size * (size + 1) / 2, "average": (size + 1) / 2, "broadcast": 7.0}
bad = [f"{k} is {np.ravel(v).tolist()}, expected {want[k]}" for k, v in got.items() if not np.allclose(v, want[k])]
print(f"TOWERKIT-HVD-CHECK rank {rank} of {size}:", "; ".join(bad) or "ok", flush=True)
raise SystemExit(1 if bad else 0)
"""


@contextlib.contextmanager
def entry_lock(cache: Path, key: str) -> Iterator[None]:
    """Hold ``flock`` on ``cache/.<key>.lock`` (released by the kernel at exit, however it exits)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".{key}.lock").open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another install-horovod to finish {cache / key}", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _run(name: str, summary: str, argv: Sequence[str], env: _Env = None) -> None:
    print(f"$ {shlex.join(argv)}", flush=True)
    try:
        code = subprocess.run(argv, env=env, check=False).returncode
    except FileNotFoundError as err:
        msg = f"step '{name}' could not start {argv[0]!r}: {err}"
        raise c.HorovodInstallError(msg) from None
    if code != 0:
        msg = f"step '{name}' ({summary}) failed with exit status {code}: {shlex.join(argv)}"
        raise c.HorovodInstallError(msg)


def _probe(python: str, timeout: float) -> c.Probe:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        done = subprocess.run(
            [python, "-c", PROBE_SCRIPT], capture_output=True, text=True, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        msg = f"probing {python} (importing tensorflow and horovod) took over {timeout:g} s"
        raise c.HorovodInstallError(msg) from None
    return c.parse_probe(done.stdout + "\n" + done.stderr)


def _unpack(sdist: Path, src: Path) -> None:
    """Unpack horovod's sdist afresh into ``src`` (its top folder, beside it), then patch it."""
    if not sdist.is_file():
        found = sorted(os.listdir(sdist.parent))
        msg = f"the download left no {sdist.name!r} in {sdist.parent}; found {found}"
        raise c.HorovodInstallError(msg)
    shutil.rmtree(src, ignore_errors=True)
    with tarfile.open(sdist) as archive:
        archive.extraction_filter = getattr(tarfile, "data_filter", None)  # Python >= 3.10.12
        archive.extractall(src.parent)
    if not (src / c.CMAKELISTS).is_file():
        msg = f"'{c.CMAKELISTS}' is missing from {src}: not a horovod source tree the patch knows"
        raise c.HorovodPatchError(msg)
    atomic_write_text(src / c.CMAKELISTS, c.patch_cmakelists((src / c.CMAKELISTS).read_text()))


def _check_tools(options: c.BuildOptions) -> None:
    path = os.environ.get("PATH", os.defpath)
    missing = c.missing_build_tools(options, path=path, env=os.environ)
    if missing:
        msg = "horovod's build needs tools that are not on PATH: " + "; ".join(missing)
        raise c.HorovodInstallError(msg)


class _Install:
    """One run: each step is announced (``== name: summary``), then done; a dry run lists them."""

    def __init__(self, args: argparse.Namespace, options: c.BuildOptions, workdir: Path) -> None:
        self.args, self.options, self.workdir, self.count = args, options, workdir, 0
        self.python, self.version, self.dry = args.python, options.version, args.dry_run
        cache = os.environ.get(c.WHEEL_CACHE_ENV) if args.wheel_cache is None else args.wheel_cache
        self.cache = Path(cache).expanduser().absolute() if cache else None

    def step(self, name: str, summary: str, *argvs: Sequence[str]) -> bool:
        """Announce a step; return whether to carry it out (never in a dry run)."""
        self.count += 1
        print(f"  {self.count}. {name}: {summary}" if self.dry else f"== {name}: {summary}")
        print("".join(f"     $ {shlex.join(argv)}\n" for argv in argvs if self.dry), end="")
        return not self.dry

    def command(self, name: str, summary: str, *argv: str, env: _Env = None) -> None:
        """A step that is one command."""
        if self.step(name, summary, argv):
            _run(name, summary, argv, env)

    def steps(self) -> None:
        """Every step in order; a dry run lists them as for a target without horovod."""
        found, done, key, python = c.Probe(), False, None, self.python
        if self.step("check-tensorflow", f"import tensorflow in {python}"):
            found = _probe(python, self.args.probe_timeout)
            if found.tensorflow is None:
                msg = (
                    f"tensorflow does not import in {python}: {found.tensorflow_error}; "
                    "install it there first (pip install tensorflow-cpu)"
                )
                raise c.HorovodInstallError(msg)
            print(f"tensorflow {found.tensorflow}", flush=True)
        fits = f"skip the build if horovod {self.version} fits (ops, controllers; --force rebuilds)"
        if self.step("check-installed", fits):
            reason = c.rebuild_reason(found, self.options)
            done = reason is None and not self.args.force
            built = f"horovod {self.version} is already built here; --force rebuilds"
            print(built if done else reason or "--force: rebuilding", flush=True)
        has_pip = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pip') is None)"
        if not done and subprocess.run([python, "-c", has_pip], check=False).returncode:
            bootstrap = (python, "-m", "ensurepip", "--upgrade")
            self.command("ensurepip", f"bootstrap pip into {python}", *bootstrap)
        with contextlib.ExitStack() as held:
            lookup = f"if {self.cache}/<key>/ holds a wheel, install it, no build (--force builds)"
            if not done and self.cache is not None and self.step("cache-lookup", lookup):
                key, done = self.lookup(self.cache, found, held)
            if not done:
                self.build(key)
        argv: tuple[str, ...] = (python, "-m", "horovod.runner.launch", "-np", "2", "--gloo")
        argv += ("-H", "localhost:2", python, str(self.workdir / "verify_horovod.py"))
        checks = "allreduce and broadcast in graph mode over 2 gloo processes"
        if not self.args.skip_verify and self.step("verify", checks, argv):
            self.verify(argv)

    def lookup(
        self, cache: Path, found: c.Probe, held: contextlib.ExitStack
    ) -> tuple[str | None, bool]:
        """Key the target, lock its entry, install its wheel if that works; (key, installed)."""
        try:
            key = c.cache_key(self.options, found)
        except ValueError as err:
            print(f"the wheel cache is not used: {err}", flush=True)
            return None, False
        print(f"cache key: {key}", flush=True)
        held.enter_context(entry_lock(cache, key))
        wheels = sorted((cache / key).glob("horovod-*.whl"))  # stores write under hidden names
        if self.args.force or not wheels:
            force = f"--force: building a new wheel for {cache / key}"
            print(force if self.args.force else f"no wheel in {cache / key}: building one")
            return key, False
        print(f"found {wheels[-1]}", flush=True)
        began = time.monotonic()
        try:
            reason = self.install_wheel("cache-lookup", wheels[-1])
        except c.HorovodInstallError as err:
            reason = str(err)
        if reason is None:
            took = f"{time.monotonic() - began:.0f} s"
            print(f"installed horovod {self.version} from the wheel cache in {took}")
            return key, True
        bad = f"the cached wheel does not work in {self.python} ({reason})"
        print(f"{bad}; removing {cache / key} and building", flush=True)
        shutil.rmtree(cache / key)
        return key, False

    def wheel_argvs(self, wheel: Path) -> list[tuple[str, ...]]:
        """Install horovod's runtime requirements, then the wheel itself with ``--no-deps``."""
        pip = (self.python, "-m", "pip", "install")
        return [
            (*pip, *c.RUNTIME_REQUIREMENTS),
            (*pip, "--no-deps", "--force-reinstall", str(wheel)),
        ]

    def install_wheel(self, name: str, wheel: Path) -> str | None:
        """Install ``wheel``, then probe; return why horovod still does not fit, or None."""
        for argv in self.wheel_argvs(wheel):
            _run(name, f"install {wheel.name}", argv)
        return c.rebuild_reason(_probe(self.python, self.args.probe_timeout), self.options)

    def build(self, key: str | None) -> None:
        """Download, patch, build a wheel, keep it under ``cache/key/`` if any, install it."""
        version, cache, workdir = self.version, self.cache, self.workdir
        pip = (self.python, "-m", "pip")
        src, wheelhouse = workdir / f"horovod-{version}", workdir / "wheelhouse"
        tools = "cmake and a C++ compiler on PATH"
        tools += ", mpicxx and mpirun" * self.options.with_mpi + ", nvcc" * self.options.gpu
        if self.step("check-tools", tools):
            _check_tools(self.options)
        get = ("download", "--no-deps", "--no-binary", ":all:", f"horovod=={version}", "-d")
        self.command("download", f"download the horovod {version} sdist", *pip, *get, str(workdir))
        if self.step("unpack", f"unpack horovod-{version}.tar.gz into {src}"):
            _unpack(workdir / f"horovod-{version}.tar.gz", src)
        self.step("patch", f"leave {c.XLA_SOURCE} out of {c.CMAKELISTS} (done while unpacking)")
        needs = "install what horovod's setup.py needs (the build is not isolated)"
        self.command("prerequisites", needs, *pip, "install", *c.BUILD_REQUIREMENTS)
        began, env = time.monotonic(), c.build_env(self.options, os.environ)
        what = "compile a horovod wheel against the installed TensorFlow"
        flags = ("wheel", "-v", "--no-build-isolation", "--no-deps", "--no-cache-dir", "-w")
        shutil.rmtree(wheelhouse, ignore_errors=True)
        self.command("build-wheel", what, *pip, *flags, str(wheelhouse), str(src), env=env)
        wheels = sorted(wheelhouse.glob("horovod-*.whl"))
        if len(wheels) != 1 and not self.dry:
            found = sorted(os.listdir(wheelhouse)) if wheelhouse.is_dir() else []
            msg = f"the build should leave one 'horovod-*.whl' in {wheelhouse}, found {found}"
            raise c.HorovodInstallError(msg)
        wheel = wheels[0] if wheels else wheelhouse / f"horovod-{version}-<tags>.whl"
        if not self.dry:
            print(f"built {wheel.name} in {time.monotonic() - began:.0f} s", flush=True)
        store = f"copy the wheel into {cache}/<key>/ (temporary name, then rename)"
        if cache is not None and self.step("cache-store", store):
            if key is None:
                print(f"not cached (the target has no key): installing {wheel}", flush=True)
            else:
                shutil.rmtree(cache / key, ignore_errors=True)
                (cache / key).mkdir()
                with atomic_path(cache / key / wheel.name) as tmp:
                    shutil.copyfile(wheel, tmp)
                    os.chmod(tmp, 0o644)
                wheel = cache / key / wheel.name
                print(f"cached {wheel}", flush=True)
        then = ", then the wheel with --no-deps, and check that it loads"
        then = f"install {', '.join(c.RUNTIME_REQUIREMENTS)}{then}"
        if self.step("install-wheel", then, *self.wheel_argvs(wheel)):
            reason = self.install_wheel("install-wheel", wheel)
            if reason is not None:
                msg = f"the wheel {wheel.name} was built but does not fit in {self.python}"
                msg += f": {reason}"
                if cache is not None and key is not None:
                    shutil.rmtree(cache / key)
                    msg += "; removed it from the wheel cache"
                raise c.HorovodInstallError(msg)

    def verify(self, argv: Sequence[str]) -> None:
        """Run the 2-process job in a process group of its own (stopped whole on timeout)."""
        atomic_write_text(argv[-1], VERIFY_SCRIPT)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HOROVOD_GLOO_TIMEOUT_SECONDS": "60"}
        print(f"$ {shlex.join(argv)}", flush=True)
        timeout, pipe = self.args.verify_timeout, subprocess.PIPE
        group: dict[str, Any] = {"cwd": self.workdir, "start_new_session": True}
        with subprocess.Popen(argv, stdout=pipe, stderr=-2, text=True, env=env, **group) as proc:
            try:
                text = proc.communicate(timeout=timeout)[0]
            except subprocess.TimeoutExpired:
                stop_process_group(proc)
                text = proc.communicate()[0]
                msg = f"step 'verify' took over {timeout:g} s: {shlex.join(argv)}\noutput:\n{text}"
                raise c.HorovodInstallError(msg) from None
        reports = [line for line in text.splitlines() if "TOWERKIT-HVD-CHECK" in line]
        if proc.returncode != 0 or len(reports) != 2:
            msg = f"step 'verify' failed with exit status {proc.returncode}, "
            msg += f"{len(reports)} of 2 ranks reported\noutput:\n{text}"
            raise c.HorovodInstallError(msg)
        works = "horovod works: allreduce (sum, average) and broadcast agree on every rank"
        print(*reports, works, sep="\n")


def _install(args: argparse.Namespace, options: c.BuildOptions) -> int:
    if not (os.path.isfile(args.python) and os.access(args.python, os.X_OK)):
        msg = f"'--python' must be an executable interpreter, got {args.python!r}"
        raise c.HorovodInstallError(msg)
    if args.dry_run:
        run = _Install(args, options, Path(args.workdir or "<a new temporary directory>"))
        head = [f"python:  {args.python}", f"workdir: {run.workdir}"]
        head += (
            [f"wheel cache: {run.cache}", "build environment:"]
            if run.cache
            else ["build environment:"]
        )
        env = (f"  {k}={v}" for k, v in sorted(c.build_env(options).items()))
        print(*head, *env, "steps:", sep="\n")
        run.steps()
        return 0
    own = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="towerkit-horovod-") if own else args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    try:
        _Install(args, options, workdir).steps()
        print(f"done in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the installer on ``argv`` (default: ``sys.argv[1:]``); 0 on success, 1 if a step failed."""
    what = "Build horovod (gloo; MPI, NCCL on request) for an interpreter's TensorFlow, check it."
    parser = argparse.ArgumentParser(prog="install-horovod", description=what)
    add, flag = parser.add_argument, cast("dict[str, Any]", {"action": "store_true"})
    add("--python", default=sys.executable, help="the target's interpreter (default: this one)")
    add("--version", default=c.DEFAULT_VERSION, help="horovod release to build")
    add("--with-mpi", **flag, help="also build the MPI controller (needs MPI)")
    add("--gpu", **flag, help="GPU collectives through NCCL (needs CUDA and NCCL)")
    add("--jobs", type=int, default=os.cpu_count() or 1, help="compile jobs (default: CPU count)")
    add("--workdir", help="where to download and build, kept (default: a temporary directory)")
    add("--dry-run", **flag, help="print the environment and steps, run nothing")
    add("--skip-verify", **flag, help="no 2-process check after")
    add("--force", **flag, help="rebuild even if a fitting horovod is installed or cached")
    add(
        "--wheel-cache",
        metavar="DIR",
        help=f"keep built wheels under DIR/<key>/, install from there when the key matches "
        f"(default: ${c.WHEEL_CACHE_ENV}; unset or '': no cache)",
    )
    add("--verify-timeout", type=float, default=300.0, help="seconds for the 2-process check")
    add("--probe-timeout", type=float, default=300.0, help="seconds to import tensorflow, horovod")
    args = parser.parse_args(argv)
    try:
        options = c.BuildOptions(
            version=args.version, with_mpi=args.with_mpi, gpu=args.gpu, jobs=args.jobs
        )
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    try:
        return _install(args, options)
    except (c.HorovodInstallError, c.HorovodPatchError) as err:
        print(f"install-horovod: error: {err}", file=sys.stderr)
        return 1
