"""No circle of run-time imports in any lib, the conformance suite or the tools."""

from __future__ import annotations

import graphlib
import itertools
import textwrap
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from import_graph import circles, import_graph, module_files, source_roots


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    """The import graph of a package tree written from `files` (path: source)."""
    for name, text in files.items():
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return import_graph(module_files([tmp_path / "src"]))


class TestImportGraph:
    """`import_graph` reads the imports that run, in every form."""

    def test_every_form_counts(self, tmp_path):
        """Module level, in a function, relative, ``import a.b`` and ``from pkg import mod``."""
        graph = _tree(
            tmp_path,
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from pkg.b import x\n",
                "pkg/b.py": "def f():\n    from . import c\nx = 1\n",
                "pkg/c.py": "import pkg.d\n",
                "pkg/d.py": "from .a import y\n",
            },
        )
        assert graph == {
            "pkg": set(),
            "pkg.a": {"pkg.b"},
            "pkg.b": {"pkg.c"},
            "pkg.c": {"pkg.d"},
            "pkg.d": {"pkg.a"},
        }
        assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.a"]]

    def test_type_checking_left_out(self, tmp_path):
        """Imports under ``if TYPE_CHECKING:`` never run; its ``else`` does."""
        graph = _tree(
            tmp_path,
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from pkg import b\n",
                "pkg/b.py": """\
                    import typing
                    from typing import TYPE_CHECKING
                    if TYPE_CHECKING:
                        from pkg.a import A
                    if typing.TYPE_CHECKING:
                        from pkg import a
                    else:
                        from pkg import c
                """,
                "pkg/c.py": "",
            },
        )
        assert graph["pkg.b"] == {"pkg.c"}
        assert circles(graph) == []

    def test_package_names_and_lazy_stubs(self, tmp_path):
        """``from pkg import Name`` is an edge to ``pkg``, or to the stub's module when lazy."""
        graph = _tree(
            tmp_path,
            {
                "eager/__init__.py": "from eager._a import A\n",
                "eager/_a.py": "A = 1\n",
                "eager/_b.py": "from eager import A\n",
                "lazy/__init__.py": "from lazy import _lazy\n",
                "lazy/__init__.pyi": "from lazy._a import A as A\n",
                "lazy/_lazy.py": "",
                "lazy/_a.py": "A = 1\n",
                "lazy/_b.py": "from lazy import A\n",
            },
        )
        assert graph["eager._b"] == {"eager"}
        assert graph["lazy._b"] == {"lazy._a"}

    def test_circle_named(self, tmp_path):
        """A circle is reported as the modules along it, first and last the same."""
        graph = _tree(
            tmp_path,
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from pkg.b import x\n",
                "pkg/b.py": "x = 1\ndef f():\n    from pkg.a import g\n",
            },
        )
        assert circles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]


_NAMES = st.sampled_from("abcdefg")


@given(st.dictionaries(_NAMES, st.sets(_NAMES, max_size=4), max_size=7))
def test_circles_exactly_when_cyclic(edges):
    """`circles` finds none exactly when the graph (self-imports aside) sorts topologically,
    and each circle it names follows the graph's edges back to where it began."""
    graph = {
        n: {e for e in edges.get(n, set()) if e != n} for n in set(edges).union(*edges.values())
    }
    found = circles(graph)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
        acyclic = True
    except graphlib.CycleError:
        acyclic = False
    assert (found == []) == acyclic
    for circle in found:
        assert circle[0] == circle[-1]
        assert len(circle) >= 3
        assert len(set(circle[:-1])) == len(circle) - 1
        assert all(b in graph[a] for a, b in itertools.pairwise(circle))
    firsts = [c[0] for c in found]
    assert len(firsts) == len(set(firsts))  # one per group


class TestNoCircles:
    """The project's own sources."""

    def test_scan_sees_the_tree(self):
        """Every lib, the conformance suite and the tools are read (the scan is not vacuous)."""
        graph = import_graph(module_files(source_roots()))
        libs = {name.split(".")[1] for name in graph if name.count(".") >= 1}
        expected = {"sessinit", "towers", "callbacks", "trainers", "export", "layers"}
        assert expected | {"conformance", "tools"} <= libs
        assert "towerkit.trainers.parallel._horovod" in graph
        assert "towerkit.trainers._config" in graph["towerkit.trainers._launch"]

    def test_none_at_run_time(self):
        """No modules of the libs, conformance or tools import each other in a circle."""
        found = circles(import_graph(module_files(source_roots())))
        lines = [" -> ".join(c) for c in found]
        assert lines == [], "import circles at run time:\n" + "\n".join(lines)
