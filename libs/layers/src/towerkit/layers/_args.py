"""Pure argument rules of the layers: data formats, 2-D shapes, paddings and tensorpack's aliases."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

_TO_KERAS = {"NHWC": "channels_last", "NCHW": "channels_first"}
_TO_TF = {"channels_last": "NHWC", "channels_first": "NCHW"}


def keras_data_format(data_format: str) -> str:
    """`data_format` as ``channels_last``/``channels_first`` (``NHWC``/``NCHW`` accepted).

    Examples:
        >>> keras_data_format("NCHW")
        'channels_first'
        >>> keras_data_format("channels_last")
        'channels_last'
    """
    result = _TO_KERAS.get(data_format, data_format) if isinstance(data_format, str) else None
    if result not in _TO_TF:
        msg = (
            "'data_format' must be one of 'channels_last', 'channels_first', 'NHWC', 'NCHW'; "
            f"got {data_format!r}"
        )
        raise ValueError(msg)
    return result


def tf_data_format(data_format: str) -> str:
    """`data_format` as ``NHWC``/``NCHW`` (``channels_last``/``channels_first`` accepted).

    Examples:
        >>> tf_data_format("channels_first")
        'NCHW'
        >>> tf_data_format("NHWC")
        'NHWC'
    """
    return _TO_TF[keras_data_format(data_format)]


def channel_axis(data_format: str) -> int:
    """The channel axis of a 4-D tensor in `data_format`.

    Examples:
        >>> channel_axis("NHWC"), channel_axis("channels_first")
        (3, 1)
    """
    return 3 if tf_data_format(data_format) == "NHWC" else 1


def shape2d(value: Any, what: str = "shape") -> list[int]:
    """An int or a pair as a ``[h, w]`` list of positive ints.

    Examples:
        >>> shape2d(3)
        [3, 3]
        >>> shape2d((2, 5))
        [2, 5]
    """

    def positive(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    if positive(value):
        return [value, value]
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(map(positive, value)):
        return [int(value[0]), int(value[1])]
    msg = f"{what!r} must be a positive int or a pair of positive ints; got {value!r}"
    raise ValueError(msg)


def shape4d(value: Any, data_format: str = "NHWC", what: str = "shape") -> list[int]:
    """A 2-D size as the 4-D list of a tf.nn op: ``[1, h, w, 1]`` or ``[1, 1, h, w]``.

    Examples:
        >>> shape4d(2)
        [1, 2, 2, 1]
        >>> shape4d((2, 3), "channels_first")
        [1, 1, 2, 3]
    """
    pair = shape2d(value, what)
    return [1, *pair, 1] if tf_data_format(data_format) == "NHWC" else [1, 1, *pair]


def tf_padding(padding: str) -> str:
    """``same``/``valid`` (any case) as the ``SAME``/``VALID`` of the tf.nn ops.

    Examples:
        >>> tf_padding("same")
        'SAME'
    """
    if isinstance(padding, str) and padding.upper() in ("SAME", "VALID"):
        return padding.upper()
    msg = f"'padding' must be 'same' or 'valid' (any case); got {padding!r}"
    raise ValueError(msg)


def conv_output_size(size: int | None, kernel: int, stride: int, padding: str) -> int | None:
    """The output length of a convolution or pooling along one axis (None stays None).

    Examples:
        >>> conv_output_size(7, 3, 2, "same"), conv_output_size(7, 3, 2, "valid")
        (4, 3)
    """
    if size is None:
        return None
    if tf_padding(padding) == "SAME":
        return -(-size // stride)
    return max(-(-(size - kernel + 1) // stride), 0)


def transpose_output_size(size: int | None, kernel: int, stride: int, padding: str) -> int | None:
    """The output length of a transposed convolution along one axis, as tensorpack computes it.

    ``same``: ``size * stride``; ``valid``: ``size * stride + max(kernel - stride, 0)``.

    Examples:
        >>> transpose_output_size(5, 3, 2, "same"), transpose_output_size(5, 3, 2, "valid")
        (10, 11)
    """
    if size is None:
        return None
    extra = max(kernel - stride, 0) if tf_padding(padding) == "VALID" else 0
    return size * stride + extra


def rename_aliases(
    layer: str, kwargs: Mapping[str, Any], aliases: Mapping[str, str]
) -> dict[str, Any]:
    """`kwargs` with tensorpack's old argument names mapped to the new ones.

    Besides `aliases`, ``W_init``/``b_init`` become ``kernel_initializer``/``bias_initializer``
    and ``nl`` becomes ``activation`` (these win over the new names). Giving both an
    alias and its target is an error.

    Examples:
        >>> rename_aliases("Conv2D", {"out_channel": 4, "W_init": "w"}, {"out_channel": "filters"})
        {'filters': 4, 'kernel_initializer': 'w'}
    """
    common = COMMON_ALIASES
    result: dict[str, Any] = {}
    clashes = []
    for key, value in kwargs.items():
        if key in common:
            continue
        new = aliases.get(key, key)
        if new != key and new in kwargs:
            clashes.append(f"{key!r} and {new!r}")
        result[new] = value
    # the old common names win over the new ones, as tensorpack lets them
    result.update((common[k], v) for k, v in kwargs.items() if k in common)
    if clashes:
        msg = f"{layer}: arguments {', '.join(clashes)} name the same thing; give one of each"
        raise TypeError(msg)
    return result


COMMON_ALIASES = {"W_init": "kernel_initializer", "b_init": "bias_initializer", "nl": "activation"}
"""tensorpack's old names that every layer with a kernel (or an activation) takes."""


