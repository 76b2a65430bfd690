"""The inference runners: they run the inferencers over an input during training."""

from __future__ import annotations

import abc
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tqdm

from towerkit.callbacks._base import Callback
from towerkit.callbacks._console_stream import CONSOLE
from towerkit.callbacks._datapoints import DatapointLayout
from towerkit.callbacks._errors import CallbackError
from towerkit.callbacks._inference_inputs import (
    _check_infs,
    _check_size,
    _check_tower_func,
    _datapoint_values,
    _dataset_cardinality,
    _dataset_inputs,
    _input_kind,
    _SourceRounds,
)
from towerkit.callbacks._inference_partials import join_partials, split_partials
from towerkit.callbacks._inference_stats import chunks
from towerkit.callbacks._inferencers import Inferencer
from towerkit.callbacks._parallel import ParallelIterable
from towerkit.towers import TowerContext, build_placeholders, resolve_devices
from towerkit.towers.compat import tf1


class InferenceRunnerBase(Callback, metaclass=abc.ABCMeta):
    """What inference runners share: the input, the inferencers and a round of inference.

    On every ``trigger`` (after each epoch by default) a runner runs a round of
    inference over the whole input: each inferencer's ``before_inference``, its
    ``on_fetches`` for every batch, then ``after_inference``, whose statistics go to
    ``trainer.monitors.put_scalar``. Subclasses build the towers
    (``_build_towers``) and produce the batches' values (``_results``).

    Args:
        input: a ``tf.data.Dataset`` created in the trainer's graph, a function of no
            argument building one (called in ``setup_graph``, in the trainer's graph),
            an input source (``FeedInput``, ``TFDatasetInput``, ...: an object with
            ``setup``, ``get_input_tensors``, ``get_callbacks`` and ``size``, whose
            callbacks the runner drives itself; a round is ``size()`` batches), or a
            re-iterable of datapoints: lists or tuples holding one array per input
            of the tower function's input signature (or dicts keyed by input name).
            A re-iterable with a ``reset_state()`` method (a DataFlow) has it called
            once, in ``before_train``, before it is first read.
        infs: an Inferencer or a list of them.
        size: batches in a round at most (>= 1), for a dataset or re-iterable input;
            None: until the input is exhausted. A dataset known to be infinite
            (``tf.data`` cardinality) needs it, or an end of its own (``.take(n)``).
        reduce: sum each round's statistics across the job's processes (horovod
            ranks): every process evaluates its own input (its shard), then the
            inferencers' partials (`Inferencer.partial`) are summed through the
            trainer's ``make_process_sum`` and every process puts the statistics of all
            the batches of all processes (the monitors write them where they run: on
            the chief). The runner then runs on every process (``chief_only`` False),
            and every process must run the same rounds. False: each process reports
            its own batches.

    Raises:
        TypeError: a bad input or inferencers; `reduce` with an inferencer that is not
            `Inferencer.reducible`.
        ValueError: no inferencer, or (in ``setup_graph``) an infinite dataset and no
            `size`.
        CallbackError: (in ``setup_graph``) `reduce` on a trainer that cannot sum across
            its processes.

    .. versionadded:: 0.2
        `size`, `reduce`.
    """

    _tower_name = "InferenceTower"

    def __init__(
        self,
        input: Any,
        infs: Inferencer | Sequence[Inferencer],
        size: int | None = None,
        reduce: bool = False,
    ) -> None:
        self._size = _check_size(size)
        self._kind = _input_kind(input)
        self._input = input
        self._infs = _check_infs(infs)
        if not isinstance(reduce, bool):
            msg = f"'reduce' must be a bool; got {reduce!r}"
            raise TypeError(msg)
        not_reducible = [f"{inf} ({type(inf).__name__})" for inf in self._infs if not inf.reducible]
        if reduce and not_reducible:
            msg = (
                "'reduce=True' needs inferencers that implement '_partial' and "
                f"'_from_partial' (Inferencer.reducible); these do not: {', '.join(not_reducible)}"
            )
            raise TypeError(msg)
        self._reduce = reduce
        self._process_sum: Any = None
        if reduce:
            self._chief_only = False  # every process must meet the others in the sum
        self._is_dataset = self._kind in ("dataset", "builder")
        self._source = _SourceRounds(input, self, self._size) if self._kind == "source" else None
        # For each inferencer, the indices of its fetches in a tower's fetch list.
        self._slots: list[list[int]] = []

    @property
    def inferencers(self) -> tuple[Inferencer, ...]:
        """The inferencers run."""
        return self._infs

    def _resolve_fetches(self, handle: Any) -> list[Any]:
        """The tower's tensors that the inferencers need, each once; sets ``_slots``."""
        tensors: list[Any] = []
        where: dict[Any, int] = {}
        missing = []
        self._slots = []
        for inf in self._infs:
            slots = []
            for name in inf.get_fetches():
                try:
                    t = handle.get_tensor(name)
                except KeyError:
                    missing.append(f"{inf}: {name!r}")
                    continue
                key = t.ref() if isinstance(t, tf.Tensor) else id(t)
                if key not in where:
                    where[key] = len(tensors)
                    tensors.append(t)
                slots.append(where[key])
            self._slots.append(slots)
        if missing:
            msg = f"{self}: tower {handle.ns_name!r} has no tensor for: {', '.join(missing)}"
            raise KeyError(msg)
        return tensors

    def _tower_func(self, tower_func: Any) -> Any:
        tower_func = tower_func if tower_func is not None else self.trainer.tower_func
        if tower_func is None:
            msg = (
                f"{self} needs a tower function: give 'tower_func', or use a trainer "
                "whose tower_func is set"
            )
            raise CallbackError(msg)
        return tower_func

    def _make_iterator(self) -> Any:
        dataset = self._input
        if self._kind == "builder":
            dataset = self._input()
            if not isinstance(dataset, tf.data.Dataset):
                msg = (
                    f"{self}: the function given as 'input' returned {type(dataset).__name__}, "
                    "not a tf.data.Dataset"
                )
                raise TypeError(msg)
        if self._size is None and _dataset_cardinality(dataset) == tf.data.INFINITE_CARDINALITY:
            msg = (
                f"{self}: the input dataset ({dataset.__class__.__name__}, element_spec "
                f"{dataset.element_spec}) is infinite (a .repeat() without a count?): a round "
                "of inference runs until the dataset is exhausted and would never end; give "
                "it an end with dataset.take(n), or pass size=n to run n batches per round"
            )
            raise ValueError(msg)
        try:
            return tf1.data.make_initializable_iterator(dataset)
        except ValueError as err:
            msg = f"{self}: the dataset must be created in the trainer's graph: {err}"
            raise ValueError(msg) from err

    def _rounds(self, batches: Iterator[Any]) -> Iterator[Any]:
        """`batches`, at most ``size`` of them when the runner was given one."""
        if self._size is None:
            return batches
        return itertools.islice(batches, self._size)

    @property
    def reduces(self) -> bool:
        """Whether each round's statistics are summed across the job's processes.

        .. versionadded:: 0.2
        """
        return self._reduce

    def set_chief_only(self, v: bool = True) -> Callback:
        """Set :attr:`chief_only`; refused for a reducing runner, which every process runs.

        Raises:
            ValueError: ``v`` True on a runner made with ``reduce=True`` (the chief would
                wait in the sum for processes that never run it).
        """
        if v and self._reduce:
            msg = (
                f"{self}: a runner with reduce=True runs on every process (the sum needs "
                "them all); it cannot be chief-only"
            )
            raise ValueError(msg)
        return super().set_chief_only(v)

    def _setup_graph(self) -> None:
        self._build_towers()
        if self._reduce:
            make = getattr(self.trainer, "make_process_sum", None)
            if not callable(make):
                msg = (
                    f"{self}: 'reduce=True' needs a trainer with a 'make_process_sum' "
                    f"method; {type(self.trainer).__name__} has none"
                )
                raise CallbackError(msg)
            # built here, before the graph is finalized: a collective is an op
            self._process_sum = make(f"inference_sum_{self._tower_name}")
        for inf in self._infs:
            inf.setup_graph(self.trainer)

    def _before_train(self) -> None:
        self._make_callables()
        if self._kind == "python":
            # A DataFlow is reset once before it is read, as tensorpack does: its
            # random state (shuffling, augmentation) is made here.
            reset = getattr(self._input, "reset_state", None)
            if callable(reset):
                reset()
        if self._source is not None:
            self._source.start(self.trainer.sess)
        for inf in self._infs:
            inf.before_train()

    def _after_train(self) -> None:
        if self._source is not None:
            self._source.finish()
        if isinstance(self._input, ParallelIterable):
            self._input.close()  # its worker processes end with training, as the input's do
        for inf in self._infs:
            inf.after_train()

    def _dispatch(self, values: Sequence[Any]) -> None:
        for inf, slots in zip(self._infs, self._slots):
            inf.on_fetches([values[i] for i in slots])

    def _trigger(self) -> None:
        for inf in self._infs:
            inf.before_inference()
        total = None
        if self._source is not None:
            total = self._source.size
        elif self._kind == "python" and hasattr(self._input, "__len__"):
            try:
                total = len(self._input)
            except (TypeError, NotImplementedError):  # a pool of copies, a DataFlow, no length
                total = None
        if self._size is not None and self._source is None:
            total = self._size if total is None else min(total, self._size)
        with tqdm.tqdm(
            total=total, desc=str(self), unit="batch", leave=False, disable=None, file=CONSOLE
        ) as bar:
            for values in self._results():
                self._dispatch(values)
                bar.update(1)
        if self._reduce:
            self._reduce_round()
        stats: dict[str, float] = {}
        for inf in self._infs:
            got = inf.after_inference() or {}
            clash = sorted(set(got) & set(stats))
            if clash:
                msg = f"{self}: inferencers put the same statistics twice: {clash}"
                raise CallbackError(msg)
            stats.update(got)
        for name, value in stats.items():
            self.trainer.monitors.put_scalar(name, float(value))

    def _reduce_round(self) -> None:
        """Sum the inferencers' partials across the processes; give each its summed part."""
        vector, lengths = join_partials([inf.partial() for inf in self._infs])
        summed = np.asarray(self._process_sum(vector), dtype=np.float64)
        if summed.shape != vector.shape:
            msg = (
                f"{self}: the sum across processes of a vector of shape {vector.shape} has "
                f"shape {summed.shape}: do all processes run the same inferencers?"
            )
            raise CallbackError(msg)
        for inf, part in zip(self._infs, split_partials(summed, lengths)):
            inf.from_partial(part)

    @abc.abstractmethod
    def _build_towers(self) -> None:
        """Build the inference tower(s) and resolve the fetches (in ``setup_graph``)."""

    @abc.abstractmethod
    def _make_callables(self) -> None:
        """Make the session callables (in ``before_train``)."""

    @abc.abstractmethod
    def _results(self) -> Iterator[Sequence[Any]]:
        """The fetched values of each batch, as lists in the order of one tower's fetches."""


