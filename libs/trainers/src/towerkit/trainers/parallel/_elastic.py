"""Elastic horovod training in graph mode: the committed state and the loop that rolls back to it.

horovod's elastic protocol (``horovod.common.elastic.run_fn``) runs the loop; when a
collective fails (a rank died) every survivor restores its last commit, horovod is
re-initialized with the ranks left, and rank 0's commit is broadcast to all; when
hosts were added, the ranks stop at the next commit and the new ones join there.

`GraphState` is that state for a finalized graph: a commit is one ``sess.run`` of
the global variables into memory, a restore feeds them back through assign ops built
before the graph was finalized, a sync runs broadcast ops built with the model (the
variables every rank has) and broadcasts the loop position. horovod's own
``TensorFlowState`` assigns with eager ops, which do nothing in graph mode.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import tensorflow as tf

from towerkit.towers.compat import tf1
from towerkit.trainers._errors import CollectiveError
from towerkit.trainers._loop_driver import LoopHooks
from towerkit.trainers.parallel._elastic_core import (
    LoopCommit,
    is_collective_failure,
    reform_within,
    remaining_epochs,
)
from towerkit.trainers.parallel._health import end_unless_set

if TYPE_CHECKING:
    from towerkit.trainers._loop_driver import LoopDriver, LoopRun
    from towerkit.trainers.parallel._horovod import HorovodTrainer

__all__ = [
    "GraphState",
    "Snapshot",
    "TrainerMoves",
    "check_elastic_launch",
    "elastic_hooks",
    "run_elastic_loop",
]

logger = logging.getLogger("towerkit.trainers")

ELASTIC_HINT = (
    "launch it in horovod's elastic mode: horovodrun -np N --min-np A --max-np B "
    "--host-discovery-script SCRIPT --gloo python train.py, or "
    "launch_horovod_job(..., min_processes=A, max_processes=B, host_discovery_script=SCRIPT)"
)


def check_elastic_launch(environ: Any = None) -> None:
    """Refuse ``elastic=True`` in a process horovod did not start in elastic mode.

    Raises:
        ValueError: ``HOROVOD_ELASTIC`` is not set to 1 (not an elastic launch).
    """
    env = os.environ if environ is None else environ
    if env.get("HOROVOD_ELASTIC", "0") != "1":
        msg = f"HorovodTrainer(elastic=True) runs only in an elastic horovod job: {ELASTIC_HINT}"
        raise ValueError(msg)


@attrs.frozen
class TrainerMoves:
    """What the elastic state has its trainer do, passed in (the trainer's own methods).

    Attributes:
        moved_to: set the loop's counters at a commit (and rank 0's loop bounds, when given).
        take_over_logdir: own the logdir from a commit on (its owner was lost).
        reset: read the rank facts again once horovod re-formed.
    """

    moved_to: Callable[[LoopCommit, tuple[int, int, int] | None], None]
    take_over_logdir: Callable[[LoopCommit], None]
    reset: Callable[[], None]


@attrs.frozen
class Snapshot:
    """What a commit holds in memory: the loop position, the variables, the setters' values.

    Attributes:
        commit: the loop position (`LoopCommit`).
        values: the value of each global variable of this process, in the state's order.
        setter_values: the value of each hyper-parameter setter's parameter, in order.
    """

    commit: LoopCommit
    values: tuple[Any, ...] = ()
    setter_values: tuple[Any, ...] = ()


class GraphState:
    """The elastic state of a graph-mode trainer, as horovod's elastic loop drives it.

    It answers what ``horovod.common.elastic.run_fn`` and its host notifications call
    (``sync``, ``restore``, ``commit``, ``on_reset``, ``on_hosts_updated``), without
    horovod's ``State`` base, so this module imports without horovod. Build it in
    ``setup_graph`` (`build_sync`, with the variables every rank has) and before the
    graph is finalized (`build_restore`, with all of this process's global variables);
    afterwards no op is created.
    """

    def __init__(self, trainer: HorovodTrainer, moves: TrainerMoves) -> None:
        self._trainer = trainer
        self._moves = moves
        self._hvd = trainer.hvd
        self._host_messages: queue.Queue[tuple[float, int]] = queue.Queue()
        self._last_updated_timestamp = 0.0
        self._sync_op: Any = None
        self._pos_feed: Any = None
        self._pos_value: Any = None
        self._host_feed: Any = None
        self._host_value: Any = None
        self._owner_feed: Any = None
        self._owners: Any = None
        self._vars: list[Any] = []
        self._feeds: list[Any] = []
        self._restore_op: Any = None
        self.snapshot = Snapshot(LoopCommit(0, 0, 0))
        self.position = LoopCommit(0, 0, 0)
        self.bounds: tuple[int, int, int] = (0, 0, 0)
        # set once the loop runs again after a reset (the ring re-formed, its state synced)
        self.reformed: threading.Event | None = None

    @property
    def sync_op(self) -> Any:
        """The broadcast of the variables every rank has (None until `build_sync`)."""
        return self._sync_op

    # -- the ops, built once ------------------------------------------------------------

    def build_sync(self, variables: list[Any]) -> None:
        """The broadcasts from rank 0: `variables`, the loop position, the hosts' update."""
        hvd = self._hvd
        with tf1.name_scope("elastic_sync"):
            self._sync_op = hvd.broadcast_variables(variables, root_rank=0)
            self._pos_feed = tf1.placeholder(tf.int64, [6], name="position")
            self._pos_value = hvd.broadcast(self._pos_feed, 0, name="elastic_position")
            self._host_feed = tf1.placeholder(tf.float64, [3], name="host_update")
            self._host_value = hvd.broadcast(self._host_feed, 0, name="elastic_host_update")
            self._owner_feed = tf1.placeholder(tf.float32, [1], name="owns_logdir")
            self._owners = hvd.allreduce(self._owner_feed, op=hvd.Sum, name="elastic_logdir_owners")

    def build_restore(self, variables: list[Any]) -> None:
        """One placeholder and assign op per variable, grouped into the restore op."""
        with tf1.name_scope("elastic_restore"):
            self._vars = list(variables)
            self._feeds = [
                tf1.placeholder(v.dtype.base_dtype, v.shape, name=f"value{i}")
                for i, v in enumerate(self._vars)
            ]
            assigns = [tf1.assign(v, f) for v, f in zip(self._vars, self._feeds)]
            self._restore_op = tf.group(*assigns, name="restore")

    # -- what horovod's elastic loop calls ------------------------------------------------

    def on_hosts_updated(self, timestamp: float, update_res: int) -> None:
        """A notification from horovod's driver: hosts were added or removed."""
        self._host_messages.put((timestamp, update_res))

    def on_reset(self) -> None:
        """After horovod re-formed: old notifications dropped, the trainer's rank facts."""
        self._host_messages = queue.Queue()
        self.reset()

    def commit(self) -> None:
        """Save the state in memory, then stop here if hosts changed (all ranks agree)."""
        self.save()
        self.check_host_updates()

    def _setters(self) -> list[Any]:
        from towerkit.callbacks import HyperParamSetter

        return [cb for cb in self._trainer.callbacks if isinstance(cb, HyperParamSetter)]

    def save(self) -> None:
        """Commit: the variables into memory (one session call), the position, the setters."""
        sess = self._trainer.sess
        values = tuple(sess.run(self._vars)) if self._vars else ()
        setters = tuple(s.get_current_value() for s in self._setters())
        self.snapshot = Snapshot(self.position, values, setters)

    def restore(self) -> None:
        """Back to the last commit: variables, setters' values, position, the trainer's step."""
        snap = self.snapshot
        sess = self._trainer.sess
        if self._vars:
            sess.run(self._restore_op, dict(zip(self._feeds, snap.values)))
        with sess.as_default():
            for setter, value in zip(self._setters(), snap.setter_values):
                setter.param.set_value(value)
        self.position = snap.commit
        self._moves.moved_to(snap.commit, None)
        logger.warning(
            "rank %d: rolled back to the last commit (epoch %d, %d steps done, global step %d)",
            self._trainer.rank,
            snap.commit.epoch,
            snap.commit.steps_done,
            snap.commit.global_step,
        )

    def sync(self) -> None:
        """Rank 0's variables and loop position on every rank, then commit them.

        The ranks then count the processes that own the logdir: none when its owner was
        lost, and rank 0 takes it over (`TrainerMoves.take_over_logdir`).
        """
        trainer = self._trainer
        sess = trainer.sess
        sess.run(self._sync_op)
        mine = np.concatenate([self.position.to_array(), np.asarray(self.bounds, np.int64)])
        got = sess.run(self._pos_value, {self._pos_feed: mine})
        commit = LoopCommit.from_array(got[:3])
        owners = sess.run(self._owners, {self._owner_feed: [float(trainer.is_chief)]})
        self.bounds = (int(got[3]), int(got[4]), int(got[5]))
        self.position = commit
        self._moves.moved_to(commit, self.bounds)
        if round(float(owners[0])) == 0:
            if trainer.rank == 0:
                self._moves.take_over_logdir(commit)
            else:
                logger.warning(
                    "rank %d of %d: the process that owned the logdir was lost; rank 0 takes it over",
                    trainer.rank,
                    trainer.size,
                )
        self.save()
        logger.info(
            "rank %d of %d: state synced from rank 0 (epoch %d, %d steps done, global step %d)",
            trainer.rank,
            trainer.size,
            commit.epoch,
            commit.steps_done,
            commit.global_step,
        )

    def check_host_updates(self) -> None:
        """As horovod's, with a broadcast op built once instead of new ops per call."""
        from horovod.common.exceptions import HostsUpdatedInterrupt
        from horovod.runner.elastic.worker import HostUpdateResult

        prev = last = self._last_updated_timestamp
        update = int(HostUpdateResult.no_update)
        while not self._host_messages.empty():
            timestamp, res = self._host_messages.get()
            if timestamp > last:
                last = timestamp
                update |= int(res)
        feed = np.asarray([prev, last, int(update)], np.float64)
        got = self._trainer.sess.run(self._host_value, {self._host_feed: feed})
        prev, self._last_updated_timestamp, agreed = float(got[0]), float(got[1]), int(got[2])
        if self._last_updated_timestamp > prev:
            raise HostsUpdatedInterrupt(agreed == int(HostUpdateResult.removed))

    def reset(self) -> None:
        """After horovod was re-initialized: the trainer's rank facts."""
        self._moves.reset()


def _as_internal_error(err: tf.errors.OpError) -> Exception:
    from horovod.common.exceptions import HorovodInternalError

    error: Exception = HorovodInternalError(err) if is_collective_failure(err) else err
    return error


def elastic_hooks(trainer: HorovodTrainer, state: GraphState, every_k: int) -> LoopHooks:
    """The loop driver's hooks of an elastic run: its commits, and each epoch begun once.

    ``before_epoch`` runs once per epoch in this process (not again after a roll back
    into an epoch already begun); inside an epoch a commit comes every `every_k` steps,
    and the epoch's end is committed right after its ``trigger_epoch``. A roll-back
    into an epoch shows the last step done as ``local_step``; a preemption signal stops
    the loop at once, even in an epoch's last step.
    """
    begun: set[int] = set()

    def begin_epoch(epoch: int) -> bool:
        if epoch in begun:
            return False
        begun.add(epoch)
        return True

    def commit_steps(epoch: int, steps_done: int) -> None:
        state.position = LoopCommit(trainer.global_step, epoch, steps_done)
        state.commit()

    def commit_epoch(epoch: int) -> None:
        state.position = LoopCommit(trainer.global_step, epoch + 1, 0)
        state.commit()

    return LoopHooks(
        begin_epoch=begin_epoch,
        after_steps=commit_steps,
        every=every_k,
        after_epoch=commit_epoch,
        epoch_end_first=False,
        rewind_local_step=True,
    )


def run_elastic_loop(
    trainer: HorovodTrainer, state: GraphState, every_k: int, driver: LoopDriver, run: LoopRun
) -> None:
    """The loop under horovod's elastic protocol, from the synced commit to ``max_epoch``.

    Each pass of horovod's loop drives the trainer's loop driver from the commit it
    restored or synced, with `elastic_hooks`: one ``run_step`` per step (K is 1).
    """
    from horovod.common.elastic import run_fn

    hvd = trainer.hvd
    hooks = elastic_hooks(trainer, state, every_k)

    def body(state: GraphState) -> None:
        if state.reformed is not None:  # re-formed in time: the reset's watchdog stands down
            state.reformed.set()
            state.reformed = None
        spe, starting, max_epoch = state.bounds
        try:
            driver.drive(run, remaining_epochs(state.position, starting, max_epoch, spe), hooks)
        except tf.errors.OpError as err:
            converted = _as_internal_error(err)
            if converted is err:
                raise
            raise converted from err

    bound = reform_within(os.environ)

    def reset() -> None:
        logger.warning("rank %d: horovod re-forms its ring", trainer.rank)
        # Bounded: a ring that does not re-form (a rendezvous or a first broadcast that
        # never completes) ends this process with one line instead of waiting forever.
        state.reformed = threading.Event()
        rank = trainer.rank
        end_unless_set(
            state.reformed,
            bound,
            lambda: CollectiveError(
                f"HorovodTrainer rank {rank}: horovod's ring did not re-form within {bound:g} s "
                "after a collective failed (HOROVOD_ELASTIC_TIMEOUT + 2 x "
                "HOROVOD_GLOO_TIMEOUT_SECONDS)"
            ),
            "the ring did not re-form",
        )
        hvd.shutdown()
        hvd.init()

    run_fn(body, reset)(state)
