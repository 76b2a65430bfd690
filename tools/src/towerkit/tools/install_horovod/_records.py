"""The install's records, constants and errors: what to build, with what, and what was found."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

import attrs

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


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"'{attribute.name}' must be an int, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if value < 1:
        msg = f"'{attribute.name}' must be at least 1, got {value!r}"
        raise ValueError(msg)


_VERSION_RE = re.compile(r"^\d+(\.\d+)*([a-z0-9.+-]*)$")


def _version_string(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
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
