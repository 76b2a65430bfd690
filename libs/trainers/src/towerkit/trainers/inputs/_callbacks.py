"""The callbacks that input sources give the trainer: initialize, feed, stage."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import tensorflow as tf

from towerkit.callbacks import Callback, Callbacks, StopTraining
from towerkit.towers.compat import tf1
from towerkit.trainers._errors import InputDataError

if TYPE_CHECKING:
    from towerkit.callbacks import TrainerView
    from towerkit.trainers.inputs._base import InputSource

__all__ = ["InputSourceCallbacks", "depends_on", "fetched_ops"]


def fetched_ops(graph: Any, fetches: Any) -> list[Any]:
    """The operations behind `fetches` (a nested structure of tensors, ops or names)."""
    if fetches is None:
        return []
    ops = []
    for el in tf.nest.flatten(fetches):
        if el is None:
            continue
        found = graph.as_graph_element(el, allow_tensor=True, allow_operation=True)
        ops.append(found if isinstance(found, tf.Operation) else found.op)
    return ops


def depends_on(roots: Iterable[Any], targets: Iterable[Any]) -> bool:
    """Whether running the ops `roots` runs any op of `targets` (through data or control edges).

    Args:
        roots: operations (e.g. the fetches of a run).
        targets: operations or tensors to look for.
    """
    wanted = {t if isinstance(t, tf.Operation) else t.op for t in targets}
    seen: set[Any] = set()
    stack = list(roots)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        if op in wanted:
            return True
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return False


def _failed_nodes(message: str) -> list[str]:
    r"""The node names TensorFlow's error `message` names as failing (``{{node NAME}}``).

    Examples:
        >>> _failed_nodes("End of sequence\n\t [[{{node IteratorGetNext}}]]")
        ['IteratorGetNext']
    """
    return re.findall(r"\{\{node ([^}]+)\}\}", message)


class _FetchDependency:
    """Remembers, per fetches object, whether running it runs some target ops."""

    def __init__(self, targets: Sequence[Any]) -> None:
        self._targets = list(targets)
        self._memo: dict[int, tuple[Any, bool]] = {}

    def __call__(self, graph: Any, fetches: Any) -> bool:
        hit = self._memo.get(id(fetches))
        if hit is not None and hit[0] is fetches:
            return hit[1]
        found = depends_on(fetched_ops(graph, fetches), self._targets)
        if len(self._memo) > 256:
            self._memo.clear()
        self._memo[id(fetches)] = (fetches, found)
        return found


class _InputCallback(Callback):
    """Base of input callbacks: they run on every worker, chief or not.

    When a training step fails, the loop asks each input callback to explain the error
    (`explain_failure`, through `input_failure`): that is the one way the loop learns
    of an input's own faults, whatever its kind.
    """

    _chief_only = False

    def explain_failure(self, err: BaseException) -> BaseException | None:
        """The input's own error behind `err` (a failed step), or None when it did not cause it."""
        return None


class LoopPlace(Protocol):
    """Where the loop is: what an input's failure message names (a trainer has it)."""

    @property
    def epoch_num(self) -> int: ...

    @property
    def local_step(self) -> int: ...

    @property
    def steps_per_epoch(self) -> int: ...

    @property
    def global_step(self) -> int: ...


def input_failure(
    err: BaseException, callbacks: Iterable[Callback], trainer: LoopPlace | None = None
) -> BaseException:
    """The error to raise for a failed step's `err`: the first input callback's explanation.

    Each callback of `callbacks` with an ``explain_failure`` method is asked in order;
    the first error it gives stands for `err` (which becomes its cause when it has
    none). Errors that are not TensorFlow's op errors are never an input's doing.
    With `trainer`, the message says where the loop was.
    """
    op_error: type[BaseException] = tf.errors.OpError  # so `err` stays a BaseException
    if not isinstance(err, op_error):
        return err
    failure: BaseException | None = None
    for cb in callbacks:
        explain = getattr(cb, "explain_failure", None)
        failure = explain(err) if explain is not None else None
        if failure is not None:
            break
    if failure is None:
        return err
    if failure.__cause__ is None:
        failure.__cause__ = err
    if trainer is None:
        return failure
    where = (
        f" [at epoch {trainer.epoch_num}, step {trainer.local_step} of "
        f"{trainer.steps_per_epoch} (0-based), global step {trainer.global_step}]"
    )
    located = type(failure)(f"{failure}{where}")
    located.__cause__ = failure.__cause__
    return located


