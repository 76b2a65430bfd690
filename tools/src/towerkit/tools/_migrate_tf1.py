"""TensorFlow 1 calls that ``tf_upgrade_v2`` rewrites by a function of its own, not by a table.

TensorFlow's upgrader (``tensorflow/tools/compatibility/tf_upgrade_v2.py``) has, beside its
tables of renames and reordered arguments, a function per call whose meaning changed in
TensorFlow 2 (``function_transformers``). Each case is written here as a pure rewrite of
one libcst call: where TensorFlow 1's meaning is kept by ``tf.compat.v1`` the call goes
there (the three-argument ``tf.name_scope``); where an argument is dropped or wrapped, the
call is rewritten (``optimize=True`` dropped, labels under ``tf.stop_gradient``).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import libcst as cst

from towerkit.tools._migrate_syntax import parse_expr


@attrs.frozen(kw_only=True)
class CallRewrite:
    """A rewritten call and the line reported for it.

    Attributes:
        node: the new expression.
        note: what changed and why.
        final: no other rule applies after it (its arguments are TensorFlow 1's, kept by
            ``tf.compat.v1``, so TensorFlow 2's renames of keywords must not touch them).
    """

    node: cst.BaseExpression
    note: str
    final: bool = True


def find_arg(call: cst.Call, keyword: str, position: int | None) -> cst.Arg | None:
    """The argument of `call` given as `keyword`, or at `position` (0-based) if not a keyword."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    if position is None:
        return None
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position] if position < len(positional) else None


def _is_name(node: cst.BaseExpression, value: str) -> bool:
    return isinstance(node, cst.Name) and node.value == value


def _is_string(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.SimpleString | cst.ConcatenatedString | cst.FormattedString)


def _to_compat(call: cst.Call, name: str, why: str) -> CallRewrite:
    new = "tf.compat.v1." + name[3:]
    return CallRewrite(node=call.with_changes(func=parse_expr(new)), note=f"{name} -> {new}: {why}")


def _without(call: cst.Call, dropped: cst.Arg) -> cst.Call:
    args = [a for a in call.args if a is not dropped]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


def _flag_or_compat(
    name: str, keyword: str, position: int, keep_if: str, why: str
) -> Callable[[cst.Call], CallRewrite | None]:
    """A TensorFlow 2 call behaves as ``keyword=keep_if``: drop that literal, else tf.compat.v1."""

    def rule(call: cst.Call) -> CallRewrite | None:
        arg = find_arg(call, keyword, position)
        if arg is None:
            return None
        if _is_name(arg.value, keep_if):
            return CallRewrite(
                node=_without(call, arg),
                note=f"{name}: {keyword}={keep_if} dropped (TensorFlow 2 behaves so)",
                final=False,
            )
        return _to_compat(call, name, why)

    return rule


def _name_scope(call: cst.Call) -> CallRewrite | None:
    positional = [a for a in call.args if a.keyword is None]
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    if len(positional) > 1 or keywords & {"default_name", "values"}:
        return _to_compat(call, "tf.name_scope", "TensorFlow 1's (name, default_name, values) form")
    return None


def _device(call: cst.Call) -> CallRewrite | None:
    arg = find_arg(call, "device_name", 0)
    if arg is None or _is_string(arg.value) or _is_name(arg.value, "None"):
        return None
    return _to_compat(call, "tf.device", "its argument may be a device function")


def _softmax_xent(call: cst.Call) -> CallRewrite | None:
    arg = find_arg(call, "labels", None)
    if arg is None:
        return None
    inner = arg.value
    if isinstance(inner, cst.Call) and (_dotted(inner.func) == "tf.stop_gradient"):
        return None
    wrapped = cst.Call(func=parse_expr("tf.stop_gradient"), args=[cst.Arg(inner)])
    args = [a.with_changes(value=wrapped) if a is arg else a for a in call.args]
    return CallRewrite(
        node=call.with_changes(args=args),
        note="tf.nn.softmax_cross_entropy_with_logits: labels under tf.stop_gradient "
        "(TensorFlow 1 did not back-propagate into the labels)",
        final=False,
    )


def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def _extra_args(
    name: str, keywords: frozenset[str], positions: int, why: str
) -> Callable[[cst.Call], CallRewrite | None]:
    """tf.compat.v1 when a TensorFlow 1 keyword or over `positions` positional arguments are given."""

    def rule(call: cst.Call) -> CallRewrite | None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        given = {a.keyword.value for a in call.args if a.keyword is not None}
        if len(positional) > positions or given & keywords:
            return _to_compat(call, name, why)
        return None

    return rule


