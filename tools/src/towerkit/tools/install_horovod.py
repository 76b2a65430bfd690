"""Build horovod from its sdist against the installed TensorFlow (or take a cached wheel), check it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Literal

import attrs

from towerkit.sessinit import atomic_path, atomic_write_text

__all__ = [
    "DEFAULT_VERSION",
    "RUNTIME_REQUIREMENTS",
    "BUILD_REQUIREMENTS",
    "WHEEL_CACHE_ENV",
    "HorovodInstallError",
    "HorovodPatchError",
    "BuildOptions",
    "Installer",
    "Probe",
    "Step",
    "patch_cmakelists",
    "build_env",
    "merged_env",
    "choose_installer",
    "plan_install",
    "parse_probe",
    "rebuild_reason",
    "parse_cmake_version",
    "missing_build_tools",
    "check_verify_output",
    "render_plan",
    "cache_key",
    "find_cached_wheel",
    "store_wheel",
    "evict_cached_wheel",
    "main",
]

DEFAULT_VERSION = "0.28.1"
"""The horovod release the patch below is known to fit."""

RUNTIME_REQUIREMENTS = ("packaging", "psutil", "cloudpickle", "pyyaml")
"""What horovod needs at run time; installed next to a wheel that is installed with ``--no-deps``."""

BUILD_REQUIREMENTS = ("setuptools", "wheel", *RUNTIME_REQUIREMENTS)
"""What horovod's ``setup.py`` imports or declares; installed first, since the build is not isolated."""

WHEEL_CACHE_ENV = "TOWERKIT_HOROVOD_WHEEL_CACHE"
"""The environment variable naming the wheel cache when ``--wheel-cache`` is not given."""

CMAKELISTS = "horovod/tensorflow/CMakeLists.txt"
"""The file, relative to the unpacked sdist, that lists the TensorFlow op sources."""

XLA_SOURCE = "horovod/tensorflow/xla_mpi_ops.cc"
"""The XLA op source that no longer compiles against current TensorFlow headers."""

PATCH_MARKER = (
    "# towerkit: xla_mpi_ops.cc left out (it does not compile against current TensorFlow)"
)
"""The comment that replaces the XLA source entry, so a second patch sees the first."""

MIN_CMAKE = (3, 13)
"""The oldest CMake horovod's build accepts without fetching one itself."""

VERIFY_TAG = "TOWERKIT-HVD-CHECK"
"""Each rank of the verification job prints one line starting with this tag, then JSON."""

PROBE_TAG = "TOWERKIT-HVD-PROBE"
"""The probe prints one line starting with this tag, then JSON."""

MANAGED_KEYS = frozenset(
    {
        f"HOROVOD_{kind}_{framework}"
        for kind in ("WITH", "WITHOUT")
        for framework in (
            "TENSORFLOW",
            "PYTORCH",
            "MXNET",
            "GLOO",
            "MPI",
        )
    }
    | {"HOROVOD_GPU_OPERATIONS"}
)
"""The environment keys whose values come from the options, never from the caller's environment."""


class HorovodInstallError(RuntimeError):
    """A step of the horovod build failed; the message names the step and what to do."""


class HorovodPatchError(ValueError):
    """The horovod sources do not have the shape the build patch expects."""


def _positive(_instance: object, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"'{attribute.name}' must be an int, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if value < 1:
        msg = f"'{attribute.name}' must be at least 1, got {value!r}"
        raise ValueError(msg)


_VERSION_RE = re.compile(r"^\d+(\.\d+)*([a-z0-9.+-]*)$")


def _version_string(_instance: object, attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str):
        msg = f"'{attribute.name}' must be a str, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if not _VERSION_RE.match(value):
        msg = f"'{attribute.name}' must be a release version such as '0.28.1', got {value!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class BuildOptions:
    """What to build.

    Attributes:
        version: The horovod release to build.
        with_mpi: Build the MPI controller too (needs an MPI installation); gloo is always built.
        gpu: Run collective operations on GPUs through NCCL (needs CUDA and NCCL).
        jobs: Parallel compile jobs.
    """

    version: str = attrs.field(default=DEFAULT_VERSION, validator=_version_string)
    with_mpi: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    gpu: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    jobs: int = attrs.field(default=1, validator=_positive)


@attrs.frozen(kw_only=True)
class Installer:
    """How packages reach the target interpreter.

    Attributes:
        kind: ``"pip"`` (the target has pip), ``"uv"`` (it has none, uv installs into it and
            a throw-away pip from uv downloads), or ``"ensurepip"`` (pip is bootstrapped into
            the target first).
        python: The target interpreter.
        uv: The uv executable, for ``kind="uv"``.
    """

    kind: Literal["pip", "uv", "ensurepip"] = attrs.field(
        validator=attrs.validators.in_(("pip", "uv", "ensurepip"))
    )
    python: str
    uv: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.kind == "uv" and not self.uv:
            msg = "'uv' must name the uv executable when kind is 'uv', got None"
            raise ValueError(msg)


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _pairs(value: Iterable[Iterable[str]]) -> tuple[tuple[str, str], ...]:
    pairs = tuple(tuple(pair) for pair in value)
    bad = [pair for pair in pairs if len(pair) != 2]
    if bad:
        msg = f"'tensorflow_dists' must hold (name, version) pairs, got {bad!r}"
        raise ValueError(msg)
    return pairs  # type: ignore[return-value]


@attrs.frozen(kw_only=True)
class Step:
    """One step of the installation.

    Attributes:
        name: Short name (``download``, ``patch``, ``build``, ...).
        summary: One line on what the step does.
        argv: The command it runs; empty for steps done inside this process.
    """

    name: str
    summary: str
    argv: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)


