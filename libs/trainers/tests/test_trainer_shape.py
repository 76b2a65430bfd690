"""The trainer's shape, checked on the lib's sources: its parts reached through what they offer."""

from __future__ import annotations

import ast
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
