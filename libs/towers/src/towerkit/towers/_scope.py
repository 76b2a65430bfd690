"""Scope utilities: reusing variable scopes, re-entering name scopes, scoping functions."""

from __future__ import annotations

import contextlib
import functools
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.towers")

F = TypeVar("F", bound=Callable[..., Any])

_NAME_SCOPES: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def auto_reuse_variable_scope(func: F) -> F:
    """Decorate `func` so that a second call under the same variable scope reuses its variables.

    The first call in a variable scope (of a graph) inherits the scope's reuse
    flag; every later call in the same scope reuses the variables. Name scopes
    are left alone.
    """
    seen: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        graph = tf1.get_default_graph()
        scope = tf1.get_variable_scope()
        names = seen.setdefault(graph, set())
        reuse = True if scope.name in names else None
        names.add(scope.name)
        with tf1.variable_scope(scope, reuse=reuse, auxiliary_name_scope=False):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def cached_name_scope(name: str, top_level: bool = True) -> Iterator[str]:
    """Open a name scope the first time, and re-enter exactly that scope afterwards.

    Args:
        name: the scope's name.
        top_level: open it at the top level of the graph, whatever the caller's
            current name scope; otherwise under the caller's current name scope.

    Yields:
        The scope's full name, ending with ``/``.
    """
    if not name or "/" in name.strip("/"):
        msg = f"'name' must be a single non-empty scope name; got {name!r}"
        raise ValueError(msg)
    name = name.strip("/")
    graph = tf1.get_default_graph()
    cache = _NAME_SCOPES.setdefault(graph, {})
    key = name if top_level else f"{graph.get_name_scope()}/{name}"
    cached = cache.get(key)
    if cached is not None:
        with tf1.name_scope(cached) as scope:
            yield scope
        return
    if top_level:
        with tf1.name_scope(None), tf1.name_scope(name) as scope:
            cache[key] = scope
            yield scope
        return
    with tf1.name_scope(name) as scope:
        cache[key] = scope
        yield scope


def _name_is_taken(name: str) -> bool:
    graph = tf1.get_default_graph()
    current = graph.get_name_scope()
    full = f"{current}/{name}" if current else name
    return bool(graph.unique_name(full, mark_as_used=False) != full)


def under_name_scope(name_scope: str | Callable[..., Any] | None = None) -> Any:
    """Decorator that runs a function under a name scope.

    The scope is, in order of precedence: the ``name_scope=`` keyword given to
    the call, the decorator's `name_scope` argument, the function's name. A name
    already in use gets TensorFlow's ``_N`` suffix; when the call asked for it
    explicitly, a warning is logged.

    Works as ``@under_name_scope()``, ``@under_name_scope("scope")`` or
    ``@under_name_scope``.
    """
    if callable(name_scope):
        return under_name_scope(None)(name_scope)
    default = name_scope

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, name_scope: str | None = None, **kwargs: Any) -> Any:
            scope = name_scope or default or func.__name__
            if name_scope and _name_is_taken(name_scope):
                _log.warning(
                    "name scope %r is already in use: %s runs under a uniquified scope",
                    name_scope,
                    func.__name__,
                )
            with tf1.name_scope(scope):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


def under_variable_scope() -> Callable[[F], F]:
    """Decorator that runs a function under a variable scope named after the function."""

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with tf1.variable_scope(func.__name__):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator
