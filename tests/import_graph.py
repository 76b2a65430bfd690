"""The run-time import graph of towerkit's packages, read from the sources, and its circles.

An edge ``a -> b`` says that running module ``a`` (at its top level or in a function)
imports module ``b``; imports under ``if TYPE_CHECKING:`` are left out, as they never
run. Importing ``towerkit.x._m`` also imports the package ``towerkit.x`` first, but that
is no edge: a package's ``__init__`` importing its modules is no circle. A ``from pkg
import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``; for a
package whose ``__init__.py`` loads its names lazily from an ``__init__.pyi`` stub
(towerkit.callbacks), to the module the stub names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository root."""


def source_roots(root: Path = ROOT) -> list[Path]:
    """The ``src`` folders of every lib, the conformance suite and the tools."""
    roots = sorted((root / "libs").glob("*/src"))
    return [*roots, root / "conformance" / "src", root / "tools" / "src"]


def module_files(roots: Iterable[Path]) -> dict[str, Path]:
    """Every module under `roots`, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for src in roots:
        for path in sorted(src.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def run_time_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of `tree` that can run: all but those under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def lazy_names(init: Path) -> dict[str, str] | None:
    """A lazy package's names and their modules, from the ``__init__.pyi`` beside `init`."""
    stub = init.with_suffix(".pyi")
    if not stub.exists() or "_lazy" not in init.read_text(encoding="utf-8"):
        return None
    names: dict[str, str] = {}
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            names.update({a.asname or a.name: node.module for a in node.names})
    return names


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Each module of `files` and the modules of `files` it imports at run time."""
    lazy = {
        name: table
        for name, path in files.items()
        if path.name == "__init__.py" and (table := lazy_names(path)) is not None
    }
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in run_time_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
                continue
            target = _absolute(name, is_package, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in files:
                    edges.add(sub)
                elif target in lazy and alias.name in lazy[target]:
                    edges.add(lazy[target][alias.name])
                else:
                    edges.add(target)
        graph[name] = {e for e in edges if e in files and e != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (``[a, b, ..., a]``) through each group of modules that import each other.

    The groups are the strongly connected components of `graph` with more than one
    module (Tarjan's algorithm, without recursion); each is named by a shortest circle
    through its first module in sorted order.

    Examples:
        >>> circles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
        [['a', 'b', 'a']]
        >>> circles({"a": {"b"}, "b": set()})
        []
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(_shortest_circle(graph, group) for group in groups)


def _shortest_circle(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest path from ``group[0]`` back to itself inside `group` (breadth first)."""
    members = set(group)
    first = group[0]
    came_from: dict[str, str] = {}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(came_from[path[-1]])
                    return [first, *reversed(path[:-1]), first] if node != first else [first]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    return group  # not reached: a component of several modules has a circle
