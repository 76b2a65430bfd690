"""Variable replacement: custom getters that freeze or remap the variables a scope creates."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from towerkit.towers.compat import tf1


@contextlib.contextmanager
def custom_getter_scope(custom_getter: Callable[..., Any]) -> Iterator[Any]:
    """Re-open the current variable scope with `custom_getter` added.

    Getters compose: an enclosing scope's getter still wraps this one. The name
    scope is left as it is.

    Args:
        custom_getter: ``custom_getter(getter, name, *args, **kwargs)``, as in
            ``tf.compat.v1.get_variable`` (the next getter comes as the keyword ``getter``).

    Yields:
        The variable scope with the getter.
    """
    if not callable(custom_getter):
        msg = f"'custom_getter' must be callable; got {type(custom_getter).__name__}"
        raise TypeError(msg)
    scope = tf1.get_variable_scope()
    with tf1.variable_scope(scope, custom_getter=custom_getter, auxiliary_name_scope=False) as vs:
        yield vs


def remap_variables(fn: Callable[[Any], Any]) -> contextlib.AbstractContextManager[Any]:
    """A scope in which every variable returned by ``get_variable`` is passed through `fn`.

    Example: ``with remap_variables(quantize): y = dense("fc", x)`` makes the
    layer compute with ``quantize(W)``. The variables themselves are unchanged.

    Args:
        fn: maps a variable to the tensor to use in its place.
    """
    if not callable(fn):
        msg = f"'fn' must be callable; got {type(fn).__name__}"
        raise TypeError(msg)

    def remap(getter: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(getter(*args, **kwargs))

    return custom_getter_scope(remap)


def freeze_variables(
    stop_gradient: bool = True, skip_collection: bool = False
) -> contextlib.AbstractContextManager[Any]:
    """A scope in which the variables from ``get_variable`` are not trained.

    Args:
        stop_gradient: return ``tf.stop_gradient(variable)`` (a tensor, not a
            variable) so no gradient flows to it through this use. Other uses of
            the variable (by name, through a collection, e.g. weight decay) still
            get gradients.
        skip_collection: create the variables outside ``TRAINABLE_VARIABLES``
            and add them to ``MODEL_VARIABLES`` instead, so they are never
            trained and still saved and used for inference. It acts only when a
            variable is created, so use it on the first tower that creates it.
    """

    def freeze(getter: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        trainable = kwargs.get("trainable", True) is not False
        if skip_collection:
            kwargs["trainable"] = False
        var = getter(*args, **kwargs)
        created_frozen = not any(v is var for v in tf1.trainable_variables())
        if skip_collection and trainable and created_frozen:
            model_vars = tf1.get_collection_ref(tf1.GraphKeys.MODEL_VARIABLES)
            if not any(v is var for v in model_vars):
                model_vars.append(var)
        if stop_gradient:
            return tf.stop_gradient(var)
        return var

    return custom_getter_scope(freeze)