@attrs.frozen(kw_only=True)
class Probe:
    """What the target interpreter has, as reported by the probe it ran.

    Attributes:
        tensorflow: TensorFlow's version, or None when it does not import.
        tensorflow_error: Why TensorFlow does not import, or None.
        horovod: horovod's version, or None when it is not installed.
        horovod_error: Why ``horovod.tensorflow`` does not import although horovod is installed.
        gloo: Whether the gloo controller is built in.
        mpi: Whether the MPI controller is built in.
        nccl: Whether NCCL operations are built in.
        python_tag: The interpreter's tag as wheels spell it (``cp311``; a free-threaded build
            adds ``t``).
        platform: ``sysconfig.get_platform()`` of the interpreter (``linux-x86_64``).
        tensorflow_dists: The installed distributions that provide the ``tensorflow`` package,
            as ``(name, version)`` pairs (``(("tensorflow-cpu", "2.21.0"),)``).
        cuda: The CUDA version TensorFlow was built with (``tf.sysconfig.get_build_info()``),
            or None for a build without CUDA.
        cudnn: The cuDNN version TensorFlow was built with, or None.
        nccl_dists: The installed NCCL distributions (``nvidia-nccl-cu12``...) as
            ``(name, version)`` pairs; a GPU build links the NCCL it finds.
    """

    tensorflow: str | None = None
    tensorflow_error: str | None = None
    horovod: str | None = None
    horovod_error: str | None = None
    gloo: bool = False
    mpi: bool = False
    nccl: bool = False
    python_tag: str | None = None
    platform: str | None = None
    tensorflow_dists: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    cuda: str | None = None
    cudnn: str | None = None
    nccl_dists: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)


def patch_cmakelists(text: str) -> str:
    """Leave the XLA op source out of horovod's TensorFlow ``CMakeLists.txt``.

    Every ``list(APPEND ...)`` line naming ``xla_mpi_ops.cc`` becomes a marker comment. Text
    already patched comes back unchanged.

    Args:
        text: The content of ``horovod/tensorflow/CMakeLists.txt``.

    Returns:
        The patched content.

    Raises:
        HorovodPatchError: The text has neither the source entry nor the marker, so it comes
            from a horovod version this patch does not know.

    Examples:
        >>> src = 'list(APPEND TF_SOURCES "a.cc")\\nlist(APPEND TF_SOURCES "xla_mpi_ops.cc")\\n'
        >>> print(patch_cmakelists(src), end="")
        list(APPEND TF_SOURCES "a.cc")
        # towerkit: xla_mpi_ops.cc left out (it does not compile against current TensorFlow)
        >>> patch_cmakelists(patch_cmakelists(src)) == patch_cmakelists(src)
        True
    """
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if _is_xla_entry(line)]
    if not hits:
        if any(line.strip() == PATCH_MARKER for line in lines):
            return text
        msg = (
            f"'{CMAKELISTS}' has no line adding 'xla_mpi_ops.cc' to the TensorFlow sources "
            f"(expected one like 'list(APPEND TF_SOURCES \"${{PROJECT_SOURCE_DIR}}/{XLA_SOURCE}\")'); "
            "this horovod version is not one the build patch knows: build it without the patch "
            f"or pass --version {DEFAULT_VERSION}"
        )
        raise HorovodPatchError(msg)
    for i in hits:
        line = lines[i]
        indent = line[: len(line) - len(line.lstrip())]
        ending = line[len(line.rstrip("\r\n")) :]
        lines[i] = f"{indent}{PATCH_MARKER}{ending}"
    return "".join(lines)