class InferenceRunner(InferenceRunnerBase):
    """Run inferencers over an input on every ``trigger``, in an inference tower.

    In ``setup_graph`` it calls the tower function (the trainer's by default)
    under ``TowerContext(tower_name, is_training=False)`` on ``device``: on
    placeholders made from its input signature for a Python input, on the
    dataset iterator's output for a ``tf.data.Dataset``, or on an input source's
    tensors. The inference tower reuses the training variables. Each batch is one
    call of one session callable that fetches every inferencer's tensors (through a
    hooked session with the source's callbacks, for an input source).

    Args:
        input: a ``tf.data.Dataset`` (made in the trainer's graph; the round ends
            when it is exhausted), a function building one, an input source such as
            ``FeedInput`` (a round is its ``size()`` batches), or a re-iterable of
            datapoints (see `InferenceRunnerBase`).
        infs: an Inferencer or a list of them.
        tower_name: the inference tower's name scope; each runner needs its own.
        tower_func: the tower function to build the tower with; the trainer's when None.
        device: the GPU id of the tower (a logical CPU device on machines without GPUs,
            see `towerkit.towers.resolve_devices`).
        size: batches in a round at most, for a dataset or a re-iterable; None: until
            it is exhausted. A dataset known to be infinite (``.repeat()``) is refused
            in ``setup_graph`` unless `size` is given.
        reduce: sum each round's statistics across the job's processes (see
            `InferenceRunnerBase`).

    Raises:
        TypeError: bad input, inferencers or tower function.
        ValueError: a bad `size`; (in ``setup_graph``) an infinite dataset without `size`.
        CallbackError: (in ``setup_graph``) no tower function at all.
        KeyError: (in ``setup_graph``) the tower lacks tensors an inferencer needs.
    """

    def __init__(
        self,
        input: Any,
        infs: Inferencer | Sequence[Inferencer],
        tower_name: str = "InferenceTower",
        tower_func: Any = None,
        device: int = 0,
        size: int | None = None,
        reduce: bool = False,
    ) -> None:
        super().__init__(input, infs, size, reduce)
        if not isinstance(tower_name, str) or not tower_name:
            msg = f"'tower_name' must be a non-empty string; got {tower_name!r}"
            raise ValueError(msg)
        if isinstance(device, bool) or not isinstance(device, (int, np.integer)) or device < 0:
            msg = f"'device' must be a GPU id (an int >= 0); got {device!r}"
            raise ValueError(msg)
        self._tower_name = tower_name
        self._tower_func_arg = _check_tower_func(tower_func)
        self._device = int(device)
        self._placeholders: list[Any] = []
        self._fetches: list[Any] = []
        self._iterator: Any = None
        self._call: Any = None
        self._signature: tuple[tf.TensorSpec, ...] = ()
        self.handle: Any = None
        """The inference tower's `towerkit.towers.TowerTensorHandle` (from ``setup_graph`` on)."""

    def _build_towers(self) -> None:
        tower_func = self._tower_func(self._tower_func_arg)
        self._signature = tuple(tower_func.input_signature)
        (device,) = resolve_devices([self._device])
        if self._is_dataset:
            self._iterator = self._make_iterator()
            inputs = _dataset_inputs(self._iterator.get_next(), self._signature)
        elif self._source is not None:
            self._source.setup(self._signature)
        with tf1.device(device), TowerContext(self._tower_name, is_training=False):
            if self._source is not None:
                inputs = self._source.source.get_input_tensors()
            elif not self._is_dataset:
                inputs = self._placeholders = build_placeholders(self._signature)
            tower_func(*inputs)
        self.handle = tower_func.towers[-1]
        self._fetches = self._resolve_fetches(self.handle)
        if self._source is not None:
            self._source.attach(self.trainer)

    def _make_callables(self) -> None:
        if self._source is not None:
            return
        sess = self.trainer.sess
        self._call = sess.make_callable(self._fetches, feed_list=self._placeholders or None)

    def _results(self) -> Iterator[Sequence[Any]]:
        if self._source is not None:
            yield from self._source.run(self._fetches)
        elif self._is_dataset:
            self.trainer.sess.run(self._iterator.initializer)
            yield from self._rounds(self._dataset_batches())
        else:
            layout = DatapointLayout.from_specs(self._signature)
            for i, dp in self._rounds(enumerate(self._input)):
                yield self._call(*_datapoint_values(dp, i, layout))

    def _dataset_batches(self) -> Iterator[Sequence[Any]]:
        while True:
            try:
                yield self._call()
            except tf.errors.OutOfRangeError:
                return

    def __str__(self) -> str:
        return f"InferenceRunner({self._tower_name})"


