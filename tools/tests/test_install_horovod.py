"""Tests for the horovod installer: patching, environment, planning, checks, dry run."""

from __future__ import annotations

import io
import json
import os
import shlex
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.tools import install_horovod as ih
from towerkit.tools.install_horovod import (
    BuildOptions,
    HorovodInstallError,
    HorovodPatchError,
    Installer,
    Probe,
    Step,
    build_env,
    check_verify_output,
    choose_installer,
    merged_env,
    missing_build_tools,
    parse_cmake_version,
    parse_probe,
    patch_cmakelists,
    plan_install,
    rebuild_reason,
    render_plan,
)

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
).filter(lambda s: "xla_mpi_ops.cc" not in s and ih.PATCH_MARKER not in s)

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


def _report(rank: int, **changes: object) -> str:
    report = {"rank": rank, "size": 2, "sum": [3.0] * 4, "average": [1.5] * 4, "broadcast": 7.0}
    report.update(changes)
    return f"[{rank}]<stdout>:{ih.VERIFY_TAG} {json.dumps(report)}"


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
        assert "xla_mpi_ops.cc" not in out.replace(ih.PATCH_MARKER, "")
        assert out.splitlines() == [
            ih.PATCH_MARKER if line == XLA_LINE else line for line in CMAKE_TEXT.splitlines()
        ]
        assert 'horovod/tensorflow/mpi_ops.cc")' in out

    def test_idempotent(self):
        """Patching patched text changes nothing."""
        once = patch_cmakelists(CMAKE_TEXT)
        assert patch_cmakelists(once) == once

    def test_keeps_indent_and_line_endings(self):
        """Indentation and CRLF endings of the replaced line survive."""
        text = "a\r\n    " + XLA_LINE + "\r\nb\r\n"
        assert patch_cmakelists(text) == "a\r\n    " + ih.PATCH_MARKER + "\r\nb\r\n"

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
        assert out.splitlines() == [*before, *([ih.PATCH_MARKER] * copies), *after]
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


class TestBuildEnv:
    """build_env and merged_env."""

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
                [*sorted(ih.MANAGED_KEYS), "PATH", "CXX", "HOROVOD_CUDA_HOME", "HOROVOD_NCCL_HOME"]
            ),
            st.sampled_from(["0", "1", "NCCL", "/opt"]),
        ),
    )
    def test_merged_property(self, options, inherited):
        """Managed keys come only from the options; every other inherited key passes."""
        env = merged_env(inherited, options)
        wanted = build_env(options)
        for key in ih.MANAGED_KEYS:
            assert env.get(key) == wanted.get(key)
        for key, value in inherited.items():
            if key not in ih.MANAGED_KEYS:
                assert env[key] == value


class TestInstaller:
    """Installer and choose_installer."""

    def test_repr(self):
        """The repr names every field."""
        assert repr(Installer(kind="uv", python="/p", uv="/u")) == (
            "Installer(kind='uv', python='/p', uv='/u')"
        )

    def test_fail(self):
        """A uv installer needs the uv executable; unknown kinds are rejected."""
        with pytest.raises(ValueError, match="'uv' must name the uv executable"):
            Installer(kind="uv", python="/p")
        with pytest.raises(ValueError, match="'kind' must be in"):
            Installer(kind="conda", python="/p")

    @given(has_pip=st.booleans(), uv=st.sampled_from([None, "/usr/bin/uv"]))
    def test_property(self, has_pip, uv):
        """The target's pip wins, then uv, then bootstrapping pip."""
        kind = choose_installer("/v/bin/python", has_pip=has_pip, uv=uv).kind
        assert kind == ("pip" if has_pip else "uv" if uv else "ensurepip")