def _is_xla_entry(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("list(") and "APPEND" in stripped and "xla_mpi_ops.cc" in stripped


def build_env(options: BuildOptions) -> dict[str, str]:
    """The ``HOROVOD_*`` and ``MAKEFLAGS`` settings for a build.

    TensorFlow and gloo are always on, PyTorch and MXNet always off.

    Args:
        options: What to build.

    Returns:
        The variables to set, by name.

    Examples:
        >>> env = build_env(BuildOptions(jobs=2))
        >>> env["HOROVOD_WITHOUT_MPI"], env["MAKEFLAGS"], "HOROVOD_GPU_OPERATIONS" in env
        ('1', '-j2', False)
        >>> env = build_env(BuildOptions(with_mpi=True, gpu=True))
        >>> env["HOROVOD_WITH_MPI"], env["HOROVOD_GPU_OPERATIONS"], "HOROVOD_WITHOUT_MPI" in env
        ('1', 'NCCL', False)
    """
    env = {
        "HOROVOD_WITH_TENSORFLOW": "1",
        "HOROVOD_WITH_GLOO": "1",
        "HOROVOD_WITHOUT_PYTORCH": "1",
        "HOROVOD_WITHOUT_MXNET": "1",
        ("HOROVOD_WITH_MPI" if options.with_mpi else "HOROVOD_WITHOUT_MPI"): "1",
        "MAKEFLAGS": f"-j{options.jobs}",
    }
    if options.gpu:
        env["HOROVOD_GPU_OPERATIONS"] = "NCCL"
    return env


def merged_env(base: Mapping[str, str], options: BuildOptions) -> dict[str, str]:
    """``base`` with the build settings on top and conflicting ``HOROVOD_*`` settings removed.

    Keys the options own (``HOROVOD_WITH[OUT]_<framework>``, ``HOROVOD_GPU_OPERATIONS``) are
    dropped from ``base`` first, so an inherited ``HOROVOD_WITHOUT_MPI`` cannot contradict
    ``--with-mpi``. Other keys (``HOROVOD_CUDA_HOME``, ``HOROVOD_NCCL_HOME``, ``CXX``) pass.

    Args:
        base: The caller's environment.
        options: What to build.

    Returns:
        The environment for the build.

    Examples:
        >>> env = merged_env({"HOROVOD_WITHOUT_MPI": "1", "PATH": "/bin"}, BuildOptions(with_mpi=True))
        >>> "HOROVOD_WITHOUT_MPI" in env, env["HOROVOD_WITH_MPI"], env["PATH"]
        (False, '1', '/bin')
    """
    env = {k: v for k, v in base.items() if k not in MANAGED_KEYS}
    env.update(build_env(options))
    return env


def choose_installer(python: str, *, has_pip: bool, uv: str | None) -> Installer:
    """Pick how to install into ``python``: its own pip, else uv, else bootstrap pip.

    Args:
        python: The target interpreter.
        has_pip: Whether ``python -m pip`` works.
        uv: The uv executable found on PATH, or None.

    Returns:
        The installer.

    Examples:
        >>> choose_installer("/v/bin/python", has_pip=False, uv="/usr/bin/uv").kind
        'uv'
        >>> choose_installer("/v/bin/python", has_pip=False, uv=None).kind
        'ensurepip'
        >>> choose_installer("/v/bin/python", has_pip=True, uv="/usr/bin/uv").kind
        'pip'
    """
    if has_pip:
        return Installer(kind="pip", python=python)
    if uv:
        return Installer(kind="uv", python=python, uv=uv)
    return Installer(kind="ensurepip", python=python)


def _install_argv(installer: Installer, *args: str) -> tuple[str, ...]:
    if installer.kind == "uv":
        return (str(installer.uv), "pip", "install", "-p", installer.python, *args)
    return (installer.python, "-m", "pip", "install", *args)


def _download_argv(installer: Installer, version: str, dest: str) -> tuple[str, ...]:
    args = ("download", "--no-deps", "--no-binary", ":all:", f"horovod=={version}", "-d", dest)
    if installer.kind == "uv":
        return (str(installer.uv), "tool", "run", "--from", "pip", "pip", *args)
    return (installer.python, "-m", "pip", *args)


def sdist_name(version: str) -> str:
    """The file name of horovod's sdist.

    Examples:
        >>> sdist_name("0.28.1")
        'horovod-0.28.1.tar.gz'
    """
    return f"horovod-{version}.tar.gz"


def plan_install(
    installer: Installer,
    options: BuildOptions,
    *,
    workdir: str,
    verify: bool = True,
    np: int = 2,
    wheel_cache: str | None = None,
) -> tuple[Step, ...]:
    """Every step of an installation, in order.

    Steps with an empty ``argv`` run inside this process (checks, unpacking, patching, the
    cache's lookup and store; commands whose arguments are known only then are printed as
    they run).

    Without a wheel cache the patched sources are installed directly. With one, the target
    is keyed (see :func:`cache_key`) after the probe; a cached wheel for the key is
    installed and the build skipped, else a wheel is built, stored under the key and
    installed from there.

    Args:
        installer: How packages reach the target interpreter.
        options: What to build.
        workdir: Where the sdist is downloaded, unpacked and built.
        verify: Whether to end with a multi-process allreduce check.
        np: Processes in the check.
        wheel_cache: The wheel cache directory, or None for none.

    Returns:
        The steps.

    Examples:
        >>> steps = plan_install(Installer(kind="pip", python="py"), BuildOptions(), workdir="w")
        >>> [s.name for s in steps]  # doctest: +NORMALIZE_WHITESPACE
        ['check-tensorflow', 'check-installed', 'check-tools', 'download', 'unpack', 'patch',
         'prerequisites', 'build', 'verify']
        >>> steps = plan_install(
        ...     Installer(kind="pip", python="py"), BuildOptions(), workdir="w", wheel_cache="c")
        >>> [s.name for s in steps]  # doctest: +NORMALIZE_WHITESPACE
        ['check-tensorflow', 'check-installed', 'cache-lookup', 'check-tools', 'download',
         'unpack', 'patch', 'prerequisites', 'build-wheel', 'cache-store', 'install-wheel',
         'verify']
    """
    python = installer.python
    src = str(Path(workdir) / f"horovod-{options.version}")
    steps = [
        Step(name="check-tensorflow", summary=f"import tensorflow in {python}"),
        Step(
            name="check-installed",
            summary=(
                f"skip the build if horovod {options.version} is installed with its TensorFlow "
                "ops and the requested controllers (--force rebuilds)"
            ),
        ),
    ]
    ensurepip = Step(
        name="ensurepip",
        summary=f"bootstrap pip into {python}",
        argv=(python, "-m", "ensurepip", "--upgrade"),
    )
    if wheel_cache is not None:
        if installer.kind == "ensurepip":
            steps.append(ensurepip)
        steps.append(
            Step(
                name="cache-lookup",
                summary=(
                    f"if {wheel_cache}/<key>/ holds a wheel, install it and skip the build; "
                    "the key names horovod's version, the Python tag, the platform, the "
                    "TensorFlow distribution and version, and the controllers (--force builds)"
                ),
            )
        )
    steps.append(
        Step(
            name="check-tools",
            summary="cmake >= {}.{} and a C++ compiler on PATH{}{}".format(
                *MIN_CMAKE,
                ", mpicxx and mpirun" if options.with_mpi else "",
                ", nvcc" if options.gpu else "",
            ),
        )
    )
    if wheel_cache is None and installer.kind == "ensurepip":
        steps.append(ensurepip)
    steps += [
        Step(
            name="download",
            summary=f"download the horovod {options.version} sdist",
            argv=_download_argv(installer, options.version, workdir),
        ),
        Step(
            name="unpack",
            summary=f"unpack {sdist_name(options.version)} into {src}",
        ),
        Step(name="patch", summary=f"leave {XLA_SOURCE} out of {CMAKELISTS}"),
        Step(
            name="prerequisites",
            summary="install what horovod's setup.py needs (the build is not isolated)",
            argv=_install_argv(installer, *BUILD_REQUIREMENTS),
        ),
    ]
    if wheel_cache is None:
        steps.append(
            Step(
                name="build",
                summary="compile and install horovod against the installed TensorFlow",
                argv=_install_argv(installer, *_build_flags(installer), src),
            )
        )
    else:
        steps += [
            Step(
                name="build-wheel",
                summary="compile a horovod wheel against the installed TensorFlow",
                argv=_wheel_argv(installer, src, str(Path(workdir) / WHEELHOUSE)),
            ),
            Step(
                name="cache-store",
                summary=f"copy the wheel into {wheel_cache}/<key>/ (temporary name, then rename)",
            ),
            Step(
                name="install-wheel",
                summary=(
                    f"install {', '.join(RUNTIME_REQUIREMENTS)}, then the cached wheel with "
                    "--no-deps, and check that it loads"
                ),
            ),
        ]
    if verify:
        steps.append(
            Step(
                name="verify",
                summary=f"allreduce and broadcast in graph mode over {np} gloo processes",
                argv=_verify_argv(python, str(Path(workdir) / "verify_horovod.py"), np),
            )
        )
    return tuple(steps)


WHEELHOUSE = "wheelhouse"
"""The folder under the workdir where the wheel is built before it is cached."""


def _wheel_argv(installer: Installer, src: str, out: str) -> tuple[str, ...]:
    if installer.kind == "uv":
        return (
            str(installer.uv), "build", "--wheel", "--no-build-isolation",
            "-p", installer.python, "-o", out, src,
        )  # fmt: skip
    return (
        installer.python, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
        "--no-cache-dir", "-w", out, src,
    )  # fmt: skip


def _install_wheel_argvs(installer: Installer, wheel: str) -> tuple[tuple[str, ...], ...]:
    """The commands that install a cached wheel: its runtime requirements, then the wheel."""
    reinstall = "--reinstall" if installer.kind == "uv" else "--force-reinstall"
    return (
        _install_argv(installer, *RUNTIME_REQUIREMENTS),
        _install_argv(installer, "--no-deps", reinstall, wheel),
    )


def _build_flags(installer: Installer) -> tuple[str, ...]:
    if installer.kind == "uv":
        return ("-v", "--no-build-isolation", "--no-deps", "--reinstall", "--no-cache")
    return ("-v", "--no-build-isolation", "--no-deps", "--force-reinstall", "--no-cache-dir")


def _verify_argv(python: str, script: str, np: int) -> tuple[str, ...]:
    launch = (python, "-m", "horovod.runner.launch", "-np", str(np), "--gloo")
    return (*launch, "-H", f"localhost:{np}", python, script)


def render_plan(
    steps: Sequence[Step],
    env: Mapping[str, str],
    *,
    python: str,
    workdir: str,
    wheel_cache: str | None = None,
) -> str:
    """The plan as text, for ``--dry-run``.

    Args:
        steps: The steps, from :func:`plan_install`.
        env: The build variables, from :func:`build_env`.
        python: The target interpreter.
        workdir: The working directory.
        wheel_cache: The wheel cache directory, or None for none.

    Returns:
        Lines naming the interpreter, the workdir, the wheel cache (when there is one), the
        variables and each step's command.

    Examples:
        >>> steps = (Step(name="patch", summary="edit"), Step(name="build", summary="b", argv=("pip", "x y")))
        >>> print(render_plan(steps, {"A": "1"}, python="py", workdir="w"))
        python:  py
        workdir: w
        build environment:
          A=1
        steps:
          1. patch: edit
          2. build: b
             $ pip 'x y'
    """
    lines = [f"python:  {python}", f"workdir: {workdir}"]
    if wheel_cache is not None:
        lines.append(f"wheel cache: {wheel_cache}")
    lines.append("build environment:")
    lines += [f"  {key}={value}" for key, value in sorted(env.items())]
    lines.append("steps:")
    for i, step in enumerate(steps, start=1):
        lines.append(f"  {i}. {step.name}: {step.summary}")
        if step.argv:
            lines.append(f"     $ {shlex.join(step.argv)}")
    return "\n".join(lines)


def parse_probe(text: str) -> Probe:
    """Read the probe's report from the interpreter's output.

    Args:
        text: Everything the probe printed; only the tagged line counts.

    Returns:
        The report.

    Raises:
        HorovodInstallError: No tagged line, or one that is not a JSON object.

    Examples:
        >>> parse_probe('noise\\nTOWERKIT-HVD-PROBE {"tensorflow": "2.21.0"}\\n').tensorflow
        '2.21.0'
    """
    for line in reversed(text.splitlines()):
        if line.startswith(PROBE_TAG):
            try:
                data = json.loads(line[len(PROBE_TAG) :])
            except json.JSONDecodeError as err:
                msg = f"the probe's report is not JSON: {line!r} ({err})"
                raise HorovodInstallError(msg) from None
            if not isinstance(data, dict):
                msg = f"the probe's report must be a JSON object, got {line!r}"
                raise HorovodInstallError(msg)
            fields = {f.name for f in attrs.fields(Probe)}
            return Probe(**{k: v for k, v in data.items() if k in fields})
    msg = f"the probe printed no line starting with {PROBE_TAG!r}; its output was:\n{text}"
    raise HorovodInstallError(msg)


def rebuild_reason(probe: Probe, options: BuildOptions) -> str | None:
    """Why horovod must be built, or None when the installed one already fits ``options``.

    Args:
        probe: What the target interpreter has.
        options: What to build.

    Returns:
        The reason, or None.

    Examples:
        >>> rebuild_reason(Probe(horovod="0.28.1", gloo=True), BuildOptions()) is None
        True
        >>> rebuild_reason(Probe(), BuildOptions())
        'horovod is not installed'
        >>> rebuild_reason(Probe(horovod="0.28.1", gloo=True), BuildOptions(with_mpi=True))
        'the installed horovod has no MPI controller'
    """
    if probe.horovod is None:
        return "horovod is not installed"
    if probe.horovod != options.version:
        return f"the installed horovod is {probe.horovod}, not {options.version}"
    if probe.horovod_error:
        return f"horovod.tensorflow does not load: {probe.horovod_error}"
    missing = [
        label
        for label, wanted, built in (
            ("gloo controller", True, probe.gloo),
            ("MPI controller", options.with_mpi, probe.mpi),
            ("NCCL operations", options.gpu, probe.nccl),
        )
        if wanted and not built
    ]
    if missing:
        return f"the installed horovod has no {' and no '.join(missing)}"
    return None


_PYTHON_TAG_RE = re.compile(r"^[a-z]+\d+[a-z]*$")
_DIST_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_DIST_VERSION_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.+!_-]*[A-Za-z0-9])?$")


