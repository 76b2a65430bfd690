"""Parts data-parallel trainers share: ops after the session init, an op each epoch, the logdir, the preemption vote."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.sessinit import SessionInit
from towerkit.towers.compat import tf1

if TYPE_CHECKING:
    from towerkit.trainers._interrupt import StopControl

__all__ = [
    "ChiefOwnsLogdir",
    "PreemptionFlag",
    "PreemptionVote",
    "RunOpEachEpoch",
    "SessionInitThenRun",
]

logger = logging.getLogger("towerkit.trainers")


class SessionInitThenRun(SessionInit):
    """A session initializer that runs another one (when given), then some ops.

    Data-parallel trainers wrap the user's ``session_init`` in it, so the copies of
    the variables are made equal right after the values are loaded (restored or
    initialized), before the trainer reads the global step.

    Args:
        session_init: the user's session initializer, or None.
        ops: the ops to run after it (e.g. copying tower 0's variables to the others).
        what: what the ops do, for the log.
        on_error: turns an error of the ops into the exception to raise (raised
            from the original); None raises the original.
    """

    def __init__(
        self,
        session_init: SessionInit | None,
        ops: Sequence[Any],
        what: str,
        on_error: Callable[[Exception], Exception] | None = None,
    ) -> None:
        self._inner = session_init
        self._ops = [op for op in ops if op is not None]
        self._what = what
        self._on_error = on_error

    def setup_graph(self, graph: Any = None) -> None:
        """Build the wrapped initializer's ops, when it has a ``setup_graph``."""
        setup = getattr(self._inner, "setup_graph", None)
        if callable(setup):
            setup() if graph is None else setup(graph)

    def init(self, sess: Any) -> None:
        """Run the wrapped initializer, then the ops."""
        if self._inner is not None:
            self._inner.init(sess)
        if self._ops:
            try:
                sess.run(self._ops)
            except tf.errors.OpError as err:
                if self._on_error is None:
                    raise
                raise self._on_error(err) from err
            logger.info("%s", self._what)

    def __repr__(self) -> str:
        return f"SessionInitThenRun({self._inner!r}, {self._what!r})"


class RunOpEachEpoch(Callback):
    """Run an op at the end of every epoch, on every worker (chief or not).

    Args:
        op: the op, or a function returning it, called in ``before_train`` (so the op
            may be built after the callbacks are set up).
        what: a short description for the log.
    """

    _chief_only = False

    def __init__(self, op: Any, what: str) -> None:
        self._op_arg = op
        self._op: Any = None
        self._what = what

    def _before_train(self) -> None:
        self._op = self._op_arg() if callable(self._op_arg) else self._op_arg

    def _trigger_epoch(self) -> None:
        if self._op is not None:
            self.trainer.sess.run(self._op)

    def __str__(self) -> str:
        return f"RunOpEachEpoch({self._what})"


class PreemptionVote(Callback):
    """Each step, the processes of a job learn whether a preemption signal reached any of them.

    The processes of a horovod job must stop after the same step: one that stopped
    alone would leave the others blocked in the next all-reduce. With every hooked
    step this feeds whether a preemption signal arrived here (the loop's
    `StopControl.signalled`) to a sum over the processes, reduced by `reduce_sum`
    in the same session call; when the sum is positive every process agrees to stop
    (`StopControl.agree`) after that call, so all stop at one global step, where
    the chief saves. The signal takes effect one step later than on a lone trainer.
    When they stopped so, every process meets the others in one more sum in
    ``after_train``, which the chief reaches once its checkpoint is written: no process
    exits before the chief saved (horovodrun ends a job's other processes when one
    exits with a non-zero status).

    The vote may ride in the gradients' own all-reduce (``carried``): one collective per
    step instead of two, which on a busy machine is a cycle of horovod's coordination
    saved each step. The trainer then builds the vote's feed (a float scalar, 1.0 where
    signalled) into the same grouped all-reduce and makes its training op wait for the
    vote's result; every hooked session call must then run the training op, since a
    group's members complete only together (the trainer's ``run_step`` does).

    Args:
        reduce_sum: builds the sum over the processes of an int32 scalar tensor.
        rank: this process's rank, for the log.
        interrupt: gives the running loop's `StopControl` (None outside the loop).
        carried: ``(feed, reduced, scale)``: the float placeholder the trainer put into
            its gradients' all-reduce, what came out of it, and the factor that turns
            that into a count of processes (the number of processes when the all-reduce
            averages, 1 when it sums). None: the vote builds its own int32 sum.
    """

    _chief_only = False

    def __init__(
        self,
        reduce_sum: Callable[[Any], Any],
        rank: int,
        interrupt: Callable[[], StopControl | None],
        carried: tuple[Any, Any, int] | None = None,
    ) -> None:
        self._reduce_sum = reduce_sum
        self._rank = rank
        self._interrupt = interrupt
        self._carried = carried
        self._feed: Any = None
        self._sum: Any = None
        self._meet: Any = None

    def _setup_graph(self) -> None:
        with tf1.device("/cpu:0"), tf1.name_scope("preemption_vote"):
            if self._carried is None:
                self._feed = tf1.placeholder_with_default(
                    tf.constant(0, tf.int32), [], name="signalled"
                )
                self._sum = self._reduce_sum(self._feed)
            else:
                feed, reduced, scale = self._carried
                self._feed = feed
                # a count of processes again: the float mean (or sum) of 0s and 1s, rounded
                self._sum = tf.cast(
                    tf.round(reduced * float(scale)), tf.int32, name="signalled_sum"
                )
            self._meet = self._reduce_sum(tf.constant(1, tf.int32, name="saved"))

    def _after_train(self) -> None:
        state = self._interrupt()
        if state is not None and state.preempted:
            self.trainer.sess.run(self._meet)  # after the chief's save (see the class doc)

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        state = self._interrupt()
        signalled = state is not None and state.signalled
        value = float(signalled) if self._carried is not None else int(signalled)
        return tf1.train.SessionRunArgs(self._sum, {self._feed: value})

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context
        state = self._interrupt()
        if state is None or state.preempted or int(run_values.results) <= 0:
            return
        if not state.signalled:
            logger.warning(
                "rank %d: %d other process(es) of the job were sent a preemption signal: "
                "stopping with them after this step",
                self._rank,
                int(run_values.results),
            )
        state.agree()

    def __str__(self) -> str:
        return "PreemptionVote()"


class PreemptionFlag(Callback):
    """A preemption signal to any worker of a TensorFlow cluster stops them all; the chief saves.

    The workers of a cluster train asynchronously: there is no step they all share.
    The job's flag lives on a parameter server; each worker reads it with every
    session call. A worker that was sent a preemption signal raises the flag and
    stops after its call in flight; the others stop after the call that read it
    raised, the chief saving at its global step (the only checkpoint written).

    Args:
        read: the flag's value (a bool tensor on a parameter server).
        raise_flag: the op that sets it.
        task: this worker's index, for the log.
        interrupt: gives the running loop's `StopControl` (None outside the loop).
    """

    _chief_only = False
    accepts_coarse_steps = True

    def __init__(
        self,
        read: Any,
        raise_flag: Any,
        task: int,
        interrupt: Callable[[], StopControl | None],
    ) -> None:
        self._read = read
        self._raise = raise_flag
        self._task = task
        self._interrupt = interrupt
        self._args = tf1.train.SessionRunArgs(read)

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        return self._args

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context
        state = self._interrupt()
        if state is None or state.preempted:
            return
        raised = bool(run_values.results)
        if state.signalled and not raised:
            self.trainer.sess.run(self._raise)
            raised = True
        if not raised:
            return
        if not state.signalled:
            logger.warning(
                "worker %d: another worker of the cluster was sent a preemption signal: "
                "stopping after this step",
                self._task,
            )
        state.agree()

    def __str__(self) -> str:
        return "PreemptionFlag()"


class ChiefOwnsLogdir:
    """Mixin for multi-process trainers: only the chief creates, moves or writes the logdir.

    On other processes ``set_logdir`` keeps the path (``trainer.logdir``, for
    callbacks that are not chief-only) but neither creates, checks nor moves the
    directory, so processes sharing a file system never race on it.
    """

    CHIEF_OWNS_LOGDIR = True
    """Read by `Trainer.set_logdir`: on another process it keeps the path only."""