def _always(name: str, why: str) -> Callable[[cst.Call], CallRewrite | None]:
    def rule(call: cst.Call) -> CallRewrite | None:
        return _to_compat(call, name, why)

    return rule


TF1_CALLS: dict[str, Callable[[cst.Call], CallRewrite | None]] = {
    "tf.name_scope": _name_scope,
    "tf.device": _device,
    "tf.zeros_like": _flag_or_compat(
        "tf.zeros_like", "optimize", 3, "True", "optimize= has no TensorFlow 2 counterpart"
    ),
    "tf.ones_like": _flag_or_compat(
        "tf.ones_like", "optimize", 3, "True", "optimize= has no TensorFlow 2 counterpart"
    ),
    "tf.while_loop": _flag_or_compat(
        "tf.while_loop",
        "return_same_structure",
        9,
        "True",
        "return_same_structure=False has no TensorFlow 2 counterpart",
    ),
    "tf.nn.softmax_cross_entropy_with_logits": _softmax_xent,
    "tf.nn.fractional_max_pool": _extra_args(
        "tf.nn.fractional_max_pool",
        frozenset({"deterministic", "seed2"}),
        4,
        "deterministic= and seed2= are TensorFlow 1's",
    ),
    "tf.nn.fractional_avg_pool": _extra_args(
        "tf.nn.fractional_avg_pool",
        frozenset({"deterministic", "seed2"}),
        4,
        "deterministic= and seed2= are TensorFlow 1's",
    ),
    "tf.image.extract_glimpse": _extra_args(
        "tf.image.extract_glimpse",
        frozenset({"uniform_noise"}),
        5,
        "uniform_noise= is TensorFlow 1's (its sixth argument is noise= in TensorFlow 2)",
    ),
    "tf.nn.ctc_beam_search_decoder": _always(
        "tf.nn.ctc_beam_search_decoder",
        "TensorFlow 2's merges no repeated labels (TensorFlow 1's merge_repeated=True)",
    ),
    "tf.nn.dilation2d": _always(
        "tf.nn.dilation2d", "TensorFlow 2's takes data_format and dilations in another order"
    ),
    "tf.nn.erosion2d": _always(
        "tf.nn.erosion2d", "TensorFlow 2's takes data_format and dilations in another order"
    ),
    "tf.strings.split": _always(
        "tf.strings.split", "TensorFlow 2's returns a RaggedTensor, TensorFlow 1's a SparseTensor"
    ),
}
"""The calls tf_upgrade_v2 rewrites by function (its ``function_transformers``) that the
renames, reorders and keyword tables miss, each with its rewrite. Left out: ``tf.to_*``
and ``tf.image.resize_*`` (their tf.compat.v1 names keep them), the ``tf.contrib`` ones (the
API record), ``tf.keras.models.save_model`` (Keras)."""

ITERATOR_METHODS = ("make_one_shot_iterator", "make_initializable_iterator")
"""Dataset methods gone in TensorFlow 2, kept as ``tf.compat.v1.data`` functions."""


def upgrade_call(name: str, call: cst.Call) -> CallRewrite | None:
    """The rewrite of a TensorFlow 1 call `name` (``tf.name_scope``), or None when none applies.

    ``ds.make_one_shot_iterator()`` (any receiver) becomes
    ``tf.compat.v1.data.make_one_shot_iterator(ds)``.

    Examples:
        >>> call = cst.parse_expression('tf.name_scope(name, "PTBProducer", [x])')
        >>> cst.Module([]).code_for_node(upgrade_call("tf.name_scope", call).node)
        'tf.compat.v1.name_scope(name, "PTBProducer", [x])'
        >>> upgrade_call("tf.name_scope", cst.parse_expression('tf.name_scope("a")')) is None
        True
    """
    rule = TF1_CALLS.get(name)
    if rule is not None:
        return rule(call)
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in ITERATOR_METHODS and not call.args:
        new = f"tf.compat.v1.data.{func.attr.value}"
        return CallRewrite(
            node=cst.Call(func=parse_expr(new), args=[cst.Arg(func.value)]),
            note=f"Dataset.{func.attr.value}() -> {new}(dataset) (gone from TensorFlow 2's Dataset)",
        )
    return None