def cache_key(options: BuildOptions, probe: Probe) -> str:
    """The wheel cache entry for a horovod built with ``options`` for the target ``probe`` read.

    The key holds everything the compiled extension depends on: horovod's version, the
    interpreter's Python tag and platform, each distribution that provides ``tensorflow``
    with its exact version (horovod's ops link against that TensorFlow's framework library),
    and the controllers built in; for a GPU build also the CUDA and cuDNN versions
    TensorFlow was built with and the installed NCCL distributions (``none`` where there
    are none), since the NCCL operations link against them. The build's parallelism is
    left out. Names are normalized
    as wheel file names normalize them (``tensorflow-cpu`` and ``tensorflow_cpu`` are one
    distribution); fields are joined by ``-``, which no field contains, so the key is one
    path component.

    Args:
        options: What to build.
        probe: What the target interpreter reported.

    Returns:
        ``horovod-<version>-<python tag>-<platform>-<dist>==<version>[,...]-<controllers>``.

    Raises:
        ValueError: The probe lacks a field of the key or holds one a key cannot carry; lists
            each.

    Examples:
        >>> probe = Probe(python_tag="cp311", platform="linux-x86_64",
        ...               tensorflow_dists=(("tensorflow-cpu", "2.21.0"),))
        >>> cache_key(BuildOptions(), probe)
        'horovod-0.28.1-cp311-linux_x86_64-tensorflow_cpu==2.21.0-gloo'
        >>> cache_key(BuildOptions(with_mpi=True, gpu=True, jobs=8), probe)
        'horovod-0.28.1-cp311-linux_x86_64-tensorflow_cpu==2.21.0-gloo+mpi+nccl-cudanone+cudnnnone+ncclnone'
    """
    problems = []
    if probe.python_tag is None or not _PYTHON_TAG_RE.match(probe.python_tag):
        problems.append(f"'python_tag' must be a tag such as 'cp311', got {probe.python_tag!r}")
    if not probe.platform or not re.search(r"[A-Za-z0-9]", probe.platform):
        problems.append(
            f"'platform' must name a platform such as 'linux-x86_64', got {probe.platform!r}"
        )
    if not probe.tensorflow_dists:
        problems.append(
            "'tensorflow_dists' is empty: no installed distribution provides 'tensorflow'"
        )
    problems += [
        f"'tensorflow_dists' entry {name!r} is not a distribution name"
        for name, _ in probe.tensorflow_dists
        if not _DIST_NAME_RE.match(name)
    ]
    problems += [
        f"'tensorflow_dists' entry {name!r} has version {version!r}, not a release version"
        for name, version in probe.tensorflow_dists
        if not _DIST_VERSION_RE.match(version)
    ]
    if problems:
        msg = "cannot key the wheel cache: " + "; ".join(problems)
        raise ValueError(msg)
    dists = sorted(
        {
            (re.sub(r"[-_.]+", "_", name).lower(), version.replace("-", "_"))
            for name, version in probe.tensorflow_dists
        }
    )
    controllers = "+".join(
        label
        for label, on in (("gloo", True), ("mpi", options.with_mpi), ("nccl", options.gpu))
        if on
    )
    fields = [
        "horovod",
        options.version.replace("-", "_"),
        str(probe.python_tag),
        re.sub(r"[^A-Za-z0-9]+", "_", str(probe.platform)),
        ",".join(f"{name}=={version}" for name, version in dists),
        controllers,
    ]
    if options.gpu:
        fields.append(_gpu_stack(probe))
    return "-".join(fields)


