"""The pure part: what to build, what the target has, the patch, the cache key, the checks."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Iterable, Mapping

import attrs

DEFAULT_VERSION = "0.28.1"  # the horovod release the patch is known to fit
# horovod's run-time needs (a wheel goes in with --no-deps), then its setup.py's (not isolated)
RUNTIME_REQUIREMENTS = ("packaging", "psutil", "cloudpickle", "pyyaml")
BUILD_REQUIREMENTS = ("setuptools", "wheel", *RUNTIME_REQUIREMENTS)
WHEEL_CACHE_ENV = "TOWERKIT_HOROVOD_WHEEL_CACHE"  # names the cache when --wheel-cache does not

# The patch: the XLA ops' source (no longer compiling) leaves CMakeLists.txt for a marker.
CMAKELISTS = "horovod/tensorflow/CMakeLists.txt"
XLA_SOURCE = "horovod/tensorflow/xla_mpi_ops.cc"
PATCH_MARKER = (
    "# towerkit: xla_mpi_ops.cc left out (it does not compile against current TensorFlow)"
)
PROBE_TAG = "TOWERKIT-HVD-PROBE"  # starts the probe's one line of JSON


class HorovodInstallError(RuntimeError):
    """A step of the horovod build failed; the message names the step and what to do."""


class HorovodPatchError(ValueError):
    """The horovod sources do not have the shape the build patch expects."""


def _jobs(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"'{attribute.name}' must be an int, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if value < 1:
        msg = f"'{attribute.name}' must be at least 1, got {value!r}"
        raise ValueError(msg)


def _version(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not re.match(r"^\d+(\.\d+)*([a-z0-9.+-]*)$", value):
        msg = f"'{attribute.name}' must be a release version such as '0.28.1', got {value!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class BuildOptions:
    """What to build.

    Attributes:
        version: The horovod release to build.
        with_mpi: Build the MPI controller too (needs MPI); gloo is always built.
        gpu: Run collective operations on GPUs through NCCL (needs CUDA and NCCL).
        jobs: Parallel compile jobs.
    """

    version: str = attrs.field(default=DEFAULT_VERSION, validator=_version)
    with_mpi: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    gpu: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    jobs: int = attrs.field(default=1, validator=_jobs)


def _pairs(value: Iterable[Iterable[str]]) -> tuple[tuple[str, str], ...]:
    pairs = tuple(tuple(pair) for pair in value)
    if bad := [pair for pair in pairs if len(pair) != 2]:
        msg = f"'tensorflow_dists' must hold (name, version) pairs, got {bad!r}"
        raise ValueError(msg)
    return pairs  # type: ignore[return-value]


@attrs.frozen(kw_only=True)
class Probe:
    """What the target interpreter reported: TensorFlow, horovod, and what a wheel depends on.

    Attributes:
        tensorflow: TensorFlow's version, or None with ``tensorflow_error`` saying why.
        horovod: horovod's version, or None; ``horovod_error``: why ``horovod.tensorflow`` fails.
        gloo: Whether the gloo controller is built in (``mpi``: MPI; ``nccl``: NCCL operations).
        python_tag: The interpreter's wheel tag (``cp311``); ``platform``: its platform.
        tensorflow_dists: The ``(name, version)`` of each distribution providing ``tensorflow``.
        cuda: The CUDA version TensorFlow was built with, or None (``cudnn``: cuDNN's).
        nccl_dists: The installed ``nvidia-nccl*`` distributions, as pairs.
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
    r"""Leave the XLA op source out of horovod's TensorFlow ``CMakeLists.txt``.

    Every ``list(APPEND ...)`` line naming ``xla_mpi_ops.cc`` becomes ``PATCH_MARKER``, with
    its indentation and line ending. Patched text comes back unchanged.

    Raises:
        HorovodPatchError: The text has neither the entry nor the marker: it comes from a
            horovod version the patch does not know.

    Examples:
        >>> src = 'list(APPEND TF_SOURCES "a.cc")\nlist(APPEND TF_SOURCES "xla_mpi_ops.cc")\n'
        >>> print(patch_cmakelists(src), end="")
        list(APPEND TF_SOURCES "a.cc")
        # towerkit: xla_mpi_ops.cc left out (it does not compile against current TensorFlow)
        >>> patch_cmakelists(patch_cmakelists(src)) == patch_cmakelists(src)
        True
    """
    lines = text.splitlines(keepends=True)
    if not any(line.strip() == PATCH_MARKER or _is_entry(line) for line in lines):
        msg = (
            f"'{CMAKELISTS}' has no line adding 'xla_mpi_ops.cc' to the TensorFlow sources "
            f"(expected one like 'list(APPEND TF_SOURCES \"${{PROJECT_SOURCE_DIR}}/{XLA_SOURCE}\")'); "
            "this horovod version is not one the build patch knows: build it without the patch "
            f"or pass --version {DEFAULT_VERSION}"
        )
        raise HorovodPatchError(msg)
    for i, line in enumerate(lines):
        if _is_entry(line):
            indent = line[: len(line) - len(line.lstrip())]
            lines[i] = f"{indent}{PATCH_MARKER}{line[len(line.rstrip(chr(13) + chr(10))) :]}"
    return "".join(lines)


def _is_entry(line: str) -> bool:
    return line.strip().startswith("list(") and "APPEND" in line and "xla_mpi_ops.cc" in line


def build_env(options: BuildOptions, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: empty) with the ``HOROVOD_*`` and ``MAKEFLAGS`` settings of a build.

    TensorFlow and gloo are always on. Inherited ``HOROVOD_WITH*`` and
    ``HOROVOD_GPU_OPERATIONS`` are dropped first, so an inherited ``HOROVOD_WITHOUT_MPI``
    cannot contradict ``with_mpi``; other keys (``HOROVOD_CUDA_HOME``, ``CXX``) pass.

    Examples:
        >>> env = build_env(BuildOptions(jobs=2))
        >>> env["HOROVOD_WITHOUT_MPI"], env["MAKEFLAGS"], "HOROVOD_GPU_OPERATIONS" in env
        ('1', '-j2', False)
        >>> env = build_env(BuildOptions(with_mpi=True, gpu=True), {"HOROVOD_WITHOUT_MPI": "1"})
        >>> env["HOROVOD_WITH_MPI"], env["HOROVOD_GPU_OPERATIONS"], "HOROVOD_WITHOUT_MPI" in env
        ('1', 'NCCL', False)
    """
    managed = ("HOROVOD_WITH", "HOROVOD_GPU_OPERATIONS")
    env = {k: v for k, v in (base or {}).items() if not k.startswith(managed)}
    mpi = "HOROVOD_WITH_MPI" if options.with_mpi else "HOROVOD_WITHOUT_MPI"
    env |= dict.fromkeys(("HOROVOD_WITH_TENSORFLOW", "HOROVOD_WITH_GLOO", mpi), "1")
    env |= dict.fromkeys(("HOROVOD_WITHOUT_PYTORCH", "HOROVOD_WITHOUT_MXNET"), "1")
    env["MAKEFLAGS"] = f"-j{options.jobs}"
    return env | ({"HOROVOD_GPU_OPERATIONS": "NCCL"} if options.gpu else {})


def cache_key(options: BuildOptions, probe: Probe) -> str:
    """The wheel cache entry (one path component) for ``options`` built where ``probe`` ran.

    It names horovod's version, the Python tag, the platform, each ``tensorflow`` distribution
    and version (normalized as in wheel names), the controllers, and for a GPU build the CUDA,
    cuDNN and NCCL versions (``none`` where absent); not ``jobs``.

    Raises:
        ValueError: A field of the key is missing or cannot be carried; lists each.

    Examples:
        >>> probe = Probe(python_tag="cp311", platform="linux-x86_64",
        ...               tensorflow_dists=(("tensorflow-cpu", "2.21.0"),))
        >>> cache_key(BuildOptions(), probe)
        'horovod-0.28.1-cp311-linux_x86_64-tensorflow_cpu==2.21.0-gloo'
        >>> cache_key(BuildOptions(with_mpi=True, gpu=True, jobs=8), probe)
        'horovod-0.28.1-cp311-linux_x86_64-tensorflow_cpu==2.21.0-gloo+mpi+nccl-cudanone+cudnnnone+ncclnone'
    """
    tag, platform, dists = probe.python_tag, probe.platform, probe.tensorflow_dists
    problems = []
    if not re.match(r"^[a-z]+\d+[a-z]*$", tag or ""):
        problems.append(f"'python_tag' must be a tag such as 'cp311', got {tag!r}")
    if not re.search(r"[A-Za-z0-9]", platform or ""):
        problems.append(f"'platform' must name a platform such as 'linux-x86_64', got {platform!r}")
    if not dists:
        problems.append(
            "'tensorflow_dists' is empty: no installed distribution provides 'tensorflow'"
        )
    for name, version in dists:
        if not re.match(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$", name):
            problems.append(f"'tensorflow_dists' entry {name!r} is not a distribution name")
        if not re.match(r"^[A-Za-z0-9]([A-Za-z0-9.+!_-]*[A-Za-z0-9])?$", version):
            problems.append(
                f"'tensorflow_dists' entry {name!r} has version {version!r}, not a release version"
            )
    if problems:
        msg = "cannot key the wheel cache: " + "; ".join(problems)
        raise ValueError(msg)
    tf = sorted({(re.sub(r"[-_.]+", "_", n).lower(), v.replace("-", "_")) for n, v in dists})
    controllers = "gloo" + "+mpi" * options.with_mpi + "+nccl" * options.gpu
    fields = ["horovod", options.version.replace("-", "_"), str(tag)]
    fields += [re.sub(r"[^A-Za-z0-9]+", "_", str(platform)), ",".join(f"{n}=={v}" for n, v in tf)]
    fields.append(controllers)
    if options.gpu:
        nccl = ",".join(_clean(v) for _, v in sorted(probe.nccl_dists)) or "none"
        fields.append(f"cuda{_clean(probe.cuda)}+cudnn{_clean(probe.cudnn)}+nccl{nccl}")
    return "-".join(fields)


def _clean(value: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", value) if value else "none"


def parse_probe(text: str) -> Probe:
    r"""Read the probe's report: the last line of ``text`` starting with ``PROBE_TAG``.

    Raises:
        HorovodInstallError: No tagged line, or one that is not a JSON object.

    Examples:
        >>> parse_probe('noise\nTOWERKIT-HVD-PROBE {"tensorflow": "2.21.0"}\n').tensorflow
        '2.21.0'
    """
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith(PROBE_TAG)), None)
    if line is None:
        msg = f"the probe printed no line starting with {PROBE_TAG!r}; its output was:\n{text}"
        raise HorovodInstallError(msg)
    try:
        data = dict(json.loads(line[len(PROBE_TAG) :]))
    except (ValueError, TypeError):
        msg = f"the probe's report must be a JSON object, got {line!r}"
        raise HorovodInstallError(msg) from None
    return Probe(**{f.name: data[f.name] for f in attrs.fields(Probe) if f.name in data})


def rebuild_reason(probe: Probe, options: BuildOptions) -> str | None:
    """Why horovod must be built, or None when the installed one already fits ``options``.

    Examples:
        >>> rebuild_reason(Probe(horovod="0.28.1", gloo=True), BuildOptions(with_mpi=True))
        'the installed horovod has no MPI controller'
    """
    if probe.horovod is None:
        return "horovod is not installed"
    if probe.horovod != options.version:
        return f"the installed horovod is {probe.horovod}, not {options.version}"
    if probe.horovod_error:
        return f"horovod.tensorflow does not load: {probe.horovod_error}"
    wanted = (
        ("gloo controller", True, probe.gloo),
        ("MPI controller", options.with_mpi, probe.mpi),
        ("NCCL operations", options.gpu, probe.nccl),
    )
    missing = [label for label, want, built in wanted if want and not built]
    return f"the installed horovod has no {' and no '.join(missing)}" if missing else None


def missing_build_tools(options: BuildOptions, *, path: str, env: Mapping[str, str]) -> list[str]:
    """The build tools not on ``path``, each with how to get it (see the README)."""
    missing: list[str] = []
    if shutil.which("cmake", path=path) is None:
        missing.append("cmake (apt-get install cmake, or pip install 'cmake>=3.13')")
    cxx = env.get("CXX")
    if cxx and shutil.which(shlex.split(cxx)[0], path=path) is None:
        missing.append(f"the C++ compiler named by CXX={cxx!r}")
    elif not cxx and not any(shutil.which(name, path=path) for name in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler: c++, g++ or clang++ (apt-get install g++)")
    for tool, package in (("mpicxx", "libopenmpi-dev"), ("mpirun", "openmpi-bin")):
        if options.with_mpi and shutil.which(tool, path=path) is None:
            missing.append(f"{tool} (apt-get install {package})")
    cuda = env.get("HOROVOD_CUDA_HOME")
    nvcc_path = os.pathsep.join([f"{cuda}/bin", path] if cuda else [path])
    if options.gpu and shutil.which("nvcc", path=nvcc_path) is None:
        missing.append("nvcc from the CUDA toolkit (put it on PATH or set HOROVOD_CUDA_HOME)")
    return missing