class TestPlanInstall:
    """plan_install and render_plan."""

    def test_pip(self):
        """With pip, every command goes through the target interpreter."""
        steps = {
            s.name: s
            for s in plan_install(
                Installer(kind="pip", python="/v/py"), BuildOptions(), workdir="/w"
            )
        }
        assert steps["download"].argv == (
            "/v/py", "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            "horovod==0.28.1", "-d", "/w",
        )  # fmt: skip
        build = steps["build"].argv
        assert build[:4] == ("/v/py", "-m", "pip", "install")
        assert "--no-build-isolation" in build
        assert build[-1] == "/w/horovod-0.28.1"
        assert steps["verify"].argv == (
            "/v/py", "-m", "horovod.runner.launch", "-np", "2", "--gloo", "-H", "localhost:2",
            "/v/py", "/w/verify_horovod.py",
        )  # fmt: skip

    def test_uv(self):
        """Without pip, uv installs with -p and a throw-away pip downloads."""
        installer = Installer(kind="uv", python="/v/py", uv="/bin/uv")
        steps = {
            s.name: s for s in plan_install(installer, BuildOptions(version="0.28.0"), workdir="/w")
        }
        assert steps["download"].argv[:6] == ("/bin/uv", "tool", "run", "--from", "pip", "pip")
        assert "horovod==0.28.0" in steps["download"].argv
        assert steps["build"].argv[:5] == ("/bin/uv", "pip", "install", "-p", "/v/py")
        assert steps["prerequisites"].argv[5:] == ih.BUILD_REQUIREMENTS

    def test_ensurepip_and_skip_verify(self):
        """Bootstrapping pip adds a step before the download; no verify when asked."""
        names = [
            s.name
            for s in plan_install(
                Installer(kind="ensurepip", python="/v/py"),
                BuildOptions(),
                workdir="/w",
                verify=False,
            )
        ]
        assert names.index("ensurepip") == names.index("download") - 1
        assert "verify" not in names

    @given(options=options_st, kind=st.sampled_from(["pip", "uv", "ensurepip"]))
    def test_property(self, options, kind):
        """The build is never isolated, the checks come first, the source dir is the workdir's."""
        installer = Installer(kind=kind, python="/v/py", uv="/bin/uv" if kind == "uv" else None)
        steps = plan_install(installer, options, workdir="/w")
        names = [s.name for s in steps]
        assert names[:3] == ["check-tensorflow", "check-installed", "check-tools"]
        assert names.index("patch") < names.index("build") < names.index("verify")
        build = next(s for s in steps if s.name == "build")
        assert "--no-build-isolation" in build.argv
        assert "--no-deps" in build.argv
        assert build.argv[-1] == f"/w/horovod-{options.version}"

    def test_render(self):
        """Each step appears numbered, with its command quoted for a shell."""
        steps = plan_install(
            Installer(kind="pip", python="/v py"), BuildOptions(jobs=3), workdir="/w"
        )
        text = render_plan(steps, build_env(BuildOptions(jobs=3)), python="/v py", workdir="/w")
        assert "  MAKEFLAGS=-j3" in text
        assert "  6. patch: leave horovod/tensorflow/xla_mpi_ops.cc out of" in text
        assert "     $ '/v py' -m pip download" in text

    def test_step_repr(self):
        """A step's repr shows its command as a tuple."""
        assert repr(Step(name="x", summary="y", argv=["a"])) == (
            "Step(name='x', summary='y', argv=('a',))"
        )


class TestParseProbe:
    """parse_probe."""

    def test_ok(self):
        """The last tagged line counts; unknown keys are ignored."""
        text = f'warning\n{ih.PROBE_TAG} {{"tensorflow": "2.21.0", "horovod": "0.28.1", "gloo": true, "x": 1}}\n'
        assert parse_probe(text) == Probe(tensorflow="2.21.0", horovod="0.28.1", gloo=True)

    def test_fail(self):
        """No tagged line, bad JSON, or a non-object fail with the output quoted."""
        with pytest.raises(HorovodInstallError, match="printed no line starting with"):
            parse_probe("Traceback: boom")
        with pytest.raises(HorovodInstallError, match="report is not JSON"):
            parse_probe(f"{ih.PROBE_TAG} {{oops")
        with pytest.raises(HorovodInstallError, match="must be a JSON object"):
            parse_probe(f"{ih.PROBE_TAG} [1]")


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
    """parse_cmake_version and missing_build_tools, against real files on a search path."""

    def test_cmake_version(self):
        """The version triple is read from cmake's banner."""
        assert parse_cmake_version("cmake version 3.25.1\n") == (3, 25, 1)
        assert parse_cmake_version("cmake3 version 3.13\n") == (3, 13)

    def test_cmake_version_fail(self):
        """A banner without a version fails."""
        with pytest.raises(HorovodInstallError, match="printed no version"):
            parse_cmake_version("command not found")

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


