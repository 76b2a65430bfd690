"""Tests for the horovod installer: the patch, the environment, the cache key, the probe, the
wheel cache and its lock, and the command line run for real."""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import stat
import subprocess
import sys
import sysconfig
import tarfile
import time
from importlib import metadata
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.tools import install_horovod as ih
from towerkit.tools.install_horovod import (
    BuildOptions,
    HorovodInstallError,
    HorovodPatchError,
    Probe,
    _core,
    _install,
    build_env,
    cache_key,
    patch_cmakelists,
    rebuild_reason,
)
from towerkit.tools.install_horovod._core import missing_build_tools, parse_probe

XLA_LINE = 'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")'
"""The entry as horovod 0.28.1 writes it."""

CMAKE_TEXT = "\n".join(
    [
        "# TF SOURCES",
        'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/mpi_ops.cc")',
        XLA_LINE,
        "",
        "add_library(${TF_TARGET_LIB} SHARED ${SOURCES} ${TF_SOURCES})",
        "",
    ]
)
"""A CMakeLists.txt shaped like the part of horovod's that the patch edits."""

# Lines of CMake that never mention the XLA source or carry the patch marker.
other_lines = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=60
).filter(lambda s: "xla_mpi_ops.cc" not in s and _core.PATCH_MARKER not in s)

options_st = st.builds(
    BuildOptions,
    with_mpi=st.booleans(),
    gpu=st.booleans(),
    jobs=st.integers(min_value=1, max_value=64),
)

probe_st = st.builds(
    Probe,
    tensorflow=st.sampled_from([None, "2.21.0"]),
    horovod=st.sampled_from([None, "0.28.1", "0.27.0"]),
    horovod_error=st.sampled_from([None, "NotFoundError: undefined symbol"]),
    gloo=st.booleans(),
    mpi=st.booleans(),
    nccl=st.booleans(),
)


dist_names = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,12}[A-Za-z0-9])?", fullmatch=True)
dist_versions = st.from_regex(
    r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}([a-z]{1,3}[0-9]|\+[a-z0-9]{1,3}(\.[a-z0-9]{1,3})?)?",
    fullmatch=True,
)

keyed_probe_st = st.builds(
    Probe,
    tensorflow=st.just("2.21.0"),
    python_tag=st.sampled_from(["cp310", "cp311", "cp313t", "pp310"]),
    platform=st.sampled_from(["linux-x86_64", "linux-aarch64", "macosx-14.0-arm64", "win-amd64"]),
    tensorflow_dists=st.lists(st.tuples(dist_names, dist_versions), min_size=1, max_size=3),
    cuda=st.sampled_from([None, "12.5.1", "11.8"]),
    cudnn=st.sampled_from([None, "9", "8.9.7"]),
    nccl_dists=st.lists(
        st.tuples(st.just("nvidia-nccl-cu12"), st.sampled_from(["2.23.4", "2.21.5"])), max_size=1
    ),
)

# Small domains, so that two draws often collide or differ in one spelling only.
near_probe_st = st.builds(
    Probe,
    python_tag=st.sampled_from(["cp311", "cp312"]),
    platform=st.sampled_from(["linux-x86_64", "linux_x86_64", "linux-aarch64"]),
    tensorflow_dists=st.lists(
        st.tuples(
            st.sampled_from(["tensorflow", "tensorflow-cpu", "TensorFlow_CPU", "tensorflow.cpu"]),
            st.sampled_from(["2.21.0", "2.20.0", "2.21.0rc1", "2.21.0+nv1", "2.21.0-1"]),
        ),
        min_size=1,
        max_size=2,
    ),
    cuda=st.sampled_from([None, "12.5.1", "12.3"]),
    cudnn=st.sampled_from([None, "9"]),
    nccl_dists=st.lists(
        st.tuples(st.just("nvidia-nccl-cu12"), st.sampled_from(["2.23.4", "2.21.5"])), max_size=1
    ),
)
near_options_st = st.builds(
    BuildOptions,
    version=st.sampled_from(["0.28.1", "0.28.0"]),
    with_mpi=st.booleans(),
    gpu=st.booleans(),
    jobs=st.integers(min_value=1, max_value=3),
)

key_options_st = st.builds(
    BuildOptions,
    version=st.sampled_from(["0.28.1", "0.28.0", "0.27.0rc1"]),
    with_mpi=st.booleans(),
    gpu=st.booleans(),
    jobs=st.integers(min_value=1, max_value=64),
)

TARGET = Probe(
    tensorflow="2.21.0",
    python_tag="cp311",
    platform="linux-x86_64",
    tensorflow_dists=(("tensorflow-cpu", "2.21.0"),),
)
"""A probe as a CPU-only TensorFlow 2.21 environment on Linux reports it."""

