"""Input sources from Python values: an iterable fed by a thread, constants, feeds."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import tensorflow as tf

from towerkit.callbacks import Callback, ParallelIterable
from towerkit.callbacks.plumbing import DatapointLayout, datapoint_tuple
from towerkit.towers.compat import tf1
from towerkit.trainers.inputs._base import InputSignatureError, InputSource, spec_mismatches
from towerkit.trainers.inputs._callbacks import (
    FeedInputCallback,
    InitializeInput,
)
from towerkit.trainers.inputs._feed import InputFeeder, QueueFeeder
from towerkit.trainers.inputs._sources import (
    _INPUT_DEVICE,
    _check_prefetch,
    _check_reiterable,
    _reset_iterable,
    iterable_size,
)
from towerkit.trainers.inputs._workers import WorkerPool, parallel_source

logger = logging.getLogger("towerkit.trainers")


def _check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        msg = f"'timeout' of IterableInput must be a number of seconds > 0 or None; got {type(timeout).__name__}"
        raise TypeError(msg)
    if not (math.isfinite(timeout) and timeout > 0):
        msg = f"'timeout' of IterableInput must be a number of seconds > 0 or None; got {timeout!r}"
        raise ValueError(msg)
    return float(timeout)


__all__ = ["IterableInput", "DummyConstantInput", "FeedInput"]


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
    `StopTraining` or Ctrl-C) closes the queue and joins the thread. In the thread the
    trainer's session is the default one: the iterable may call the predictors of
    ``trainer.get_predictor(...)`` (a replay memory whose player asks the model).

    A datapoint of the wrong arity, dtype or shape, a pass that yields nothing, or an
    exception raised by the iterable stops the thread; the batches queued before it
    are still trained on, then the trainer raises `InputDataError` (bad data) or
    `InputProducerError` (the iterable raised; its exception is the cause), naming
    this input, the datapoint, what the signature expects and what came. Components
    are cast within their kind (``float64`` to ``float32``, ``int64`` to ``int32``).

    A producer that blocks never hangs training silently: with `timeout`, an iterable
    that gives no datapoint for `timeout` seconds stops training with
    `InputTimeoutError`, naming this input, the datapoint it waited for and how long
    (the batches already queued are trained on first); without it, training waits,
    and Ctrl-C works as documented for the trainer: the first asks training to stop
    after the step, the second aborts it, even while the step waits for this input.

    With `workers`, the datapoints are produced by that many processes (a
    `towerkit.callbacks.ParallelIterable`: see there how the source is split, ordered
    and seeded, and the start method); the thread only feeds what they produce. The
    workers start with the first pass, are stopped after training, and their queue
    fill and speed are written to the monitors at each epoch's end (``WorkerPool``).
    A worker that raises or dies stops training with `InputProducerError`, whose
    cause names the worker, the datapoint and the worker's traceback. An
    `iterable` that is a `ParallelIterable` gets the same care.

    Args:
        iterable: re-iterable datapoints (not a one-pass iterator); with `workers`,
            also an object with ``__len__`` and ``__getitem__``, or a function
            ``(worker, workers)`` returning worker k's iterable.
        prefetch: batches the queue holds, >= 1 (``tf.data.AUTOTUNE``: 8).
        timeout: seconds the iterable may take to give one datapoint (or to start a
            pass), > 0; None (the default) waits however long it takes.
        workers: producer processes, >= 1; None (the default): the feeding thread
            produces them itself.
        ordered: with `workers`, keep the order one worker would produce (True) or
            deliver datapoints as they come (False); None (the default): ordered,
            except an iterable without ``__getitem__`` (a DataFlow), whose workers
            each iterate a copy of their own, unordered (see `ParallelIterable`).
        seed: with `workers`, the base of the workers' seeds (NumPy and ``random``);
            None (the default): the run's seed (``TrainConfig(seed=...)``), else 0.
        start_method: with `workers`, ``"forkserver"``, ``"spawn"`` or ``"fork"``;
            None (the default): ``"forkserver"`` where the platform has it, else
            ``"spawn"``.

    Raises:
        TypeError: `iterable` is not re-iterable, or cannot be pickled to workers.
        ValueError: a `timeout` that is not > 0, `workers` < 1.

    .. versionadded:: 0.2
        `timeout`.

    .. versionadded:: 0.2
        `workers`, `ordered`, `seed`, `start_method`.
    """

    _default_capacity = 8

    def __init__(
        self,
        iterable: Iterable[Any],
        *,
        prefetch: int = 8,
        timeout: float | None = None,
        workers: int | None = None,
        ordered: bool | None = None,
        seed: int | None = None,
        start_method: str | None = None,
    ) -> None:
        iterable = parallel_source(
            iterable,
            workers,
            ordered=ordered,
            seed=0 if seed is None else seed,
            start_method=start_method,
            capacity=prefetch if isinstance(prefetch, int) and prefetch > 0 else 8,
        )
        _check_reiterable(iterable, "iterable")
        self._timeout = _check_timeout(timeout)
        checked = _check_prefetch(prefetch)
        if checked is None:
            msg = "'prefetch' of IterableInput must be an int >= 1 or tf.data.AUTOTUNE; got None"
            raise TypeError(msg)
        self._iterable = iterable
        self._capacity = self._default_capacity if checked == tf.data.AUTOTUNE else checked
        self._queue: Any = None
        self._feeder: QueueFeeder | None = None
        self._seed_given = seed is not None

    @property
    def iterable(self) -> Iterable[Any]:
        """The datapoints."""
        return self._iterable

    @property
    def timeout(self) -> float | None:
        """Seconds the iterable may take to give a datapoint; None: no limit."""
        return self._timeout

    def use_run_seed(self, seed: int) -> bool:
        """Seed the workers from the run's `seed` when no ``seed=`` was given; whether it did."""
        if self._seed_given or not isinstance(self._iterable, ParallelIterable):
            return False
        self._iterable.reseed(seed)
        return True

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
                timeout=self._timeout,
            )
        self._queue = queue

    def _get_input_tensors(self) -> list[tf.Tensor]:
        with tf.device(_INPUT_DEVICE):
            got = self._queue.dequeue(name=f"IterableInput_get{self._calls}")
        return list(got) if isinstance(got, (list, tuple)) else [got]

    def _get_callbacks(self) -> list[Callback]:
        feeder = InputFeeder(str(self), self.reset_state, self._feeder)  # type: ignore[arg-type]
        if isinstance(self._iterable, ParallelIterable):
            # first: after training the workers stop before the thread is joined
            return [WorkerPool(self._iterable), feeder]
        return [feeder]

    def _size(self) -> int | None:
        return iterable_size(self._iterable)

    def _skip_batches(self, batches: int) -> bool:
        if self._feeder is None:
            return False
        self._feeder.skip = batches
        if batches:
            logger.info(
                "%s: skipping %d datapoints (what the interrupted run consumed)", self, batches
            )
        return True

    def _reset_state(self) -> None:
        _reset_iterable(self._iterable)

    def __str__(self) -> str:
        return f"IterableInput({type(self._iterable).__name__})"


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

    PER_TOWER_CALLBACKS = True

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

    def _skip_batches(self, batches: int) -> bool:
        del batches  # every batch is the same
        return True

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

    per_step_feed_reason = "feeds its placeholders from Python before every step"

    PER_TOWER_CALLBACKS = True

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
