"""The libs reach each other only through public names: no import of another lib's private module."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
"""The repository root."""

SCANNED = ("libs", "conformance", "tools", "examples", "benchmarks", "tests")
"""The folders whose Python files are scanned (sources, tests, scripts)."""


def owner(path: Path) -> str | None:
    """The part of towerkit a file belongs to (``"callbacks"``, ``"tools"``, ...), or None."""
    parts = path.relative_to(ROOT).parts
    if parts[0] == "libs":
        return parts[1]
    if parts[0] in ("conformance", "tools"):
        return parts[0]
    return None


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every absolute module path an import names, with its line: ``import a.b``, ``from a import b``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def foreign_private(source: str, own: str | None) -> list[tuple[int, str]]:
    """The imports in `source` of a private module of a lib other than `own`.

    A module is private when any part of its path below the lib starts with one
    underscore: ``towerkit.<lib>._x`` and ``towerkit.<lib>.<package>._x`` alike.
    """
    bad = []
    for line, module in imported_modules(ast.parse(source)):
        parts = module.split(".")
        private = any(p.startswith("_") and not p.startswith("__") for p in parts[2:])
        repeated = bool(bad) and bad[-1][0] == line  # one report per import statement
        if parts[0] == "towerkit" and private and parts[1] != own and not repeated:
            bad.append((line, module))
    return bad


def private_imports(path: Path) -> list[str]:
    """`foreign_private` for a file of the tree, as ``file:line: module`` lines."""
    found = foreign_private(path.read_text(encoding="utf-8"), owner(path))
    return [f"{path.relative_to(ROOT)}:{line}: {module}" for line, module in found]


def python_files() -> list[Path]:
    """The scanned files."""
    return sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.procs
class TestPrivateImports:
    """No file imports a private module of a lib it is not part of."""

    def test_scan_sees_the_tree(self):
        """The scan reads the sources of every lib (a moved tree would make it vacuous)."""
        owners = {owner(p) for p in python_files()}
        assert {"sessinit", "towers", "callbacks", "trainers", "export", "layers"} <= owners
        assert {"conformance", "tools", None} <= owners

    def test_detects_every_import_form(self):
        """``from a._x import``, ``import a._x`` and ``from a import _x`` are all reported."""
        source = (
            "import os\n"
            "from towerkit.trainers._base import Trainer\n"
            "import towerkit.towers._scope\n"
            "from towerkit.trainers import _tfutils\n"
            "from towerkit.callbacks._loop import loop_events\n"
            "from towerkit.trainers import Trainer, __version__\n"
            "from towerkit.trainers.inputs._feed import QueueFeeder\n"
            "from towerkit.trainers.parallel import _horovod\n"
        )
        assert foreign_private(source, "callbacks") == [
            (2, "towerkit.trainers._base"),
            (3, "towerkit.towers._scope"),
            (4, "towerkit.trainers._tfutils"),
            (7, "towerkit.trainers.inputs._feed"),
            (8, "towerkit.trainers.parallel._horovod"),
        ]

    def test_none_across_libs(self):
        """Every ``towerkit.<lib>._x`` import sits inside ``<lib>`` itself."""
        bad = [hit for path in python_files() for hit in private_imports(path)]
        assert bad == [], "imports of another lib's private module:\n" + "\n".join(bad)

    def test_own_private_imports_allowed(self):
        """A lib's own private modules are its business (the scan does not flag them)."""
        path = ROOT / "libs" / "callbacks" / "src" / "towerkit" / "callbacks" / "_timeline.py"
        modules = [m for _, m in imported_modules(ast.parse(path.read_text(encoding="utf-8")))]
        assert "towerkit.callbacks._loop" in modules
        assert private_imports(path) == []


LIBS = ("sessinit", "towers", "callbacks", "trainers", "export", "layers")

DOCUMENTED_ALIASES = {"trainers.StopTraining": "callbacks.StopTraining"}
"""Names the spec documents in a module that maps to another lib than their home: the
lib of the documented module re-exports the home's object (STYLE T5)."""