class InitializeInput(_InputCallback):
    """Before training: reset the source's Python state, then run its initializer ops.

    Args:
        name: the source's description, for ``str``.
        reset: the source's ``reset_state``.
        ops: initializer ops (e.g. an iterator's initializer).
        feed: values to feed while running `ops` (e.g. arrays behind placeholders).
        reads: the names of the ops that read the source's data (an iterator's
            ``get_next``), to recognise the end of the data in an error.
    """

    def __init__(
        self,
        name: str,
        reset: Callable[[], None],
        ops: Sequence[Any],
        feed: Callable[[], dict[Any, Any] | None] | None = None,
        reads: Sequence[str] = (),
    ) -> None:
        self._name = name
        self._reset = reset
        self._ops = list(ops)
        self._feed = feed
        self._reads = reads

    @property
    def name(self) -> str:
        """The source's description."""
        return self._name

    def explain_failure(self, err: BaseException) -> BaseException | None:
        """An `InputDataError` naming this source when `err` is its dataset running out.

        The dataset is repeated after each pass, so only a pass with no element ends it.
        """
        if not self.ran_out(err):
            return None
        failure = InputDataError(
            f"{self.name}: the dataset ran out of data: a whole pass over it gave no "
            "element (the dataset is repeated after each pass, so only an empty pass "
            "ends it: an empty dataset, or a filter that keeps nothing)"
        )
        failure.__cause__ = err
        return failure

    def ran_out(self, err: BaseException) -> bool:
        """Whether `err` is the end of this source's data (an ``OutOfRangeError`` of its reads)."""
        if not isinstance(err, tf.errors.OutOfRangeError):
            return False
        op = getattr(err, "op", None)
        if op is not None:
            return op.name in self._reads
        return any(name in _failed_nodes(err.message) for name in self._reads)

    def _before_train(self) -> None:
        self._reset()
        if self._ops:
            self.trainer.sess.run(self._ops, feed_dict=self._feed() if self._feed else None)

    def __str__(self) -> str:
        return f"InitializeInput({self._name})"


class FeedInputCallback(_InputCallback):
    """Feed one datapoint per tower into the placeholders of runs that need them.

    A run whose fetches do not depend on the placeholders gets no feed and takes no
    datapoint.

    Args:
        name: the source's description.
        reset: the source's ``reset_state``, called in ``before_train``.
        placeholders: one list of placeholders per tower.
        start: returns a fresh iterator of datapoints (tuples in signature order).
        infinite: start again when the iterator ends; otherwise raise ``StopTraining``.
    """

    def __init__(
        self,
        name: str,
        reset: Callable[[], None],
        placeholders: Sequence[Sequence[Any]],
        start: Callable[[], Any],
        infinite: bool,
    ) -> None:
        self._name = name
        self._reset = reset
        self._placeholders = [list(p) for p in placeholders]
        self._start = start
        self._infinite = infinite
        self._depends = _FetchDependency([p for group in self._placeholders for p in group])
        self._it: Any = None

    def _before_train(self) -> None:
        self._reset()
        self._it = self._start()

    def _next(self) -> Sequence[Any]:
        try:
            return next(self._it)
        except StopIteration:
            if not self._infinite:
                msg = f"{self._name}: the data is exhausted"
                raise StopTraining(msg) from None
        self._it = self._start()
        try:
            return next(self._it)
        except StopIteration:
            msg = (
                f"{self._name}: the iterable yielded no datapoint in a whole pass; expected "
                "datapoints (an empty list or DataFlow?)"
            )
            raise InputDataError(msg) from None

    def _before_run(self, run_context: Any) -> Any:
        if not self._depends(run_context.session.graph, run_context.original_args.fetches):
            return None
        if self._it is None:
            self._it = self._start()
        feed = {}
        for group in self._placeholders:
            for ph, value in zip(group, self._next()):
                feed[ph] = value
        return tf1.train.SessionRunArgs(fetches=None, feed_dict=feed)

    def __str__(self) -> str:
        return f"FeedInputCallback({self._name})"


