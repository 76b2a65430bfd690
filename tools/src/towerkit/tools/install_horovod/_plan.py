"""The build as a plan: the patch, the environment and the commands, computed without running any."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from towerkit.tools.install_horovod._records import (
    BUILD_REQUIREMENTS,
    CMAKELISTS,
    DEFAULT_VERSION,
    MANAGED_KEYS,
    MIN_CMAKE,
    PATCH_MARKER,
    RUNTIME_REQUIREMENTS,
    XLA_SOURCE,
    BuildOptions,
    HorovodPatchError,
    Installer,
    Step,
)

__all__ = [
    "patch_cmakelists",
    "build_env",
    "merged_env",
    "choose_installer",
    "plan_install",
    "render_plan",
]


def patch_cmakelists(text: str) -> str:
    r"""Leave the XLA op source out of horovod's TensorFlow ``CMakeLists.txt``.

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
        >>> src = 'list(APPEND TF_SOURCES "a.cc")\nlist(APPEND TF_SOURCES "xla_mpi_ops.cc")\n'
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