class TestOnePublicHome:
    """Each public object is exported by one lib only."""

    def test_no_name_in_two_libs(self):
        """No object is listed in the ``__all__`` of two libs, but the documented aliases."""
        homes: dict[int, list[str]] = {}
        for lib in LIBS:
            module = importlib.import_module(f"towerkit.{lib}")
            for name in module.__all__:
                if name != "__version__" and f"{lib}.{name}" not in DOCUMENTED_ALIASES:
                    homes.setdefault(id(getattr(module, name)), []).append(f"{lib}.{name}")
        # one lib may give an object two names (towerkit.layers' Deconv2D is Conv2DTranspose)
        shared = sorted(
            paths for paths in homes.values() if len({p.split(".")[0] for p in paths}) > 1
        )
        assert shared == []

    def test_documented_aliases_are_the_same_object(self):
        """``from towerkit.trainers import StopTraining`` gives the callbacks lib's class."""
        for alias, home in DOCUMENTED_ALIASES.items():
            lib, name = alias.split(".")
            home_lib, home_name = home.split(".")
            module = importlib.import_module(f"towerkit.{lib}")
            assert name in module.__all__
            home_obj = getattr(importlib.import_module(f"towerkit.{home_lib}"), home_name)
            assert getattr(module, name) is home_obj

    def test_helpers_left_trainers(self):
        """The trainers lib does not export its implementation helpers."""
        trainers = importlib.import_module("towerkit.trainers")
        gone = ("regex_matches", "first_multiplier", "check_multipliers")
        gone += ("least_loaded", "tower_variable_key", "num_batches")
        assert [n for n in gone if n in trainers.__all__ or hasattr(trainers, n)] == []

    def test_internal_helpers_not_public(self):
        """Each lib's implementation helpers stay in its private modules, out of its namespace."""
        gone = {
            "sessinit": "normalize_name target_name can_upcast can_reshape render_mismatches"
            " render_names sort_checkpoints parse_checkpoint_state",
            "towers": "cpu_devices_needed strip_port strip_tower_prefix join_scope scope_segments"
            " ArgScope merge_argscope backward_closure RULE_NAMES dedupe_violations"
            " normalize_tower_name reserved_scopes outputs_signature SUMMARY_TYPES"
            " check_summary_types check_summary_lists summary_tag",
            "callbacks": "HOOK_METHODS summary_due",
            "trainers": "rank_gpu horovod_launch_argv hierarchical_groups missing_devices"
            " replica_sources",
            "export": "InferenceGraph build_inference_graph freeze_session_graph optimize_graph_def"
            " STATEFUL_OPS check_input_names check_output_names close_names op_name signature_key"
            " reachable unused_inputs stateful_nodes",
            "layers": "tflayer_args rename_aliases keras_data_format tf_data_format shape2d shape4d"
            " split_scope_name attach_variables batch_flatten dropout_rate bilinear_filter",
        }
        public = {}
        for lib, names in gone.items():
            module = importlib.import_module(f"towerkit.{lib}")
            public[lib] = [n for n in names.split() if n in module.__all__ or hasattr(module, n)]
        assert public == {lib: [] for lib in gone}


@pytest.mark.procs
class TestLayersLib:
    """towerkit-layers stands on towers alone: no other towerkit lib, no Keras, no tensorpack."""

    FORBIDDEN = ("keras", "tf_keras", "tensorpack")

    def test_declared_dependencies(self):
        """Its pyproject names towerkit-towers as its only towerkit dependency."""
        import tomllib

        with open(ROOT / "libs" / "layers" / "pyproject.toml", "rb") as f:
            deps = tomllib.load(f)["project"]["dependencies"]
        towerkit = sorted(d.split(">")[0].split("=")[0] for d in deps if d.startswith("towerkit-"))
        assert towerkit == ["towerkit-towers"]
        assert not [d for d in deps if any(name in d for name in self.FORBIDDEN)]

    def test_imports(self):
        """Its sources import towerkit.towers and itself only, and nothing of Keras or tensorpack."""
        src = ROOT / "libs" / "layers" / "src"
        bad = []
        for path in sorted(src.rglob("*.py")):
            for line, module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
                parts = module.split(".")
                other_lib = (
                    parts[0] == "towerkit"
                    and len(parts) > 1
                    and parts[1] not in ("towers", "layers")
                )
                foreign = parts[0] in self.FORBIDDEN or "keras" in parts
                if other_lib or foreign:
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {module}")
        assert bad == []
