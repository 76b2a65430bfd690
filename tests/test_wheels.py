"""The built distributions: one sdist and one wheel per lib, each wheel installable alone.

``nox -s build`` builds them into ``dist/`` and runs this file with ``TOWERKIT_DIST``
pointing there. Run alone, the file builds them into a temporary folder first (needs
``uv``). Each install goes into a fresh virtual environment with ``--find-links`` on the
folder (the towerkit distributions) and the package index (everything else), as the
README tells users to install.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from example_modules import ROOT
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

LIBS = ["sessinit", "towers", "callbacks", "trainers", "export", "layers"]
"""The libs, in dependency order."""

FOLDERS = {
    **{f"towerkit-{lib}": ROOT / "libs" / lib for lib in LIBS},
    "towerkit-conformance": ROOT / "conformance",
    "towerkit-tools": ROOT / "tools",
}
"""Each distribution and its folder."""

UV = shutil.which("uv")

pytestmark = [
    pytest.mark.timeout(600),  # builds venvs from the wheels
    pytest.mark.procs,
    pytest.mark.skipif(UV is None, reason="uv is needed to build and install (nox -s build)"),
]


def project(dist: str) -> dict:
    """The ``[project]`` table of `dist`'s pyproject."""
    with open(FOLDERS[dist] / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def version_of(dist: str) -> str:
    """The version in `dist`'s ``_version.py``."""
    package = dist.removeprefix("towerkit-")
    text = (FOLDERS[dist] / "src" / "towerkit" / package / "_version.py").read_text()
    match = re.search(r"__version__ = \"([^\"]+)\"", text)
    assert match is not None, text
    return match.group(1)


def towerkit_closure(dist: str) -> set[str]:
    """`dist` and every towerkit distribution it needs, declared or through another."""
    out = {dist}
    for dep in project(dist)["dependencies"]:
        name = re.split(r"[ <>=!~;\[]", dep, maxsplit=1)[0]
        if name.startswith("towerkit-"):
            out |= towerkit_closure(name)
    return out


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    """Run a command; its output comes back as text."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **kwargs.pop("env", {})}
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
        **kwargs,
    )


def run_script(
    bin_dir: Path, script: str, *args: str, **kwargs
) -> subprocess.CompletedProcess[str]:
    """Run a console script that a venv's install wrote, through that venv's interpreter.

    The script's first line must name the venv's own Python; the script itself is then
    handed to that interpreter rather than executed, so that a temporary folder mounted
    without exec rights, or a script the installer's file handles still hold, cannot
    fail the run for a reason that is not ours.
    """
    path = bin_dir / script
    shebang = path.read_text().splitlines()[0]
    assert shebang.startswith("#!"), (script, shebang)
    interpreter = Path(shebang[2:].strip().split()[0])
    assert interpreter.parent == bin_dir, (script, shebang)
    return run(interpreter, path, *args, **kwargs)


ENTRY_POINT = """
import sys
from importlib.metadata import entry_points

name, target, *args = sys.argv[1:]
found = entry_points(group="console_scripts", name=name)
values = sorted(ep.value for ep in found)
if values != [target]:
    sys.exit(f"console script {name!r}: installed entry points {values}, declared {target!r}")
sys.argv = [name, *args]
sys.exit(next(iter(found)).load()())
"""
"""Run a console script's installed entry point, after checking it is the declared one."""


def run_entry_point(
    bin_dir: Path, script: str, target: str, *args: str, **kwargs
) -> subprocess.CompletedProcess[str]:
    """Run console script `script` as its installed entry point says, in the venv's Python.

    The entry point is read from the installed distribution's metadata and must be
    `target` (the pyproject's ``[project.scripts]`` value); ``sys.argv[0]`` is the
    script's name, as when the script itself runs.
    """
    return run(bin_dir / "python", "-c", ENTRY_POINT, script, target, *args, **kwargs)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The folder of built distributions: ``TOWERKIT_DIST``, or a fresh build."""
    given = os.environ.get("TOWERKIT_DIST")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("dist")
    for folder in FOLDERS.values():
        done = run(UV, "build", "-q", "--sdist", "--wheel", "--out-dir", out, folder)
        assert done.returncode == 0, done.stderr
    return out


def wheel_of(dist_dir: Path, dist: str) -> Path:
    """The one wheel of `dist` at its current version."""
    name = dist.replace("-", "_")
    (wheel,) = dist_dir.glob(f"{name}-{version_of(dist)}-py3-none-any.whl")
    return wheel


def venv_with(tmp_path: Path, dist_dir: Path, *requirements: str) -> Path:
    """A fresh venv with `requirements` installed from `dist_dir` plus the index; its bin folder."""
    venv = tmp_path / "venv"
    done = run(UV, "venv", "-q", "-p", sys.executable, venv)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    # The wheels keep their version from one build to the next, and uv prefers a wheel
    # of the same name and version from its cache to the one in --find-links: without
    # a refresh, a folder built before (at the same path) can be installed instead.
    refresh = [arg for dist in FOLDERS for arg in ("--refresh-package", dist)]
    done = run(
        UV, "pip", "install", "-q", "-p", python, *refresh, "--find-links", dist_dir, *requirements
    )
    assert done.returncode == 0, done.stderr
    return venv / "bin"


def installed_towerkit(bin_dir: Path) -> set[str]:
    """The towerkit distributions installed in a venv."""
    done = run(UV, "pip", "list", "-p", bin_dir / "python", "--format", "freeze")
    assert done.returncode == 0, done.stderr
    return {line.split("==")[0] for line in done.stdout.split() if line.startswith("towerkit-")}


@pytest.mark.parametrize("name", sorted(FOLDERS))
class TestBuilt:
    """What ``uv build`` made of each distribution."""

    def test_sdist_and_wheel(self, dist, name):
        """One sdist and one wheel at the version of ``_version.py``; the sdist holds the tests."""
        wheel_of(dist, name)
        (sdist,) = dist.glob(f"{name.replace('-', '_')}-{version_of(name)}.tar.gz")
        with tarfile.open(sdist) as tar:
            members = tar.getnames()
        assert any("/tests/" in m for m in members), members[:20]
        assert any(m.endswith("/README.md") for m in members)

    def test_wheel_contents(self, dist, name):
        """The package with ``py.typed``, ``_version.py`` and its stubs (the callbacks'
        ``__init__.pyi``, which declares its names), no ``towerkit/__init__.py``, no tests."""
        package = name.removeprefix("towerkit-")
        with zipfile.ZipFile(wheel_of(dist, name)) as whl:
            names = whl.namelist()
        assert f"towerkit/{package}/py.typed" in names
        assert f"towerkit/{package}/_version.py" in names
        source = FOLDERS[name] / "src"
        stubs = {p.relative_to(source).as_posix() for p in source.rglob("*.pyi")}
        assert stubs <= set(names)
        if package == "callbacks":
            assert "towerkit/callbacks/__init__.pyi" in names
        assert "towerkit/__init__.py" not in names
        assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]

    def test_metadata(self, dist, name):
        """The wheel's metadata: name, version, dependencies and extras as declared, README as Markdown."""
        with zipfile.ZipFile(wheel_of(dist, name)) as whl:
            info = f"{name.replace('-', '_')}-{version_of(name)}.dist-info/METADATA"
            meta = email.parser.Parser().parsestr(whl.read(info).decode())
        declared = project(name)
        assert meta["Name"] == name
        assert meta["Version"] == version_of(name)
        assert meta["Description-Content-Type"] == "text/markdown"
        body = meta.get_payload()
        assert body.startswith(f"# {name}"), body[:80]
        requires = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
        plain = [r for r in requires if r.marker is None or "extra" not in str(r.marker)]
        assert sorted(map(str, plain)) == sorted(
            str(Requirement(d)) for d in declared["dependencies"]
        )
        assert set(meta.get_all("Provides-Extra") or []) == set(
            declared.get("optional-dependencies", {})
        )


INSTALLED = """
import importlib, importlib.metadata as md, json, re, sys

def closure(dist):
    out = {dist}
    for req in md.requires(dist) or []:
        if "extra ==" in req:
            continue
        name = re.split(r"[ <>=!~;\\[(]", req, maxsplit=1)[0]
        if name.startswith("towerkit-"):
            out |= closure(name)
    return out

facts = {}
for dist in sys.argv[1:]:
    module = importlib.import_module("towerkit." + dist.removeprefix("towerkit-"))
    facts[dist] = {"version": module.__version__, "closure": sorted(closure(dist))}
print(json.dumps(facts))
"""
"""Import each installed towerkit package; its version and the towerkit distributions its
installed metadata requires, declared or through another, as JSON."""


@pytest.fixture(scope="module")
def all_wheels(dist, tmp_path_factory) -> tuple[Path, dict]:
    """One fresh venv with every wheel (each with its ``cpu`` extra) from `dist`; the facts.

    Every wheel goes into the same venv, once: that each lib installs alone, with only its
    declared dependencies, is what the per-lib test sessions prove (each builds a venv of
    that lib alone). Here the wheels' own metadata must name the same closure.
    """
    tmp = tmp_path_factory.mktemp("wheels")
    bin_dir = venv_with(tmp, dist, *[f"{name}[cpu]" for name in sorted(FOLDERS)])
    assert installed_towerkit(bin_dir) == set(FOLDERS)
    done = run(bin_dir / "python", "-c", INSTALLED, *sorted(FOLDERS), cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return bin_dir, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_wheel_installs(all_wheels, name, tmp_path):
    """The wheel installs from dist/ plus the index, imports, and requires its declared closure."""
    bin_dir, facts = all_wheels
    assert facts[name]["version"] == version_of(name)
    assert set(facts[name]["closure"]) == towerkit_closure(name)
    if name == "towerkit-tools":
        for script, target in project(name)["scripts"].items():
            assert os.access(bin_dir / script, os.X_OK), f"{script} is not installed in {bin_dir}"
            shown = run_entry_point(bin_dir, script, target, "--help", cwd=tmp_path)
            assert shown.returncode == 0, (script, shown.stdout[-1000:], shown.stderr[-2000:])
            assert shown.stdout.startswith(f"usage: {script}"), (script, shown.stdout[:500])


def test_tools_without_tensorflow(dist, tmp_path):
    """Installed without a TensorFlow extra, a tool that needs it says so in one line, status 2."""
    bin_dir = venv_with(tmp_path, dist, "towerkit-tools")
    assert run(bin_dir / "python", "-c", "import tensorflow").returncode != 0
    (tmp_path / "model-1.index").write_bytes(b"")  # ls-checkpoint checks its path first
    done = run_script(bin_dir, "ls-checkpoint", "model-1", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("ls-checkpoint: error: TensorFlow cannot be imported: ")
    timeline = run_script(bin_dir, "timeline", "--help", cwd=tmp_path)
    assert timeline.returncode == 0, timeline.stderr