def _gpu_stack(probe: Probe) -> str:
    """The CUDA, cuDNN and NCCL versions a GPU build links against, as one key field.

    >>> _gpu_stack(Probe(cuda="12.5.1", cudnn="9", nccl_dists=(("nvidia-nccl-cu12", "2.23.4"),)))
    'cuda12.5.1+cudnn9+nccl2.23.4'
    """

    def clean(value: str | None) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "_", value) if value else "none"

    nccl = ",".join(clean(v) for _, v in sorted(probe.nccl_dists)) or "none"
    return f"cuda{clean(probe.cuda)}+cudnn{clean(probe.cudnn)}+nccl{nccl}"


def _entry(cache: Path, key: str) -> Path:
    if not key or key.startswith(".") or "/" in key or "\\" in key or "\0" in key:
        msg = f"'key' must be one visible path component such as cache_key() returns, got {key!r}"
        raise ValueError(msg)
    return Path(cache) / key


def find_cached_wheel(cache: str | os.PathLike[str], key: str) -> Path | None:
    """The wheel stored under ``cache/key/``, or None when there is none.

    Only finished files named ``horovod-*.whl`` count; temporary files of a store in
    progress have hidden names and are never returned.

    Args:
        cache: The wheel cache directory (need not exist).
        key: The entry, from :func:`cache_key`.

    Returns:
        The wheel's path, or None.

    Raises:
        ValueError: ``key`` is not a single visible path component.
    """
    entry = _entry(Path(cache), key)
    if not entry.is_dir():
        return None
    wheels = sorted(path for path in entry.glob("horovod-*.whl") if path.is_file())
    return wheels[-1] if wheels else None


