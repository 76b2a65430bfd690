"""Argument scopes: default keyword arguments for layer functions, set by a ``with`` block."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from towerkit.towers._context import get_current_tower_context
from towerkit.towers._errors import LayersUnavailableError
from towerkit.towers._layers import layers_loader_state, layers_loaders
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.towers")

_WRAPPED = "__towerkit_argscope__"


def _pairs(value: Mapping[str, Any] | Sequence[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((str(k), v) for k, v in items)


def _entries(value: Any) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    try:
        return tuple((str(layer), _pairs(kwargs)) for layer, kwargs in items)
    except (TypeError, ValueError, AttributeError):
        msg = (
            "an ArgScope takes {layer name: {argument: value}} (or the same as pairs); "
            f"got {value!r}"
        )
        raise TypeError(msg) from None


@attrs.frozen
class ArgScope:
    """Default keyword arguments per layer name, as ``((layer, ((arg, value), ...)), ...)``.

    Examples:
        >>> ArgScope({"conv": {"k": 3}})
        ArgScope(entries=(('conv', (('k', 3),)),))
        >>> ArgScope().as_dict()
        {}
    """

    entries: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = attrs.field(
        default=(), converter=_entries
    )

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """The scope as a fresh dict of dicts: ``{layer: {arg: value}}``."""
        return {layer: dict(kwargs) for layer, kwargs in self.entries}

    def defaults_for(self, layer: str) -> dict[str, Any]:
        """The default keyword arguments of `layer` (empty when none).

        Examples:
            >>> ArgScope({"fc": {"units": 4}}).defaults_for("fc")
            {'units': 4}
        """
        for name, kwargs in self.entries:
            if name == layer:
                return dict(kwargs)
        return {}


def merge_argscope(scope: ArgScope, layers: Sequence[str], kwargs: Mapping[str, Any]) -> ArgScope:
    """A new scope where each of `layers` also gets `kwargs` (which win over older values).

    Layers keep their first-seen order, arguments too; a repeated argument takes
    the new value.

    Examples:
        >>> outer = merge_argscope(ArgScope(), ["conv"], {"k": 3, "act": "relu"})
        >>> merge_argscope(outer, ["conv", "fc"], {"k": 5}).as_dict()
        {'conv': {'k': 5, 'act': 'relu'}, 'fc': {'k': 5}}
    """
    merged = scope.as_dict()
    for layer in layers:
        merged.setdefault(layer, {}).update(kwargs)
    return ArgScope(merged)


_EMPTY = ArgScope()  # frozen: safe as a shared default
_CURRENT: contextvars.ContextVar[ArgScope] = contextvars.ContextVar(
    "towerkit_argscope", default=_EMPTY
)


def _layer_name(layer: Any) -> str:
    if isinstance(layer, str):
        return layer
    name = getattr(layer, "__name__", None)
    if not callable(layer) or not isinstance(name, str):
        msg = f"argscope layers must be functions or names; got {type(layer).__name__}"
        raise TypeError(msg)
    return name


def _check_arguments(layer: Any, kwargs: Mapping[str, Any]) -> None:
    if isinstance(layer, str):
        return
    func = getattr(layer, _WRAPPED, layer)
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(k for k in kwargs if k not in params)
    if unknown:
        msg = f"argscope: {_layer_name(layer)!r} takes no arguments {unknown}; it takes {list(params)}"
        raise TypeError(msg)


@contextlib.contextmanager
def argscope(layers: Any, **kwargs: Any) -> Iterator[None]:
    """A scope where calls of `layers` get `kwargs` as default keyword arguments.

    Arguments given to a call win over the scope; inner scopes win over outer ones.

    Args:
        layers: a layer function (or its name) or a list of them. Only functions
            decorated with `enable_argscope_for_function` read the scope.
        kwargs: the default keyword arguments.

    Raises:
        TypeError: a layer is neither a function nor a name, or takes none of some arguments.
    """
    layer_list = list(layers) if isinstance(layers, (list, tuple)) else [layers]
    for layer in layer_list:
        _check_arguments(layer, kwargs)
    names = [_layer_name(layer) for layer in layer_list]
    token = _CURRENT.set(merge_argscope(_CURRENT.get(), names, kwargs))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def get_arg_scope() -> dict[str, dict[str, Any]]:
    """The current argscope as a dict of dicts, ``{layer name: {arg: value}}`` (a copy)."""
    return _CURRENT.get().as_dict()


def _first_tensor(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return _first_tensor(value[0]) if value else None
    return value if hasattr(value, "shape") and hasattr(value, "dtype") else None


def enable_argscope_for_function(
    func: Callable[..., Any], log_shape: bool = True
) -> Callable[..., Any]:
    """Make `func` read its default keyword arguments from the current argscope.

    Args:
        func: a function of tensors; its ``__name__`` is its argscope name.
        log_shape: log the shapes of the first input and first output tensor
            (in the main training tower, or outside towers).

    Returns:
        The wrapped function (wrapping twice returns it unchanged).
    """
    if hasattr(func, _WRAPPED):
        return func
    if not callable(func):
        msg = f"'func' must be callable; got {type(func).__name__}"
        raise TypeError(msg)
    name = func.__name__

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call_kwargs = {**_CURRENT.get().defaults_for(name), **kwargs}
        out = func(*args, **call_kwargs)
        if log_shape:
            ctx = get_current_tower_context()
            if ctx is None or ctx.is_main_training_tower:
                first_in = _first_tensor(list(args) + list(call_kwargs.values()))
                first_out = _first_tensor(out)
                scope = tf1.get_default_graph().get_name_scope()
                label = call_kwargs.get("name") or name
                _log.info(
                    "%s%s: input %s, output %s",
                    f"{scope}/" if scope else "",
                    label,
                    None if first_in is None else first_in.shape,
                    None if first_out is None else first_out.shape,
                )
        return out

    setattr(wrapper, _WRAPPED, func)
    return wrapper


def _module_functions(module: types.ModuleType) -> list[tuple[str, Any]]:
    """The public functions of `module`, resolving TensorFlow's lazy Keras loaders first."""
    state = layers_loader_state(module)
    if state is None:
        return [
            (attr, value)
            for attr, value in list(vars(module).items())
            if not attr.startswith("_") and inspect.isfunction(value)
        ]
    fix = (
        "the graph-mode layers (tf.compat.v1.layers) need tf-keras: install "
        "'towerkit-towers[layers]' and call towerkit.towers.enable_tf_layers() (or set "
        "TF_USE_LEGACY_KERAS=1) before the layers are first used"
    )
    try:
        names = [n for n in dir(module) if not n.startswith("_")]
        found = [(n, getattr(module, n)) for n in names]
    except (ImportError, AttributeError) as err:
        msg = f"cannot enable argscope for {module!r}: {err}; {fix}"
        raise LayersUnavailableError(msg) from err
    functions = [(n, v) for n, v in found if inspect.isfunction(v)]
    if layers_loader_state(module) != "tf_keras" and not functions:
        msg = f"cannot enable argscope for {module!r}: it holds no functions; {fix}"
        raise LayersUnavailableError(msg)
    return functions