class DataParallelInferenceRunner(InferenceRunnerBase):
    """Run inferencers with one inference tower per device, a batch on each at once.

    It builds tower ``<tower_name><k>`` on the k-th device of
    ``towerkit.towers.resolve_devices(gpus)`` (GPUs, or logical CPU devices
    ``/cpu:k`` on machines without GPUs, which the session config must provide),
    each on its own placeholders. Datapoints are taken ``len(devices)`` at a time,
    one per tower, and run in one session call; the remaining datapoints (fewer
    than the towers) run one by one on the first tower. Inferencers see each
    tower's batch as a batch. A ``tf.data.Dataset`` input (or an input source's
    tensors) is read on the host, one element (batch) per datapoint.

    Args:
        input: a ``tf.data.Dataset`` (made in the trainer's graph), a function
            building one, an input source such as ``FeedInput`` (a round is its
            ``size()`` batches), or a re-iterable of datapoints (see `InferenceRunnerBase`).
        infs: an Inferencer or a list of them.
        gpus: a number of devices or a list of GPU ids.
        tower_name: the towers' name prefix.
        tower_func: the tower function; the trainer's when None.
        size: datapoints (batches) in a round at most, as for `InferenceRunner`.
        reduce: sum each round's statistics across the job's processes (see
            `InferenceRunnerBase`).

    Raises:
        TypeError, ValueError: bad arguments (``gpus`` as for ``resolve_devices``); (in
            ``setup_graph``) an infinite dataset without `size`.
    """

    def __init__(
        self,
        input: Any,
        infs: Inferencer | Sequence[Inferencer],
        gpus: int | Sequence[int],
        tower_name: str = "InferenceTower",
        tower_func: Any = None,
        size: int | None = None,
        reduce: bool = False,
    ) -> None:
        super().__init__(input, infs, size, reduce)
        if not isinstance(tower_name, str) or not tower_name:
            msg = f"'tower_name' must be a non-empty string; got {tower_name!r}"
            raise ValueError(msg)
        resolve_devices(gpus, num_visible_gpus=0)  # validates the argument's form
        self._gpus = gpus
        self._tower_name = tower_name
        self._tower_func_arg = _check_tower_func(tower_func)
        self._signature: tuple[tf.TensorSpec, ...] = ()
        self._placeholders: list[list[Any]] = []
        self._fetches: list[list[Any]] = []
        self._iterator: Any = None
        self._next: list[Any] = []
        self._call_all: Any = None
        self._call_one: Any = None
        self._pull: Any = None
        self.devices: tuple[str, ...] = ()
        """The towers' devices (from ``setup_graph`` on)."""
        self.handles: list[Any] = []
        """The towers' `towerkit.towers.TowerTensorHandle` (from ``setup_graph`` on)."""

    def _build_towers(self) -> None:
        tower_func = self._tower_func(self._tower_func_arg)
        self._signature = tuple(tower_func.input_signature)
        self.devices = resolve_devices(self._gpus)
        n = len(self.devices)
        if self._is_dataset:
            self._iterator = self._make_iterator()
            self._next = _dataset_inputs(self._iterator.get_next(), self._signature)
        elif self._source is not None:
            self._source.setup(self._signature)
            with tf1.device("/cpu:0"):
                self._next = list(self._source.source.get_input_tensors())
            self._source.attach(self.trainer)
        self.handles, self._placeholders, self._fetches = [], [], []
        for k, device in enumerate(self.devices):
            name = f"{self._tower_name}{k}"
            with tf1.device(device), TowerContext(name, is_training=False, index=k, total=n):
                placeholders = build_placeholders(self._signature)
                tower_func(*placeholders)
            handle = tower_func.towers[-1]
            self.handles.append(handle)
            self._placeholders.append(placeholders)
            self._fetches.append(self._resolve_fetches(handle))

    def _make_callables(self) -> None:
        sess = self.trainer.sess
        self._call_all = sess.make_callable(
            self._fetches, feed_list=[p for ph in self._placeholders for p in ph]
        )
        self._call_one = sess.make_callable(self._fetches[0], feed_list=self._placeholders[0])
        if self._is_dataset:
            self._pull = sess.make_callable(self._next)

    def _datapoints(self) -> Iterator[list[Any]]:
        if self._source is not None:
            yield from self._source.run(self._next)
        elif self._is_dataset:
            self.trainer.sess.run(self._iterator.initializer)
            yield from self._rounds(self._pulled())
        else:
            layout = DatapointLayout.from_specs(self._signature)
            for i, dp in self._rounds(enumerate(self._input)):
                yield _datapoint_values(dp, i, layout)

    def _pulled(self) -> Iterator[list[Any]]:
        while True:
            try:
                yield self._pull()
            except tf.errors.OutOfRangeError:
                return

    def _results(self) -> Iterator[Sequence[Any]]:
        n = len(self.devices)
        for group in chunks(self._datapoints(), n):
            if len(group) == n:
                yield from self._call_all(*[v for values in group for v in values])
            else:
                for values in group:
                    yield self._call_one(*values)

    def __str__(self) -> str:
        return f"DataParallelInferenceRunner({self._tower_name})"
