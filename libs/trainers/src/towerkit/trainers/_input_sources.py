"""Input sources on tf.data, Python iterables, numpy arrays, constants, feeds and staging areas."""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers import visible_gpu_count
from towerkit.towers.compat import tf1
from towerkit.trainers._datapoints import DatapointLayout, datapoint_tuple
from towerkit.trainers._input_base import InputSignatureError, InputSource, spec_mismatches
from towerkit.trainers._input_callbacks import (
    FeedInputCallback,
    InitializeInput,
    StageInputCallback,
)
from towerkit.trainers._input_feed import InputFeeder, QueueFeeder

__all__ = [
    "TFDatasetInput",
    "IterableInput",
    "NumpyInput",
    "DummyConstantInput",
    "FeedInput",
    "StagingInput",
    "apply_default_prefetch",
    "datapoint_tuple",
    "num_batches",
    "iterable_size",
    "wants_staging",
]

logger = logging.getLogger("towerkit.trainers")

_INPUT_DEVICE = "/cpu:0"
"""Where iterators, placeholders and prefetch buffers live, whatever device a tower is on."""


# -- pure helpers --------------------------------------------------------------------------


def num_batches(n: int, batch_size: int, drop_remainder: bool) -> int:
    """Batches in one pass over `n` datapoints.

    Examples:
        >>> num_batches(10, 3, drop_remainder=True)
        3
        >>> num_batches(10, 3, drop_remainder=False)
        4
        >>> num_batches(9, 3, drop_remainder=False)
        3
    """
    return n // batch_size if drop_remainder else -(-n // batch_size)


def iterable_size(iterable: Any) -> int | None:
    """``len(iterable)`` when it has a usable length, else None.

    Examples:
        >>> iterable_size([1, 2, 3])
        3
        >>> iterable_size(x for x in "ab") is None
        True
    """
    try:
        n = len(iterable)
    except (TypeError, NotImplementedError):
        return None
    return int(n)


def wants_staging(devices: Sequence[Any], num_visible_gpus: int) -> bool:
    """Whether towers on `devices` benefit from staging their input on the device.

    True when some device is a GPU: a device string naming a GPU, or an int (a GPU
    id) while GPUs are visible.

    Examples:
        >>> wants_staging(["/gpu:0", "/gpu:1"], num_visible_gpus=2)
        True
        >>> wants_staging(["/cpu:0", "/cpu:1"], num_visible_gpus=0)
        False
        >>> wants_staging([0, 1], num_visible_gpus=0)
        False
        >>> wants_staging([0], num_visible_gpus=1)
        True
    """
    for d in devices:
        if isinstance(d, str) and "gpu" in d.lower():
            return True
        if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and num_visible_gpus > 0:
            return True
    return False


def _check_reiterable(iterable: Any, what: str) -> None:
    if isinstance(iterable, (str, bytes, np.ndarray, tf.data.Dataset)) or not isinstance(
        iterable, Iterable
    ):
        msg = (
            f"'{what}' must be a re-iterable collection of datapoints (a list, a DataFlow, "
            f"any object whose __iter__ starts a new pass); got {type(iterable).__name__}"
        )
        raise TypeError(msg)
    if isinstance(iterable, Iterator):
        msg = (
            f"'{what}' is an iterator ({type(iterable).__name__}), which gives one pass only: "
            "pass an object whose __iter__ starts a new pass (e.g. a list, or a class with "
            "__iter__ defined as a generator function)"
        )
        raise TypeError(msg)


def _reset_iterable(iterable: Any) -> None:
    reset = getattr(iterable, "reset_state", None)
    if callable(reset):
        reset()


def _check_prefetch(prefetch: Any) -> int | None:
    if prefetch is None:
        return None
    if isinstance(prefetch, bool) or not isinstance(prefetch, int):
        msg = (
            f"'prefetch' must be None, an int >= 1, or -1 (autotune); got {type(prefetch).__name__}"
        )
        raise TypeError(msg)
    if prefetch < 1 and prefetch != tf.data.AUTOTUNE:
        msg = f"'prefetch' must be None, an int >= 1, or -1 (autotune); got {prefetch}"
        raise ValueError(msg)
    return prefetch


