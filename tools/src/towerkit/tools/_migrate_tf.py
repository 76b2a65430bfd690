"""TensorFlow 1 calls through ``tf.``: TensorFlow's own upgrader tables, read once."""

from __future__ import annotations

import functools
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class TFRules:
    """What ``tf_upgrade_v2`` knows, as plain tables.

    Attributes:
        renames: full dotted name (``tf.placeholder``) to its TensorFlow 2 name.
        reorders: full name to its TensorFlow 1 positional argument names (None for a
            position that keeps its place), for calls
            whose argument order changed (``tf.nn.in_top_k``): positional arguments
            become keywords.
        keyword_renames: full name to ``{old keyword: new keyword}``.
    """

    renames: dict[str, str] = attrs.field(factory=dict)
    reorders: dict[str, tuple[str | None, ...]] = attrs.field(factory=dict)
    keyword_renames: dict[str, dict[str, str]] = attrs.field(factory=dict)


@functools.cache
def load_rules() -> TFRules:
    """TensorFlow's upgrader tables (``tensorflow.tools.compatibility.tf_upgrade_v2``).

    Raises:
        ImportError: TensorFlow (with its upgrader) is not installed.
    """
    from tensorflow.tools.compatibility import tf_upgrade_v2

    spec = tf_upgrade_v2.TFAPIChangeSpec()
    renames = {k: v for k, v in spec.symbol_renames.items() if v and not k.startswith("tf.compat.")}
    reorders = {k: tuple(v) for k, v in spec.function_reorders.items()}
    keywords = {
        k: {old: new for old, new in v.items() if new}
        for k, v in spec.function_keyword_renames.items()
    }
    return TFRules(renames=renames, reorders=reorders, keyword_renames=keywords)


def _resolves(root: Any, dotted: str) -> bool:
    obj = root
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part)
        except Exception:
            return False
    return True


@functools.cache
def compat_name(full: str) -> tuple[str, str] | None:
    """The TensorFlow 2 spelling of `full` (``tf.a.b``) and why, or None when it needs none.

    TensorFlow's rename table (``tf_upgrade_v2``) first; ``tf.summary.*`` goes to
    ``tf.compat.v1.summary`` (TensorFlow 2's writes nothing in a graph without a default
    writer); then a name missing from TensorFlow 2 but present in ``tf.compat.v1`` goes
    there.
    """
    if not full.startswith("tf.") or full.startswith("tf.compat."):
        return None
    rules = load_rules()
    if full in rules.renames:
        new = rules.renames[full]
        if new not in rules.reorders:
            return new, "TensorFlow's tf_upgrade_v2 rename"
        # The new name is also a TensorFlow 1 name whose arguments moved: a second run
        # would read its call as TensorFlow 1's. Keep a spelling that means one thing.
        import tensorflow as tf

        if _resolves(tf, full[3:]):
            return None
        if _resolves(tf.compat.v1, full[3:]):
            return "tf.compat.v1." + full[3:], f"{new} is a TensorFlow 1 name too"
        return new, "TensorFlow's tf_upgrade_v2 rename"
    if full.startswith("tf.summary."):
        return "tf.compat.v1." + full[3:], "graph-mode summaries are tf.compat.v1's"
    import tensorflow as tf

    rest = full[3:]
    if not _resolves(tf, rest) and _resolves(tf.compat.v1, rest):
        return "tf.compat.v1." + rest, "not in TensorFlow 2; kept in tf.compat.v1"
    return None
