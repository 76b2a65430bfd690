"""`layer_register`: a layer's variable scope, argscope defaults, shape logging and the registry."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
from collections.abc import Callable
from typing import Any

from towerkit.layers._args import given_twice
from towerkit.towers import custom_getter_scope, enable_argscope_for_function
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.layers")

_REGISTRY: dict[str, Callable[..., Any] | None] = {}
"""Registered layers by name; None marks a name registered twice."""

_LOGGED: set[str] = set()
_LOGGING = {"enabled": True}
_RESERVED = frozenset({"tf"})
_TOWER_PREFIX = re.compile(r"tower\d+/")


def _register(name: str, layer: Callable[..., Any]) -> None:
    if name in _RESERVED:
        msg = f"a layer cannot be named {name!r}: LinearWrap uses that name for TensorFlow"
        raise ValueError(msg)
    _REGISTRY[name] = None if name in _REGISTRY and _REGISTRY[name] is not layer else layer


def get_registered_layer(name: str) -> Callable[..., Any] | None:
    """The layer registered under `name` (its function's name), or None.

    Raises:
        KeyError: two different layers were registered under `name`.
    """
    if name in _REGISTRY and _REGISTRY[name] is None:
        msg = f"layer {name!r} is registered with @layer_register more than once"
        raise KeyError(msg)
    return _REGISTRY.get(name)


def disable_layer_logging() -> None:
    """Log no layer's input and output shapes from now on."""
    _LOGGING["enabled"] = False


def _is_tensor(value: Any) -> bool:
    return isinstance(value, (tf1.Tensor, tf1.Variable)) or (
        hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value, "op")
    )


def _check_inputs(layer: str, inputs: Any) -> None:
    ok = _is_tensor(inputs) or (
        isinstance(inputs, (list, tuple)) and len(inputs) > 0 and _is_tensor(inputs[0])
    )
    if not ok:
        msg = (
            f"{layer}: the input must be a tensor or a list of tensors; "
            f"got {type(inputs).__name__} {inputs!r:.80}"
        )
        raise TypeError(msg)


def split_scope_name(
    layer: str, use_scope: bool | None, args: tuple[Any, ...]
) -> tuple[str | None, tuple[Any, ...]]:
    """The scope name and the remaining arguments of a layer call (pure).

    With ``use_scope=True`` the first argument must be the name; with ``None``
    it may be; with ``False`` it should not be (a name is still taken, with a warning).

    Examples:
        >>> split_scope_name("Conv2D", True, ("conv0", "x", 3))
        ('conv0', ('x', 3))
        >>> split_scope_name("Dropout", None, (1.0, 0.5))
        (None, (1.0, 0.5))
    """
    if not args:
        msg = f"{layer} needs an input; called with no positional arguments"
        raise TypeError(msg)
    first = args[0]
    if use_scope:
        if not isinstance(first, str):
            msg = (
                f"{layer}: the first argument must be the layer's name (a str); got "
                f"{type(first).__name__}. Did you forget the name, as in {layer}('name', x, ...)?"
            )
            raise TypeError(msg)
        if len(args) < 2:
            msg = f"{layer}({first!r}, ...) needs an input after the name"
            raise TypeError(msg)
        return first, args[1:]
    if isinstance(first, str):
        if use_scope is False:
            _log.warning("%s takes no scope name; calling it with %r anyway", layer, first)
        if len(args) < 2:
            msg = f"{layer}({first!r}, ...) needs an input after the name"
            raise TypeError(msg)
        return first, args[1:]
    return None, args


def _shape_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_shape_text(v) for v in value)
    shape: Any = getattr(value, "shape", None)
    return str(shape.as_list()) if hasattr(shape, "as_list") and shape.rank is not None else "?"


def _positional_names(func: Callable[..., Any]) -> list[str]:
    params = list(inspect.signature(func).parameters.values())
    return [
        p.name
        for p in params[1:]
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]


