"""Programs of tensorpack 0.8-0.10: the old ``ModelDesc`` method names, brought to tensorpack 0.11's.

tensorpack 0.11 itself does not run them: its ``ModelDesc`` calls ``inputs()``,
``build_graph(*tensors)`` (which returns the cost) and ``optimizer()``, and its ``training``
is a read-only property. This pass runs before the migration proper and rewrites, in a
class defining ``_get_inputs``, ``_build_graph`` or ``_get_optimizer``:

- ``_get_inputs(self)`` -> ``inputs(self)``; ``_get_optimizer(self)`` -> ``optimizer(self)``;
- ``_build_graph(self, inputs)`` -> ``build_graph(self, *inputs)`` (the inputs came as one
  list), with ``return self.cost`` added when it only assigned ``self.cost``;
- ``self.training = <the tower context's is_training>`` removed (the property says it), any
  other assigned ``self.training`` renamed ``self.training_mode``;

and anywhere, ``.get_inputs_desc()`` -> ``.get_input_signature()``.
"""

from __future__ import annotations

import difflib
from typing import Any

import attrs
import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from towerkit.tools._migrate_syntax import Note, dotted

OLD_METHODS = {
    "_get_inputs": "inputs",
    "_build_graph": "build_graph",
    "_get_optimizer": "optimizer",
}
"""tensorpack 0.8-0.10's ModelDesc methods and their tensorpack 0.11 names."""

TRAINING_RENAMED = "training_mode"
"""What an assigned ``self.training`` becomes (``training`` is a read-only property)."""


@attrs.frozen(kw_only=True)
class Modernized:
    """A module brought to tensorpack 0.11's ModelDesc, its notes and where its lines come from.

    Attributes:
        source: the new text.
        notes: the changes, at the lines of the original text.
        origin: for each line of the new text (1-based, at index line - 1), the line of the
            original text it comes from (an added line: the one before it). Empty when
            nothing changed.
    """

    source: str
    notes: tuple[Note, ...]
    origin: tuple[int, ...] = ()

    def original_line(self, line: int) -> int:
        """The line of the original text that `line` of the new text comes from.

        Examples:
            >>> Modernized(source="", notes=(), origin=(1, 2, 2, 3)).original_line(4)
            3
            >>> Modernized(source="", notes=()).original_line(9)
            9
        """
        if not self.origin or not 1 <= line <= len(self.origin):
            return line
        return self.origin[line - 1]


def line_origins(before: str, after: str) -> tuple[int, ...]:
    r"""For each line of `after`, the line of `before` it comes from (1-based).

    An inserted line maps to the line before it; lines of `before` that were removed
    have no line of `after`.

    Examples:
        >>> line_origins("a\nb\nc\n", "a\nc\nx\n")
        (1, 3, 3)
    """
    old, new = before.splitlines(), after.splitlines()
    origin: list[int] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            origin += range(i1 + 1, i2 + 1)
        elif tag == "replace":
            origin += [min(i1 + 1 + k, i2) for k in range(j2 - j1)]
        elif tag == "insert":
            origin += [max(i1, 1)] * (j2 - j1)
    return tuple(origin)


def _is_context_training(node: cst.BaseExpression) -> bool:
    """``get_current_tower_context().is_training`` (or ``<anything>.is_training``)."""
    return isinstance(node, cst.Attribute) and node.attr.value == "is_training"


