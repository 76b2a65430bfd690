"""Input and output names: validation, suggestions and signature keys (pure)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

_PORT = re.compile(r"^(?P<op>.+?)(?::(?P<port>\d+))?$")


def as_names(what: str, names: object) -> tuple[str, ...]:
    """`names` as a tuple of non-empty strings; errors name the argument `what`.

    Raises:
        TypeError: `names` is a string or not iterable, or holds something else than strings.
        ValueError: some names are empty.

    Examples:
        >>> as_names("output_names", ["prob", "logits"])
        ('prob', 'logits')
        >>> as_names("output_names", "prob")
        Traceback (most recent call last):
        ...
        TypeError: 'output_names' must be a sequence of strings; got str
    """
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        msg = f"{what!r} must be a sequence of strings; got {type(names).__name__}"
        raise TypeError(msg)
    names = tuple(names)
    wrong = [f"{i}: {type(n).__name__}" for i, n in enumerate(names) if not isinstance(n, str)]
    if wrong:
        msg = f"{what!r} must hold strings; entries at fault: {', '.join(wrong)}"
        raise TypeError(msg)
    empty = [str(i) for i, n in enumerate(names) if not n]
    if empty:
        msg = f"{what!r} must hold non-empty names; empty entries at: {', '.join(empty)}"
        raise ValueError(msg)
    return names


def _repeated(names: Sequence[str]) -> list[str]:
    return sorted({n for n in names if names.count(n) > 1})


def op_name(tensor_name: str) -> str:
    """The operation name of a tensor name (``"prob:0"`` gives ``"prob"``).

    Examples:
        >>> op_name("prob:0")
        'prob'
        >>> op_name("tower/logits")
        'tower/logits'
        >>> op_name("split:1")
        'split'
    """
    match = _PORT.match(tensor_name)
    return match.group("op") if match else tensor_name


def signature_key(tensor_name: str) -> str:
    """The key under which a tensor appears in a SavedModel signature.

    The default port ``:0`` is dropped; another port becomes a ``_<port>`` suffix,
    since a colon is not allowed in the keyword arguments of a loaded signature.

    Examples:
        >>> signature_key("prob:0")
        'prob'
        >>> signature_key("prob")
        'prob'
        >>> signature_key("split:1")
        'split_1'
    """
    match = _PORT.match(tensor_name)
    if match is None:
        return tensor_name
    port = match.group("port")
    return match.group("op") if port in (None, "0") else f"{match.group('op')}_{port}"


def check_input_names(
    input_names: Sequence[str] | None, signature_names: Sequence[str]
) -> tuple[str, ...]:
    """The names to feed: all of the signature's when None, else the names given, checked.

    A name is either a name of the input signature or the name of any tensor of the
    tower (``"z"`` or ``"z:0"``, without the tower prefix), for example a
    ``placeholder_with_default`` inside the model; whether such a tensor exists is
    known only once the tower is built.

    Args:
        input_names: the names to feed, in feeding order, or None.
        signature_names: the names of the input signature, in order.

    Returns:
        The input names as a tuple.

    Raises:
        TypeError: `input_names` is not a sequence of strings.
        ValueError: no names, empty names, or names repeated.

    Examples:
        >>> check_input_names(None, ["image", "label"])
        ('image', 'label')
        >>> check_input_names(["image"], ["image", "label"])
        ('image',)
        >>> check_input_names(["z", "image"], ["image", "label"])
        ('z', 'image')
        >>> check_input_names(["z", "z"], ["image", "label"])
        Traceback (most recent call last):
        ...
        ValueError: 'input_names' must not repeat a name; repeated: 'z'
    """
    valid = tuple(signature_names)
    if input_names is None:
        return valid
    names = as_names("input_names", input_names)
    if not names:
        msg = (
            f"'input_names' is empty: name at least one input of the signature {list(valid)} "
            "or tensor of the tower"
        )
        raise ValueError(msg)
    repeated = _repeated(names)
    if repeated:
        msg = f"'input_names' must not repeat a name; repeated: {', '.join(map(repr, repeated))}"
        raise ValueError(msg)
    return names


def check_output_names(output_names: Sequence[str] | None) -> tuple[str, ...]:
    """Check output tensor names: at least one, no repeats, distinct signature keys.

    Returns:
        The output names as a tuple.

    Raises:
        TypeError: `output_names` is not a sequence of strings.
        ValueError: none given, or two of them name the same tensor or signature key.

    Examples:
        >>> check_output_names(["prob", "logits:0"])
        ('prob', 'logits:0')
        >>> check_output_names(["prob", "prob:0"])
        Traceback (most recent call last):
        ...
        ValueError: 'output_names' must name distinct tensors; these share the signature key 'prob': 'prob', 'prob:0'
    """
    if output_names is None:
        msg = "'output_names' is required: name the tensors of the tower to predict"
        raise ValueError(msg)
    names = as_names("output_names", output_names)
    if not names:
        msg = "'output_names' is empty: name at least one tensor of the tower"
        raise ValueError(msg)
    by_key: dict[str, list[str]] = {}
    for name in names:
        by_key.setdefault(signature_key(name), []).append(name)
    clashes = [(key, group) for key, group in by_key.items() if len(group) > 1]
    if clashes:
        parts = "; ".join(
            f"the signature key {key!r}: {', '.join(map(repr, group))}" for key, group in clashes
        )
        msg = f"'output_names' must name distinct tensors; these share {parts}"
        raise ValueError(msg)
    return names


def close_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` of `candidates` that look like `name`, closest first.

    Examples:
        >>> close_names("prob", ["probs", "logits", "prob_1", "fc/W"])
        ['probs', 'prob_1']
        >>> close_names("xyz", ["logits"])
        []
    """
    pool = list(dict.fromkeys(candidates))
    return difflib.get_close_matches(name, pool, n=n, cutoff=0.6)


def render_unknown(
    missing: Sequence[str],
    candidates: Iterable[str],
    scope: str = "the inference tower",
    what: str = "output_names",
) -> str:
    """The message for output names that name no tensor, with suggestions for each.

    Examples:
        >>> print(render_unknown(["probs"], ["prob", "logits"]))
        'output_names' must name tensors of the inference tower; not found: 'probs' (did you mean 'prob'?)
    """
    pool = list(dict.fromkeys(candidates))
    parts = []
    for name in missing:
        near = close_names(name, pool)
        hint = f" (did you mean {' or '.join(map(repr, near))}?)" if near else ""
        parts.append(f"{name!r}{hint}")
    return f"{what!r} must name tensors of {scope}; not found: {', '.join(parts)}"
