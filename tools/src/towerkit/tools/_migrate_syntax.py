"""Syntax helpers of towerkit-migrate: report records, names of calls, where statements go."""

from __future__ import annotations

import os
from collections.abc import Sequence

import attrs
import libcst as cst


@attrs.frozen(kw_only=True)
class Note:
    """One line of the report: a change made, or an edit left to do by hand."""

    line: int
    text: str
    manual: bool = False


def _as_notes(notes: Sequence[Note]) -> tuple[Note, ...]:
    return tuple(notes)


@attrs.frozen(kw_only=True)
class Migrated:
    """A module's new source and its report."""

    source: str
    notes: tuple[Note, ...] = attrs.field(converter=_as_notes)
    keeps_tensorpack: bool = False

    @property
    def changed(self) -> bool:
        """Whether anything changed."""
        return any(not n.manual for n in self.notes)


def dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def alias_name(alias: cst.ImportAlias) -> str | None:
    """The name an import binds with ``as``, or None."""
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return None


def parse_expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


_ACTIONS = {"k": "keep", "b": "overwrite", "d": "overwrite"}


BASIC_CONFIG = (
    'logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")\n'
)


def configure_logging(body: list[cst.BaseStatement]) -> tuple[list[cst.BaseStatement], bool]:
    """Put a ``logging.basicConfig`` at INFO first in the ``__main__`` block, if any.

    tensorpack's logger printed its INFO lines; Python's prints warnings only.
    """
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.If) and is_main_test(stmt.test):
            code = cst.Module(body=[stmt]).code
            if "logging.basicConfig(" in code:
                return body, True
            inner = stmt.body
            if isinstance(inner, cst.IndentedBlock):
                line = cst.parse_statement(BASIC_CONFIG)
                block = inner.with_changes(body=[line, *inner.body])
                return [*body[:i], stmt.with_changes(body=block), *body[i + 1 :]], True
    return body, False


def is_main_test(test: cst.BaseExpression) -> bool:
    code = cst.Module(body=[]).code_for_node(test).replace("'", '"').replace(" ", "")
    return code in ('__name__=="__main__"', '"__main__"==__name__')


def is_tensorpack(module: str) -> bool:
    return module == "tensorpack" or module.startswith("tensorpack.")


def imports_tensorpack(stmt: cst.CSTNode) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if (
            isinstance(small, cst.ImportFrom)
            and small.module is not None
            and not small.relative
            and is_tensorpack(dotted(small.module) or "")
        ):
            return True
        if isinstance(small, cst.Import) and any(
            is_tensorpack(dotted(a.name) or "") for a in small.names
        ):
            return True
    return False


def call_name(node: cst.Call) -> str:
    """``a.b`` for ``a.b(...)``; ``f(...).m`` for a method of a call's result; else ``""``."""
    name = dotted(node.func)
    if name is not None:
        return name
    func = node.func
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
        return f"{call_name(func.value) or '...'}(...).{func.attr.value}"
    return ""


def logdir_of(call: cst.Call, stem: str) -> tuple[str, str | None, bool] | None:
    """``(logdir expression, logdir_action or None, needs os)`` of a logger directory call.

    ``logger.auto_set_dir(action=None, name=None)`` is ``train_log/<script stem>`` (or
    ``train_log/<script stem>:<name>``, as tensorpack names it on POSIX);
    ``logger.set_logger_dir(dirname, action=None)`` its `dirname`.
    None when the directory is not given.
    """
    module = cst.Module(body=[])
    name = dotted(call.func) or ""
    args = {a.keyword.value if a.keyword else str(i): a.value for i, a in enumerate(call.args)}
    auto = name.endswith("auto_set_dir")
    action_node = args.get("action") or args.get("0" if auto else "1")
    action = None
    if isinstance(action_node, cst.SimpleString):
        action = _ACTIONS.get(str(action_node.evaluated_value))
    if auto:
        sub = args.get("name") or args.get("1")
        if sub is None:
            return repr(os.path.join("train_log", stem)), action, False
        if isinstance(sub, cst.SimpleString) and isinstance(sub.evaluated_value, str):
            named = f"{stem}:{sub.evaluated_value}" if sub.evaluated_value else stem
            return repr(os.path.join("train_log", named)), action, False
        return (
            f"os.path.join('train_log', {stem + ':'!r} + {module.code_for_node(sub)})",
            action,
            True,
        )
    dirname = args.get("dirname") or args.get("0")
    if dirname is None:
        return None
    return module.code_for_node(dirname), action, False


def keywords_for_positions(
    order: Sequence[str | None], positional: int
) -> tuple[str | None, ...] | None:
    """The keyword each of the first `positional` arguments takes, None where it keeps its place.

    `order` is a row of TensorFlow's reorder table: the TensorFlow 1 name of each position,
    None for a position that is the same in TensorFlow 2 (always a leading run). Returns
    None when no argument needs a keyword.

    Examples:
        >>> keywords_for_positions([None, None, "name", "dimension"], 2) is None
        True
        >>> keywords_for_positions([None, None, "name", "dimension"], 4)
        (None, None, 'name', 'dimension')
        >>> keywords_for_positions(["predictions", "targets", "k"], 3)
        ('predictions', 'targets', 'k')
    """
    row = tuple(order[:positional])
    if positional < 2 or all(n is None for n in row):
        return None
    first = next(i for i, n in enumerate(row) if n is not None)
    if any(n is None for n in row[first:]):
        msg = f"reorder row {list(order)} has a fixed position after a renamed one"
        raise ValueError(msg)
    return row


def _is_import(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def after_imports(body: Sequence[cst.CSTNode]) -> int:
    """The index after the module's leading docstring and imports (top-level statements)."""
    at = 0
    for i, stmt in enumerate(body):
        if _is_import(stmt):
            at = i + 1
        elif (
            i == 0
            and isinstance(stmt, cst.SimpleStatementLine)
            and isinstance(stmt.body[0], cst.Expr)
        ):
            at = 1
        elif not isinstance(stmt, (cst.If, cst.Try)):
            break
    return at