def _dataset_graph(dataset: tf.data.Dataset) -> Any | None:
    """The graph a dataset was built in, or None when it was built eagerly."""
    variant = dataset._variant_tensor
    if tf.is_symbolic_tensor(variant):
        return variant.graph
    return None


def _cardinality_value(card: Any) -> int | None:
    """The value of a cardinality tensor (eager or in a graph), or None when not computable.

    ``tf.data.INFINITE_CARDINALITY`` (-1) and ``tf.data.UNKNOWN_CARDINALITY`` (-2) are
    returned as they are. A graph tensor runs in a short-lived CPU-only session, so no
    GPU memory is taken.
    """
    try:
        if tf.is_symbolic_tensor(card):
            config = tf1.ConfigProto(device_count={"GPU": 0})
            with tf1.Session(graph=card.graph, config=config) as sess:
                return int(sess.run(card))
        return int(card)
    except (tf.errors.OpError, RuntimeError, ValueError) as err:
        logger.debug("cannot compute a dataset's cardinality: %s", err)
        return None


def _run_cardinality(card: Any) -> int | None:
    """The value of a cardinality tensor, or None when unknown, infinite or not computable."""
    n = _cardinality_value(card)
    return n if n is not None and n >= 0 else None


def _cardinality(dataset: tf.data.Dataset) -> int | None:
    """The number of elements of `dataset`, or None when unknown, infinite or not computable."""
    graph = _dataset_graph(dataset)
    if graph is None:
        return _run_cardinality(dataset.cardinality())
    if graph.finalized:
        return None
    with graph.as_default():
        return _run_cardinality(dataset.cardinality())


def _to_signature(dataset: tf.data.Dataset, specs: Sequence[tf.TensorSpec], source: str) -> Any:
    """`dataset` with tuple elements in signature order; raise when they cannot match."""
    names = [s.name for s in specs]
    element = dataset.element_spec
    if isinstance(element, Mapping):
        missing = [n for n in names if n not in element]
        if missing:
            msg = (
                f"{source}: dataset elements are dicts without {missing} "
                f"(keys: {sorted(element)}); the input signature names {names}"
            )
            raise InputSignatureError(msg)
        produced = [element[n] for n in names]
        dataset = dataset.map(lambda d: tuple(d[n] for n in names))
    elif isinstance(element, tf.TensorSpec):
        produced = [element]
        dataset = dataset.map(lambda x: (x,))
    elif isinstance(element, (tuple, list)) and all(isinstance(e, tf.TensorSpec) for e in element):
        produced = list(element)
        if isinstance(element, list):
            dataset = dataset.map(lambda *xs: tuple(xs))
    else:
        msg = (
            f"{source}: dataset elements must be a tensor, a tuple of tensors or a dict of "
            f"tensors keyed by the input names; got element_spec {element}"
        )
        raise InputSignatureError(msg)
    wrong = spec_mismatches(specs, produced)
    if wrong:
        msg = f"{source}: dataset elements do not match the input signature: {'; '.join(wrong)}"
        raise InputSignatureError(msg)
    return dataset


# -- sources on an initializable iterator ---------------------------------------------------


class _IteratorInput(InputSource):
    """Sources that read an initializable iterator over a dataset repeated forever."""

    _prefetch: int | None = None
    _iterator: Any = None

    @abc.abstractmethod
    def _make_dataset(self, specs: tuple[tf.TensorSpec, ...]) -> tf.data.Dataset:
        """The dataset of single batches matching `specs` (repeated by the caller)."""

    def _init_feed(self) -> dict[Any, Any] | None:
        return None

    def _endless(self) -> bool:
        """Whether the dataset of `_make_dataset` is known to be infinite (then not repeated)."""
        return False

    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        with tf.device(_INPUT_DEVICE):
            dataset = _to_signature(self._make_dataset(specs), specs, str(self))
            # A pipeline that ends in a repeat makes every get_next hop to another thread:
            # an infinite dataset is read as it is.
            if not self._endless():
                dataset = dataset.repeat()
            if self._prefetch is not None:
                dataset = dataset.prefetch(self._prefetch)
            self._iterator = tf1.data.make_initializable_iterator(dataset)

    @property
    def initializer(self) -> Any:
        """The iterator's initializer op (run by the source's callback before training)."""
        self._require_setup("initializer")
        return self._iterator.initializer

    def _get_input_tensors(self) -> list[tf.Tensor]:
        with tf.device(_INPUT_DEVICE):
            return list(self._iterator.get_next())

    def _get_callbacks(self) -> list[Callback]:
        return [
            InitializeInput(
                str(self), self.reset_state, [self._iterator.initializer], self._init_feed
            )
        ]


