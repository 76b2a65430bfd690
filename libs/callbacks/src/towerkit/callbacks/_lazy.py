"""A package's public names, declared once in its ``__init__.pyi`` and imported on first use.

The stub holds one line per defining module, ``from towerkit.callbacks._x import A as A,
B as B``: type checkers and IDEs read it in place of ``__init__.py`` and see each name
with its type. At run time `LazyNames` reads the same lines, gives the package its
``__all__``, and imports a name's module the first time the name is looked up (PEP 562
``__getattr__``), so importing the package imports none of its modules: a program that
uses only the TensorFlow-free core never loads TensorFlow.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path


def read_stub(source: str, filename: str = "<stub>") -> dict[str, str]:
    r"""``{public name: module that defines it}``, in the stub's order.

    The stub may hold a docstring and ``from <module> import <name> as <name>``
    statements, nothing else: each name is declared once, where its module is named.

    Raises:
        ImportError: the stub does not parse, holds another statement, a relative
            import, an alias that renames, or a name twice.

    Examples:
        >>> read_stub("from pkg._a import A as A, f as f\nfrom pkg._b import B as B\n")
        {'A': 'pkg._a', 'f': 'pkg._a', 'B': 'pkg._b'}
    """
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as err:
        msg = f"the public names in {filename!r} do not parse: {err}"
        raise ImportError(msg) from None
    homes: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        where = f"{filename}, line {node.lineno}"
        if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
            msg = f"{where}: expected 'from <module> import <name> as <name>', got {ast.unparse(node)!r}"
            raise ImportError(msg)
        for alias in node.names:
            if alias.asname != alias.name:
                msg = f"{where}: {alias.name!r} must be imported as itself ('{alias.name} as {alias.name}') to be public"
                raise ImportError(msg)
            if alias.name in homes:
                msg = f"{where}: {alias.name!r} is declared twice (also from {homes[alias.name]})"
                raise ImportError(msg)
            homes[alias.name] = node.module
    return homes


class LazyNames:
    """The public names of `package`, read from the ``.pyi`` beside its ``__init__.py``.

    Args:
        package: The package's ``__name__``.
        init_file: The package's ``__file__``.

    Raises:
        ImportError: the stub is missing or malformed (see `read_stub`).
    """

    def __init__(self, package: str, init_file: str) -> None:
        stub = Path(init_file).with_suffix(".pyi")
        try:
            source = stub.read_text(encoding="utf-8")
        except OSError as err:
            msg = f"{package} declares its public names in {stub}, which cannot be read: {err}"
            raise ImportError(msg) from None
        self.package = package
        self.homes = read_stub(source, str(stub))

    @property
    def names(self) -> list[str]:
        """The public names, for ``__all__``."""
        return list(self.homes)

    def load(self, name: str) -> object:
        """The object `name` names, imported from its module and kept on the package.

        Raises:
            AttributeError: `name` is not a public name of the package.
        """
        home = self.homes.get(name)
        if home is None:
            msg = f"module {self.package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[self.package], name, value)
        return value

    def listing(self) -> list[str]:
        """What ``dir(package)`` shows: what it holds so far and every public name."""
        return sorted({*vars(sys.modules[self.package]), *self.homes})
