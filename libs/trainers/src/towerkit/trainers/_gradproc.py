"""Gradient processors: frozen records whose ``process`` maps (gradient, variable) pairs to new ones."""

from __future__ import annotations

import abc
import functools
import inspect
import logging
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import tensorflow as tf

from towerkit.towers import add_moving_summary, get_current_tower_context
from towerkit.towers.compat import tf1

__all__ = [
    "GradientProcessor",
    "FilterNoneGrad",
    "GlobalNormClip",
    "MapGradient",
    "SummaryGradient",
    "PrintGradient",
    "CheckGradient",
    "ScaleGradient",
    "Chain",
    "chain",
    "check_grads_and_vars",
    "regex_matches",
    "first_multiplier",
    "check_multipliers",
]

logger = logging.getLogger("towerkit.trainers")

GradsAndVars = list[tuple[Any, Any]]


# -- pure helpers ------------------------------------------------------------------------


def regex_matches(regex: str, name: str) -> bool:
    """Whether `regex` matches the WHOLE of `name` (``re.fullmatch``).

    Variable names are op names, without the ``:0`` port. ``'.*/b'`` matches ``'fc/b'``
    but not ``'fc/bias'``; write ``'.*/b.*'`` to match a prefix.

    Examples:
        >>> regex_matches(".*/b", "fc/b")
        True
        >>> regex_matches(".*/b", "fc/bias")
        False
        >>> regex_matches("layer0/.*", "layer0/W")
        True
    """
    return re.fullmatch(regex, name) is not None


def _check_regex(regex: Any, what: str) -> str:
    if not isinstance(regex, str):
        msg = f"{what} must be a regular expression string; got {type(regex).__name__}"
        raise TypeError(msg)
    try:
        re.compile(regex)
    except re.error as err:
        msg = f"{what} {regex!r} is not a valid regular expression: {err}"
        raise ValueError(msg) from None
    return regex


