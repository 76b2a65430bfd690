"""What the tower-rule checker reports: the rules, violations, and its pure helpers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import attrs

from towerkit.towers._names import scope_segments

__all__ = [
    "RULE_NAMES",
    "Violation",
    "dedupe_violations",
    "format_violations",
    "normalize_tower_name",
    "outputs_signature",
    "reserved_scopes",
]

RULE_NAMES: dict[int, str] = {
    1: "may be called several times",
    2: "respects variable collections",
    3: "respects variable scope names",
    4: "respects variable reuse",
    5: "no 'tower' in scope or variable names",
}
"""The five rules of a tower function, by number."""

Severity = Literal["error", "warning"]

_TOWER_NAMES = ("tower0", "tower1", "tower2", "InferenceTower")
_PLACEHOLDER = "<tower>"


def _rule_name(self: Violation) -> str:
    return RULE_NAMES.get(self.rule, "")


def _check_rule(_inst: object, _attr: attrs.Attribute[int], value: int) -> None:
    if value not in RULE_NAMES:
        msg = f"'rule' must be one of {sorted(RULE_NAMES)}; got {value!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class Violation:
    """One broken tower-function rule.

    Attributes:
        rule: the rule's number, 1 to 5 (see `RULE_NAMES`).
        subject: the variable, scope or collection at fault.
        message: what is wrong.
        fix: how to fix it.
        severity: ``"error"`` (breaks multi-tower training) or ``"warning"`` (a recommendation).
        rule_name: the rule's short name, derived from `rule`.

    Examples:
        >>> Violation(rule=5, subject="mytower", message="scope 'mytower' contains 'tower'", fix="rename it")
        Violation(rule=5, subject='mytower', message="scope 'mytower' contains 'tower'", fix='rename it', severity='error', rule_name="no 'tower' in scope or variable names")
    """

    rule: int = attrs.field(validator=[attrs.validators.instance_of(int), _check_rule])
    subject: str = attrs.field(validator=attrs.validators.instance_of(str))
    message: str = attrs.field(validator=attrs.validators.instance_of(str))
    fix: str = attrs.field(validator=attrs.validators.instance_of(str))
    severity: Severity = attrs.field(
        default="error", validator=attrs.validators.in_(("error", "warning"))
    )
    rule_name: str = attrs.field(default=attrs.Factory(_rule_name, takes_self=True), init=False)

    def __str__(self) -> str:
        return (
            f"[rule {self.rule}: {self.rule_name}] {self.severity}: {self.message}. Fix: {self.fix}"
        )


def format_violations(violations: Iterable[Violation]) -> str:
    """One line per violation, errors first, for logs and error messages.

    Examples:
        >>> v = Violation(rule=4, subject="w", message="'w' is created by tf.Variable", fix="use tf1.get_variable")
        >>> print(format_violations([v]))
        - [rule 4: respects variable reuse] error: 'w' is created by tf.Variable. Fix: use tf1.get_variable
    """
    ordered = sorted(violations, key=lambda v: (v.severity != "error", v.rule))
    return "\n".join(f"- {v}" for v in ordered)


def dedupe_violations(violations: Iterable[Violation]) -> list[Violation]:
    """Keep the first violation per (rule, subject), in order.

    Examples:
        >>> a = Violation(rule=3, subject="x/W", message="m1", fix="f")
        >>> b = Violation(rule=3, subject="x/W", message="m2", fix="f")
        >>> [v.message for v in dedupe_violations([a, b])]
        ['m1']
    """
    seen: set[tuple[int, str]] = set()
    out = []
    for v in violations:
        if (v.rule, v.subject) not in seen:
            seen.add((v.rule, v.subject))
            out.append(v)
    return out


def normalize_tower_name(name: str, tower_names: Sequence[str] = _TOWER_NAMES) -> str:
    """Replace every occurrence of a tower's name in `name` by ``<tower>``.

    Names that differ only by the tower they were built in become equal.

    Examples:
        >>> normalize_tower_name("tower1_MatMul/W")
        '<tower>_MatMul/W'
        >>> normalize_tower_name("fc/W")
        'fc/W'
    """
    for tower in sorted(tower_names, key=len, reverse=True):
        name = name.replace(tower, _PLACEHOLDER)
    return name


def reserved_scopes(names: Iterable[str], word: str = "tower") -> list[str]:
    """The scope paths, up to the first segment containing `word`, of `names`.

    Tower placeholders (``<tower>``) do not count. Order of first appearance, no repeats.

    Examples:
        >>> reserved_scopes(["fc/W", "mytower/conv/W", "mytower/conv/b", "a/Tower2/x"])
        ['mytower']
        >>> reserved_scopes(["<tower>/fc/towers_out"])
        ['<tower>/fc/towers_out']
    """
    found: dict[str, None] = {}
    for name in names:
        segments = scope_segments(name)
        for i, seg in enumerate(segments):
            if word in seg.replace(_PLACEHOLDER, ""):
                found["/".join(segments[: i + 1])] = None
                break
    return list(found)


def outputs_signature(outputs: Any) -> Any:
    """A comparable summary of a tower's outputs: structure, dtypes and shapes of tensors.

    Examples:
        >>> outputs_signature([1, (2, "a")])
        ['int', ('int', 'str')]
    """
    if isinstance(outputs, dict):
        return {
            k: outputs_signature(v) for k, v in sorted(outputs.items(), key=lambda kv: str(kv[0]))
        }
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(outputs_signature(v) for v in outputs)
    dtype = getattr(outputs, "dtype", None)
    shape = getattr(outputs, "shape", None)
    if dtype is not None and shape is not None:
        dims = shape.as_list() if getattr(shape, "rank", None) is not None else None
        return f"Tensor({getattr(dtype, 'name', dtype)}, {dims})"
    return type(outputs).__name__