class TFDatasetInput(_IteratorInput):
    """Input from a ``tf.data.Dataset`` built by the user.

    The dataset is repeated forever (unless it is infinite already, which is read as
    it is): an epoch is ``steps_per_epoch`` steps, not a pass over the data, and
    passes continue across epoch boundaries. Its iterator is
    initialized by the source's callback in ``before_train``, so every call of
    ``train`` starts again from the first element (and a new shuffle); nothing is
    re-initialized between epochs.

    Each element is one batch: a tensor, a tuple of tensors in signature order, or a
    dict keyed by the signature's names; dtypes and shapes are checked in ``setup``.

    Args:
        dataset: the dataset, built in the graph the trainer builds its model in; or a
            function of no argument that builds it, called in ``setup`` (use this when
            the graph does not exist yet, e.g. with ``launch_train_with_config``).
        prefetch: batches to prefetch after the repeat (``tf.data.AUTOTUNE``: let
            tf.data choose); None adds no prefetch of its own.

    Raises:
        TypeError: `dataset` is neither a dataset nor callable.
    """

    def __init__(self, dataset: Any, *, prefetch: int | None = None) -> None:
        if not (isinstance(dataset, tf.data.Dataset) or callable(dataset)):
            msg = (
                f"'dataset' must be a tf.data.Dataset or a function returning one; "
                f"got {type(dataset).__name__}"
            )
            raise TypeError(msg)
        self._dataset = dataset
        self._prefetch = _check_prefetch(prefetch)
        self._card: int | None = None
        self._card_known = False
        self._built: tf.data.Dataset | None = None
        self._card_tensor: Any = None

    def _make_dataset(self, specs: tuple[tf.TensorSpec, ...]) -> tf.data.Dataset:
        del specs
        dataset = (
            self._dataset() if not isinstance(self._dataset, tf.data.Dataset) else self._dataset
        )
        if not isinstance(dataset, tf.data.Dataset):
            msg = f"the 'dataset' function of {self} returned {type(dataset).__name__}, not a tf.data.Dataset"
            raise TypeError(msg)
        graph = _dataset_graph(dataset)
        if graph is not tf1.get_default_graph():
            where = "eagerly" if graph is None else "in another graph"
            msg = (
                f"{self}: the dataset was built {where}, not in the graph being built: build "
                "it inside 'with graph.as_default():', or pass a function that builds it"
            )
            raise ValueError(msg)
        self._built = dataset
        self._card_tensor = dataset.cardinality()
        return dataset

    def _endless(self) -> bool:
        if self._card_tensor is None:
            return False
        n = _cardinality_value(self._card_tensor)
        self._card = n if n is not None and n >= 0 else None
        self._card_known = True
        return n == tf.data.INFINITE_CARDINALITY

    def _size(self) -> int | None:
        if not self._card_known:
            if self._card_tensor is not None:
                self._card = _run_cardinality(self._card_tensor)
            elif isinstance(self._dataset, tf.data.Dataset):
                self._card = _cardinality(self._dataset)
            else:
                return None
            self._card_known = True
        return self._card


