"""Public names read from a package's ``__init__.pyi`` and imported on first use (``_lazy``)."""

import subprocess
import sys
import textwrap

import pytest

from towerkit.callbacks._lazy import LazyNames, read_stub


class TestReadStub:
    """The stub is a list of ``from <module> import <name> as <name>``, and nothing else."""

    def test_names_and_modules_in_order(self):
        """Each name maps to the module it is imported from; a docstring is allowed."""
        src = '"""Doc."""\nfrom p._b import Z as Z, a as a\nfrom p._a import (\n    M as M,\n)\n'
        assert read_stub(src) == {"Z": "p._b", "a": "p._b", "M": "p._a"}
        assert list(read_stub(src)) == ["Z", "a", "M"]

    @pytest.mark.parametrize(
        ("src", "expected"),
        [
            ("from p._a import A\n", r"s\.pyi, line 1: 'A' must be imported as itself"),
            ("from p._a import A as B\n", r"'A' must be imported as itself \('A as A'\)"),
            (
                "from ._a import A as A\n",
                r"line 1: expected 'from <module> import <name> as <name>'",
            ),
            ("import os\n", r"got 'import os'"),
            ("x = 1\n", r"got 'x = 1'"),
            (
                "from p._a import A as A\nfrom p._b import A as A\n",
                r"line 2: 'A' is declared twice \(also from p\._a\)",
            ),
            ("from p import (\n", r"the public names in 's\.pyi' do not parse"),
        ],
    )
    def test_refuses_anything_else(self, src, expected):
        """Another statement, a renaming or relative import, a name twice: each named with its line."""
        with pytest.raises(ImportError, match=expected):
            read_stub(src, "s.pyi")

    def test_missing_stub(self, tmp_path):
        """A package without its stub fails to import, naming the stub."""
        init = tmp_path / "pkg" / "__init__.py"
        with pytest.raises(ImportError, match=r"pkg declares its public names in .*__init__\.pyi"):
            LazyNames("pkg", str(init))


PACKAGE_INIT = """\
import towerkit.callbacks._lazy as _lazy

_PUBLIC = _lazy.LazyNames(__name__, __file__)
__all__ = _PUBLIC.names
__getattr__ = _PUBLIC.load
__dir__ = _PUBLIC.listing
"""

USE = textwrap.dedent(
    """
    import sys
    import pkg
    print(pkg.__all__, "pkg._heavy" in sys.modules, "pkg._light" in sys.modules)
    print(pkg.light(), "pkg._heavy" in sys.modules, "pkg._light" in sys.modules)
    print(pkg.Heavy.__module__, "pkg._heavy" in sys.modules, "Heavy" in vars(pkg))
    print([n for n in dir(pkg) if not n.startswith("_")])
    try:
        pkg.nothing
    except AttributeError as err:
        print(err)
    """
)


@pytest.mark.procs
def test_a_package_imports_each_module_on_first_use(tmp_path):
    """In a fresh interpreter, importing the package imports none of its modules."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(PACKAGE_INIT)
    (pkg / "__init__.pyi").write_text(
        "from pkg._light import light as light\nfrom pkg._heavy import Heavy as Heavy\n"
    )
    (pkg / "_light.py").write_text("def light():\n    return 'light'\n")
    (pkg / "_heavy.py").write_text("class Heavy:\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-c", USE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{tmp_path}:{':'.join(sys.path)}"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['light', 'Heavy'] False False",
        "light False True",
        "pkg._heavy True True",
        "['Heavy', 'light']",
        "module 'pkg' has no attribute 'nothing'",
    ]
