"""Reading what the target Python reports: the probe, the build tools and the verify job."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Mapping

import attrs

from towerkit.tools.install_horovod._records import (
    PROBE_TAG,
    VERIFY_TAG,
    BuildOptions,
    HorovodInstallError,
    Probe,
)

__all__ = [
    "parse_probe",
    "rebuild_reason",
    "parse_cmake_version",
    "missing_build_tools",
    "check_verify_output",
]


def parse_probe(text: str) -> Probe:
    r"""Read the probe's report from the interpreter's output.

    Args:
        text: Everything the probe printed; only the tagged line counts.

    Returns:
        The report.

    Raises:
        HorovodInstallError: No tagged line, or one that is not a JSON object.

    Examples:
        >>> parse_probe('noise\nTOWERKIT-HVD-PROBE {"tensorflow": "2.21.0"}\n').tensorflow
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


def parse_cmake_version(text: str) -> tuple[int, ...]:
    r"""The version in ``cmake --version`` output.

    Raises:
        HorovodInstallError: The text names no version.

    Examples:
        >>> parse_cmake_version("cmake version 3.25.1\n\nCMake suite maintained by Kitware")
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
    r"""Check what the ranks of the verification job reported.

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
        >>> out = "\n".join(
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
