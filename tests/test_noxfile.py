"""The noxfile's helpers that decide what CI runs and how: real files, no nox session."""

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def noxfile():
    """The noxfile as a module (loading it sets bytecode variables: they are put back)."""
    saved = dict(os.environ)
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return module


def make_site(root: Path, files: dict[str, str]) -> Path:
    site = root / "lib" / "python3.11" / "site-packages"
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return site


def test_links_bytecode_of_the_same_source_file_only(noxfile, tmp_path):
    """A pyc is linked when both venvs' sources are one file; another file is compiled anew."""
    site_a = make_site(tmp_path / "a", {"pkg/__init__.py": "", "pkg/mod.py": "x = 1\n"})
    site_b = tmp_path / "b" / "lib" / "python3.11" / "site-packages"
    (site_b / "pkg").mkdir(parents=True)
    os.link(site_a / "pkg" / "__init__.py", site_b / "pkg" / "__init__.py")  # as uv does
    (site_b / "pkg" / "mod.py").write_text("x = 1\n")  # equal text, another file
    cache_a, cache_b = tmp_path / "cache" / "a", tmp_path / "cache" / "b"
    (cache_a / "pkg").mkdir(parents=True)
    for name in ("__init__", "mod"):
        (cache_a / "pkg" / f"{name}.cpython-311.pyc").write_bytes(b"compiled " + name.encode())
    (cache_a / "pkg" / "mod.cpython-311.pyc.140023").write_bytes(b"half written")

    assert noxfile._link_bytecode(cache_a, site_a, cache_b, site_b) == 1
    linked = cache_b / "pkg" / "__init__.cpython-311.pyc"
    assert linked.samefile(cache_a / "pkg" / "__init__.cpython-311.pyc")
    assert sorted(p.name for p in (cache_b / "pkg").iterdir()) == ["__init__.cpython-311.pyc"]


def test_keeps_bytecode_already_there(noxfile, tmp_path):
    """A venv's own compiled file is never replaced; a second pass links nothing."""
    site_a = make_site(tmp_path / "a", {"m.py": "y = 2\n"})
    site_b = tmp_path / "b" / "lib" / "python3.11" / "site-packages"
    site_b.mkdir(parents=True)
    os.link(site_a / "m.py", site_b / "m.py")
    cache_a, cache_b = tmp_path / "ca", tmp_path / "cb"
    cache_a.mkdir()
    cache_b.mkdir()
    (cache_a / "m.cpython-311.pyc").write_bytes(b"theirs")
    (cache_b / "m.cpython-311.pyc").write_bytes(b"mine")
    assert noxfile._link_bytecode(cache_a, site_a, cache_b, site_b) == 0
    assert (cache_b / "m.cpython-311.pyc").read_bytes() == b"mine"


def test_tests_order_lists_every_lib_once(noxfile):
    """The libs' test sessions run longest first, and none is left out or run twice."""
    assert sorted(noxfile.TESTS_ORDER) == sorted(noxfile.LIBS)
    assert noxfile.TESTS_ORDER[0] == "trainers"


def test_horovod_session_reaches_every_horovod_test(noxfile):
    """Every module with ``horovod``-marked tests is in a folder the `horovod` session runs
    (outside ``tests/hosts``, which the `hosts` session runs)."""
    marked = {
        path.relative_to(ROOT).as_posix()
        for tree in ("libs", "conformance", "tools", "tests")
        for path in (ROOT / tree).rglob("test_*.py")
        if "pytest.mark.horovod" in path.read_text(encoding="utf-8")
    }
    assert "libs/trainers/tests/test_horovod.py" in marked
    outside = sorted(
        path
        for path in marked
        if path.startswith("tests/hosts/")
        or not any(path.startswith(f"{folder}/") for folder in noxfile.HOROVOD_TEST_PATHS)
    )
    assert outside == [], f"horovod tests the horovod session does not run: {outside}"


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3" failures="{failures}" errors="0" skipped="1">
<testcase classname="a.TestX" name="test_kill" time="1.0">{kill}</testcase>
<testcase classname="a.TestX" name="test_freeze" time="1.0"/>
<testcase classname="a" name="test_skipped" time="0.0"><skipped message="no"/></testcase>
</testsuite></testsuites>
"""


def test_flake_gate_counts_each_test(noxfile, tmp_path):
    """The flake gate counts each test's passes and runs over every run's JUnit report;
    a failure or an error is a run that did not pass, a skip no run at all."""
    reports = []
    for run, kill in enumerate(["", '<failure message="hang"/>', '<error message="x"/>', ""]):
        path = tmp_path / f"procs-{run:03d}.xml"
        path.write_text(JUNIT.format(failures=int(bool(kill)), kill=kill))
        reports.append(path)
    assert noxfile.pass_counts(reports) == {
        "a.TestX::test_kill": (2, 4),
        "a.TestX::test_freeze": (4, 4),
    }
    assert noxfile.pass_counts([]) == {}


def test_flake_gate_arguments(noxfile):
    """``--runs N`` sets the runs (20 by default); the other arguments are the tests."""
    assert noxfile.flake_gate_args([]) == (20, [])
    assert noxfile.flake_gate_args(["--runs", "3", "t.py::x"]) == (3, ["t.py::x"])
    for bad in (["--runs"], ["--runs", "0"], ["--runs", "two"]):
        with pytest.raises(ValueError, match="--runs takes a number of runs >= 1"):
            noxfile.flake_gate_args(bad)


def test_conformance_builds_horovod_for_builtin_rows_only(noxfile):
    """Your own rows run without building horovod unless --horovod asks; built-in rows need it."""
    args = noxfile.conformance_args
    assert args(["--trainer", "mine.trainers:make", "-k", "loop"]) == (
        False,
        ["--trainer", "mine.trainers:make", "-k", "loop"],
    )
    assert args(["--trainer=mine.trainers:make", "--horovod"]) == (
        True,
        ["--trainer=mine.trainers:make"],
    )
    assert args([]) == (True, [])
    assert args(["-x"])[0] is True
    assert args(["--trainer", "builtin"])[0] is True
    assert args(["--trainer", "mine:make", "--trainer", "HorovodTrainer"])[0] is True