class IterableInput(InputSource):
    """Input from a Python iterable of datapoints (a DataFlow, a list, a generator class).

    Each datapoint is one batch: a list/tuple of arrays in signature order, or a dict
    keyed by the signature's names. A background thread takes the datapoints, checks
    them against the signature, and puts them into a queue of the graph (on the CPU)
    that holds up to `prefetch` batches; each tower's input tensors take one batch
    from the queue. Producing the next batches thus overlaps with the training
    step, and the step itself runs no Python. While the thread runs, the
    interpreter's switch interval (``sys.setswitchinterval``) is lowered to 0.1 ms,
    then restored: a pure-Python producer holds the GIL, and the training thread
    takes it back sooner after each step. After each pass the iterable is
    iterated again (``iter(iterable)``), forever; ``size()`` is ``len(iterable)``
    when it has one.

    The source's callback calls the iterable's ``reset_state()`` (when it has one)
    and starts the thread in ``before_train``; ``after_train`` (also after an error,
    `StopTraining` or Ctrl-C) closes the queue and joins the thread.

    A datapoint of the wrong arity, dtype or shape, a pass that yields nothing, or an
    exception raised by the iterable stops the thread; the batches queued before it
    are still trained on, then the trainer raises `InputDataError` (bad data) or
    `InputProducerError` (the iterable raised; its exception is the cause), naming
    this input, the datapoint, what the signature expects and what came. Components
    are cast within their kind (``float64`` to ``float32``, ``int64`` to ``int32``).

    Args:
        iterable: re-iterable datapoints (not a one-pass iterator).
        prefetch: batches the queue holds, >= 1 (``tf.data.AUTOTUNE``: 8).

    Raises:
        TypeError: `iterable` is not re-iterable.
    """

    _default_capacity = 8

    def __init__(self, iterable: Iterable[Any], *, prefetch: int = 8) -> None:
        _check_reiterable(iterable, "iterable")
        checked = _check_prefetch(prefetch)
        if checked is None:
            msg = "'prefetch' of IterableInput must be an int >= 1 or tf.data.AUTOTUNE; got None"
            raise TypeError(msg)
        self._iterable = iterable
        self._capacity = self._default_capacity if checked == tf.data.AUTOTUNE else checked
        self._queue: Any = None
        self._feeder: QueueFeeder | None = None

    @property
    def iterable(self) -> Iterable[Any]:
        """The datapoints."""
        return self._iterable

    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        with tf.device(_INPUT_DEVICE), tf1.name_scope("IterableInput"):
            queue = tf1.FIFOQueue(self._capacity, [s.dtype for s in specs], name="queue")
            placeholders = [tf1.placeholder(s.dtype, s.shape, name=s.name) for s in specs]
            self._feeder = QueueFeeder(
                str(self),
                self._iterable,
                DatapointLayout.from_specs(specs),
                placeholders,
                queue.enqueue(placeholders, name="enqueue"),
                queue.close(cancel_pending_enqueues=False, name="close"),
                queue.close(cancel_pending_enqueues=True, name="cancel"),
            )
        self._queue = queue

    def _get_input_tensors(self) -> list[tf.Tensor]:
        with tf.device(_INPUT_DEVICE):
            got = self._queue.dequeue(name=f"IterableInput_get{self._calls}")
        return list(got) if isinstance(got, (list, tuple)) else [got]

    def _get_callbacks(self) -> list[Callback]:
        return [InputFeeder(str(self), self.reset_state, self._feeder)]  # type: ignore[arg-type]

    def _size(self) -> int | None:
        return iterable_size(self._iterable)

    def _reset_state(self) -> None:
        _reset_iterable(self._iterable)

    def __str__(self) -> str:
        return f"IterableInput({type(self._iterable).__name__})"