def store_wheel(wheel: str | os.PathLike[str], cache: str | os.PathLike[str], key: str) -> Path:
    """Copy ``wheel`` into ``cache/key/``, atomically, as the entry's only wheel.

    The copy is written under a hidden temporary name in the entry, flushed to disk and
    renamed over the final name, so a reader sees no wheel or the whole one. It is readable
    by every user of the machine (mode 0644). Other wheels in the entry are removed
    afterwards.

    Args:
        wheel: The built wheel (``horovod-<version>-<tags>.whl``).
        cache: The wheel cache directory (created when missing).
        key: The entry, from :func:`cache_key`.

    Returns:
        The cached wheel's path.

    Raises:
        ValueError: ``wheel`` is not named ``horovod-*.whl``, or ``key`` is not a single
            visible path component.
        FileNotFoundError: ``wheel`` does not exist.
    """
    source = Path(wheel)
    if not (source.name.startswith("horovod-") and source.name.endswith(".whl")):
        msg = f"'wheel' must be a file named 'horovod-*.whl', got {str(source)!r}"
        raise ValueError(msg)
    entry = _entry(Path(cache), key)
    entry.mkdir(parents=True, exist_ok=True)
    final = entry / source.name
    with source.open("rb") as src, atomic_path(final) as tmp, open(tmp, "wb") as out:
        shutil.copyfileobj(src, out)
        os.fchmod(out.fileno(), 0o644)
    for other in entry.glob("horovod-*.whl"):
        if other.name != final.name:
            other.unlink(missing_ok=True)
    return final


