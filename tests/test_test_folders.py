"""Any set of test folders runs in one pytest run: no two folders share a module name.

pytest imports a test folder's modules (tests and helpers) by their bare names, with
the folder put first on ``sys.path``; two folders holding a module of one name cannot be
collected together ("import file mismatch"), and a helper of one folder could be found
in another. So every module name is the folder's own (``trainers_strategies.py``,
``test_trainers_loop.py``), and no module imports a ``conftest``: pytest loads every
folder's ``conftest.py`` under that one name.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from example_modules import ROOT

TEST_TREES = ("libs", "conformance", "tools", "tests")


def collected_folders() -> list[Path]:
    """The folders pytest collects from: those holding a ``conftest.py`` or a test module."""
    found: set[Path] = set()
    for tree in TEST_TREES:
        for path in (ROOT / tree).rglob("*.py"):
            in_tests = "tests" in path.relative_to(ROOT).parts
            if in_tests and (path.name == "conftest.py" or path.name.startswith("test_")):
                found.add(path.parent)
    return sorted(found)


def test_every_module_name_is_its_folders_own():
    """No module name (test or helper) is in two test folders."""
    folders = collected_folders()
    assert ROOT / "libs" / "trainers" / "tests" in folders
    assert ROOT / "tests" / "hosts" in folders
    where: dict[str, list[str]] = defaultdict(list)
    for folder in folders:
        for path in folder.glob("*.py"):
            if path.name != "conftest.py":
                where[path.name].append(folder.relative_to(ROOT).as_posix())
    shared = {name: dirs for name, dirs in where.items() if len(dirs) > 1}
    assert shared == {}, f"give each a name of its folder's own: {shared}"


def test_no_module_imports_a_conftest():
    """Helpers live in modules of their own names, never in a ``conftest.py`` imported by name."""
    offenders = []
    for folder in collected_folders():
        for path in folder.glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                if "conftest" in names:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == [], f"import the helper from a module of its own: {offenders}"