class NumpyInput(_IteratorInput):
    """Input from in-memory arrays, batched (and shuffled) by tf.data.

    The arrays enter the graph through placeholders fed once, when the iterator is
    initialized, so they do not bloat the graph. One pass gives
    ``num_batches(n, batch_size, drop_remainder)`` batches (``size()``); with `shuffle`
    each pass has a new order (reproducible with `seed`).

    Args:
        arrays: one array per input, in signature order, or a dict keyed by input name;
            all with the same first dimension ``n``. Arrays are cast to the signature's
            dtypes when that is a same-kind cast (float64 to float32, say).
        batch_size: datapoints per batch, >= 1.
        shuffle: shuffle the datapoints in each pass.
        seed: the shuffle seed; None for a different order every run.
        drop_remainder: drop the last, smaller batch of each pass.

    Raises:
        TypeError: bad kinds of arguments.
        ValueError: arrays of different lengths, empty arrays, or a bad `batch_size`.
    """

    def __init__(
        self,
        arrays: Sequence[Any] | Mapping[str, Any],
        batch_size: int,
        shuffle: bool = True,
        seed: int | None = None,
        drop_remainder: bool = True,
    ) -> None:
        if isinstance(arrays, Mapping):
            keys = list(arrays)
            values = [np.asarray(arrays[k]) for k in keys]
        elif isinstance(arrays, (Sequence, tuple)) and not isinstance(arrays, (str, bytes)):
            keys = None
            values = [np.asarray(a) for a in arrays]
        else:
            msg = f"'arrays' must be a list of arrays or a dict of arrays; got {type(arrays).__name__}"
            raise TypeError(msg)
        if not values:
            msg = "'arrays' is empty: expected one array per input"
            raise ValueError(msg)
        scalar = [
            str(k if keys else i)
            for i, (k, a) in enumerate(zip(keys or values, values))
            if a.ndim == 0
        ]
        if scalar:
            msg = f"'arrays' entries must have a first (datapoint) dimension; 0-d entries: {', '.join(scalar)}"
            raise ValueError(msg)
        lengths = [len(a) for a in values]
        if len(set(lengths)) != 1:
            labels = keys if keys else [f"#{i}" for i in range(len(values))]
            detail = ", ".join(f"{lab}: {n}" for lab, n in zip(labels, lengths))
            msg = f"'arrays' must all have the same first dimension; got {detail}"
            raise ValueError(msg)
        if lengths[0] == 0:
            msg = "'arrays' hold no datapoint (first dimension 0)"
            raise ValueError(msg)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            msg = f"'batch_size' must be an int >= 1; got {type(batch_size).__name__}"
            raise TypeError(msg)
        if batch_size < 1:
            msg = f"'batch_size' must be >= 1; got {batch_size}"
            raise ValueError(msg)
        if drop_remainder and batch_size > lengths[0]:
            msg = (
                f"'batch_size' {batch_size} exceeds the {lengths[0]} datapoints: with "
                "drop_remainder=True no batch would be produced"
            )
            raise ValueError(msg)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            msg = f"'seed' must be an int or None; got {type(seed).__name__}"
            raise TypeError(msg)
        self._keys = keys
        self._arrays = values
        self._n = lengths[0]
        self._batch_size = int(batch_size)
        self._shuffle = bool(shuffle)
        self._seed = None if seed is None else int(seed)
        self._drop = bool(drop_remainder)
        self._feed: dict[Any, Any] = {}

    def _make_dataset(self, specs: tuple[tf.TensorSpec, ...]) -> tf.data.Dataset:
        if self._keys is not None:
            missing = [s.name for s in specs if s.name not in self._keys]
            if missing:
                msg = f"{self}: no array for inputs {missing}; arrays given for {self._keys}"
                raise InputSignatureError(msg)
            arrays = [self._arrays[self._keys.index(s.name)] for s in specs]
        else:
            arrays = self._arrays
            if len(arrays) != len(specs):
                msg = (
                    f"{self}: {len(arrays)} arrays for the {len(specs)} inputs "
                    f"{[s.name for s in specs]}"
                )
                raise InputSignatureError(msg)
        cast, wrong = [], []
        for spec, arr in zip(specs, arrays):
            target = spec.dtype.as_numpy_dtype
            item = tf.TensorShape(arr.shape[1:])
            if not np.can_cast(arr.dtype, target, casting="same_kind"):
                wrong.append(
                    f"{spec.name!r}: array dtype {arr.dtype} cannot become {spec.dtype.name}"
                )
            elif spec.shape.rank is not None and not spec.shape[1:].is_compatible_with(item):
                wrong.append(
                    f"{spec.name!r}: datapoint shape {tuple(item.as_list())} vs signature "
                    f"{tuple(spec.shape.as_list())}"
                )
            else:
                cast.append(arr.astype(target, copy=False))
        if wrong:
            msg = f"{self}: arrays do not match the input signature: {'; '.join(wrong)}"
            raise InputSignatureError(msg)
        placeholders = tuple(
            tf1.placeholder(spec.dtype, arr.shape, name=f"{spec.name}_array")
            for spec, arr in zip(specs, cast)
        )
        self._feed = dict(zip(placeholders, cast))
        dataset = tf.data.Dataset.from_tensor_slices(placeholders)
        if self._shuffle:
            dataset = dataset.shuffle(self._n, seed=self._seed, reshuffle_each_iteration=True)
        return dataset.batch(self._batch_size, drop_remainder=self._drop)

    def _init_feed(self) -> dict[Any, Any]:
        return self._feed

    def _size(self) -> int:
        return num_batches(self._n, self._batch_size, self._drop)

    def __str__(self) -> str:
        return f"NumpyInput(n={self._n}, batch_size={self._batch_size})"


