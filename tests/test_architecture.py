"""docs/ARCHITECTURE.md stays true: its module map lists every module, and what it cites exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from example_modules import ROOT

DOC = ROOT / "docs" / "ARCHITECTURE.md"
LIBS = ("sessinit", "towers", "callbacks", "trainers", "export", "layers")


def lib_modules(lib: str) -> set[str]:
    """The modules of `lib`, as paths below its package folder (``inputs/_feed.py``)."""
    base = ROOT / "libs" / lib / "src" / "towerkit" / lib
    return {p.relative_to(base).as_posix() for p in base.rglob("*.py")} - {"_version.py"}


def mapped_modules(text: str, lib: str) -> set[str]:
    """The modules the map's section of `lib` lists."""
    section = text.split(f"### towerkit-{lib}\n", 1)[1].split("\n### ", 1)[0]
    return set(re.findall(r"^\| `([^`]+\.py)` \|", section, re.M))


def test_module_map_is_complete():
    """Every module of every lib is in the map, and every module the map names exists."""
    text = DOC.read_text()
    for lib in LIBS:
        have, mapped = lib_modules(lib), mapped_modules(text, lib)
        assert have - mapped == set(), f"towerkit-{lib}: modules missing from the map"
        assert mapped - have == set(), f"towerkit-{lib}: the map lists modules that are gone"


def test_cited_paths_exist():
    """Every repository path the page cites (``tests/...``, ``libs/...``, ``docs/...``,
    ``tools/...``, ``conformance/...``) exists, and no document outside the repo is cited."""
    text = DOC.read_text()
    cited = set(re.findall(r"`((?:libs|tests|tools|docs|conformance)/[^`:\s]+)", text))
    assert cited, "the page cites repository paths"
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert missing == [], missing
    assert "../" not in text


@pytest.mark.procs
def test_change_table_files_exist():
    """The files of the "to change X, open Y" table exist in the lib each row names."""
    text = DOC.read_text()
    table = text.split("## To change X, open Y", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| to change")]
    assert len(rows) >= 6
    for row in rows:
        opened = row.split("|")[2]
        named = re.search(r"\b(sessinit|towers|callbacks|trainers|export|layers|tools)\b", opened)
        assert named, row
        lib = named.group(1)
        files = re.findall(r"`([\w/]+\.py)", opened)
        assert files, row
        for name in files:
            if lib in LIBS:
                base = ROOT / "libs" / lib / "src" / "towerkit" / lib
            else:
                base = ROOT / lib / "src" / "towerkit" / lib
            where = base / name
            found = where.exists() or any(base.rglob(Path(name).name))
            assert found, (row[:60], name)