def enable_argscope_for_module(module: types.ModuleType, log_shape: bool = True) -> None:
    """Replace every public function of `module` by its argscope-enabled version.

    This changes the module object for every user of it. TensorFlow's lazily
    loaded modules, such as ``tf.compat.v1.layers`` (the graph-mode layers of
    tf-keras, see `enable_tf_layers`), are resolved first and the module they
    stand for is changed, so ``tf.compat.v1.layers.conv2d`` reads the argscope.

    Raises:
        TypeError: `module` is not a module.
        LayersUnavailableError: `module` is ``tf.compat.v1.layers`` without tf-keras
            behind it.
    """
    if not isinstance(module, types.ModuleType):
        msg = f"'module' must be a module; got {type(module).__name__}"
        raise TypeError(msg)
    functions = _module_functions(module)
    targets = [module]
    real = sys.modules.get(getattr(module, "__name__", ""))
    if real is not None and real is not module:
        targets.append(real)
    if layers_loader_state(module) is not None:
        # other names of the same lazily loaded module (see `layers_loaders`)
        targets += [
            m
            for m in layers_loaders()
            if all(m is not t for t in targets)
            and layers_loader_state(m) == layers_loader_state(module)
            and getattr(m, "__name__", None) == getattr(module, "__name__", None)
        ]
    for attr, value in functions:
        wrapped = enable_argscope_for_function(value, log_shape=log_shape)
        for target in targets:
            setattr(target, attr, wrapped)