# -- constant, fed and staged inputs ---------------------------------------------------------


class DummyConstantInput(InputSource):
    """Input of fixed tensors that never change, for benchmarking the model alone.

    Each tower gets its own non-trainable local variables of the given shapes, filled
    once (uniform in [0, 1) for floating dtypes, zeros otherwise, fixed seed) when the
    source's callback runs in ``before_train``; no data moves during training. Its size
    is unknown: give ``steps_per_epoch``.

    Args:
        shapes: one fully defined shape per input, in signature order.

    Raises:
        TypeError, ValueError: `shapes` is not a list of fully defined shapes.
    """

    _per_tower_callbacks = True

    def __init__(self, shapes: Sequence[Sequence[int]]) -> None:
        if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Sequence):
            msg = f"'shapes' must be a list of shapes (lists of ints); got {type(shapes).__name__}"
            raise TypeError(msg)
        parsed, wrong = [], []
        for i, shape in enumerate(shapes):
            try:
                ts = tf.TensorShape(shape)
            except (TypeError, ValueError):
                wrong.append(f"#{i} {shape!r}")
                continue
            if not ts.is_fully_defined():
                wrong.append(f"#{i} {shape!r}")
                continue
            parsed.append(ts)
        if wrong:
            msg = f"'shapes' entries must be fully defined shapes; entries at fault: {', '.join(wrong)}"
            raise ValueError(msg)
        self._shapes = tuple(parsed)
        self._variables: list[Any] = []

    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        produced = [tf.TensorSpec(shape, spec.dtype) for shape, spec in zip(self._shapes, specs)]
        if len(self._shapes) != len(specs):
            produced = [tf.TensorSpec(shape, tf.float32) for shape in self._shapes]
        wrong = spec_mismatches(specs, produced)
        if wrong:
            msg = f"{self}: shapes do not match the input signature: {'; '.join(wrong)}"
            raise InputSignatureError(msg)

    def _get_input_tensors(self) -> list[tf.Tensor]:
        tensors = []
        with tf1.name_scope("DummyConstantInput"):
            for i, (spec, shape) in enumerate(zip(self.input_signature, self._shapes)):
                if spec.dtype.is_floating:
                    init = tf1.random_uniform(shape, dtype=spec.dtype, seed=1234 + i)
                else:
                    init = tf.zeros(shape, spec.dtype)
                var = tf1.Variable(
                    init,
                    trainable=False,
                    collections=[tf1.GraphKeys.LOCAL_VARIABLES],
                    name=spec.name,
                )
                self._variables.append(var)
                tensors.append(tf.identity(var, name=f"{spec.name}_value"))
        return tensors

    def _get_callbacks(self) -> list[Callback]:
        return [
            InitializeInput(str(self), self.reset_state, [v.initializer for v in self._variables])
        ]

    def __str__(self) -> str:
        return f"DummyConstantInput({[s.as_list() for s in self._shapes]})"


