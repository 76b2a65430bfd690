"""The input-source protocol that trainers consume, its errors and its signature checks."""

from __future__ import annotations

import abc
import weakref
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers import validate_input_signature
from towerkit.towers.compat import tf1

__all__ = [
    "InputSignatureError",
    "InputSizeUnknownError",
    "InputSource",
    "check_input_tensors",
    "spec_mismatches",
    "unregistered_inputs",
]

_SOURCES: weakref.WeakKeyDictionary[Any, weakref.WeakSet[InputSource]] = weakref.WeakKeyDictionary()
"""The input sources set up in each graph, to find those whose callbacks nobody drives."""


class InputSizeUnknownError(TypeError):
    """The input has no known number of steps per epoch: pass ``steps_per_epoch`` explicitly."""


class InputSignatureError(TypeError):
    """Tensors produced by an input do not match the input signature."""


def spec_mismatches(specs: Sequence[tf.TensorSpec], produced: Sequence[tf.TensorSpec]) -> list[str]:
    """Describe every way `produced` fails to match `specs`, entry by entry.

    Dtypes must be equal; shapes must be compatible (``None`` dimensions match anything,
    an unknown rank matches any rank). An empty list means they match.

    Args:
        specs: the input signature.
        produced: the specs (or tensors) an input produced, in signature order.

    Returns:
        One line per entry at fault, or ``["count ..."]`` when the lengths differ.

    Examples:
        >>> import tensorflow as tf
        >>> sig = [tf.TensorSpec([None, 3], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]
        >>> spec_mismatches(sig, [tf.TensorSpec([8, 3], tf.float32), tf.TensorSpec([8], tf.int32)])
        []
        >>> spec_mismatches(sig, [tf.TensorSpec([8, 4], tf.float32), tf.TensorSpec([8], tf.int64)])
        ["#0 'x': expected float32(None, 3), got float32(8, 4)", "#1 'y': expected int32(None,), got int64(8,)"]
        >>> spec_mismatches(sig, [tf.TensorSpec([8, 3], tf.float32)])
        ['count: expected 2 tensors (x, y), got 1']
    """
    if len(specs) != len(produced):
        names = ", ".join(s.name or "?" for s in specs)
        return [f"count: expected {len(specs)} tensors ({names}), got {len(produced)}"]
    wrong = []
    for i, (spec, got) in enumerate(zip(specs, produced)):
        got_dtype = tf.as_dtype(got.dtype)
        got_shape = tf.TensorShape(got.shape)
        if got_dtype != spec.dtype or not spec.shape.is_compatible_with(got_shape):
            wrong.append(
                f"#{i} {spec.name!r}: expected {_fmt(spec.dtype, spec.shape)}, "
                f"got {_fmt(got_dtype, got_shape)}"
            )
    return wrong


def _fmt(dtype: tf.DType, shape: tf.TensorShape) -> str:
    """``float32(None, 3)``; ``float32<unknown rank>`` when the rank is unknown."""
    if shape.rank is None:
        return f"{dtype.name}<unknown rank>"
    return f"{dtype.name}{tuple(shape.as_list())}"


def check_input_tensors(
    source: str, specs: Sequence[tf.TensorSpec], tensors: Sequence[Any]
) -> list[tf.Tensor]:
    """Check that `tensors` match `specs` and give them the signature's static shapes.

    Args:
        source: the input's description, used in the message.
        specs: the input signature.
        tensors: one tower's input tensors, in signature order.

    Returns:
        The tensors, each with its static shape merged with its spec's.

    Raises:
        InputSignatureError: a count, dtype or shape mismatch; the message lists every
            entry at fault with both specs.
    """
    tensors = list(tensors)
    wrong = spec_mismatches(specs, tensors)
    if wrong:
        msg = f"{source} does not produce the input signature: {'; '.join(wrong)}"
        raise InputSignatureError(msg)
    out = []
    for spec, t in zip(specs, tensors):
        if not t.shape.is_fully_defined() and spec.shape.rank is not None:
            t.set_shape(t.shape.merge_with(spec.shape))
        out.append(t)
    return out


def _building_in(graph: Any) -> Any:
    """Where to read a batch: the default graph when it is a loop body inside `graph`, else `graph`.

    A body inside `graph` is a loop running several steps per call, where each iteration
    takes its own batch.
    """
    current = tf1.get_default_graph()
    inner = current
    while inner is not graph and inner is not None:
        inner = getattr(inner, "outer_graph", None)
    return current if inner is graph else graph


