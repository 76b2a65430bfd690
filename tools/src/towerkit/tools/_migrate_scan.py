"""The first pass of towerkit-migrate over a module.

What the rewrite needs to know first: the names the module uses and binds, its logger's
directory calls, its configs and trainers.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import PositionProvider

from towerkit.tools._migrate_names import DATAFLOW_NAMES, GONE, LIB_OF, UTILS_NAMES, home_of
from towerkit.tools._migrate_syntax import (
    alias_name,
    call_name,
    dotted,
    is_main_test,
    is_tensorpack,
    logdir_of,
)

CONFIG_CALLS = ("TrainConfig", "AutoResumeTrainConfig")
LOGDIR_CALLS = ("auto_set_dir", "set_logger_dir")
INFO_CALLS = ("describe_trainable_vars",)
"""Functions that print in tensorpack and log at INFO in towerkit (shown once logging is set)."""
STAR_CANDIDATES = (
    frozenset(LIB_OF) | DATAFLOW_NAMES | UTILS_NAMES | {"QueueInput", "InputDesc", *GONE}
)


V1_ALIASES = frozenset(
    [
        ("tensorpack", "tfv1"),
        ("tensorpack.compat", "tfv1"),
        ("tensorpack.tfutils.compat", "tfv1"),
        ("tensorflow.compat", "v1"),
    ]
)
"""``from <module> import <name> as tf``: tf is TensorFlow 1's API (``tf.compat.v1``)."""


class Scan(cst.CSTVisitor):
    """What the rewrite needs to know first: names used and bound, logdir calls, aliases."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.not_refs: dict[str, int] = {}
        self.bound: set[str] = set()
        self.tp_aliases: set[str] = set()
        self.tf_alias_is_v2 = False
        self.tf_alias_is_v1 = False  # tf is tf.compat.v1 (tensorpack's tfv1 as tf)
        self.logger_uses = 0
        self.logdir_calls: list[tuple[str, int]] = []
        self.scopes: list[str] = []
        self.config_scopes: list[str] = []
        self.logdir: tuple[str, str | None, str] | None = None  # expr, action, scope
        self.tp_left = 0
        self.stem = ""
        self.unresolved: set[str] = set()
        self.other_star = False
        self.main_block = False
        self.imports_logging = False
        # calls a towerkit function that logs at INFO what tensorpack printed
        self.logs_info = False
        self.enables_tf_layers = False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.not_refs[node.attr.value] = self.not_refs.get(node.attr.value, 0) + 1
        name = dotted(node)
        if name is None:
            return
        head, _, rest = name.partition(".")
        if head in self.tp_aliases and rest.count(".") == 0:
            home = home_of(rest)
            if home is None or not home.startswith("towerkit."):
                self.tp_left += 1

    def visit_Name(self, node: cst.Name) -> None:
        self.counts[node.value] = self.counts.get(node.value, 0) + 1
        if node.value == "logger":
            self.logger_uses += 1

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.not_refs[node.keyword.value] = self.not_refs.get(node.keyword.value, 0) + 1

    @property
    def used(self) -> set[str]:
        """Names read as names (not attributes or keywords), for a star import's names."""
        return {n for n, c in self.counts.items() if c > self.not_refs.get(n, 0)}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.bound.add(node.name.value)
        self.scopes.append(node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.bound.add(node.name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name):
            self.bound.add(node.target.value)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = dotted(alias.name) or ""
            bound = alias_name(alias) or name.split(".")[0]
            if name == "tensorpack":
                self.tp_aliases.add(bound)
            if name == "logging" and bound == "logging":
                self.imports_logging = True
            if name == "tensorflow" and bound == "tf":
                self.tf_alias_is_v2 = True
            if name == "tensorflow.compat.v1" and bound == "tf":
                self.tf_alias_is_v1 = True

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted(node.module) if node.module is not None else None
        if isinstance(node.names, cst.ImportStar):
            self.other_star |= not is_tensorpack(module or "")
            return
        for alias in node.names:  # a name imported by name is not a star import's
            if isinstance(alias.name, cst.Name):
                self.bound.add(alias_name(alias) or alias.name.value)
                if alias_name(alias) == "tf" and (module, alias.name.value) in V1_ALIASES:
                    self.tf_alias_is_v1 = True

    def visit_If(self, node: cst.If) -> None:
        if is_main_test(node.test):
            self.main_block = True

    def visit_Call(self, node: cst.Call) -> None:
        name = call_name(node)
        scope = ".".join(self.scopes)
        if name in (f"logger.{c}" for c in LOGDIR_CALLS):
            self.logdir_calls.append((scope, self.get_metadata(PositionProvider, node).start.line))
            self.logger_uses -= 1
            found = logdir_of(node, self.stem)
            if found is not None:
                self.logdir = (found[0], found[1], scope)
        if name.split(".")[-1] == "enable_tf_layers":
            self.enables_tf_layers = True
        if name.split(".")[-1] in INFO_CALLS:
            self.logs_info = True
        if name.split(".")[-1] in CONFIG_CALLS or name.endswith(".train_with_defaults"):
            self.config_scopes.append(scope)