def check_multipliers(multipliers: Any) -> tuple[tuple[str, float], ...]:
    """Normalize ScaleGradient's `multipliers` to a tuple of ``(regex, float)`` pairs.

    A single pair may be given alone. Every entry at fault is listed in the error.

    Examples:
        >>> check_multipliers((".*/b", 2))
        (('.*/b', 2.0),)
        >>> check_multipliers([(".*/b", 2.0), ("layer0/.*", 0)])
        (('.*/b', 2.0), ('layer0/.*', 0.0))
        >>> check_multipliers([(".*/b", "x"), ("(", 1.0)])
        Traceback (most recent call last):
        ...
        ValueError: 'multipliers' entries must be (regex, number) pairs with a valid regex; entries at fault: #0 ('.*/b', 'x'): multiplier is not a number; #1 ('(', 1.0): bad regex: missing ), unterminated subpattern at position 0
    """
    if (
        isinstance(multipliers, tuple)
        and len(multipliers) == 2
        and isinstance(multipliers[0], str)
        and not isinstance(multipliers[1], (tuple, list))
    ):
        multipliers = [multipliers]
    if isinstance(multipliers, (str, bytes)) or not isinstance(multipliers, Sequence):
        msg = f"'multipliers' must be a (regex, number) pair or a list of them; got {type(multipliers).__name__}"
        raise TypeError(msg)
    if not multipliers:
        msg = "'multipliers' is empty: expected at least one (regex, number) pair"
        raise ValueError(msg)
    out, wrong = [], []
    for i, entry in enumerate(multipliers):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            wrong.append(f"#{i} {entry!r}: not a (regex, number) pair")
            continue
        regex, value = entry
        if not isinstance(regex, str):
            wrong.append(f"#{i} {tuple(entry)!r}: regex is not a str")
            continue
        try:
            re.compile(regex)
        except re.error as err:
            wrong.append(f"#{i} {tuple(entry)!r}: bad regex: {err}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            wrong.append(f"#{i} {tuple(entry)!r}: multiplier is not a number")
            continue
        out.append((regex, float(value)))
    if wrong:
        msg = (
            "'multipliers' entries must be (regex, number) pairs with a valid regex; "
            f"entries at fault: {'; '.join(wrong)}"
        )
        raise ValueError(msg)
    return tuple(out)


def first_multiplier(multipliers: Sequence[tuple[str, float]], name: str) -> float | None:
    """The multiplier of the first pair whose regex fully matches `name`, or None.

    Examples:
        >>> mults = ((".*/b", 2.0), ("layer0/.*", 0.0))
        >>> first_multiplier(mults, "layer1/b")
        2.0
        >>> first_multiplier(mults, "layer0/b")
        2.0
        >>> first_multiplier(mults, "layer0/W")
        0.0
        >>> first_multiplier(mults, "layer1/W") is None
        True
    """
    for regex, value in multipliers:
        if re.fullmatch(regex, name) is not None:
            return value
    return None


def check_grads_and_vars(grads: Any) -> GradsAndVars:
    """Return `grads` as a list of ``(gradient, variable)`` pairs, or raise.

    Raises:
        TypeError: `grads` is not a sequence of pairs; every entry at fault is listed.

    Examples:
        >>> check_grads_and_vars([("g0", "v0"), ["g1", "v1"]])
        [('g0', 'v0'), ('g1', 'v1')]
        >>> check_grads_and_vars([("g0", "v0"), "g1", ("g2",)])
        Traceback (most recent call last):
        ...
        TypeError: gradients must be (gradient, variable) pairs; entries at fault: #1: str, #2: tuple
    """
    if isinstance(grads, (str, bytes)) or not isinstance(grads, Sequence):
        msg = f"gradients must be a list of (gradient, variable) pairs; got {type(grads).__name__}"
        raise TypeError(msg)
    pairs = list(grads)
    wrong = [
        f"#{i}: {type(p).__name__}"
        for i, p in enumerate(pairs)
        if not isinstance(p, (tuple, list)) or len(p) != 2
    ]
    if wrong:
        msg = f"gradients must be (gradient, variable) pairs; entries at fault: {', '.join(wrong)}"
        raise TypeError(msg)
    return [(g, v) for g, v in pairs]


def _var_name(var: Any) -> str:
    """The variable's op name (no ``:0``)."""
    op = getattr(var, "op", None)
    if op is not None:
        name: str = op.name
        return name
    return str(getattr(var, "name", var)).split(":")[0]


def _values(grad: Any) -> Any:
    """The dense values of a gradient (the ``values`` of ``IndexedSlices``)."""
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _map_values(grad: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply `fn` to a gradient's values, keeping ``IndexedSlices`` sparse."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
    return fn(grad)


def _check_numerics(x: Any, message: str) -> Any:
    return tf.debugging.check_numerics(x, message)


def _scale(x: Any, factor: float) -> Any:
    return x * tf.cast(factor, x.dtype)


def _takes_var(func: Callable[..., Any]) -> bool:
    """Whether `func` is called as ``func(grad, var)``: it REQUIRES 2 positional arguments.

    Parameters with defaults do not count, so ``lambda g, k=2: g * k`` takes the gradient
    only; a function with ``*args`` gets both.
    """
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in params if p.kind in positional and p.default is p.empty]
    return len(required) >= 2


def _accepts_one(func: Callable[..., Any]) -> bool:
    """Whether `func` can be called with one positional argument."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional or p.kind is p.VAR_POSITIONAL for p in params)


def _check_func(_inst: Any, _attr: Any, func: Any) -> None:
    if not callable(func):
        msg = f"'func' must be callable (grad -> grad, or (grad, var) -> grad); got {type(func).__name__}"
        raise TypeError(msg)
    if not _accepts_one(func):
        msg = f"'func' must take 1 argument (grad) or 2 (grad, var); {func!r} takes none"
        raise TypeError(msg)


def _check_regex_field(_inst: Any, attr: Any, value: Any) -> None:
    _check_regex(value, f"'{attr.name}'")


def _check_name_scope(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str) or not value:
        msg = f"'name_scope' must be a non-empty str; got {value!r}"
        raise TypeError(msg)


def _collections(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _check_collections(_inst: Any, _attr: Any, value: Any) -> None:
    if value is None:
        return
    wrong = [repr(c) for c in value if not isinstance(c, str)]
    if wrong:
        msg = (
            f"'collections' must hold collection names (str); entries at fault: {', '.join(wrong)}"
        )
        raise TypeError(msg)


def _name_scope_field(default: str) -> Any:
    return attrs.field(default=default, kw_only=True, validator=_check_name_scope)


# -- the processors -------------------------------------------------------------------------


class GradientProcessor(abc.ABC):
    """Base of gradient processors: ``process(grads) -> grads`` over (gradient, variable) pairs.

    Processors are frozen records: ``process`` builds ops in the default graph under
    the name scope of the ``name_scope`` field and changes nothing on the record, so
    one processor can be used on several optimizers or graphs. Subclasses implement
    ``_process``. Use them through ``apply_grad_processors(opt, procs)``.
    """

    __slots__ = ()
    name_scope: str

    def process(self, grads: Sequence[tuple[Any, Any]]) -> GradsAndVars:
        """Process ``(gradient, variable)`` pairs; returns the new pairs (some may be dropped).

        Raises:
            TypeError: `grads` is not a list of pairs.
        """
        pairs = check_grads_and_vars(grads)
        with tf1.name_scope(self.name_scope):
            return check_grads_and_vars(list(self._process(pairs)))

    @abc.abstractmethod
    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        """Return the processed pairs."""


@attrs.frozen
class FilterNoneGrad(GradientProcessor):
    """Drop the pairs whose gradient is None (the variable gets no update), with a warning.

    Args:
        verbose: log a warning naming the variables without gradient.
    """

    verbose: bool = attrs.field(default=True, converter=bool)
    name_scope: str = _name_scope_field("FilterNoneGrad")

    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        kept = [(g, v) for g, v in grads if g is not None]
        if self.verbose and len(kept) < len(grads):
            names = [_var_name(v) for g, v in grads if g is None]
            logger.warning("no gradient for %d variable(s), left unchanged: %s", len(names), names)
        return kept


@attrs.frozen
class GlobalNormClip(GradientProcessor):
    """Clip the gradients by their global norm (``tf.clip_by_global_norm``).

    The global norm is the L2 norm of all gradients concatenated; when it exceeds
    `global_norm`, every gradient is scaled by ``global_norm / norm``.

    Args:
        global_norm: the threshold, > 0.
    """

    global_norm: float = attrs.field(converter=float)
    name_scope: str = _name_scope_field("GlobalNormClip")

    @global_norm.validator
    def _check_norm(self, _attr: Any, value: float) -> None:
        if not value > 0.0:
            msg = f"'global_norm' must be > 0; got {value}"
            raise ValueError(msg)

    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        present = [(g, v) for g, v in grads if g is not None]
        if not present:
            return grads
        clipped, _ = tf.clip_by_global_norm([g for g, _ in present], self.global_norm)
        new = dict(zip([id(v) for _, v in present], clipped))
        return [(new[id(v)] if g is not None else None, v) for g, v in grads]


@attrs.frozen
class MapGradient(GradientProcessor):
    """Apply `func` to the gradients of the variables whose name matches `regex`.

    Gradients of other variables, and None gradients, pass unchanged.

    Args:
        func: ``grad -> grad`` or ``(grad, var) -> grad``; returning None drops the pair
            (the variable is not updated). It gets the variable too when it requires two
            positional arguments (parameters with defaults do not count) or takes ``*args``.
        regex: fully matched against the variable's op name (no ``:0``); all by default.
    """

    func: Callable[..., Any] = attrs.field(validator=_check_func)
    regex: str = attrs.field(default=".*", validator=_check_regex_field)
    name_scope: str = _name_scope_field("MapGradient")

    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        two = _takes_var(self.func)
        out = []
        for g, v in grads:
            if g is None or not regex_matches(self.regex, _var_name(v)):
                out.append((g, v))
                continue
            new = self.func(g, v) if two else self.func(g)
            if new is not None:
                out.append((new, v))
        return out


@attrs.frozen
class SummaryGradient(GradientProcessor):
    """Summarize each matching gradient: a histogram and the moving average of its RMS.

    The histogram is tagged ``<var>-grad``; the RMS goes through
    ``towerkit.towers.add_moving_summary`` as ``<var>-grad-rms``. In a tower context
    other than the main training tower it does nothing.

    Args:
        regex: fully matched against the variable's op name; all by default.
        collections: collections of the histogram summaries (default ``SUMMARIES``).
    """

    regex: str = attrs.field(default=".*", validator=_check_regex_field)
    collections: tuple[str, ...] | None = attrs.field(
        default=None, converter=_collections, validator=_check_collections
    )
    name_scope: str = _name_scope_field("SummaryGradient")

    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        ctx = get_current_tower_context()
        if ctx is not None and not ctx.is_main_training_tower:
            return grads
        keys = list(self.collections) if self.collections is not None else [tf1.GraphKeys.SUMMARIES]
        rms_list = []
        for g, v in grads:
            name = _var_name(v)
            if g is None or not regex_matches(self.regex, name):
                continue
            values = tf.cast(_values(g), tf.float32)
            hist = tf.raw_ops.HistogramSummary(tag=f"{name}-grad", values=values)
            for key in keys:
                tf1.add_to_collection(key, hist)
            rms = tf.sqrt(tf.reduce_mean(tf.square(values)))
            with tf1.name_scope(None):
                rms_list.append(tf.identity(rms, name=f"{name}-grad-rms"))
        if rms_list:
            add_moving_summary(*rms_list)
        return grads


@attrs.frozen
class PrintGradient(GradientProcessor):
    """Print statistics of each matching gradient every time it is computed (``tf.print``).

    Each line holds the variable name, then the mean, RMS and maximum absolute value.

    Args:
        regex: fully matched against the variable's op name; all by default.
        output_stream: ``"stderr"``, ``"stdout"``, or ``"file://<path>"`` (appended to).
    """

    regex: str = attrs.field(default=".*", validator=_check_regex_field)
    output_stream: str = attrs.field(default="stderr", kw_only=True)
    name_scope: str = _name_scope_field("PrintGradient")

    @output_stream.validator
    def _check_stream(self, _attr: Any, value: Any) -> None:
        if not isinstance(value, str) or not (
            value in ("stderr", "stdout") or value.startswith("file://")
        ):
            msg = f"'output_stream' must be 'stderr', 'stdout' or 'file://<path>'; got {value!r}"
            raise ValueError(msg)

    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        stream: Any = self.output_stream
        if stream == "stderr":
            stream = sys.stderr
        elif stream == "stdout":
            stream = sys.stdout
        out = []
        for g, v in grads:
            name = _var_name(v)
            if g is None or not regex_matches(self.regex, name):
                out.append((g, v))
                continue
            values = tf.cast(_values(g), tf.float32)
            printed = tf.print(
                f"{name}-grad",
                "mean",
                tf.reduce_mean(values),
                "rms",
                tf.sqrt(tf.reduce_mean(tf.square(values))),
                "max_abs",
                tf.reduce_max(tf.abs(values)),
                output_stream=stream,
            )
            with tf1.control_dependencies([printed]):
                out.append((_map_values(g, tf.identity), v))
        return out


@attrs.frozen
class CheckGradient(GradientProcessor):
    """Fail the step with an error naming the variable when a gradient holds NaN or Inf.

    Uses ``tf.debugging.check_numerics``; the error is an ``InvalidArgumentError``
    whose message contains ``gradient of <var>``.
    """

    name_scope: str = _name_scope_field("CheckGradient")

    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        out = []
        for g, v in grads:
            if g is None:
                out.append((g, v))
                continue
            message = f"gradient of {_var_name(v)}"
            out.append((_map_values(g, functools.partial(_check_numerics, message=message)), v))
        return out


@attrs.frozen
class ScaleGradient(GradientProcessor):
    """Multiply the gradient of each variable by the first multiplier whose regex matches it.

    Each regex is fully matched against the variable's op name (no ``:0``); the first
    matching pair wins; variables that match none keep their gradient. A multiplier of
    0 drops the pair, so the variable is not updated (frozen).

    Args:
        multipliers: a ``(regex, number)`` pair or a list of them, e.g.
            ``[('.*/b', 2.0), ('layer0/.*', 0.0)]`` doubles the step of every bias and
            freezes ``layer0``.
        verbose: log each scaled or dropped variable.
    """

    multipliers: tuple[tuple[str, float], ...] = attrs.field(converter=check_multipliers)
    verbose: bool = attrs.field(default=True, converter=bool)
    name_scope: str = _name_scope_field("ScaleGradient")

    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        out = []
        for g, v in grads:
            name = _var_name(v)
            mult = first_multiplier(self.multipliers, name) if g is not None else None
            if mult is None or mult == 1.0:
                out.append((g, v))
            elif mult == 0.0:
                if self.verbose:
                    logger.info("gradient of %s dropped (multiplier 0): not updated", name)
            else:
                if self.verbose:
                    logger.info("gradient of %s scaled by %g", name, mult)
                out.append((_map_values(g, functools.partial(_scale, factor=mult)), v))
        return out


def _check_procs(procs: Any) -> tuple[GradientProcessor, ...]:
    checked = tuple(procs)
    wrong = [
        f"#{i}: {type(p).__name__}"
        for i, p in enumerate(checked)
        if not isinstance(p, GradientProcessor)
    ]
    if wrong:
        msg = f"gradient processors must be GradientProcessor instances; entries at fault: {', '.join(wrong)}"
        raise TypeError(msg)
    return checked


@attrs.frozen
class Chain(GradientProcessor):
    """Processors applied one after another, left to right (``procs[0]`` first).

    Args:
        procs: the processors.
    """

    procs: tuple[GradientProcessor, ...] = attrs.field(converter=_check_procs)
    name_scope: str = _name_scope_field("GradientProcessors")

    def _process(self, grads: GradsAndVars) -> GradsAndVars:
        for proc in self.procs:
            grads = proc.process(grads)
        return grads


def chain(*procs: GradientProcessor) -> Chain:
    """Compose processors left to right: ``chain(a, b).process(g) == b.process(a.process(g))``.

    Examples:
        >>> chain(FilterNoneGrad(), GlobalNormClip(5))
        Chain(procs=(FilterNoneGrad(verbose=True, name_scope='FilterNoneGrad'), GlobalNormClip(global_norm=5.0, name_scope='GlobalNormClip')), name_scope='GradientProcessors')
    """
    return Chain(procs)
