"""LinearWrap: chain single-input layers and TensorFlow functions on one tensor."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from towerkit.layers._registry import get_registered_layer
from towerkit.towers.compat import tf1


class _ModuleCaller:
    """``LinearWrap(x).tf.nn.relu()``: attribute access into a module, calling with the tensor first."""

    def __init__(self, module: types.ModuleType, tensor: Any) -> None:
        self._module = module
        self._tensor = tensor

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._module, name)
        if isinstance(target, types.ModuleType):
            return _ModuleCaller(target, self._tensor)
        if not callable(target):
            msg = f"LinearWrap: {self._module.__name__}.{name} is not a function"
            raise TypeError(msg)

        def call(*args: Any, **kwargs: Any) -> LinearWrap:
            return LinearWrap(target(self._tensor, *args, **kwargs))

        return call


class LinearWrap:
    """A tensor that registered layers and functions chain on, as tensorpack's ``LinearWrap``.

    ``LinearWrap(x).Conv2D('c0', 32, 3).MaxPooling('p0', 2).FullyConnected('fc', 10)()``
    calls each registered layer with the wrapped tensor as its input; ``.tf.<f>``
    calls a TensorFlow (``tf.compat.v1``) function; `apply` and `apply2` call any
    function; calling the wrap (or `tensor`) returns the tensor.
    """

    def __init__(self, tensor: Any) -> None:
        self._t = tensor

    def __getattr__(self, layer_name: str) -> Any:
        if layer_name.startswith("__"):
            raise AttributeError(layer_name)
        layer = get_registered_layer(layer_name)
        if layer is None:
            if layer_name != "tf":
                msg = (
                    f"LinearWrap.{layer_name}: neither a registered layer nor 'tf' "
                    "(did you forget to take the tensor out of the LinearWrap with ()?)"
                )
                raise AttributeError(msg)
            return _ModuleCaller(tf1, self._t)
        if layer.use_scope:  # type: ignore[attr-defined]

            def with_name(name: str, *args: Any, **kwargs: Any) -> LinearWrap:
                return LinearWrap(layer(name, self._t, *args, **kwargs))

            return with_name

        def maybe_name(*args: Any, **kwargs: Any) -> LinearWrap:
            if args and isinstance(args[0], str):
                return LinearWrap(layer(args[0], self._t, *args[1:], **kwargs))
            return LinearWrap(layer(self._t, *args, **kwargs))

        return maybe_name

    def apply(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> LinearWrap:
        """``LinearWrap(func(tensor, *args, **kwargs))``."""
        return LinearWrap(func(self._t, *args, **kwargs))

    def apply2(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> LinearWrap:
        """``LinearWrap(func(args[0], tensor, *args[1:], **kwargs))``: for layers taking a name first."""
        if not args:
            msg = "LinearWrap.apply2 needs the first argument of `func` (such as a layer name)"
            raise TypeError(msg)
        return LinearWrap(func(args[0], self._t, *args[1:], **kwargs))

    def __call__(self) -> Any:
        """The wrapped tensor."""
        return self._t

    def tensor(self) -> Any:
        """The wrapped tensor (same as calling the wrap)."""
        return self._t

    def print_tensor(self) -> LinearWrap:
        """Print the wrapped tensor and return the wrap."""
        print(self._t)
        return self