def given_twice(
    positional: Sequence[str], given: int, keywords: Iterable[str], aliases: Mapping[str, str]
) -> list[str]:
    """The values a call gives more than once: by position and by keyword, or under two names.

    Args:
        positional: the names of the arguments that may follow the input, in order.
        given: how many follow it in the call.
        keywords: the keyword arguments of the call (not the argscope's defaults).
        aliases: old names and the names they stand for.

    Returns:
        One entry per value given twice, naming how it was given; empty when none is.

    Examples:
        >>> given_twice(["units"], 1, ["out_dim"], {"out_dim": "units"})
        ["positional 'units' and 'out_dim'"]
        >>> given_twice(["units"], 0, ["out_dim", "units", "nl", "activation"],
        ...             {"out_dim": "units", "nl": "activation"})
        ["'out_dim' and 'units'", "'nl' and 'activation'"]
        >>> given_twice(["filters", "kernel_size"], 2, ["strides"], {})
        []
    """
    ways: dict[str, list[str]] = {}
    for name in positional[:given]:
        ways.setdefault(name, []).append(f"positional {name!r}")
    for key in keywords:
        ways.setdefault(aliases.get(key, key), []).append(repr(key))
    return [" and ".join(w) for w in ways.values() if len(w) > 1]


def _nl_activation(nl: Callable[..., Any]) -> Callable[..., Any]:
    def activation(x: Any, name: str | None = None) -> Any:
        return nl(x, name=name)

    return activation


def tflayer_args(
    positional: Sequence[str], aliases: Mapping[str, str]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a layer body so it takes tensorpack's positional arguments and aliases.

    The body is called as ``body(inputs, **kwargs)``: up to ``len(positional)``
    arguments after the input are named by `positional` (and win over the same
    keyword, which lets an argscope default them), aliases are renamed (see
    `rename_aliases`), ``nl`` is wrapped into an activation and a data format is
    given in the ``channels_*`` spelling. The signature seen by `argscope` is the
    body's plus the aliases as keyword-only arguments.
    """

    def decorator(body: Callable[..., Any]) -> Callable[..., Any]:
        layer = body.__name__

        @functools.wraps(body)
        def call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if len(args) > len(positional):
                msg = (
                    f"{layer} takes at most {len(positional)} positional arguments after the "
                    f"input ({', '.join(positional)}); give the others by keyword, got {len(args)}"
                )
                raise TypeError(msg)
            named = rename_aliases(layer, kwargs, aliases)
            if "nl" in kwargs and kwargs["nl"] is not None:
                named["activation"] = _nl_activation(kwargs["nl"])
            if named.get("data_format") is not None:
                named["data_format"] = keras_data_format(named["data_format"])
            named.update(zip(positional, args))
            return body(inputs, **named)

        call.given_twice_rules = (tuple(positional), {**aliases, **COMMON_ALIASES})  # type: ignore[attr-defined]
        params = list(inspect.signature(body).parameters.values())
        extra = [
            inspect.Parameter(alias, inspect.Parameter.KEYWORD_ONLY, default=None)
            for alias in [*aliases, "nl", "W_init", "b_init"]
        ]
        call.__signature__ = inspect.Signature(params + extra)  # type: ignore[attr-defined]
        return call

    return decorator
