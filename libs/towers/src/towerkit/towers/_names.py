"""Pure helpers for tensor, operation and tower-scoped names."""

from __future__ import annotations

import re

_TOWER_PREFIX = re.compile(r"^tower\d+/")


def get_op_tensor_name(name: str) -> tuple[str, str]:
    """Split a tensor or operation name into (operation name, tensor name).

    A name without an output index refers to output 0.

    Args:
        name: ``"op"`` or ``"op:k"``.

    Returns:
        ``("op", "op:k")`` (``k`` is 0 when `name` has no index).

    Raises:
        ValueError: `name` is empty or has a malformed output index.

    Examples:
        >>> get_op_tensor_name("fc/W")
        ('fc/W', 'fc/W:0')
        >>> get_op_tensor_name("fc/out:1")
        ('fc/out', 'fc/out:1')
    """
    if not name:
        msg = "tensor name '' is empty: expected 'op' or 'op:index'"
        raise ValueError(msg)
    op, sep, index = name.rpartition(":")
    if not sep:
        return name, f"{name}:0"
    if not op or not index.isdigit():
        msg = (
            f"tensor name {name!r} is malformed: expected 'op' or 'op:index' with an integer index"
        )
        raise ValueError(msg)
    return op, name


def strip_port(name: str) -> str:
    """Drop the output index of a tensor name (``"x:0"`` becomes ``"x"``).

    Examples:
        >>> strip_port("tower0/cost:0")
        'tower0/cost'
        >>> strip_port("cost")
        'cost'
    """
    return get_op_tensor_name(name)[0]


def join_scope(*parts: str) -> str:
    """Join scope names with ``/``, skipping empty parts and stray slashes.

    Examples:
        >>> join_scope("tower0", "", "fc/W")
        'tower0/fc/W'
        >>> join_scope("", "")
        ''
    """
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def strip_tower_prefix(name: str, prefix: str | None = None) -> str:
    """Remove a tower's name-scope prefix from a name.

    Args:
        name: a tensor, operation or variable name.
        prefix: the tower's name scope (such as ``"InferenceTower"``). ``None``
            strips a leading ``tower<N>/``, the names trainers give their towers.
            An empty prefix strips nothing.

    Returns:
        `name` without the prefix, unchanged when it does not start with it.

    Examples:
        >>> strip_tower_prefix("tower1/fc/out:0")
        'fc/out:0'
        >>> strip_tower_prefix("InferenceTower/prob", "InferenceTower")
        'prob'
        >>> strip_tower_prefix("towerless/x", "tower")
        'towerless/x'
    """
    if prefix is None:
        return _TOWER_PREFIX.sub("", name, count=1)
    prefix = prefix.strip("/")
    if prefix and name.startswith(prefix + "/"):
        return name[len(prefix) + 1 :]
    return name


def scope_segments(name: str) -> tuple[str, ...]:
    """The ``/``-separated segments of a name, output index dropped.

    Examples:
        >>> scope_segments("tower0/fc/W:0")
        ('tower0', 'fc', 'W')
        >>> scope_segments("")
        ()
    """
    if not name:
        return ()
    return tuple(s for s in strip_port(name).split("/") if s)