def evict_cached_wheel(cache: str | os.PathLike[str], key: str) -> bool:
    """Remove the entry ``cache/key/`` and its wheel.

    The entry is first renamed to a hidden name, so a concurrent lookup finds the whole
    entry or none, then deleted.

    Args:
        cache: The wheel cache directory.
        key: The entry, from :func:`cache_key`.

    Returns:
        Whether there was an entry to remove.

    Raises:
        ValueError: ``key`` is not a single visible path component.
    """
    entry = _entry(Path(cache), key)
    doomed = entry.with_name(f".{key}.evicted-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(entry, doomed)
    except FileNotFoundError:
        return False
    shutil.rmtree(doomed, ignore_errors=True)
    return True


def parse_cmake_version(text: str) -> tuple[int, ...]:
    """The version in ``cmake --version`` output.

    Raises:
        HorovodInstallError: The text names no version.

    Examples:
        >>> parse_cmake_version("cmake version 3.25.1\\n\\nCMake suite maintained by Kitware")
        (3, 25, 1)
    """
    found = re.search(r"version\s+(\d+(?:\.\d+)*)", text)
    if found is None:
        msg = f"'cmake --version' printed no version: {text!r}"
        raise HorovodInstallError(msg)
    return tuple(int(part) for part in found.group(1).split("."))


_APT_HINTS = {
    "cmake": "cmake",
    "C++ compiler": "g++",
    "mpicxx": "libopenmpi-dev",
    "mpirun": "openmpi-bin",
}


def missing_build_tools(options: BuildOptions, *, path: str, env: Mapping[str, str]) -> list[str]:
    """The build tools that cannot be found on ``path``, each with how to get it.

    Looks for ``cmake``, a C++ compiler (``$CXX``, else ``c++``, ``g++`` or ``clang++``), and
    with MPI ``mpicxx`` and ``mpirun``, with GPU ``nvcc`` (or ``$HOROVOD_CUDA_HOME/bin/nvcc``).
    The CMake version is checked separately.

    Args:
        options: What to build.
        path: The search path (``PATH``'s format).
        env: The environment (for ``CXX`` and ``HOROVOD_CUDA_HOME``).

    Returns:
        One line per missing tool; empty when all are present.
    """
    missing: list[str] = []
    if shutil.which("cmake", path=path) is None:
        missing.append("cmake (apt-get install cmake, or pip install 'cmake>=3.13')")
    cxx = env.get("CXX")
    if cxx:
        if shutil.which(shlex.split(cxx)[0], path=path) is None:
            missing.append(f"the C++ compiler named by CXX={cxx!r}")
    elif not any(shutil.which(name, path=path) for name in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler: c++, g++ or clang++ (apt-get install g++)")
    if options.with_mpi:
        for tool in ("mpicxx", "mpirun"):
            if shutil.which(tool, path=path) is None:
                missing.append(f"{tool} (apt-get install {_APT_HINTS[tool]})")
    if options.gpu:
        cuda_home = env.get("HOROVOD_CUDA_HOME")
        nvcc_path = os.pathsep.join(filter(None, [f"{cuda_home}/bin" if cuda_home else "", path]))
        if shutil.which("nvcc", path=nvcc_path) is None:
            missing.append("nvcc from the CUDA toolkit (put it on PATH or set HOROVOD_CUDA_HOME)")
    return missing


def check_verify_output(text: str, *, np: int = 2) -> list[dict[str, object]]:
    """Check what the ranks of the verification job reported.

    Rank ``r`` contributes ``r + 1`` to each allreduce and starts its variable at
    ``10 * r + 7``; after broadcasting from rank 0 every rank must hold 7.

    Args:
        text: The job's output (horovodrun prefixes each line with the rank).
        np: The number of processes.

    Returns:
        The reports, ordered by rank.

    Raises:
        HorovodInstallError: A rank did not report, or reported a wrong value; lists each.

    Examples:
        >>> out = "\\n".join(
        ...     f'[{r}]<stdout>:TOWERKIT-HVD-CHECK {{"rank": {r}, "size": 2, "sum": [3.0, 3.0],'
        ...     f' "average": [1.5, 1.5], "broadcast": 7.0}}' for r in (0, 1))
        >>> [report["rank"] for report in check_verify_output(out)]
        [0, 1]
    """
    reports: dict[int, dict[str, object]] = {}
    for line in text.splitlines():
        _, tag, rest = line.partition(VERIFY_TAG)
        if not tag:
            continue
        try:
            report = json.loads(rest)
        except json.JSONDecodeError:
            continue
        if isinstance(report, dict) and isinstance(report.get("rank"), int):
            reports[report["rank"]] = report
    expected_sum = float(np * (np + 1) // 2)
    expected_avg = expected_sum / np
    problems: list[str] = []
    for rank in range(np):
        report = reports.get(rank)
        if report is None:
            problems.append(f"rank {rank} did not report")
            continue
        checks = (
            ("size", report.get("size") == np, np),
            ("sum", _all_close(report.get("sum"), expected_sum), expected_sum),
            ("average", _all_close(report.get("average"), expected_avg), expected_avg),
            ("broadcast", _all_close([report.get("broadcast")], 7.0), 7.0),
        )
        problems += [
            f"rank {rank}: {name} is {report.get(name)!r}, expected {want!r}"
            for name, ok, want in checks
            if not ok
        ]
    if problems:
        msg = "horovod verification failed: " + "; ".join(problems) + f"\noutput:\n{text}"
        raise HorovodInstallError(msg)
    return [reports[rank] for rank in range(np)]


def _all_close(values: object, want: float) -> bool:
    if not isinstance(values, list) or not values:
        return False
    return all(isinstance(v, int | float) and abs(v - want) < 1e-6 for v in values)


# ---------------------------------------------------------------------------
# The shell: everything below runs commands and touches files.

PROBE_SCRIPT = f"""
import json
import sys
import sysconfig
report = {{}}
impl = {{"cpython": "cp", "pypy": "pp"}}.get(sys.implementation.name, sys.implementation.name)
abiflags = getattr(sys, "abiflags", "")
report["python_tag"] = f"{{impl}}{{sys.version_info[0]}}{{sys.version_info[1]}}{{abiflags}}"
report["platform"] = sysconfig.get_platform()
try:
    import tensorflow as tf
    report["tensorflow"] = tf.__version__
except Exception as err:
    report["tensorflow_error"] = f"{{type(err).__name__}}: {{err}}"
if "tensorflow" in report:
    from importlib import metadata
    names = sorted(set(metadata.packages_distributions().get("tensorflow", [])))
    report["tensorflow_dists"] = [[name, metadata.version(name)] for name in names]
    try:
        info = dict(tf.sysconfig.get_build_info())
    except Exception:
        info = {{}}
    for key, field in (("cuda_version", "cuda"), ("cudnn_version", "cudnn")):
        if info.get(key):
            report[field] = str(info[key])
    report["nccl_dists"] = sorted(
        [d.metadata["Name"], d.version]
        for d in metadata.distributions()
        if (d.metadata["Name"] or "").lower().startswith("nvidia-nccl")
    )
    try:
        import horovod
        report["horovod"] = horovod.__version__
    except ModuleNotFoundError:
        pass
    if "horovod" in report:
        try:
            import horovod.tensorflow as hvd
            report["gloo"] = bool(hvd.gloo_built())
            report["mpi"] = bool(hvd.mpi_built())
            report["nccl"] = bool(hvd.nccl_built())
        except Exception as err:
            report["horovod_error"] = f"{{type(err).__name__}}: {{err}}"
print({PROBE_TAG!r} + " " + json.dumps(report))
"""

VERIFY_SCRIPT = f"""
import json
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
import horovod.tensorflow as hvd

tf1 = tf.compat.v1
hvd.init()
rank = hvd.rank()
graph = tf1.Graph()
with graph.as_default():
    x = tf1.constant([float(rank + 1)] * 4)
    total = hvd.allreduce(x, op=hvd.Sum)
    mean = hvd.allreduce(x, op=hvd.Average)
    var = tf1.get_variable("v", initializer=tf1.constant(float(10 * rank + 7)))
    init = tf1.global_variables_initializer()
    bcast = hvd.broadcast_global_variables(0)
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        total_v, mean_v = sess.run([total, mean])
        sess.run(bcast)
        var_v = sess.run(var)
report = {{
    "rank": rank,
    "size": hvd.size(),
    "sum": [float(v) for v in total_v],
    "average": [float(v) for v in mean_v],
    "broadcast": float(var_v),
}}
print({VERIFY_TAG!r} + " " + json.dumps(report), flush=True)
"""


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


@contextlib.contextmanager
def _atomic_file(path: Path, mode: Literal["w", "wb"] = "w") -> Iterator[IO]:
    """Open a hidden temporary sibling of ``path``; on success flush it and rename it over ``path``.

    On failure the temporary file is removed and ``path`` is left as it was.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_atomic(path: Path, text: str) -> None:
    with _atomic_file(path) as handle:
        handle.write(text)


def _apply_patch(src: Path) -> None:
    target = src / CMAKELISTS
    if not target.is_file():
        msg = f"'{CMAKELISTS}' is missing from {src}: not a horovod source tree the patch knows"
        raise HorovodPatchError(msg)
    text = target.read_text()
    atomic_write_text(target, patch_cmakelists(text))


def _wheel_cache_dir(option: str | None, environ: Mapping[str, str]) -> Path | None:
    """``--wheel-cache``, else ``$TOWERKIT_HOROVOD_WHEEL_CACHE``, as an absolute path; '' is none."""
    value = option if option is not None else environ.get(WHEEL_CACHE_ENV, "")
    if not value:
        return None
    return Path(value).expanduser().absolute()


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


@contextlib.contextmanager
def _entry_lock(cache: Path, key: str) -> Iterator[None]:
    """Hold an exclusive lock on the entry ``key`` (a hidden lock file beside it).

    A second installer for the same key waits here while the first builds, then finds the
    wheel the first stored.
    """
    import fcntl

    cache.mkdir(parents=True, exist_ok=True)
    path = _entry(cache, key).with_name(f".{key}.lock")
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another install-horovod to finish {cache / key}", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
            _stop_group(proc)
            out, _ = proc.communicate()
            return None, out or ""
    return proc.returncode, out or ""


def _stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group (horovodrun then stops its workers), SIGKILL after ``grace`` s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="install-horovod",
        description=(
            "Build horovod from its sdist against the TensorFlow installed in an interpreter "
            "(gloo controller; MPI and NCCL on request), then check a 2-process allreduce."
        ),
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter of the target environment (default: this one)",
    )
    parser.add_argument("--version", default=DEFAULT_VERSION, help="horovod release to build")
    parser.add_argument(
        "--with-mpi", action="store_true", help="also build the MPI controller (needs MPI)"
    )
    parser.add_argument(
        "--gpu", action="store_true", help="GPU collectives through NCCL (needs CUDA and NCCL)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="parallel compile jobs (default: the CPU count)",
    )
    parser.add_argument(
        "--workdir",
        default=None,
        help="where to download and build (kept); default: a temporary directory, removed after",
    )
    parser.add_argument(
        "--keep-workdir", action="store_true", help="keep the temporary working directory"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the environment and steps, run nothing"
    )
    parser.add_argument("--skip-verify", action="store_true", help="no 2-process check after")
    parser.add_argument(
        "--force",
        action="store_true",
        help="rebuild even if a fitting horovod is installed or cached (replaces the cached wheel)",
    )
    parser.add_argument(
        "--wheel-cache",
        default=None,
        metavar="DIR",
        help=(
            "build a wheel, keep it under DIR/<key>/ and install from there; a later run whose "
            "key matches (horovod version, Python tag, platform, TensorFlow distribution and "
            f"version, controllers) installs it without compiling (default: ${WHEEL_CACHE_ENV}; "
            "unset or '' builds and installs without a cache)"
        ),
    )
    parser.add_argument(
        "--verify-timeout",
        type=float,
        default=300.0,
        help="seconds the 2-process check may take (default: 300)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=300.0,
        help="seconds importing tensorflow and horovod may take (default: 300)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the installer.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when a step failed.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        options = BuildOptions(
            version=args.version, with_mpi=args.with_mpi, gpu=args.gpu, jobs=args.jobs
        )
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    try:
        return _install(args, options)
    except (HorovodInstallError, HorovodPatchError) as err:
        print(f"install-horovod: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