class TestCheckVerifyOutput:
    """check_verify_output."""

    def test_ok(self):
        """Both ranks reporting the right values pass, noise lines are ignored."""
        text = "\n".join(["[1]<stderr>:some warning", _report(1), _report(0)])
        assert [r["rank"] for r in check_verify_output(text)] == [0, 1]

    def test_fail(self):
        """Every wrong value and every silent rank is listed."""
        text = "\n".join([_report(0, sum=[3.0, 2.0], broadcast=17.0)])
        with pytest.raises(HorovodInstallError) as info:
            check_verify_output(text)
        message = str(info.value)
        assert "rank 0: sum is [3.0, 2.0], expected 3.0" in message
        assert "rank 0: broadcast is 17.0, expected 7.0" in message
        assert "rank 1 did not report" in message

    @given(np=st.integers(min_value=1, max_value=6))
    def test_property(self, np):
        """For any size, the expected sum is 1 + ... + np and the average its mean."""
        total = float(np * (np + 1) // 2)
        lines = [
            f"[{r}]<stdout>:{ih.VERIFY_TAG} "
            + json.dumps(
                {"rank": r, "size": np, "sum": [total], "average": [total / np], "broadcast": 7.0}
            )
            for r in range(np)
        ]
        assert len(check_verify_output("\n".join(lines), np=np)) == np


def _sdist(folder: Path, version: str, cmake_text: str) -> Path:
    """A tarball shaped like horovod's sdist, written for real."""
    path = folder / ih.sdist_name(version)
    with tarfile.open(path, "w:gz") as archive:
        for name, text in (
            ("setup.py", "print('setup')\n"),
            (ih.CMAKELISTS, cmake_text),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"horovod-{version}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


class TestUnpackAndPatch:
    """Unpacking and patching a real tarball on disk."""

    def test_unpack_patch(self, tmp_path):
        """The sdist unpacks to horovod-<version>, and the patch lands in the file."""
        sdist = _sdist(tmp_path, "0.28.1", CMAKE_TEXT)
        src = ih._unpack(sdist, tmp_path, "0.28.1")
        ih._apply_patch(src)
        assert (src / ih.CMAKELISTS).read_text() == patch_cmakelists(CMAKE_TEXT)
        ih._apply_patch(src)
        assert sorted(p.name for p in (src / "horovod" / "tensorflow").iterdir()) == [
            "CMakeLists.txt"
        ]

    def test_unpack_replaces_old_tree(self, tmp_path):
        """A second unpack starts from a clean tree (no stale build output)."""
        sdist = _sdist(tmp_path, "0.28.1", CMAKE_TEXT)
        src = ih._unpack(sdist, tmp_path, "0.28.1")
        (src / "stale.o").write_text("x")
        src = ih._unpack(sdist, tmp_path, "0.28.1")
        assert not (src / "stale.o").exists()

    def test_fail(self, tmp_path):
        """A missing sdist and an unknown CMakeLists fail with what was found."""
        with pytest.raises(HorovodInstallError, match=r"left no 'horovod-0.28.1.tar.gz'"):
            ih._unpack(tmp_path / ih.sdist_name("0.28.1"), tmp_path, "0.28.1")
        src = ih._unpack(_sdist(tmp_path, "0.29.0", "project(x)\n"), tmp_path, "0.29.0")
        with pytest.raises(HorovodPatchError, match="has no line adding"):
            ih._apply_patch(src)
        assert (src / ih.CMAKELISTS).read_text() == "project(x)\n"


class TestMain:
    """main, run for real."""

    def test_dry_run(self, tmp_path, capsys):
        """--dry-run prints the environment and every command and touches nothing."""
        workdir = tmp_path / "work"
        code = ih.main(
            ["--dry-run", "--python", sys.executable, "--workdir", str(workdir), "--with-mpi",
             "--gpu", "--jobs", "3"]
        )  # fmt: skip
        out = capsys.readouterr().out
        assert code == 0
        assert not workdir.exists()
        assert f"python:  {sys.executable}" in out
        for line in ("HOROVOD_WITH_MPI=1", "HOROVOD_GPU_OPERATIONS=NCCL", "MAKEFLAGS=-j3"):
            assert f"  {line}\n" in out
        assert "HOROVOD_WITHOUT_MPI" not in out
        assert f"horovod==0.28.1 -d {shlex.quote(str(workdir))}" in out
        assert "--no-build-isolation" in out
        assert "horovod.runner.launch -np 2 --gloo -H localhost:2" in out
        assert (
            "check-tools: cmake >= 3.13 and a C++ compiler on PATH, mpicxx and mpirun, nvcc" in out
        )

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