def layer_register(
    log_shape: bool = False, use_scope: bool | None = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make a function of tensors a layer: ``Layer('name', x, ...)`` under variable scope ``name``.

    The layer reads default keyword arguments from `towerkit.towers.argscope`
    under its function's name (arguments of the call win, and so do positional
    arguments over a default of the same name), is registered for `LinearWrap`,
    and with `log_shape` logs its input and output shapes once per layer name.

    Args:
        log_shape: log the input and output shapes (the first time a scope is built).
        use_scope: True: the first argument is the scope name. None: it may be
            given or not. False: it is not given (a name is accepted with a warning).

    Returns:
        A decorator.

    Raises:
        TypeError: `use_scope` is not a bool or None.
    """
    if not (use_scope is None or isinstance(use_scope, bool)):
        msg = f"'use_scope' must be True, False or None; got {use_scope!r}"
        raise TypeError(msg)
    if log_shape and not use_scope:
        msg = "'log_shape' needs use_scope=True (shapes are logged under the layer's scope name)"
        raise ValueError(msg)

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        layer_name = func.__name__
        try:
            positional = _positional_names(func)
        except (TypeError, ValueError):
            positional = []

        @functools.wraps(func)
        def layer(*args: Any, **kwargs: Any) -> Any:
            scope, args = split_scope_name(layer_name, use_scope, args)
            _check_inputs(layer_name, args[0])
            for name in positional[: len(args) - 1]:
                kwargs.pop(name, None)  # a positional argument wins over an argscope default
            if scope is None:
                return func(*args, **kwargs)
            with tf1.variable_scope(scope) as vs:
                key = _TOWER_PREFIX.sub("", vs.name)
                log = log_shape and _LOGGING["enabled"] and key not in _LOGGED
                outputs = func(*args, **kwargs)
                if log:
                    _LOGGED.add(key)
                    _log.info("%r: %s --> %s", vs.name, _shape_text(args[0]), _shape_text(outputs))
            return outputs

        argscoped = enable_argscope_for_function(layer, log_shape=False)
        no_aliases: dict[str, str] = {}
        rules: tuple[tuple[str, ...], dict[str, str]] = getattr(
            func, "given_twice_rules", (tuple(positional), no_aliases)
        )

        @functools.wraps(argscoped)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            # the call as written, before the argscope's defaults join it: a value given
            # twice (by position and keyword, or under two names) is an error
            rest = (
                args[1:] if args and isinstance(args[0], str) and use_scope is not False else args
            )
            twice = given_twice(rules[0], len(rest) - 1, kwargs, rules[1])
            if twice:
                msg = f"{layer_name}: a value given twice: {'; '.join(twice)}; give each once"
                raise TypeError(msg)
            return argscoped(*args, **kwargs)

        wrapped.use_scope = use_scope  # type: ignore[attr-defined]
        _register(layer_name, wrapped)
        return wrapped

    return decorator


class VariableHolder:
    """The variables of a layer by short name (``holder.W``), as a layer's output carries them.

    Examples:
        >>> h = VariableHolder(W=1)
        >>> h.b = 2
        >>> h.W, sorted(h.all())
        (1, [1, 2])
    """

    def __init__(self, **variables: Any) -> None:
        object.__setattr__(self, "_vars", {})
        for name, var in variables.items():
            self._add(name, var)

    def _add(self, name: str, var: Any) -> None:
        if name in self._vars:
            msg = f"VariableHolder already holds a variable named {name!r}"
            raise ValueError(msg)
        self._vars[name] = var

    def __setattr__(self, name: str, var: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, var)
        else:
            self._add(name, var)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_vars"][name]
        except KeyError:
            msg = f"the layer has no variable {name!r}; it has {sorted(self.__dict__['_vars'])}"
            raise AttributeError(msg) from None

    def all(self) -> list[Any]:
        """Every variable held, in the order added."""
        return list(self._vars.values())


def attach_variables(output: Any, **variables: Any) -> Any:
    """Set ``output.variables`` to a `VariableHolder` of `variables` when the tensor allows it."""
    holder = VariableHolder(**{k: v for k, v in variables.items() if v is not None})
    with contextlib.suppress(AttributeError):
        output.variables = holder
    return output


def rename_get_variable(mapping: dict[str, str]) -> Any:
    """A scope in which ``get_variable`` renames variables by their last name part.

    Args:
        mapping: old base name to new one, e.g. ``{"kernel": "W"}``.
    """

    def getter(getter: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
        head, _, base = name.rpartition("/")
        if base in mapping:
            name = f"{head}/{mapping[base]}" if head else mapping[base]
        return getter(name, *args, **kwargs)

    return custom_getter_scope(getter)


def rename_tflayer_get_variable() -> Any:
    """A scope that gives ``tf.compat.v1.layers`` variables tensorpack's names.

    ``kernel``/``bias`` become ``W``/``b``, ``moving_mean``/``moving_variance``
    become ``mean/EMA``/``variance/EMA``.
    """
    return rename_get_variable(
        {"kernel": "W", "bias": "b", "moving_mean": "mean/EMA", "moving_variance": "variance/EMA"}
    )
