"""The lib's version and public names."""

import ast
import importlib
import importlib.metadata
from pathlib import Path

import pytest

import towerkit.callbacks as lib


class TestVersion:
    """`__version__` matches the installed distribution."""

    def test_matches_metadata(self):
        """The module's version is the distribution's version."""
        assert lib.__version__ == importlib.metadata.version("towerkit-callbacks")


class TestAll:
    """Every name in `__all__` is importable from the lib."""

    def test_in_all(self):
        """Each `__all__` entry resolves to an attribute."""
        mod = importlib.import_module("towerkit.callbacks")
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert missing == []
        assert len(set(mod.__all__)) == len(mod.__all__)


def type_checking_imports() -> dict[str, str]:
    """``{name: module}`` for the imports under ``if TYPE_CHECKING:`` in the package's ``__init__``."""
    mod = importlib.import_module("towerkit.callbacks")
    tree = ast.parse(Path(mod.__file__).read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.unparse(stmt)
                found.update({a.name: stmt.module.rsplit(".", 1)[1] for a in stmt.names})
    return found


class TestLazyShells:
    """The shells that need TensorFlow are looked up lazily, from one explicit table."""

    def test_table_matches_type_checking_imports(self):
        """``_SHELLS`` and the ``TYPE_CHECKING`` imports name the same names and modules."""
        mod = importlib.import_module("towerkit.callbacks")
        assert type_checking_imports() == mod._SHELLS
        assert len(mod._SHELLS) > 50

    def test_all_is_core_plus_shells(self):
        """``__all__`` is the eagerly imported core plus every shell, nothing else."""
        mod = importlib.import_module("towerkit.callbacks")
        tree = ast.parse(Path(mod.__file__).read_text(encoding="utf-8"))
        eager = {
            a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names
        }
        eager -= {"TYPE_CHECKING"}
        assert set(mod.__all__) == eager | set(mod._SHELLS)
        assert not eager & set(mod._SHELLS)

    def test_shell_resolves_to_its_module(self):
        """Each shell is the object its module defines, and is cached on the package."""
        mod = importlib.import_module("towerkit.callbacks")
        for name, module in mod._SHELLS.items():
            value = getattr(mod, name)
            assert value is getattr(importlib.import_module(f"towerkit.callbacks.{module}"), name)
            assert vars(mod)[name] is value
        assert set(mod.__all__) <= set(dir(mod))

    def test_unknown_name(self):
        """An unknown attribute raises AttributeError naming the module and the name."""
        mod = importlib.import_module("towerkit.callbacks")
        with pytest.raises(
            AttributeError, match=r"module 'towerkit.callbacks' has no attribute 'Nope'"
        ):
            mod.Nope  # noqa: B018