class InputSource(abc.ABC):
    """Where a trainer's input tensors come from.

    A trainer uses an input source in this order:

    1. ``setup(input_signature)`` once, with the graph being built as the default
       graph: the source builds what it needs there (iterators, queues, placeholders).
       It returns the source's callbacks (see 3), to register with the trainer:
       ``self.register_callback(input.setup(signature))``.
    2. ``get_input_tensors()`` once per tower: each call returns tensors that take
       their OWN batch when run, so with ``k`` towers one step consumes ``k`` batches
       (the total batch is ``batch * k``).
    3. ``get_callbacks()``, after every tower got its tensors: callbacks the trainer
       must register with its own; they initialize iterators, warm up staging areas,
       feed placeholders, reset the source's Python state before training. Without
       them the tensors may produce nothing. Sources whose callbacks act on each
       tower (feeds, staging areas, constants) refuse new towers after this call.
    4. ``size()``: the number of steps in one epoch when the source knows it
       (the default of ``steps_per_epoch``).

    A trainer refuses to train (in ``setup_callbacks``, before the first step) when
    a source set up in its graph gave tensors but its callbacks are not registered.

    Subclasses implement ``_setup``, ``_get_input_tensors`` and optionally ``_size``,
    ``_get_callbacks`` and ``_reset_state``.
    """

    _specs: tuple[tf.TensorSpec, ...] | None = None
    _graph: Any = None
    _callbacks: list[Callback] | None = None
    _calls: int = 0
    PER_TOWER_CALLBACKS: bool = False
    """Whether the callbacks act on each tower's tensors (then towers come first)."""
    TOWERS_IN_ORDER: bool = True
    """Whether a multi-tower trainer makes each tower's ``get_input_tensors`` run after the
    previous tower's (so which batch goes to which tower does not depend on scheduling).
    False for a source whose tensors also feed work outside the step (`StagingInput`'s
    staging puts, which its warm-up runs alone)."""

    # -- the protocol --------------------------------------------------------------

    def setup(self, input_signature: Sequence[tf.TensorSpec]) -> list[Callback]:
        """Build this source's graph parts in the current default graph, once.

        Calling it again with the same signature in the same graph does nothing more
        and returns the same callbacks.

        Args:
            input_signature: named ``tf.TensorSpec``s, one per input tensor.

        Returns:
            The callbacks the trainer must register for this source: one callback
            standing for ``get_callbacks()``, which it calls when the trainer sets
            up its callbacks, so the towers may take their tensors after ``setup``.

        Raises:
            TypeError, ValueError: a malformed signature.
            RuntimeError: setup again with another signature or in another graph.
        """
        specs = validate_input_signature(input_signature)
        graph = tf1.get_default_graph()
        if self._specs is not None:
            if self._specs == specs and self._graph is graph:
                return [self._deferred_callbacks()]
            msg = (
                f"{self} is already set up with signature {list(self._specs)} in graph "
                f"{id(self._graph):#x}; got signature {list(specs)} in graph {id(graph):#x}"
            )
            raise RuntimeError(msg)
        self._setup(specs)
        self._specs = specs
        self._graph = graph
        _SOURCES.setdefault(graph, weakref.WeakSet()).add(self)
        return [self._deferred_callbacks()]

    def _deferred_callbacks(self) -> Callback:
        from towerkit.trainers.inputs._callbacks import InputSourceCallbacks

        found = self.__dict__.get("_deferred")
        if found is None:
            found = self.__dict__["_deferred"] = InputSourceCallbacks(self)
        return found

    def callbacks_driven(self) -> bool:
        """Whether every callback of this source is set up by a trainer (or an inference runner).

        True when the source needs no callback; False when its callbacks were never
        made, or made but never set up.
        """
        if self._callbacks is None:
            try:
                return not self.get_callbacks()
            except RuntimeError:
                return False
        return all(getattr(cb, "trainer", None) is not None for cb in self._callbacks)

    def setup_done(self) -> bool:
        """Whether ``setup`` has run."""
        return self._specs is not None

    @property
    def input_signature(self) -> tuple[tf.TensorSpec, ...]:
        """The signature given to ``setup``."""
        self._require_setup("input_signature")
        return self._specs  # type: ignore[return-value]

    def get_input_tensors(self) -> list[tf.Tensor]:
        """One tower's input tensors, in signature order; each call takes its own batch.

        Raises:
            RuntimeError: ``setup`` has not run, or the source's per-tower callbacks were
                already made.
            InputSignatureError: the produced tensors do not match the signature.
        """
        self._require_setup("get_input_tensors")
        if self.PER_TOWER_CALLBACKS and self._callbacks is not None:
            msg = (
                f"{self}: get_input_tensors after get_callbacks: the callbacks already "
                "made would not serve this tower; build every tower first"
            )
            raise RuntimeError(msg)
        with _building_in(self._graph).as_default():
            tensors = self._get_input_tensors()
        self._calls += 1
        return check_input_tensors(str(self), self._specs, tensors)  # type: ignore[arg-type]

    def size(self) -> int:
        """Steps in one epoch when the source knows it (e.g. batches in one pass).

        Raises:
            InputSizeUnknownError: the size is unknown; give ``steps_per_epoch`` instead.
        """
        n = self._size()
        if n is None:
            msg = (
                f"the size of {self} is unknown: pass 'steps_per_epoch' explicitly "
                f"(e.g. TrainConfig(steps_per_epoch=...))"
            )
            raise InputSizeUnknownError(msg)
        return int(n)

    def get_callbacks(self) -> list[Callback]:
        """Callbacks the trainer registers for this source (the same objects on every call).

        Raises:
            RuntimeError: ``setup`` has not run, or (for sources whose callbacks act on
                each tower) no tower has taken its tensors yet.
        """
        self._require_setup("get_callbacks")
        if self._callbacks is None and self.PER_TOWER_CALLBACKS and self._calls == 0:
            msg = f"{self}: get_callbacks before any get_input_tensors; build every tower first"
            raise RuntimeError(msg)
        if self._callbacks is None:
            with self._graph.as_default():
                self._callbacks = list(self._get_callbacks())
        return list(self._callbacks)

    def skip_steps(self, steps: int) -> bool:
        """Start after the data that `steps` global steps consume: a run resumed at a step.

        With ``k`` towers (``get_input_tensors`` calls), that is ``steps * k`` batches;
        they are produced and dropped before the first step (the source's order must be
        reproducible for the resumed run to see what an uninterrupted one would).
        Call it after every tower took its tensors and before training starts.

        Returns:
            Whether the source can skip (`TFDatasetInput`, `NumpyInput`, `IterableInput`
            and the sources wrapping them can); when False the source starts from its
            first datapoint, as it does on any new run.

        Raises:
            ValueError: a negative count.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            msg = f"'steps' must be an int >= 0; got {steps!r}"
            raise ValueError(msg)
        return self._skip_batches(steps * max(1, self._calls))

    def _skip_batches(self, batches: int) -> bool:
        """Drop the first `batches` batches before training; False when the source cannot."""
        return batches == 0

    def reset_state(self) -> None:
        """Reset Python-side state (e.g. a data flow's ``reset_state``) before data is drawn.

        The callbacks of ``get_callbacks`` call it in ``before_train``; call it yourself
        only when driving the source without a trainer.
        """
        self._reset_state()

    # -- for subclasses ----------------------------------------------------------------

    @abc.abstractmethod
    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        """Build graph parts for `specs` in the default graph."""

    @abc.abstractmethod
    def _get_input_tensors(self) -> Sequence[tf.Tensor]:
        """Tensors that take one batch when run."""

    def _size(self) -> int | None:
        return None

    def _get_callbacks(self) -> Sequence[Callback]:
        return []

    def _reset_state(self) -> None:
        return None

    def _require_setup(self, what: str) -> None:
        if self._specs is None:
            msg = f"{self}.{what}: call setup(input_signature) first"
            raise RuntimeError(msg)

    def __str__(self) -> str:
        return type(self).__name__


def unregistered_inputs(graph: Any) -> list[InputSource]:
    """The sources set up in `graph` that gave tensors but whose callbacks nobody set up.

    Their tensors would produce nothing (an iterator never initialized, placeholders
    never fed), so a trainer checks this once its callbacks are set up.
    """
    sources = _SOURCES.get(graph)
    if not sources:
        return []
    return [s for s in list(sources) if s._calls > 0 and not s.callbacks_driven()]