class StageInputCallback(_InputCallback):
    """Keep staging areas one batch ahead: warm them up, then refill them on each run.

    Before training, `nr_stage` batches are put into each area. A run whose fetches
    take from the areas also runs the put op, which stages the next batch while the
    current one is used. Runs that do not take from the areas put nothing, so the areas
    never grow.

    Inside a loop of several steps per session call (``steps_per_execution``), each
    step of the loop puts the next batch itself: then the callback only warms the
    areas up (``per_run=False``), with put ops built outside the loop.

    Args:
        name: the source's description.
        put: one op putting a batch into every area.
        gets: the tensors taken from the areas.
        nr_stage: batches staged ahead, >= 1.
        per_run: also put a batch with every run that takes from the areas.
    """

    def __init__(
        self, name: str, put: Any, gets: Sequence[Any], nr_stage: int, *, per_run: bool = True
    ) -> None:
        self._name = name
        self._put = put
        self._nr_stage = nr_stage
        self._per_run = per_run
        self.accepts_coarse_steps = not per_run  # inside a loop of steps: nothing per step
        self._depends = _FetchDependency(list(gets))
        self._args = tf1.train.SessionRunArgs(fetches=put)

    def has_hook(self, method: str) -> bool:
        if method == "_before_run":
            return self._per_run
        return super().has_hook(method)

    def _before_train(self) -> None:
        for _ in range(self._nr_stage):
            self.trainer.sess.run(self._put)

    def _before_run(self, run_context: Any) -> Any:
        if self._depends(run_context.session.graph, run_context.original_args.fetches):
            return self._args
        return None

    def __str__(self) -> str:
        return f"StageInputCallback({self._name})"


class InputSourceCallbacks(Callbacks, _InputCallback):
    """The callbacks of an input source, as ``InputSource.setup`` returns them: a `Callbacks`.

    It stands for ``source.get_callbacks()``, which it calls only when the trainer sets
    up its callbacks, after the towers took their tensors. A towerkit trainer puts
    the source's own callbacks in its place then (so each step calls them directly);
    driven by anything else, it is the group of them, with a group's guarantees (an
    error in one's ``after_train`` does not skip the others') and one session-run
    request for all of them.

    Args:
        source: the input source.
    """

    def __init__(self, source: InputSource) -> None:
        super().__init__(())
        self._source = source
        self._set_up = False
        self._run_args: list[tuple[Callback, Any]] = []

    @property
    def source(self) -> InputSource:
        """The input source."""
        return self._source

    def callbacks(self) -> list[Callback]:
        """The source's callbacks (``source.get_callbacks()``): call once every tower is built."""
        return self._source.get_callbacks()

    def has_hook(self, method: str) -> bool:
        return True if not self._set_up else super().has_hook(method)

    def setup_graph(self, trainer: TrainerView) -> None:
        self.cbs = Callbacks(self.callbacks()).cbs
        self._set_up = True
        super().setup_graph(trainer)

    def __bool__(self) -> bool:
        return True  # a stand-in, never an empty group: its callbacks are not known yet

    def explain_failure(self, err: BaseException) -> BaseException | None:
        """The first of the source's callbacks' explanations of `err` (see `input_failure`)."""
        return input_failure(err, self.cbs) if self.cbs else None

    def _before_run(self, run_context: Any) -> Any:
        wanted = []
        for cb in self.with_hook("_before_run"):
            args = cb.before_run(run_context)
            if args is not None:
                if not isinstance(args, tf1.train.SessionRunArgs):
                    args = tf1.train.SessionRunArgs(args)
                wanted.append((cb, args))
        self._run_args = wanted
        if not wanted:
            return None
        if len(wanted) == 1:
            return wanted[0][1]
        feed: dict[Any, Any] = {}
        for _, args in wanted:
            feed.update(args.feed_dict or {})
        return tf1.train.SessionRunArgs(
            fetches=[args.fetches for _, args in wanted], feed_dict=feed or None
        )

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        wanted = self._run_args
        if len(wanted) == 1:
            results = [run_values.results]
        else:
            results = list(run_values.results or [None] * len(wanted))
        done = {id(cb) for cb, _ in wanted}
        for (cb, _), value in zip(wanted, results):
            if cb.has_hook("_after_run"):
                cb.after_run(
                    run_context,
                    tf1.train.SessionRunValues(
                        results=value,
                        options=run_values.options,
                        run_metadata=run_values.run_metadata,
                    ),
                )
        for cb in self.with_hook("_after_run"):
            if id(cb) not in done:
                cb.after_run(run_context, run_values._replace(results=None))

    def __str__(self) -> str:
        return f"InputSourceCallbacks({self._source})"
