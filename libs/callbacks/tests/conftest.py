"""Fixtures: a fresh graph and session for each test; which tests a loop drives."""

import ast
import functools
import os
import pathlib

import pytest
import tensorflow as tf

from towerkit.towers.compat import tf1


@pytest.fixture
def graph():
    """A fresh graph, made the default for the test."""
    g = tf.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def sess(graph):
    """A session on the test's graph, closed afterwards."""
    s = tf1.Session(graph=graph)
    yield s
    s.close()


def pytest_report_header(config):
    """Say which loop drives the callbacks (see tests/loop.py)."""
    from loop import DRIVER

    return f"towerkit callbacks tests: driven by the {DRIVER!r} loop"


def _names_in(node) -> set[str]:
    """Every name and attribute name that `node`'s code mentions."""
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
        elif isinstance(sub, ast.alias):
            out.add(sub.asname or sub.name)
    return out


@functools.cache
def _definitions(path: str) -> dict[str, list]:
    """The functions and classes of a test module (and their methods), by name."""
    tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
    out: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(node.name, []).append(node)
    return out


def drives_a_loop(item) -> bool:
    """Whether a test reaches `LoopTrainer`: its code, the helpers and fixtures it names.

    The names its function mentions are followed through the functions, methods and
    classes of its module and of this conftest, to any depth; a test that reaches
    ``LoopTrainer`` (or the ``loop`` module) drives callbacks through a training loop.
    """
    path = str(item.path)
    here = str(pathlib.Path(__file__))
    defs = {**_definitions(here)}
    for name, nodes in _definitions(path).items():
        defs[name] = defs.get(name, []) + nodes
    todo = {item.originalname if hasattr(item, "originalname") else item.name}
    todo |= set(getattr(item, "fixturenames", ()))
    if getattr(item, "cls", None) is not None:
        todo.add(item.cls.__name__)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in ("LoopTrainer", "loop"):
            return True
        for node in defs.get(name, []):
            todo |= _names_in(node) - seen
    return False


def pytest_collection_modifyitems(config, items):
    """With TOWERKIT_ONLY_DRIVEN=1, keep only the tests that drive a training loop.

    The cross-lib session runs this lib's tests again with the real trainer as the loop
    (``TOWERKIT_CALLBACKS_DRIVER=trainer``): only the tests that reach the loop differ
    between the two drivers, the others would run the same code twice. Tests of other
    folders collected in the same run are kept.
    """
    if os.environ.get("TOWERKIT_ONLY_DRIVEN") != "1":
        return
    here = pathlib.Path(__file__).parent
    keep = [item for item in items if here not in item.path.parents or drives_a_loop(item)]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