WHEEL_NAME = "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"


def _normalized_inputs(options: BuildOptions, probe: Probe) -> tuple[object, ...]:
    """What the key must tell apart: the inputs up to the spellings wheels treat as equal."""
    return (
        options.version,
        probe.python_tag,
        re.sub(r"[^A-Za-z0-9]+", "_", probe.platform),
        frozenset(
            (re.sub(r"[-_.]+", "_", name).lower(), version.replace("-", "_"))
            for name, version in probe.tensorflow_dists
        ),
        options.with_mpi,
        options.gpu,
        # the GPU stack counts for GPU builds only
        (probe.cuda, probe.cudnn, tuple(sorted(v for _, v in probe.nccl_dists)))
        if options.gpu
        else None,
    )


def _this_target() -> Probe:
    """This interpreter as the probe reports it, read without importing TensorFlow."""
    names = sorted(set(metadata.packages_distributions().get("tensorflow", [])))
    return Probe(
        python_tag=f"cp{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}",
        platform=sysconfig.get_platform(),
        tensorflow_dists=[(name, metadata.version(name)) for name in names],
    )


def _venv_seeing_this_env(folder: Path) -> Path:
    """A new venv without pip that imports this environment's packages but horovod and pip.

    The venv's site-packages gets a ``.pth`` naming a folder of links to every entry of this
    environment's site-packages but horovod's, so TensorFlow imports there without a second
    install and horovod goes into the venv itself.
    """
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    view = folder / "site-view"
    view.mkdir()
    paths = sysconfig.get_paths()
    for site in dict.fromkeys([paths["purelib"], paths["platlib"]]):
        for entry in Path(site).iterdir():
            # pip stays out too: the venv has none, whether or not this one has
            skip = entry.name.lower().startswith(("horovod", "pip")) or entry.suffix == ".pth"
            if not skip and not (view / entry.name).exists():
                (view / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    (Path(site.stdout.strip()) / "_towerkit_test_view.pth").write_text(f"{view}\n")
    return python


def _executable(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


class TestPatchCmakelists:
    """patch_cmakelists."""

    def test_removes_entry(self):
        """The XLA source entry becomes the marker; every other line stays."""
        out = patch_cmakelists(CMAKE_TEXT)
        assert "xla_mpi_ops.cc" not in out.replace(_core.PATCH_MARKER, "")
        assert out.splitlines() == [
            _core.PATCH_MARKER if line == XLA_LINE else line for line in CMAKE_TEXT.splitlines()
        ]
        assert 'horovod/tensorflow/mpi_ops.cc")' in out

    def test_idempotent(self):
        """Patching patched text changes nothing."""
        once = patch_cmakelists(CMAKE_TEXT)
        assert patch_cmakelists(once) == once

    def test_keeps_indent_and_line_endings(self):
        """Indentation and CRLF endings of the replaced line survive."""
        text = "a\r\n    " + XLA_LINE + "\r\nb\r\n"
        assert patch_cmakelists(text) == "a\r\n    " + _core.PATCH_MARKER + "\r\nb\r\n"

    def test_fail(self):
        """Text from an unknown horovod version fails loudly."""
        text = CMAKE_TEXT.replace(XLA_LINE, "")
        with pytest.raises(
            HorovodPatchError,
            match=r"'horovod/tensorflow/CMakeLists.txt' has no line adding 'xla_mpi_ops.cc' .* "
            r"--version 0.28.1",
        ):
            patch_cmakelists(text)

    def test_comment_mentioning_source_is_not_an_entry(self):
        """A comment naming the file is neither patched nor taken for the entry."""
        with pytest.raises(HorovodPatchError, match="has no line adding"):
            patch_cmakelists("# xla_mpi_ops.cc was here\n")

    @given(
        before=st.lists(other_lines, max_size=5),
        after=st.lists(other_lines, max_size=5),
        copies=st.integers(min_value=1, max_value=3),
    )
    def test_property(self, before, after, copies):
        """Only entry lines change, all of them, and a second patch is a no-op."""
        lines = [*before, *([XLA_LINE] * copies), *after]
        text = "\n".join(lines) + "\n"
        out = patch_cmakelists(text)
        assert out.splitlines() == [*before, *([_core.PATCH_MARKER] * copies), *after]
        assert patch_cmakelists(out) == out

    @given(lines=st.lists(other_lines, max_size=6))
    def test_property_fail(self, lines):
        """Text with neither entry nor marker always raises."""
        with pytest.raises(HorovodPatchError, match="has no line adding"):
            patch_cmakelists("\n".join(lines))


class TestBuildOptions:
    """BuildOptions."""

    def test_repr(self):
        """The repr names every field."""
        assert repr(BuildOptions(jobs=2)) == (
            "BuildOptions(version='0.28.1', with_mpi=False, gpu=False, jobs=2)"
        )

    def test_fail(self):
        """Bad jobs, flags and versions are rejected at construction."""
        with pytest.raises(ValueError, match=r"'jobs' must be at least 1, got 0"):
            BuildOptions(jobs=0)
        with pytest.raises(TypeError, match=r"'jobs' must be an int, got str '2'"):
            BuildOptions(jobs="2")
        with pytest.raises(ValueError, match=r"'version' must be a release version .*'latest'"):
            BuildOptions(version="latest")
        with pytest.raises(TypeError, match="'with_mpi' must be <class 'bool'>"):
            BuildOptions(with_mpi="yes")


MANAGED_KEYS = sorted(
    {
        f"HOROVOD_{w}_{f}"
        for w in ("WITH", "WITHOUT")
        for f in ("TENSORFLOW", "PYTORCH", "MXNET", "GLOO", "MPI")
    }
    | {"HOROVOD_GPU_OPERATIONS"}
)
"""The keys whose values come from the options only."""


@pytest.mark.procs
class TestBuildEnv:
    """build_env, alone and over an inherited environment."""

    def test_cpu_gloo(self):
        """The default build: TensorFlow and gloo, no MPI, PyTorch, MXNet or NCCL."""
        assert build_env(BuildOptions(jobs=2)) == {
            "HOROVOD_WITH_TENSORFLOW": "1",
            "HOROVOD_WITH_GLOO": "1",
            "HOROVOD_WITHOUT_MPI": "1",
            "HOROVOD_WITHOUT_PYTORCH": "1",
            "HOROVOD_WITHOUT_MXNET": "1",
            "MAKEFLAGS": "-j2",
        }

    def test_mpi_gpu(self):
        """MPI and GPU switch the MPI key and add NCCL operations."""
        env = build_env(BuildOptions(with_mpi=True, gpu=True, jobs=8))
        assert env["HOROVOD_WITH_MPI"] == "1"
        assert "HOROVOD_WITHOUT_MPI" not in env
        assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
        assert env["HOROVOD_WITH_GLOO"] == "1"

    @given(options=options_st)
    def test_property(self, options):
        """Exactly one MPI key; NCCL exactly when asked; TensorFlow and gloo always on."""
        env = build_env(options)
        assert ("HOROVOD_WITH_MPI" in env) != ("HOROVOD_WITHOUT_MPI" in env)
        assert ("HOROVOD_WITH_MPI" in env) == options.with_mpi
        assert ("HOROVOD_GPU_OPERATIONS" in env) == options.gpu
        assert env["HOROVOD_WITH_TENSORFLOW"] == env["HOROVOD_WITH_GLOO"] == "1"
        assert env["MAKEFLAGS"] == f"-j{options.jobs}"

    @given(
        options=options_st,
        inherited=st.dictionaries(
            st.sampled_from(
                [
                    *sorted(MANAGED_KEYS),
                    "PATH",
                    "CXX",
                    "HOROVOD_CUDA_HOME",
                    "HOROVOD_NCCL_HOME",
                ]
            ),
            st.sampled_from(["0", "1", "NCCL", "/opt"]),
        ),
    )
    def test_merged_property(self, options, inherited):
        """Managed keys come only from the options; every other inherited key passes."""
        env = build_env(options, inherited)
        wanted = build_env(options)
        for key in MANAGED_KEYS:
            assert env.get(key) == wanted.get(key)
        for key, value in inherited.items():
            if key not in MANAGED_KEYS:
                assert env[key] == value


class TestCacheKey:
    """cache_key and the probe fields it reads."""

    def test_key(self):
        """The key names horovod, the interpreter, the TensorFlow distribution and the switches."""
        assert cache_key(BuildOptions(), TARGET) == (
            "horovod-0.28.1-cp311-linux_x86_64-tensorflow_cpu==2.21.0-gloo"
        )
        assert cache_key(BuildOptions(with_mpi=True), TARGET).endswith("-gloo+mpi")
        assert cache_key(BuildOptions(gpu=True), TARGET).endswith(
            "-gloo+nccl-cudanone+cudnnnone+ncclnone"
        )

    def test_gpu_stack(self):
        """A GPU build's key names the CUDA, cuDNN and NCCL it links; a CPU build's does not."""
        gpu = attrs.evolve(
            TARGET, cuda="12.5.1", cudnn="9", nccl_dists=(("nvidia-nccl-cu12", "2.23.4"),)
        )
        assert cache_key(BuildOptions(gpu=True), gpu).endswith(
            "-gloo+nccl-cuda12.5.1+cudnn9+nccl2.23.4"
        )
        assert cache_key(BuildOptions(), gpu) == cache_key(BuildOptions(), TARGET)
        newer = attrs.evolve(gpu, nccl_dists=(("nvidia-nccl-cu12", "2.24.0"),))
        assert cache_key(BuildOptions(gpu=True), newer) != cache_key(BuildOptions(gpu=True), gpu)

    def test_tensorflow_version_and_distribution_matter(self):
        """A wheel built against tensorflow-cpu 2.21.0 is never the one for 2.20.0 or tensorflow."""
        keys = {
            cache_key(BuildOptions(), attrs.evolve(TARGET, tensorflow_dists=dists))
            for dists in (
                (("tensorflow-cpu", "2.21.0"),),
                (("tensorflow-cpu", "2.20.0"),),
                (("tensorflow", "2.21.0"),),
                (("tensorflow", "2.21.0"), ("tensorflow-intel", "2.21.0")),
            )
        }
        assert len(keys) == 4

    def test_jobs_and_spelling_do_not_matter(self):
        """Parallelism is not part of the key; a distribution's name spellings are one name."""
        spelled = attrs.evolve(TARGET, tensorflow_dists=(("TensorFlow_CPU", "2.21.0"),))
        assert cache_key(BuildOptions(jobs=16), spelled) == cache_key(BuildOptions(), TARGET)

    def test_fail(self):
        """A probe without the key's fields, or with fields a key cannot hold, lists each."""
        with pytest.raises(ValueError) as info:
            cache_key(BuildOptions(), Probe(tensorflow="2.21.0"))
        assert str(info.value) == (
            "cannot key the wheel cache: 'python_tag' must be a tag such as 'cp311', got None; "
            "'platform' must name a platform such as 'linux-x86_64', got None; "
            "'tensorflow_dists' is empty: no installed distribution provides 'tensorflow'"
        )
        bad = attrs.evolve(
            TARGET,
            python_tag="cp 311",
            tensorflow_dists=(("tensorflow/cpu", "2.21.0"), ("tensorflow", "2.21 0")),
        )
        with pytest.raises(ValueError, match=r"'python_tag' .* got 'cp 311'") as info:
            cache_key(BuildOptions(), bad)
        assert "entry 'tensorflow/cpu' is not a distribution name" in str(info.value)
        assert "entry 'tensorflow' has version '2.21 0', not a release version" in str(info.value)

    def test_probe_pairs(self):
        """The probe's JSON lists become a tuple of pairs; anything else is rejected."""
        assert Probe(tensorflow_dists=[["tensorflow-cpu", "2.21.0"]]).tensorflow_dists == (
            ("tensorflow-cpu", "2.21.0"),
        )
        with pytest.raises(ValueError, match=r"'tensorflow_dists' must hold \(name, version\)"):
            Probe(tensorflow_dists=[["tensorflow-cpu"]])

    @given(options=key_options_st, probe=keyed_probe_st)
    def test_property_shape(self, options, probe):
        """A key is one visible path component of six '-'-separated fields (seven for GPUs)."""
        key = cache_key(options, probe)
        assert "/" not in key
        assert not key.startswith(".")
        fields = key.split("-")
        assert len(fields) == (7 if options.gpu else 6)
        assert fields[0] == "horovod"
        assert fields[1] == options.version
        assert fields[2] == probe.python_tag
        assert fields[5].split("+")[0] == "gloo"

    @given(a=st.tuples(near_options_st, near_probe_st), b=st.tuples(near_options_st, near_probe_st))
    def test_property_distinct(self, a, b):
        """Two targets share a key exactly when everything the key captures agrees."""
        same_key = cache_key(*a) == cache_key(*b)
        assert same_key == (_normalized_inputs(*a) == _normalized_inputs(*b))


@pytest.mark.procs
class TestParseProbe:
    """parse_probe."""

    def test_ok(self):
        """The last tagged line counts; unknown keys are ignored."""
        text = f'warning\n{_core.PROBE_TAG} {{"tensorflow": "2.21.0", "horovod": "0.28.1", "gloo": true, "x": 1}}\n'
        assert parse_probe(text) == Probe(tensorflow="2.21.0", horovod="0.28.1", gloo=True)

    def test_fail(self):
        """No tagged line, bad JSON, or a non-object fail with the output quoted."""
        with pytest.raises(HorovodInstallError, match="printed no line starting with"):
            parse_probe("Traceback: boom")
        with pytest.raises(HorovodInstallError, match="must be a JSON object"):
            parse_probe(f"{_core.PROBE_TAG} {{oops")
        with pytest.raises(HorovodInstallError, match="must be a JSON object"):
            parse_probe(f"{_core.PROBE_TAG} [1]")


@pytest.mark.procs
class TestRealProbe:
    """The probe script, run by this interpreter (which has TensorFlow)."""

    def test_reports_this_interpreter(self):
        """It reports the TensorFlow found here, its distribution and its CUDA build facts."""
        import importlib.metadata

        import tensorflow as tf

        probe = _install._probe(sys.executable, timeout=300)
        assert probe.tensorflow == tf.__version__
        assert probe.tensorflow_error is None
        assert probe.python_tag == f"cp{sys.version_info[0]}{sys.version_info[1]}"
        names = {name for name, _ in probe.tensorflow_dists}
        assert names, probe
        for name, version in probe.tensorflow_dists:
            assert importlib.metadata.version(name) == version
        info = dict(tf.sysconfig.get_build_info())
        assert probe.cuda == (str(info["cuda_version"]) if info.get("cuda_version") else None)
        for name, version in probe.nccl_dists:
            assert name.lower().startswith("nvidia-nccl")
            assert importlib.metadata.version(name) == version
        assert cache_key(BuildOptions(), probe).startswith("horovod-")


@pytest.mark.procs
class TestRebuildReason:
    """rebuild_reason."""

    def test_reasons(self):
        """Each mismatch gives its own reason."""
        ok = Probe(tensorflow="2.21.0", horovod="0.28.1", gloo=True)
        assert rebuild_reason(ok, BuildOptions()) is None
        assert rebuild_reason(Probe(horovod="0.27.0", gloo=True), BuildOptions()) == (
            "the installed horovod is 0.27.0, not 0.28.1"
        )
        assert rebuild_reason(
            Probe(horovod="0.28.1", horovod_error="NotFoundError: x"), BuildOptions()
        ) == ("horovod.tensorflow does not load: NotFoundError: x")
        assert rebuild_reason(Probe(horovod="0.28.1"), BuildOptions(with_mpi=True, gpu=True)) == (
            "the installed horovod has no gloo controller and no MPI controller "
            "and no NCCL operations"
        )

    @given(probe=probe_st, options=options_st)
    def test_property(self, probe, options):
        """None exactly when version, ops and every requested controller fit."""
        fits = (
            probe.horovod == options.version
            and probe.horovod_error is None
            and probe.gloo
            and (probe.mpi or not options.with_mpi)
            and (probe.nccl or not options.gpu)
        )
        assert (rebuild_reason(probe, options) is None) == fits


class TestBuildTools:
    """missing_build_tools, against real files on a search path."""

    def test_all_missing(self, tmp_path):
        """An empty search path lacks every tool, each named with how to install it."""
        missing = missing_build_tools(
            BuildOptions(with_mpi=True, gpu=True), path=str(tmp_path), env={}
        )
        assert missing == [
            "cmake (apt-get install cmake, or pip install 'cmake>=3.13')",
            "a C++ compiler: c++, g++ or clang++ (apt-get install g++)",
            "mpicxx (apt-get install libopenmpi-dev)",
            "mpirun (apt-get install openmpi-bin)",
            "nvcc from the CUDA toolkit (put it on PATH or set HOROVOD_CUDA_HOME)",
        ]

    def test_present(self, tmp_path):
        """cmake and g++ are enough for the default build."""
        _executable(tmp_path, "cmake")
        _executable(tmp_path, "g++")
        assert missing_build_tools(BuildOptions(), path=str(tmp_path), env={}) == []

    def test_cxx_and_cuda_home(self, tmp_path):
        """CXX names the compiler; HOROVOD_CUDA_HOME/bin is searched for nvcc."""
        bins = tmp_path / "bin"
        cuda = tmp_path / "cuda"
        (cuda / "bin").mkdir(parents=True)
        bins.mkdir()
        _executable(bins, "cmake")
        _executable(bins, "clang++-17")
        _executable(cuda / "bin", "nvcc")
        env = {"CXX": "clang++-17 -stdlib=libc++", "HOROVOD_CUDA_HOME": str(cuda)}
        assert missing_build_tools(BuildOptions(gpu=True), path=str(bins), env=env) == []
        env["CXX"] = "icpx"
        assert missing_build_tools(BuildOptions(), path=str(bins), env=env) == [
            "the C++ compiler named by CXX='icpx'"
        ]


def _sdist(folder: Path, version: str, cmake_text: str) -> Path:
    """A tarball shaped like horovod's sdist, written for real."""
    path = folder / f"horovod-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in (
            ("setup.py", "print('setup')\n"),
            (_core.CMAKELISTS, cmake_text),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"horovod-{version}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


class TestUnpackAndPatch:
    """Unpacking and patching a real tarball on disk."""

    def test_unpack_patch(self, tmp_path):
        """The sdist unpacks to horovod-<version>, patched; unpacking again starts clean."""
        sdist = _sdist(tmp_path, "0.28.1", CMAKE_TEXT)
        src = tmp_path / "horovod-0.28.1"
        _install._unpack(sdist, src)
        assert (src / _core.CMAKELISTS).read_text() == patch_cmakelists(CMAKE_TEXT)
        assert sorted(p.name for p in (src / "horovod" / "tensorflow").iterdir()) == [
            "CMakeLists.txt"
        ]
        (src / "stale.o").write_text("x")
        _install._unpack(sdist, src)
        assert not (src / "stale.o").exists()

    def test_fail(self, tmp_path):
        """A missing sdist and an unknown CMakeLists fail with what was found."""
        with pytest.raises(HorovodInstallError, match=r"left no 'horovod-0.28.1.tar.gz'"):
            _install._unpack(tmp_path / "horovod-0.28.1.tar.gz", tmp_path / "horovod-0.28.1")
        src = tmp_path / "horovod-0.29.0"
        with pytest.raises(HorovodPatchError, match="has no line adding"):
            _install._unpack(_sdist(tmp_path, "0.29.0", "project(x)\n"), src)
        assert (src / _core.CMAKELISTS).read_text() == "project(x)\n"


def _dry_run(capsys, *args: str) -> tuple[list[str], str]:
    """The step names ``--dry-run`` lists, and its whole output."""
    assert ih.main(["--dry-run", "--python", sys.executable, *args]) == 0
    out = capsys.readouterr().out
    return re.findall(r"^  \d+\. ([a-z-]+):", out, flags=re.M), out


@pytest.mark.procs
class TestDryRun:
    """--dry-run: the environment and every step with its command, nothing run."""

    def test_plan(self, tmp_path, capsys):
        """The build's environment and commands are printed; the workdir is not created."""
        workdir = tmp_path / "work"
        names, out = _dry_run(
            capsys, "--workdir", str(workdir), "--with-mpi", "--gpu", "--jobs", "3", "--wheel-cache", ""
        )  # fmt: skip
        assert not workdir.exists()
        assert f"python:  {sys.executable}\nworkdir: {workdir}\nbuild environment:\n" in out
        for line in ("HOROVOD_WITH_MPI=1", "HOROVOD_GPU_OPERATIONS=NCCL", "MAKEFLAGS=-j3"):
            assert f"  {line}\n" in out
        assert "HOROVOD_WITHOUT_MPI" not in out
        py = shlex.quote(sys.executable)
        assert (
            f"$ {py} -m pip download --no-deps --no-binary :all: horovod==0.28.1 -d {workdir}\n"
            in out
        )
        assert (
            f"$ {py} -m pip wheel -v --no-build-isolation --no-deps --no-cache-dir "
            f"-w {workdir / 'wheelhouse'} {workdir / 'horovod-0.28.1'}\n"
        ) in out
        assert f"$ {py} -m pip install {' '.join(ih._core.RUNTIME_REQUIREMENTS)}\n" in out
        wheel = shlex.quote(f"{workdir / 'wheelhouse'}/horovod-0.28.1-<tags>.whl")
        assert f"$ {py} -m pip install --no-deps --force-reinstall {wheel}\n" in out
        assert f"-m horovod.runner.launch -np 2 --gloo -H localhost:2 {py} {workdir}" in out
        assert "check-tools: cmake and a C++ compiler on PATH, mpicxx and mpirun, nvcc" in out
        assert "cache-lookup" not in names
        assert "cache-store" not in names

    @settings(max_examples=15, deadline=None)
    @given(options=options_st, cache=st.booleans(), verify=st.booleans())
    def test_order(self, options, cache, verify):
        """Checks first; with a cache, lookup before the tools and store before the install."""
        flags = ["--jobs", str(options.jobs), *["--with-mpi"] * options.with_mpi]
        flags += [*["--gpu"] * options.gpu, *["--skip-verify"] * (not verify)]
        flags += ["--wheel-cache", "/c" if cache else ""]
        capture = io.StringIO()
        with contextlib.redirect_stdout(capture):
            assert ih.main(["--dry-run", "--python", sys.executable, *flags]) == 0
        names = re.findall(r"^  \d+\. ([a-z-]+):", capture.getvalue(), flags=re.M)
        order = ["check-tensorflow", "check-installed", "ensurepip", "cache-lookup", "check-tools"]
        order += ["download", "unpack", "patch", "prerequisites", "build-wheel", "cache-store"]
        order += ["install-wheel", "verify"]
        assert names == [n for n in order if n in names]
        assert ("cache-lookup" in names) == ("cache-store" in names) == cache
        assert ("verify" in names) == verify
        assert {"check-tensorflow", "check-installed", "build-wheel", "install-wheel"} <= set(names)

    def test_wheel_cache(self, tmp_path, capsys, monkeypatch):
        """--wheel-cache, else the environment variable, names the cache; '' turns it off."""
        cache = tmp_path / "cache"
        monkeypatch.delenv(ih.WHEEL_CACHE_ENV, raising=False)
        names, out = _dry_run(capsys, "--wheel-cache", str(cache))
        assert f"wheel cache: {cache}\n" in out
        assert f"cache-lookup: if {cache}/<key>/ holds a wheel" in out
        assert not cache.exists()
        monkeypatch.setenv(ih.WHEEL_CACHE_ENV, str(tmp_path / "from-env"))
        assert f"wheel cache: {tmp_path / 'from-env'}\n" in _dry_run(capsys)[1]
        names, out = _dry_run(capsys, "--wheel-cache", "")
        assert "wheel cache" not in out
        assert "cache-lookup" not in names
        monkeypatch.chdir(tmp_path)
        assert f"wheel cache: {tmp_path / 'rel'}\n" in _dry_run(capsys, "--wheel-cache", "rel")[1]


@pytest.mark.procs
class TestMain:
    """main, run for real against real interpreters."""

    def test_bad_options(self, capsys):
        """Bad option values exit with status 2 and the reason."""
        with pytest.raises(SystemExit) as info:
            ih.main(["--dry-run", "--jobs", "0"])
        assert info.value.code == 2
        assert "'jobs' must be at least 1, got 0" in capsys.readouterr().err

    def test_bad_python(self, tmp_path, capsys):
        """A --python that is not an interpreter fails before anything runs."""
        code = ih.main(["--python", str(tmp_path / "nope"), "--workdir", str(tmp_path)])
        assert code == 1
        assert "'--python' must be an executable interpreter" in capsys.readouterr().err

    def test_no_tensorflow(self, tmp_path, capsys):
        """An interpreter without TensorFlow is named in the error, before any download."""
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        workdir = tmp_path / "work"
        code = ih.main(["--python", str(python), "--workdir", str(workdir)])
        err = capsys.readouterr().err
        assert code == 1
        assert f"tensorflow does not import in {python}: ModuleNotFoundError" in err
        assert os.listdir(workdir) == []

    @pytest.mark.slow
    def test_missing_compiler(self, tmp_path, capsys, monkeypatch):
        """A build without a C++ compiler stops at the tools check, naming it."""
        python = _venv_seeing_this_env(tmp_path)
        monkeypatch.setenv("CXX", "no-such-compiler-here")
        workdir = tmp_path / "w"
        code = ih.main(["--python", str(python), "--wheel-cache", "", "--workdir", str(workdir)])
        captured = capsys.readouterr()
        assert code == 1
        assert "horovod is not installed" in captured.out
        assert (
            "install-horovod: error: horovod's build needs tools that are not on PATH: "
            "the C++ compiler named by CXX='no-such-compiler-here'"
        ) in captured.err
        assert "== download" not in captured.out

    @pytest.mark.slow
    def test_broken_cached_wheel_is_removed(self, tmp_path, capsys, monkeypatch):
        """A cached wheel that does not install is removed and the build goes on (here to a
        tools check that fails, so nothing compiles); a store's hidden temporary is no wheel."""
        python = _venv_seeing_this_env(tmp_path)
        cache = tmp_path / "cache"
        key = cache_key(BuildOptions(), _this_target())
        entry = cache / key
        entry.mkdir(parents=True)
        (entry / WHEEL_NAME).write_bytes(b"not a zip archive")
        (entry / f".{WHEEL_NAME}.tmp-1-0123abcd").write_bytes(b"half")
        monkeypatch.setenv("CXX", "no-such-compiler-here")
        code = ih.main(
            ["--python", str(python), "--wheel-cache", str(cache), "--workdir", str(tmp_path / "w")]
        )
        captured = capsys.readouterr()
        assert code == 1
        assert f"cache key: {key}\n" in captured.out
        assert f"found {entry / WHEEL_NAME}\n" in captured.out
        assert f"the cached wheel does not work in {python}" in captured.out
        assert "the C++ compiler named by CXX='no-such-compiler-here'" in captured.err
        assert os.listdir(cache) == [f".{key}.lock"]

    @pytest.mark.slow
    def test_lock_excludes_a_second_installer(self, tmp_path):
        """While one process holds an entry's lock, an install for that entry waits for it."""
        python = _venv_seeing_this_env(tmp_path)
        cache = tmp_path / "cache"
        key = cache_key(BuildOptions(), _this_target())
        release = tmp_path / "release"
        holder = (
            "import sys, time\n"
            "from pathlib import Path\n"
            "from towerkit.tools.install_horovod._install import entry_lock\n"
            "with entry_lock(Path(sys.argv[1]), sys.argv[2]):\n"
            "    print('locked', flush=True)\n"
            "    while not Path(sys.argv[3]).exists():\n"
            "        time.sleep(0.05)\n"
        )
        second_argv = [
            sys.executable, "-m", "towerkit.tools.install_horovod", "--python", str(python),
            "--wheel-cache", str(cache), "--workdir", str(tmp_path / "w"),
        ]  # fmt: skip
        env = {**os.environ, "CXX": "no-such-compiler-here"}
        pipe = subprocess.PIPE
        with (
            subprocess.Popen([sys.executable, "-c", holder, str(cache), key, str(release)], stdout=pipe, text=True) as first,
            subprocess.Popen(second_argv, stdout=pipe, stderr=pipe, text=True, env=env) as second,
        ):  # fmt: skip
            assert first.stdout.readline() == "locked\n"
            seen = []
            while not seen or not seen[-1].startswith("waiting for another install-horovod"):
                seen.append(second.stdout.readline())
                assert seen[-1], f"the second install ended without waiting: {seen}"
            assert seen[-1] == f"waiting for another install-horovod to finish {cache / key}\n"
            time.sleep(1.0)
            assert second.poll() is None
            release.write_text("go")
            out, err = second.communicate(timeout=600)
            assert first.wait(timeout=60) == 0
        assert second.returncode == 1, err
        assert f"no wheel in {cache / key}: building one" in out
        assert "the C++ compiler named by CXX='no-such-compiler-here'" in err
        assert sorted(os.listdir(cache)) == [f".{key}.lock"]

    @pytest.mark.slow
    @pytest.mark.horovod
    @pytest.mark.timeout(660)  # a venv, an install and a 2-process check; asserted < 600 s
    def test_cached_wheel_installs_without_compiling(self, tmp_path, capsys, monkeypatch):
        """A wheel from the cache goes into a new venv (pip bootstrapped) and passes the
        2-process check, no compiler needed."""
        key = cache_key(BuildOptions(), _this_target())
        shared = os.environ.get(ih.WHEEL_CACHE_ENV)
        wheels = sorted(Path(shared, key).glob("horovod-*.whl")) if shared else []
        if not wheels:
            pytest.skip(
                f"no cached horovod wheel for {key}: run 'install-horovod --wheel-cache DIR' "
                f"once and set {ih.WHEEL_CACHE_ENV}=DIR"
            )
        cache = tmp_path / "cache"
        (cache / key).mkdir(parents=True)
        (cache / key / wheels[-1].name).write_bytes(wheels[-1].read_bytes())
        python = _venv_seeing_this_env(tmp_path)
        monkeypatch.setenv("CXX", "no-such-compiler-here")
        workdir = tmp_path / "w"
        started = time.monotonic()
        code = ih.main(
            ["--python", str(python), "--wheel-cache", str(cache), "--workdir", str(workdir)]
        )
        out = capsys.readouterr().out
        assert code == 0, out
        assert "== ensurepip" in out
        assert "installed horovod 0.28.1 from the wheel cache" in out
        assert "== check-tools" not in out
        assert "TOWERKIT-HVD-CHECK rank 0 of 2: ok" in out
        assert "TOWERKIT-HVD-CHECK rank 1 of 2: ok" in out
        assert "horovod works: allreduce (sum, average) and broadcast agree on every rank" in out
        assert sorted(os.listdir(workdir)) == ["verify_horovod.py"]
        assert os.listdir(cache / key) == [wheels[-1].name]
        assert time.monotonic() - started < 600
        again = ih.main(["--python", str(python), "--wheel-cache", str(cache), "--skip-verify"])
        assert again == 0
        assert "horovod 0.28.1 is already built here; --force rebuilds" in capsys.readouterr().out


@pytest.mark.procs
class TestPackage:
    """The installer is a small package."""

    def test_size(self):
        """The package is at most 700 lines, no module over 600."""
        sizes = {
            p.name: len(p.read_text(encoding="utf-8").splitlines())
            for p in Path(ih.__file__).parent.iterdir()
            if p.is_file()
        }
        assert {name: n for name, n in sizes.items() if n > 600} == {}
        assert sum(sizes.values()) <= 700, sizes

    def test_doctests(self):
        """The examples in the pure module's docstrings hold."""
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        result = doctest.testmod(_core, optionflags=flags)
        assert result.attempted > 0
        assert result.failed == 0

    def test_runs_as_module(self):
        """``python -m towerkit.tools.install_horovod --help`` prints the script's usage."""
        done = subprocess.run(
            [sys.executable, "-m", "towerkit.tools.install_horovod", "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: install-horovod")

    def test_all_importable(self):
        """Every name of the package's ``__all__`` is importable from it."""
        assert [n for n in ih.__all__ if not hasattr(ih, n)] == []
