"""Input sources on tf.data and numpy arrays, and the helpers every input source shares."""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.callbacks.plumbing import datapoint_tuple
from towerkit.towers.compat import tf1
from towerkit.trainers.inputs._base import InputSignatureError, InputSource, spec_mismatches
from towerkit.trainers.inputs._callbacks import (
    InitializeInput,
)

__all__ = [
    "TFDatasetInput",
    "NumpyInput",
    "datapoint_tuple",
    "num_batches",
    "iterable_size",
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

    _iterator: Any = None
    _skip_ph: Any = None
    _skip: int = 0

    @abc.abstractmethod
    def _make_dataset(self, specs: tuple[tf.TensorSpec, ...]) -> tf.data.Dataset:
        """The dataset of single batches matching `specs` (repeated by the caller)."""

    def _init_feed(self) -> dict[Any, Any] | None:
        return None

    def _endless(self) -> bool:
        """Whether the dataset of `_make_dataset` is known to be infinite (then not repeated)."""
        return False

    def _prefetch_batches(self) -> int | None:
        """The batches the iterator's dataset prefetches (None: no prefetch of its own)."""
        return None

    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        self._reads: list[str] = []
        with tf.device(_INPUT_DEVICE):
            dataset = _to_signature(self._make_dataset(specs), specs, str(self))
            # A pipeline that ends in a repeat makes every get_next hop to another thread:
            # an infinite dataset is read as it is.
            if not self._endless():
                dataset = dataset.repeat()
            # a resumed run skips what the interrupted one consumed (`skip_steps`)
            self._skip_ph = tf1.placeholder_with_default(
                tf.constant(0, tf.int64), [], name="skip_batches"
            )
            dataset = dataset.skip(self._skip_ph)
            prefetch = self._prefetch_batches()
            if prefetch is not None:
                dataset = dataset.prefetch(prefetch)
            self._iterator = tf1.data.make_initializable_iterator(dataset)

    @property
    def initializer(self) -> Any:
        """The iterator's initializer op (run by the source's callback before training)."""
        self._require_setup("initializer")
        return self._iterator.initializer

    def _get_input_tensors(self) -> list[tf.Tensor]:
        with tf.device(_INPUT_DEVICE):
            got = list(self._iterator.get_next())
        self._reads.extend(t.op.name for t in got[:1])
        return got

    def _get_callbacks(self) -> list[Callback]:
        return [
            InitializeInput(
                str(self),
                self.reset_state,
                [self._iterator.initializer],
                self._initializer_feed,
                reads=tuple(self._reads),
            )
        ]

    def _initializer_feed(self) -> dict[Any, Any] | None:
        feed = dict(self._init_feed() or {})
        if self._skip:
            feed[self._skip_ph] = self._skip
        return feed or None

    def _skip_batches(self, batches: int) -> bool:
        self._skip = batches
        if batches:
            logger.info(
                "%s: skipping %d batches (what the interrupted run consumed)", self, batches
            )
        return True


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

    def _prefetch_batches(self) -> int | None:
        return self._prefetch

    def _endless(self) -> bool:
        if self._card_tensor is None:
            return False
        n = _cardinality_value(self._card_tensor)
        if n == 0:
            msg = (
                f"{self}: the dataset is empty (its cardinality is 0): there is nothing to "
                "train on; check how it is built (a take(0), a batch with drop_remainder "
                "larger than the data, a skip past its end)"
            )
            raise ValueError(msg)
        self._card = n if n is not None and n >= 0 else None
        self._card_known = True
        endless: bool = n == tf.data.INFINITE_CARDINALITY
        return endless

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

    @property
    def batch_size(self) -> int:
        """Datapoints per batch (recorded with each checkpoint's position).

        .. versionadded:: 0.2
        """
        return self._batch_size

    def _size(self) -> int:
        return num_batches(self._n, self._batch_size, self._drop)

    def __str__(self) -> str:
        return f"NumpyInput(n={self._n}, batch_size={self._batch_size})"
