"""Graph collections: back up, restore, and freeze them around code that changes them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from towerkit.towers.compat import tf1


def backup_collection(keys: Iterable[str] | None = None) -> dict[str, list[Any]]:
    """Copy collections of the default graph.

    Args:
        keys: the collection keys; all keys of the graph when None.

    Returns:
        ``{key: items}``, each a copy of the collection's list.
    """
    graph = tf1.get_default_graph()
    if keys is None:
        keys = graph.get_all_collection_keys()
    elif isinstance(keys, str):
        msg = f"'keys' must be a list of collection keys, not the string {keys!r}; use [{keys!r}]"
        raise TypeError(msg)
    return {key: list(graph.get_collection(key)) for key in keys}


def restore_collection(backup: dict[str, list[Any]]) -> None:
    """Set collections of the default graph back to a `backup_collection` copy.

    Keys not in `backup` are left alone.
    """
    graph = tf1.get_default_graph()
    for key, items in backup.items():
        ref = graph.get_collection_ref(key)
        ref[:] = items


@contextlib.contextmanager
def freeze_collection(keys: Iterable[str]) -> Iterator[None]:
    """A scope after which the collections `keys` are as they were when it opened."""
    backup = backup_collection(keys)
    try:
        yield
    finally:
        restore_collection(backup)
