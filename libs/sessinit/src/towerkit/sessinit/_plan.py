"""Pure restore planning: which source entries go into which graph variables, and why not."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

from towerkit.sessinit._unused import describe_unused

_UPCASTS: dict[str, frozenset[str]] = {
    "float16": frozenset({"float32", "float64"}),
    "bfloat16": frozenset({"float32", "float64"}),
    "float32": frozenset({"float64"}),
    "int8": frozenset({"int16", "int32", "int64"}),
    "int16": frozenset({"int32", "int64"}),
    "int32": frozenset({"int64"}),
    "uint8": frozenset({"uint16", "uint32", "uint64", "int16", "int32", "int64"}),
    "uint16": frozenset({"uint32", "uint64", "int32", "int64"}),
    "uint32": frozenset({"uint64", "int64"}),
    "complex64": frozenset({"complex128"}),
}
"""Lossless widenings that relaxed restores apply: source dtype -> graph dtypes it may fill."""


_DTYPE_NAMES: dict[str, str] = {}
"""Canonical names of dtype strings seen so far (a small memo: parsing goes through NumPy)."""


def normalize_name(name: str) -> str:
    """Return a variable name without the ``:0`` output suffix of its tensor.

    Graph variables print as ``"fc/W:0"``, checkpoints and npz files store ``"fc/W"``;
    both spellings name the same variable everywhere in this lib.

    Args:
        name: A variable name, with or without ``:0``.

    Returns:
        The name without a trailing ``:0``.

    Raises:
        TypeError: `name` is not a string.

    Examples:
        >>> normalize_name("fc/W:0")
        'fc/W'
        >>> normalize_name("fc/W")
        'fc/W'
    """
    if not isinstance(name, str):
        msg = f"variable name {name!r} is a {type(name).__name__}: expected a str"
        raise TypeError(msg)
    return name[:-2] if name.endswith(":0") else name


def dtype_name(dtype: Any) -> str:
    """Return the canonical name of a dtype given as a string, NumPy dtype or TensorFlow DType.

    Reference dtypes (``float32_ref``) name their base dtype; NumPy byte, unicode and
    object arrays map to TensorFlow's ``"string"``.

    Examples:
        >>> dtype_name("float32_ref")
        'float32'
        >>> dtype_name(np.float16)
        'float16'
        >>> dtype_name(np.dtype("S5"))
        'string'
    """
    if isinstance(dtype, str):
        known = _DTYPE_NAMES.get(dtype)
        if known is not None:
            return known
        name = dtype.removesuffix("_ref")
        try:
            known = dtype_name(np.dtype(name))
        except TypeError:
            known = name
        if len(_DTYPE_NAMES) < 256:
            _DTYPE_NAMES[dtype] = known
        return known
    base = getattr(dtype, "base_dtype", None)
    if base is not None and hasattr(base, "name"):
        return str(base.name)
    np_dtype = np.dtype(dtype)
    if np_dtype.kind in "SUO":
        return "string"
    return str(np_dtype.name)


def _shape(value: Iterable[int | None]) -> tuple[int | None, ...]:
    if isinstance(value, (str, bytes)):
        msg = f"shape {value!r} is a {type(value).__name__}: expected a sequence of ints"
        raise TypeError(msg)
    return tuple(None if d is None else int(d) for d in value)


def _check_dims(
    _inst: object, _attr: attrs.Attribute[tuple[int | None, ...]], value: tuple[int | None, ...]
) -> None:
    bad = [d for d in value if d is not None and d < 0]
    if bad:
        msg = f"shape {value} has negative dimensions {bad}: expected sizes >= 0 or None (unknown)"
        raise ValueError(msg)


def _check_name(_inst: object, _attr: attrs.Attribute[str], value: str) -> None:
    if not value:
        msg = "variable name '' is empty: expected a name such as 'fc/W'"
        raise ValueError(msg)


def format_shape(shape: tuple[int | None, ...]) -> str:
    """Render a shape the way Python prints tuples, with ``?`` for unknown dimensions.

    Examples:
        >>> format_shape((3,))
        '(3,)'
        >>> format_shape((None, 4))
        '(?, 4)'
        >>> format_shape(())
        '()'
    """
    dims = ["?" if d is None else str(d) for d in shape]
    if len(dims) == 1:
        return f"({dims[0]},)"
    return "(" + ", ".join(dims) + ")"


@attrs.frozen(kw_only=True)
class VarInfo:
    """A named variable or stored value, described without its values.

    Attributes:
        name: The name without ``:0``.
        shape: One size per dimension; ``None`` where a graph variable's size is unknown.
        dtype: The canonical dtype name (``"float32"``, ``"int64"``, ``"string"``...).

    Examples:
        >>> VarInfo(name="fc/W:0", shape=[3, 4], dtype="float32_ref")
        VarInfo(name='fc/W', shape=(3, 4), dtype='float32')
    """

    name: str = attrs.field(converter=normalize_name, validator=_check_name)
    shape: tuple[int | None, ...] = attrs.field(converter=_shape, validator=_check_dims)
    dtype: str = attrs.field(converter=dtype_name)

    @property
    def size(self) -> int | None:
        """The number of elements, or None when a dimension is unknown."""
        if any(d is None for d in self.shape):
            return None
        return math.prod(self.shape)  # type: ignore[arg-type]

    def describe(self) -> str:
        """``"float32 (3, 4)"``: the dtype and shape of this entry."""
        return f"{self.dtype} {format_shape(self.shape)}"


def can_upcast(source: str, target: str) -> bool:
    """Whether every value of dtype `source` converts to dtype `target` without loss.

    Only widenings within floats, within integers (unsigned into wider signed too) and
    within complex numbers count; int-to-float and any narrowing do not.

    Examples:
        >>> can_upcast("float16", "float32")
        True
        >>> can_upcast("float32", "float16")
        False
        >>> can_upcast("int32", "float64")
        False
    """
    return target in _UPCASTS.get(source, frozenset())


def shapes_match(source: tuple[int | None, ...], target: tuple[int | None, ...]) -> bool:
    """Whether two shapes have the same rank and agree wherever both sizes are known.

    Examples:
        >>> shapes_match((3, 4), (None, 4))
        True
        >>> shapes_match((3, 4), (12,))
        False
    """
    return len(source) == len(target) and all(
        a is None or b is None or a == b for a, b in zip(source, target)
    )


def can_reshape(source: tuple[int | None, ...], target: tuple[int | None, ...]) -> bool:
    """Whether values of shape `source` fill a variable of shape `target` by a reshape.

    Both shapes must be fully known and hold the same number of elements.

    Examples:
        >>> can_reshape((3,), (1, 3))
        True
        >>> can_reshape((1, 1, 3, 4), (3, 4))
        True
        >>> can_reshape((3,), (4,))
        False
    """
    if any(d is None for d in source) or any(d is None for d in target):
        return False
    return math.prod(source) == math.prod(target)  # type: ignore[arg-type]


@attrs.frozen(kw_only=True)
class Assignment:
    """One source entry paired with the graph variable it restores into.

    Attributes:
        source: The entry in the checkpoint, npz file or dict.
        target: The graph variable (its name includes any restore prefix).

    Examples:
        >>> a = Assignment(
        ...     source=VarInfo(name="W", shape=(3,), dtype="float16"),
        ...     target=VarInfo(name="net/W", shape=(1, 3), dtype="float32"),
        ... )
        >>> a.fixes, a.fixable
        (('upcast', 'reshape'), True)
    """

    source: VarInfo = attrs.field(validator=attrs.validators.instance_of(VarInfo))
    target: VarInfo = attrs.field(validator=attrs.validators.instance_of(VarInfo))

    @property
    def cast(self) -> bool:
        """Whether the dtypes differ."""
        return self.source.dtype != self.target.dtype

    @property
    def reshape(self) -> bool:
        """Whether the shapes differ (unknown graph dimensions match any size)."""
        return not shapes_match(self.source.shape, self.target.shape)

    @property
    def exact(self) -> bool:
        """Whether shape and dtype agree, so the value goes in as it is."""
        return not (self.cast or self.reshape)

    @property
    def fixable(self) -> bool:
        """Whether a relaxed restore can convert the value: lossless upcast and/or reshape."""
        return (not self.cast or can_upcast(self.source.dtype, self.target.dtype)) and (
            not self.reshape or can_reshape(self.source.shape, self.target.shape)
        )

    @property
    def fixes(self) -> tuple[str, ...]:
        """The conversions the value needs: ``"upcast"`` and/or ``"reshape"``, in that order."""
        return tuple(f for f, need in (("upcast", self.cast), ("reshape", self.reshape)) if need)

    def describe(self) -> str:
        """One line naming both sides with their dtypes and shapes."""
        names = repr(self.source.name)
        if self.target.name != self.source.name:
            names += f" -> {self.target.name!r}"
        return f"{names}: source {self.source.describe()}, graph {self.target.describe()}"


def _assignments(value: Iterable[Assignment]) -> tuple[Assignment, ...]:
    return tuple(sorted(value, key=lambda a: a.target.name))


def _infos(value: Iterable[VarInfo]) -> tuple[VarInfo, ...]:
    return tuple(sorted(value, key=lambda v: v.name))


def _all_exact(
    inst: RestorePlan, _attr: attrs.Attribute[tuple[Assignment, ...]], value: tuple[Assignment, ...]
) -> None:
    del inst
    bad = [a.describe() for a in value if not a.exact]
    if bad:
        msg = f"'matched' holds pairs whose shape or dtype differ: {bad}; expected exact pairs"
        raise ValueError(msg)


def _none_exact(
    inst: RestorePlan, _attr: attrs.Attribute[tuple[Assignment, ...]], value: tuple[Assignment, ...]
) -> None:
    del inst
    bad = [a.describe() for a in value if a.exact]
    if bad:
        msg = f"'mismatches' holds pairs that agree in shape and dtype: {bad}; expected mismatches"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class RestorePlan:
    """What a restore will do, computed before any session is touched.

    Each source entry is in exactly one of `matched`, `mismatches` (by its `source`),
    `unused` or `ignored`; each graph variable is the target of at most one pair, or
    `missing`, or skipped because `ignore` names it.

    Attributes:
        matched: Pairs whose shape and dtype agree, sorted by graph name.
        mismatches: Pairs whose shape or dtype differ, fixable or not, sorted by graph name.
        missing: Graph variables that no source entry restores (missing in the source).
        unused: Source entries that name no graph variable (unused in the source).
        ignored: Source entries skipped because `ignore` names them or their target.
        relaxed: Whether fixable mismatches are converted and restored.
    """

    matched: tuple[Assignment, ...] = attrs.field(
        default=(), converter=_assignments, validator=_all_exact
    )
    mismatches: tuple[Assignment, ...] = attrs.field(
        default=(), converter=_assignments, validator=_none_exact
    )
    missing: tuple[VarInfo, ...] = attrs.field(default=(), converter=_infos)
    unused: tuple[VarInfo, ...] = attrs.field(default=(), converter=_infos)
    ignored: tuple[VarInfo, ...] = attrs.field(default=(), converter=_infos)
    relaxed: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    @property
    def fixable(self) -> tuple[Assignment, ...]:
        """Mismatches that an upcast and/or reshape repairs."""
        return tuple(a for a in self.mismatches if a.fixable)

    @property
    def unfixable(self) -> tuple[Assignment, ...]:
        """Mismatches that no lossless conversion repairs."""
        return tuple(a for a in self.mismatches if not a.fixable)

    @property
    def restored(self) -> tuple[Assignment, ...]:
        """The pairs this plan restores: exact ones, and fixable ones when relaxed."""
        if not self.relaxed:
            return self.matched
        return _assignments(self.matched + self.fixable)

    @property
    def converted(self) -> tuple[Assignment, ...]:
        """The restored pairs whose values are upcast and/or reshaped (none unless relaxed)."""
        return self.fixable if self.relaxed else ()

    @property
    def at_fault(self) -> tuple[Assignment, ...]:
        """The mismatches this plan cannot restore: all of them, or the unfixable ones if relaxed."""
        return self.unfixable if self.relaxed else self.mismatches

    def summary(self) -> str:
        """One line of counts, for logs.

        Unused source entries that are optimizer state or moving averages (what a
        training checkpoint holds beside the model) are counted as such, so a restore
        into an inference graph reads ``22 unused in the source (14 optimizer slots,
        6 moving averages, 2 others: global_step, learning_rate)``.
        """
        parts = [f"{len(self.restored)} restored"]
        converted = len(self.converted)
        if converted:
            parts[0] += f" ({converted} converted)"
        for label, items in (
            ("mismatched", self.at_fault),
            ("missing in the source", self.missing),
            ("unused in the source", self.unused),
            ("ignored", self.ignored),
        ):
            if items:
                parts.append(f"{len(items)} {label}")
                if items is self.unused:
                    parts[-1] += describe_unused(v.name for v in self.unused)
        return ", ".join(parts)


def _duplicates(names: Iterable[str]) -> list[str]:
    return sorted(n for n, k in Counter(names).items() if k > 1)


def _ignore_set(ignore: Iterable[str]) -> frozenset[str]:
    if isinstance(ignore, (str, bytes)):
        msg = (
            f"'ignore' is the string {ignore!r}: expected a sequence of names, "
            f"such as ({ignore!r},)"
        )
        raise TypeError(msg)
    return frozenset(normalize_name(n) for n in ignore)


def _normalize_prefix(prefix: str | None) -> str:
    if prefix is None:
        return ""
    if not isinstance(prefix, str):
        msg = f"'prefix' {prefix!r} is a {type(prefix).__name__}: expected a str or None"
        raise TypeError(msg)
    return prefix.strip("/")


def target_name(source_name: str, prefix: str | None = None) -> str:
    """The graph variable a source entry restores into: ``prefix/name``, or `name` alone.

    Examples:
        >>> target_name("conv/W:0", "tower")
        'tower/conv/W'
        >>> target_name("conv/W", None)
        'conv/W'
    """
    name = normalize_name(source_name)
    prefix = _normalize_prefix(prefix)
    return f"{prefix}/{name}" if prefix else name


def plan_restore(
    checkpoint_vars: Iterable[VarInfo],
    graph_vars: Iterable[VarInfo],
    prefix: str | None = None,
    ignore: Iterable[str] = (),
    relaxed: bool = False,
) -> RestorePlan:
    """Pair source entries with graph variables by name and sort out what cannot be restored.

    Args:
        checkpoint_vars: The entries of the source (checkpoint, npz file or dict).
        graph_vars: The variables of the graph to restore into.
        prefix: Entry ``name`` restores into graph variable ``prefix/name``.
        ignore: Names (with or without ``:0``) of source entries or graph variables to skip.
        relaxed: Whether mismatches repaired by a lossless upcast and/or a reshape are restored.

    Returns:
        The plan. Nothing is raised for mismatches here: callers decide with `at_fault`.

    Raises:
        ValueError: Two source entries, or two graph variables, share a name.
        TypeError: `ignore` is a single string, or `prefix` is not a string.

    Examples:
        >>> ckpt = [VarInfo(name="W", shape=(3,), dtype="float16"),
        ...         VarInfo(name="lr", shape=(), dtype="float32")]
        >>> graph = [VarInfo(name="net/W:0", shape=(3,), dtype="float32"),
        ...          VarInfo(name="net/b:0", shape=(3,), dtype="float32")]
        >>> plan = plan_restore(ckpt, graph, prefix="net", relaxed=True)
        >>> [a.target.name for a in plan.restored], [v.name for v in plan.missing]
        (['net/W'], ['net/b'])
        >>> plan.summary()
        '1 restored (1 converted), 1 missing in the source, 1 unused in the source'
    """
    sources = list(checkpoint_vars)
    graph = list(graph_vars)
    for label, items in (("source entries", sources), ("graph variables", graph)):
        bad = [type(v).__name__ for v in items if not isinstance(v, VarInfo)]
        if bad:
            msg = f"{label} must be VarInfo records: got {sorted(set(bad))}"
            raise TypeError(msg)
        dups = _duplicates(v.name for v in items)
        if dups:
            msg = f"{label} share names {dups}: expected each name once (':0' is ignored)"
            raise ValueError(msg)
    skip = _ignore_set(ignore)
    prefix = _normalize_prefix(prefix)
    by_name = {v.name: v for v in graph}
    matched: list[Assignment] = []
    mismatches: list[Assignment] = []
    unused: list[VarInfo] = []
    ignored: list[VarInfo] = []
    claimed: set[str] = set()
    for src in sources:
        tgt_name = f"{prefix}/{src.name}" if prefix else src.name
        if src.name in skip or tgt_name in skip:
            ignored.append(src)
            claimed.add(tgt_name)
            continue
        tgt = by_name.get(tgt_name)
        if tgt is None:
            unused.append(src)
            continue
        claimed.add(tgt_name)
        pair = Assignment(source=src, target=tgt)
        (matched if pair.exact else mismatches).append(pair)
    missing = [v for v in graph if v.name not in claimed and v.name not in skip]
    return RestorePlan(
        matched=matched,
        mismatches=mismatches,
        missing=missing,
        unused=unused,
        ignored=ignored,
        relaxed=relaxed,
    )


def render_names(infos: Iterable[VarInfo], limit: int = 0) -> str:
    """Render entries as ``'name' dtype (shape)`` lines, indented, for messages and logs.

    Args:
        infos: The entries.
        limit: Render at most this many, then a count of the rest; 0 renders all.

    Examples:
        >>> print(render_names([VarInfo(name="a", shape=(2,), dtype="int64")]))
          'a': int64 (2,)
    """
    items = list(infos)
    shown = items[:limit] if limit else items
    lines = [f"  {v.name!r}: {v.describe()}" for v in shown]
    if len(items) > len(shown):
        lines.append(f"  ... and {len(items) - len(shown)} more")
    return "\n".join(lines)


def render_mismatches(plan: RestorePlan, source: str) -> str:
    """The message for the mismatches `plan` cannot restore: every pair with both sides.

    Args:
        plan: A plan with mismatches at fault.
        source: How to name the source in the message (a path, or ``"the dict"``).

    Examples:
        >>> plan = plan_restore([VarInfo(name="W", shape=(4,), dtype="float32")],
        ...                     [VarInfo(name="W", shape=(3,), dtype="float32")])
        >>> print(render_mismatches(plan, "'model-10'"))
        cannot restore 1 variable from 'model-10': shapes or dtypes differ between the source and the graph:
          'W': source float32 (4,), graph float32 (3,)
    """
    faults = plan.at_fault
    noun = "variable" if len(faults) == 1 else "variables"
    lines = [
        f"cannot restore {len(faults)} {noun} from {source}: "
        "shapes or dtypes differ between the source and the graph:"
    ]
    for pair in faults:
        note = " (fixable by " + " and ".join(pair.fixes) + ")" if pair.fixable else ""
        lines.append(f"  {pair.describe()}{note}")
    return "\n".join(lines)


def restores_nothing(plan: RestorePlan) -> bool:
    """Whether a source with entries meets a graph with variables and no name matches.

    No user means that: the source belongs to another model, or the names differ by
    a scope. A source whose entries were all ignored on purpose, and a graph without
    variables, are not this case.

    Examples:
        >>> ckpt = [VarInfo(name="W", shape=(3,), dtype="float32")]
        >>> graph = [VarInfo(name="net/W", shape=(3,), dtype="float32")]
        >>> restores_nothing(plan_restore(ckpt, graph))
        True
        >>> restores_nothing(plan_restore(ckpt, graph, prefix="net"))
        False
        >>> restores_nothing(plan_restore(ckpt, []))
        False
    """
    return not plan.matched and not plan.mismatches and bool(plan.unused) and bool(plan.missing)


def render_nothing_restored(plan: RestorePlan, source: str, limit: int = 50) -> str:
    """The message for a plan that `restores_nothing`: both sides' names, and the fixes.

    Args:
        plan: A plan that restores nothing.
        source: How to name the source (a path, or ``"the dict"``).
        limit: Names shown per side at most, then a count of the rest.

    Examples:
        >>> plan = plan_restore([VarInfo(name="old/W", shape=(3,), dtype="float32")],
        ...                     [VarInfo(name="W", shape=(3,), dtype="float32")])
        >>> print(render_nothing_restored(plan, "'model-10'"))
        nothing to restore from 'model-10': none of its 1 entry names a variable of the graph (1 variable).
        entries of 'model-10':
          'old/W': float32 (3,)
        variables of the graph:
          'W': float32 (3,)
        Check that the source belongs to this model; a graph built under a scope restores entry 'x' into 'scope/x' with SaverRestore(path, prefix='scope').
    """
    entries = len(plan.unused)
    variables = len(plan.missing)
    return "\n".join(
        [
            f"nothing to restore from {source}: none of its {entries} "
            f"{'entry names' if entries == 1 else 'entries name'} a variable of the graph "
            f"({variables} {'variable' if variables == 1 else 'variables'}).",
            f"entries of {source}:",
            render_names(plan.unused, limit),
            "variables of the graph:",
            render_names(plan.missing, limit),
            "Check that the source belongs to this model; a graph built under a scope "
            "restores entry 'x' into 'scope/x' with SaverRestore(path, prefix='scope').",
        ]
    )
