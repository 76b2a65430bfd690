"""Running the plan: the steps, the build, the install and the verify job, each in its own process."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from towerkit.callbacks.plumbing import stop_process_group
from towerkit.sessinit import atomic_write_text
from towerkit.tools.install_horovod._cache import (
    _entry_lock,
    _wheel_cache_dir,
    cache_key,
    evict_cached_wheel,
    find_cached_wheel,
    store_wheel,
)
from towerkit.tools.install_horovod._checks import (
    PROBE_SCRIPT,
    VERIFY_SCRIPT,
    check_verify_output,
    missing_build_tools,
    parse_cmake_version,
    parse_probe,
    rebuild_reason,
)
from towerkit.tools.install_horovod._plan import (
    WHEELHOUSE,
    _install_wheel_argvs,
    build_env,
    choose_installer,
    merged_env,
    patch_cmakelists,
    plan_install,
    render_plan,
    sdist_name,
)
from towerkit.tools.install_horovod._records import (
    CMAKELISTS,
    MIN_CMAKE,
    BuildOptions,
    HorovodInstallError,
    HorovodPatchError,
    Installer,
    Probe,
    Step,
)


def _has_pip(python: str) -> bool:
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pip') is None)"
    return subprocess.run([python, "-c", code], check=False).returncode == 0


def _probe(python: str, timeout: float) -> Probe:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        done = subprocess.run(
            [python, "-c", PROBE_SCRIPT],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        msg = f"probing {python} (importing tensorflow and horovod) took over {timeout:g} s"
        raise HorovodInstallError(msg) from None
    return parse_probe(done.stdout + "\n" + done.stderr)


def _run_step(step: Step, *, env: Mapping[str, str] | None, timeout: float | None = None) -> None:
    print(f"$ {shlex.join(step.argv)}", flush=True)
    try:
        done = subprocess.run(step.argv, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        msg = (
            f"step '{step.name}' ({step.summary}) took over {timeout:g} s: {shlex.join(step.argv)}"
        )
        raise HorovodInstallError(msg) from None
    except FileNotFoundError as err:
        msg = f"step '{step.name}' could not start {step.argv[0]!r}: {err}"
        raise HorovodInstallError(msg) from None
    if done.returncode != 0:
        msg = (
            f"step '{step.name}' ({step.summary}) failed with exit status {done.returncode}: "
            f"{shlex.join(step.argv)}"
        )
        raise HorovodInstallError(msg)


def _check_tools(options: BuildOptions) -> None:
    path = os.environ.get("PATH", os.defpath)
    missing = missing_build_tools(options, path=path, env=os.environ)
    if missing:
        msg = "horovod's build needs tools that are not on PATH: " + "; ".join(missing)
        raise HorovodInstallError(msg)
    cmake = shutil.which("cmake", path=path) or "cmake"
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=False)
    found = parse_cmake_version(out.stdout)
    if found < MIN_CMAKE:
        msg = (
            f"horovod's build needs cmake >= {'.'.join(map(str, MIN_CMAKE))}, "
            f"found {'.'.join(map(str, found))} at {cmake} (pip install 'cmake>=3.13' or "
            "set HOROVOD_CMAKE to a newer one)"
        )
        raise HorovodInstallError(msg)


def _unpack(sdist: Path, workdir: Path, version: str) -> Path:
    if not sdist.is_file():
        msg = (
            f"the download left no {sdist.name!r} in {workdir}; found {sorted(os.listdir(workdir))}"
        )
        raise HorovodInstallError(msg)
    src = workdir / f"horovod-{version}"
    if src.exists():
        shutil.rmtree(src)
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(workdir, filter="data")
        else:  # Python < 3.10.12 has no extraction filters
            archive.extractall(workdir)
    if not (src / "setup.py").is_file():
        msg = f"{sdist.name!r} did not unpack to {src} with a setup.py"
        raise HorovodInstallError(msg)
    return src


def _apply_patch(src: Path) -> None:
    target = src / CMAKELISTS
    if not target.is_file():
        msg = f"'{CMAKELISTS}' is missing from {src}: not a horovod source tree the patch knows"
        raise HorovodPatchError(msg)
    text = target.read_text()
    atomic_write_text(target, patch_cmakelists(text))


def _install(args: argparse.Namespace, options: BuildOptions) -> int:
    python = args.python
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        msg = f"'--python' must be an executable interpreter, got {python!r}"
        raise HorovodInstallError(msg)
    uv = shutil.which("uv")
    installer = choose_installer(python, has_pip=_has_pip(python), uv=uv)
    cache = _wheel_cache_dir(args.wheel_cache, os.environ)
    cache_text = None if cache is None else str(cache)
    own_workdir = args.workdir is None
    if args.dry_run:
        workdir_text = args.workdir or "<a new temporary directory>"
        steps = plan_install(
            installer,
            options,
            workdir=workdir_text,
            verify=not args.skip_verify,
            wheel_cache=cache_text,
        )
        print(
            render_plan(
                steps,
                build_env(options),
                python=python,
                workdir=workdir_text,
                wheel_cache=cache_text,
            )
        )
        return 0
    if own_workdir:
        workdir = Path(tempfile.mkdtemp(prefix="towerkit-horovod-"))
    else:
        workdir = Path(args.workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    steps = plan_install(
        installer,
        options,
        workdir=str(workdir),
        verify=not args.skip_verify,
        wheel_cache=cache_text,
    )
    env = merged_env(os.environ, options)
    try:
        with contextlib.ExitStack() as locks:
            _execute(
                steps,
                options,
                installer=installer,
                env=env,
                workdir=workdir,
                cache=cache,
                locks=locks,
                args=args,
            )
    finally:
        if own_workdir and not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        elif own_workdir:
            print(f"kept the working directory {workdir}")
    return 0


def _execute(
    steps: Sequence[Step],
    options: BuildOptions,
    *,
    installer: Installer,
    env: Mapping[str, str],
    workdir: Path,
    cache: Path | None,
    locks: contextlib.ExitStack,
    args: argparse.Namespace,
) -> None:
    python = args.python
    skip_build = False
    src = workdir / f"horovod-{options.version}"
    key: str | None = None
    wheel: Path | None = None
    started = time.monotonic()
    for step in steps:
        if skip_build and step.name != "verify":
            continue
        print(f"== {step.name}: {step.summary}", flush=True)
        if step.name == "check-tensorflow":
            probe = _probe(python, args.probe_timeout)
            if probe.tensorflow is None:
                msg = (
                    f"tensorflow does not import in {python}: {probe.tensorflow_error}; "
                    "install it there first (pip install tensorflow-cpu)"
                )
                raise HorovodInstallError(msg)
            print(f"tensorflow {probe.tensorflow}", flush=True)
        elif step.name == "check-installed":
            reason = rebuild_reason(probe, options)
            if reason is None and not args.force:
                print(f"horovod {options.version} is already built here; --force rebuilds")
                skip_build = True
            else:
                print(reason or "--force: rebuilding", flush=True)
        elif step.name == "cache-lookup":
            if cache is not None:
                key, skip_build = _cache_lookup(
                    cache, options, probe, installer=installer, env=env, locks=locks, args=args
                )
        elif step.name == "check-tools":
            _check_tools(options)
        elif step.name == "unpack":
            src = _unpack(workdir / sdist_name(options.version), workdir, options.version)
        elif step.name == "patch":
            _apply_patch(src)
        elif step.name == "build":
            build_started = time.monotonic()
            _run_step(step, env=env)
            print(f"built horovod {options.version} in {time.monotonic() - build_started:.0f} s")
            reason = rebuild_reason(_probe(python, args.probe_timeout), options)
            if reason is not None:
                msg = f"the build finished but does not fit in {python}: {reason}"
                raise HorovodInstallError(msg)
        elif step.name == "build-wheel":
            wheelhouse = workdir / WHEELHOUSE
            shutil.rmtree(wheelhouse, ignore_errors=True)
            build_started = time.monotonic()
            _run_step(step, env=env)
            wheel = _built_wheel(wheelhouse)
            print(f"built {wheel.name} in {time.monotonic() - build_started:.0f} s", flush=True)
        elif step.name == "cache-store":
            wheel = _store_built(wheel, cache, key)
        elif step.name == "install-wheel":
            _install_and_check(
                wheel, options, installer=installer, env=env, cache=cache, key=key, args=args
            )
        elif step.name == "verify":
            _verify(step, workdir=workdir, timeout=args.verify_timeout)
        else:
            _run_step(step, env=env)
    print(f"done in {time.monotonic() - started:.0f} s", flush=True)


def _cache_lookup(
    cache: Path,
    options: BuildOptions,
    probe: Probe,
    *,
    installer: Installer,
    env: Mapping[str, str],
    locks: contextlib.ExitStack,
    args: argparse.Namespace,
) -> tuple[str | None, bool]:
    """Key the target, lock its entry, install a cached wheel when one works.

    Returns the key (None when the target cannot be keyed) and whether horovod is installed.
    A cached wheel that fails to install or to load is evicted, and the build goes on.
    """
    try:
        key = cache_key(options, probe)
    except ValueError as err:
        print(f"the wheel cache is not used: {err}", flush=True)
        return None, False
    print(f"cache key: {key}", flush=True)
    locks.enter_context(_entry_lock(cache, key))
    if args.force:
        print(f"--force: building a new wheel for {cache / key}", flush=True)
        return key, False
    wheel = find_cached_wheel(cache, key)
    if wheel is None:
        print(f"no wheel in {cache / key}: building one", flush=True)
        return key, False
    print(f"found {wheel}", flush=True)
    began = time.monotonic()
    try:
        _install_wheel(installer, wheel, env=env, step_name="cache-lookup")
        reason = rebuild_reason(_probe(installer.python, args.probe_timeout), options)
    except HorovodInstallError as err:
        reason = str(err)
    if reason is None:
        elapsed = time.monotonic() - began
        print(f"installed horovod {options.version} from the wheel cache in {elapsed:.0f} s")
        return key, True
    print(
        f"the cached wheel does not work in {installer.python} ({reason}); "
        f"removing {cache / key} and building",
        flush=True,
    )
    evict_cached_wheel(cache, key)
    return key, False


def _install_wheel(
    installer: Installer, wheel: Path, *, env: Mapping[str, str], step_name: str
) -> None:
    for argv in _install_wheel_argvs(installer, str(wheel)):
        _run_step(Step(name=step_name, summary=f"install {wheel.name}", argv=argv), env=env)


def _built_wheel(wheelhouse: Path) -> Path:
    wheels = sorted(wheelhouse.glob("horovod-*.whl")) if wheelhouse.is_dir() else []
    if len(wheels) != 1:
        found = sorted(os.listdir(wheelhouse)) if wheelhouse.is_dir() else []
        msg = f"the build should leave one 'horovod-*.whl' in {wheelhouse}, found {found}"
        raise HorovodInstallError(msg)
    return wheels[0]


def _store_built(wheel: Path | None, cache: Path | None, key: str | None) -> Path:
    if wheel is None:
        msg = "step 'cache-store' has no wheel: step 'build-wheel' did not run"
        raise HorovodInstallError(msg)
    if cache is None or key is None:
        print(f"not cached (the target has no key): installing {wheel}", flush=True)
        return wheel
    stored = store_wheel(wheel, cache, key)
    print(f"cached {stored}", flush=True)
    return stored


def _install_and_check(
    wheel: Path | None,
    options: BuildOptions,
    *,
    installer: Installer,
    env: Mapping[str, str],
    cache: Path | None,
    key: str | None,
    args: argparse.Namespace,
) -> None:
    if wheel is None:
        msg = "step 'install-wheel' has no wheel: step 'build-wheel' did not run"
        raise HorovodInstallError(msg)
    _install_wheel(installer, wheel, env=env, step_name="install-wheel")
    reason = rebuild_reason(_probe(installer.python, args.probe_timeout), options)
    if reason is not None:
        evicted = cache is not None and key is not None and evict_cached_wheel(cache, key)
        msg = (
            f"the wheel {wheel.name} was built but does not fit in {installer.python}: {reason}"
            + ("; removed it from the wheel cache" if evicted else "")
        )
        raise HorovodInstallError(msg)


def _run_job(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout: float
) -> tuple[int | None, str]:
    """Run a launcher in its own process group; on timeout stop the whole group.

    Returns the exit status (None after a timeout) and the combined output. Killing only the
    launcher would leave its workers running, so the group gets SIGTERM, then SIGKILL.
    """
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process_group(proc)
            out, _ = proc.communicate()
            return None, out or ""
    return proc.returncode, out or ""


def _verify(step: Step, *, workdir: Path, timeout: float) -> None:
    script = Path(step.argv[-1])
    atomic_write_text(script, VERIFY_SCRIPT)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "HOROVOD_GLOO_TIMEOUT_SECONDS": "60"}
    print(f"$ {shlex.join(step.argv)}", flush=True)
    code, text = _run_job(step.argv, env=env, cwd=workdir, timeout=timeout)
    if code is None:
        msg = f"step 'verify' took over {timeout:g} s: {shlex.join(step.argv)}\noutput:\n{text}"
        raise HorovodInstallError(msg)
    if code != 0:
        msg = f"step 'verify' failed with exit status {code}\noutput:\n{text}"
        raise HorovodInstallError(msg)
    reports = check_verify_output(text, np=2)
    for report in reports:
        print(f"rank {report['rank']}: {json.dumps(report)}")
    print("horovod works: allreduce (sum, average) and broadcast agree on every rank")