def _returns_value(func: cst.FunctionDef) -> bool:
    found = False

    class Finder(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is func  # nested functions' returns are theirs

        def visit_Return(self, node: cst.Return) -> None:
            nonlocal found
            found = found or node.value is not None

    func.visit(Finder())
    return found


def _assigns_self_cost(func: cst.FunctionDef) -> bool:
    code = cst.Module(body=[]).code_for_node(func.body)
    return "self.cost =" in code or "self.cost=" in code


class _OldModelDesc(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.notes: list[Note] = []
        self.classes: list[bool] = []  # per enclosing class: it is an old ModelDesc
        self.added_return = 0

    def _note(self, node: cst.CSTNode, text: str) -> None:
        line = self.get_metadata(PositionProvider, node).start.line
        self.notes.append(Note(line=line, text=text))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        methods = {s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)}
        self.classes.append(bool(methods & set(OLD_METHODS)))

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: Any) -> Any:
        self.classes.pop()
        return updated_node

    def _in_old(self) -> bool:
        return bool(self.classes) and self.classes[-1]

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: Any) -> Any:
        old = original_node.name.value
        if not self._in_old() or old not in OLD_METHODS:
            return updated_node
        new = OLD_METHODS[old]
        updated_node = updated_node.with_changes(name=cst.Name(new))
        text = f"tensorpack 0.8-0.10's ModelDesc.{old} -> {new}"
        params = updated_node.params
        if (
            old == "_build_graph"
            and len(params.params) == 2
            and params.star_arg is cst.MaybeSentinel.DEFAULT
        ):
            listed = params.params[1]
            updated_node = updated_node.with_changes(
                params=params.with_changes(
                    params=[params.params[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)],
                    star_arg=listed.with_changes(star="*", comma=cst.MaybeSentinel.DEFAULT),
                )
            )
            text += f" (its inputs come as *{listed.name.value})"
            if not _returns_value(original_node) and _assigns_self_cost(original_node):
                body = updated_node.body
                ret = cst.parse_statement("return self.cost\n")
                updated_node = updated_node.with_changes(
                    body=body.with_changes(body=[*body.body, ret])
                )
                text += "; return self.cost added (tensorpack 0.11's build_graph returns the cost)"
                self.added_return += 1
        self._note(original_node, text)
        return updated_node

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: Any
    ) -> Any:
        if len(original_node.body) != 1 or not isinstance(original_node.body[0], cst.Assign):
            return updated_node
        assign = original_node.body[0]
        targets = [dotted(t.target) for t in assign.targets]
        if targets == ["self.training"] and self._in_old() and _is_context_training(assign.value):
            self._note(
                original_node, "self.training = ...is_training removed: ModelDesc.training says it"
            )
            return cst.RemovalSentinel.REMOVE
        return updated_node


def _assigned_training(module: cst.Module) -> bool:
    """Whether a class with old methods assigns ``self.training`` other than from the context."""
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            nonlocal found
            if any(dotted(t.target) == "self.training" for t in node.targets) and not (
                _is_context_training(node.value)
            ):
                found = True

    module.visit(Finder())
    return found


class _Renames(cst.CSTTransformer):
    """``.get_inputs_desc`` and (where assigned) ``self.training`` renamed everywhere."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, training: bool) -> None:
        super().__init__()
        self.training = training
        self.notes: list[Note] = []

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: Any) -> Any:
        attr = original_node.attr.value
        if attr == "get_inputs_desc":
            line = self.get_metadata(PositionProvider, original_node).start.line
            self.notes.append(Note(line=line, text="get_inputs_desc() -> get_input_signature()"))
            return updated_node.with_changes(attr=cst.Name("get_input_signature"))
        if self.training and attr == "training" and dotted(original_node) == "self.training":
            line = self.get_metadata(PositionProvider, original_node).start.line
            self.notes.append(
                Note(
                    line=line,
                    text=f"self.training -> self.{TRAINING_RENAMED} (ModelDesc.training is a "
                    "read-only property)",
                )
            )
            return updated_node.with_changes(attr=cst.Name(TRAINING_RENAMED))
        return updated_node


def modernize(source: str) -> Modernized:
    r"""Bring a module written for tensorpack 0.8-0.10 to tensorpack 0.11's ModelDesc.

    Raises:
        libcst.ParserSyntaxError: the source is not valid Python.

    Examples:
        >>> done = modernize("class M(ModelDesc):\n    def _get_optimizer(self):\n        return 1\n")
        >>> done.source.splitlines()[1]
        '    def optimizer(self):'
    """
    module = cst.parse_module(source)
    if not any(m in source for m in (*OLD_METHODS, "get_inputs_desc")):
        return Modernized(source=source, notes=())
    renames = _Renames(_assigned_training(module) and "_build_graph" in source)
    wrapper = MetadataWrapper(module)
    renamed = wrapper.visit(renames)
    # Same lines: the renames change no line count, so positions still match the original.
    old = _OldModelDesc()
    new = MetadataWrapper(renamed).visit(old)
    text = new.code
    notes = sorted([*renames.notes, *old.notes], key=lambda n: n.line)
    origin = line_origins(source, text) if text != source else ()
    return Modernized(source=text, notes=tuple(notes), origin=origin)
