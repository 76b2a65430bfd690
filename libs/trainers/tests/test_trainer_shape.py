"""The trainer's shape, checked on the lib's sources: its parts reached through what they offer."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import towerkit.trainers

LIB = Path(towerkit.trainers.__file__).resolve().parent
"""The trainers lib's package folder."""

TRAINER_NAMES = ("trainer", "self._trainer")
"""How the lib's modules name a trainer they hold but are not (callbacks, states, launchers)."""


def sources() -> dict[str, str]:
    """Each module of the lib (path below the package) and its text."""
    return {p.relative_to(LIB).as_posix(): p.read_text(encoding="utf-8") for p in LIB.rglob("*.py")}


def private_calls_on_trainers(source: str) -> list[tuple[int, str]]:
    """The calls of a private method of a trainer held under one of `TRAINER_NAMES`.

    Examples:
        >>> private_calls_on_trainers("trainer._train(b)\\nself._trainer._reset()\\nself._go()\\n")
        [(1, 'trainer._train'), (2, 'self._trainer._reset')]
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        held = ast.unparse(node.func.value)
        if name.startswith("_") and not name.startswith("__") and held in TRAINER_NAMES:
            found.append((node.lineno, f"{held}.{name}"))
    return sorted(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def declared_privates(cls: ast.ClassDef) -> set[str]:
    r"""The private fields a class declares: annotated or assigned in its body (a
    ``TYPE_CHECKING`` block's included) or on ``self`` in its ``__init__``.

    Examples:
        >>> src = "class A:\n    _a: int\n    _b = 1\n    def __init__(self):\n        self._c, self.d = 1, 2\n"
        >>> sorted(declared_privates(ast.parse(src).body[0]))
        ['_a', '_b', '_c']
    """
    found = set()
    body = [n for n in cls.body if not isinstance(n, ast.If)]
    body += [sub for n in cls.body if isinstance(n, ast.If) for sub in n.body]
    for node in body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {t.id for t in targets if isinstance(t, ast.Name) and _private(t.id)}
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign):
                    targets = sub.targets
                elif isinstance(sub, ast.AnnAssign):
                    targets = [sub.target]
                else:
                    continue
                for target in targets:
                    for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if (
                            isinstance(one, ast.Attribute)
                            and isinstance(one.value, ast.Name)
                            and one.value.id == "self"
                            and _private(one.attr)
                        ):
                            found.add(one.attr)
    return found


def lib_classes() -> dict[type, tuple[str, set[str]]]:
    """Each class the lib defines at module level: where, and the private fields it declares."""
    classes = {}
    for path, text in sources().items():
        name = "towerkit.trainers." + path.removesuffix(".py").replace("/", ".")
        module = importlib.import_module(name.removesuffix(".__init__"))
        for node in ast.parse(text).body:
            cls = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                classes[cls] = (f"{path}:{node.name}", declared_privates(node))
    return classes


def declared_twice(classes: dict[type, tuple[str, set[str]]]) -> list[str]:
    """Each private field declared by two classes of one class's bases (itself included)."""
    found = set()
    for cls in classes:
        first: dict[str, str] = {}
        for base in cls.__mro__:
            if base not in classes:
                continue
            where, names = classes[base]
            for name in names:
                if first.setdefault(name, where) != where:
                    found.add(f"{name}: {first[name]} and {where}")
    return sorted(found)


class TestShape:
    """What the parts of the trainer leave to each other."""

    def test_scan_sees_the_lib(self):
        """The scan reads the trainer's modules (a moved tree would make it vacuous)."""
        names = set(sources())
        assert {
            "_base.py",
            "_run_dir.py",
            "_stop.py",
            "_launch.py",
            "parallel/_elastic.py",
        } <= names

    def test_no_attr_defined_ignores(self):
        """No ``type: ignore[attr-defined]``: what a class reads, it declares or is given."""
        marker = "type: ignore[attr-defined]"
        found = [
            f"{path}:{i}"
            for path, text in sources().items()
            for i, line in enumerate(text.splitlines(), 1)
            if marker in line
        ]
        assert found == []

    def test_no_private_calls_on_a_trainer(self):
        """No module calls a trainer's private method: the launcher calls ``train`` and the
        run directory part; the elastic state is given the trainer's methods it needs."""
        found = [
            f"{path}:{line}: {call}"
            for path, text in sources().items()
            for line, call in private_calls_on_trainers(text)
        ]
        assert found == []

    def test_no_private_field_declared_twice(self):
        """A private field is declared in one class of a trainer's (or any lib class's) bases:
        the parts and layers read what the first layer declares, none re-declares it."""
        classes = lib_classes()
        assert any(c.__name__ == "Trainer" for c in classes)  # the scan sees the trainer
        assert declared_twice(classes) == []

    def test_the_scan_finds_a_field_declared_twice(self):
        """The check fails on a mixin re-declaring its host's field (it is not vacuous)."""
        src = (
            "class Mixin:\n    _phase: str\n"
            "class Host(Mixin):\n    def __init__(self):\n        self._phase = 'new'\n"
        )
        namespace: dict[str, object] = {}
        exec(compile(src, "<src>", "exec"), namespace)
        tree = ast.parse(src)
        classes = {
            namespace[node.name]: (node.name, declared_privates(node))
            for node in tree.body
            if isinstance(node, ast.ClassDef)
        }
        assert declared_twice(classes) == ["_phase: Host and Mixin"]

    def test_modules_under_600_lines(self):
        """Every module of the lib stays under 600 lines; the trainer's first module well under."""
        long = {path: n for path, text in sources().items() if (n := len(text.splitlines())) >= 600}
        assert long == {}
        assert len(sources()["_base.py"].splitlines()) < 450