class FeedInput(InputSource):
    """Input fed into placeholders from a Python iterable, one datapoint per tower per run.

    Each ``get_input_tensors`` call makes placeholders for one tower. The source's
    callback feeds them in ``before_run`` of every ``hooked_sess.run`` whose fetches
    need them (other runs take no datapoint). Simple but synchronous: the next
    datapoint is produced while the step waits; prefer :class:`IterableInput` for
    training. Running the input tensors with a plain ``sess.run`` fails: nothing feeds
    them there.

    Args:
        iterable: re-iterable datapoints (lists/tuples in signature order, or dicts).
        infinite: iterate again after each pass; when False the end of the data raises
            ``StopTraining``.

    Raises:
        TypeError: `iterable` is not re-iterable.
    """

    _per_tower_callbacks = True

    def __init__(self, iterable: Iterable[Any], infinite: bool = True) -> None:
        _check_reiterable(iterable, "iterable")
        self._iterable = iterable
        self._infinite = bool(infinite)
        self._placeholders: list[list[Any]] = []

    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        del specs

    def _get_input_tensors(self) -> list[tf.Tensor]:
        group = [tf1.placeholder(s.dtype, s.shape, name=s.name) for s in self.input_signature]
        self._placeholders.append(group)
        return group

    def _start(self) -> Iterator[tuple[Any, ...]]:
        names = [s.name for s in self.input_signature]
        return (datapoint_tuple(dp, names) for dp in self._iterable)

    def _size(self) -> int | None:
        return iterable_size(self._iterable)

    def _reset_state(self) -> None:
        _reset_iterable(self._iterable)

    def _get_callbacks(self) -> list[Callback]:
        return [
            FeedInputCallback(
                str(self), self.reset_state, self._placeholders, self._start, self._infinite
            )
        ]

    def __str__(self) -> str:
        return f"FeedInput({type(self._iterable).__name__})"


class StagingInput(InputSource):
    """Stage another source's batches on each tower's device, one step ahead.

    Each ``get_input_tensors`` call takes a batch from the wrapped source (on the CPU)
    and puts it into a staging area on that tower's device; the tower reads from the
    area. Each training run also stages the next batch, so the copy to the device
    overlaps with the step. Before training the areas get `nr_stage` batches.

    A run whose fetches read from the areas stages one more batch per area; other runs
    (a callback's ``hooked_sess.run`` on other tensors) leave them alone. Do not fetch
    the input tensors with a plain ``sess.run``: that takes a batch without staging a
    new one, and a later step would wait forever.

    Args:
        input: the wrapped source (not a :class:`FeedInput` or :class:`DummyConstantInput`).
        devices: the device of each tower, in the order the towers call
            ``get_input_tensors``; None uses the device scope open at each call.
        nr_stage: batches staged ahead per area, >= 1.

    Raises:
        TypeError: `input` is not a source that can be staged.
        ValueError: `nr_stage` < 1.
    """

    _per_tower_callbacks = True

    def __init__(
        self, input: InputSource, devices: Sequence[str] | None = None, nr_stage: int = 1
    ) -> None:
        if not isinstance(input, InputSource):
            msg = f"'input' must be an InputSource; got {type(input).__name__}"
            raise TypeError(msg)
        if isinstance(input, (FeedInput, DummyConstantInput, StagingInput)):
            msg = (
                f"'input' {input} cannot be staged: staging needs a source whose tensors "
                "produce a batch whenever run (TFDatasetInput, IterableInput, NumpyInput)"
            )
            raise TypeError(msg)
        if devices is not None:
            if isinstance(devices, str) or not all(isinstance(d, str) for d in devices):
                msg = f"'devices' must be a list of device strings or None; got {devices!r}"
                raise TypeError(msg)
            devices = tuple(devices)
        if isinstance(nr_stage, bool) or not isinstance(nr_stage, int):
            msg = f"'nr_stage' must be an int >= 1; got {type(nr_stage).__name__}"
            raise TypeError(msg)
        if nr_stage < 1:
            msg = f"'nr_stage' must be >= 1; got {nr_stage}"
            raise ValueError(msg)
        self._input = input
        self._devices = devices
        self._nr_stage = nr_stage
        self._puts: list[Any] = []
        self._gets: list[Any] = []

    @property
    def input(self) -> InputSource:
        """The wrapped source."""
        return self._input

    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        self._input.setup(specs)

    def _get_input_tensors(self) -> list[tf.Tensor]:
        tower = len(self._puts)
        if self._devices is not None and tower >= len(self._devices):
            msg = (
                f"{self}: tower #{tower} asks for input, but 'devices' names only "
                f"{len(self._devices)} device(s): {list(self._devices)}"
            )
            raise RuntimeError(msg)
        with tf.device(_INPUT_DEVICE):
            batch = self._input.get_input_tensors()
        dtypes = [t.dtype for t in batch]
        device = self._devices[tower] if self._devices is not None else None
        where = tf.device(device) if device is not None else contextlib.nullcontext()
        with where, tf1.name_scope(f"StagingInput{tower}"):
            shared = tf1.get_default_graph().unique_name("staging_area", mark_as_used=True)
            put = tf.raw_ops.Stage(values=batch, shared_name=shared, name="put")
            got = tf.raw_ops.Unstage(dtypes=dtypes, shared_name=shared, name="get")
        out = []
        for t, g in zip(batch, got):
            g.set_shape(t.shape)
            out.append(g)
        self._puts.append(put)
        self._gets.extend(out)
        return out

    def _size(self) -> int | None:
        return self._input.size()

    def _reset_state(self) -> None:
        self._input.reset_state()

    def _get_callbacks(self) -> list[Callback]:
        cbs = self._input.get_callbacks()
        if self._puts:
            put = tf.group(*self._puts, name="StagingInput_put")
            cbs.append(StageInputCallback(str(self), put, self._gets, self._nr_stage))
        return cbs

    def __str__(self) -> str:
        return f"StagingInput({self._input})"


# -- the default heuristics ------------------------------------------------------------------


def apply_default_prefetch(input_or_data: Any, trainer: Any = None) -> InputSource:
    """The input source a trainer uses for `input_or_data`, with automatic prefetching.

    * an :class:`InputSource` is used as it is;
    * a ``tf.data.Dataset``, or a function building one, becomes a
      :class:`TFDatasetInput` with ``tf.data.AUTOTUNE`` prefetching;
    * any other re-iterable (a DataFlow, a list of datapoints) becomes an
      :class:`IterableInput` (a background thread fills a prefetch buffer).

    Then, when the trainer's ``devices`` (one entry per tower) include a GPU, the
    source is wrapped in a :class:`StagingInput` on those devices, unless it is already
    staged or is a :class:`FeedInput` or :class:`DummyConstantInput`.

    Args:
        input_or_data: an input source, a dataset (or a function building one), or an
            iterable of datapoints.
        trainer: the trainer; its ``devices`` attribute (device strings or GPU ids), when
            present, decides the staging.

    Raises:
        TypeError: `input_or_data` is none of these.
    """
    if isinstance(input_or_data, InputSource):
        source = input_or_data
    elif isinstance(input_or_data, tf.data.Dataset) or (
        callable(input_or_data) and not isinstance(input_or_data, Iterable)
    ):
        source = TFDatasetInput(input_or_data, prefetch=tf.data.AUTOTUNE)
    elif isinstance(input_or_data, Iterable) and not isinstance(
        input_or_data, (str, bytes, np.ndarray)
    ):
        source = IterableInput(input_or_data)
    else:
        msg = (
            "the input must be an InputSource, a tf.data.Dataset (or a function returning "
            f"one) or a re-iterable of datapoints; got {type(input_or_data).__name__}"
        )
        raise TypeError(msg)
    devices = list(getattr(trainer, "devices", None) or [])
    if devices and not isinstance(source, (StagingInput, FeedInput, DummyConstantInput)):
        gpus = visible_gpu_count() if any(not isinstance(d, str) for d in devices) else 0
        if wants_staging(devices, gpus):
            names = [d if isinstance(d, str) else f"/gpu:{d}" for d in devices]
            logger.info("staging the input on %s", names)
            source = StagingInput(source, devices=names)
    return source
