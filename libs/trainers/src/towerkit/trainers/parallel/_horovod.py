"""`HorovodTrainer`: one process per device, gradients all-reduced by horovod, rank 0 the chief."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import tensorflow as tf

from towerkit.callbacks import Callback, CallbackError, LoopBounds
from towerkit.towers import FLOAT32, Precision, TowerContext, TowerFn, TowerFunc, visible_gpu_count
from towerkit.towers.compat import tf1
from towerkit.trainers._errors import CollectiveError
from towerkit.trainers._loop_driver import LoopRun
from towerkit.trainers._process_sum import ProcessSumFn
from towerkit.trainers._seams import OptimizerFactory
from towerkit.trainers._sesscreate import NewSessionCreator
from towerkit.trainers._tower import SingleCostTrainer
from towerkit.trainers.parallel._elastic_core import (
    LoopCommit,
    check_commit_every,
    is_collective_failure,
)
from towerkit.trainers.parallel._hvd_slurm import join_slurm_step
from towerkit.trainers.parallel._hvd_sum import horovod_process_sum
from towerkit.trainers.parallel._trainer_parts import (
    ChiefOwnsLogdir,
    PreemptionVote,
    RunOpEachEpoch,
    SessionInitThenRun,
)

if TYPE_CHECKING:
    from towerkit.sessinit import SessionInit
    from towerkit.trainers._interrupt import StopControl
    from towerkit.trainers._sesscreate import SessionCreatorLike
    from towerkit.trainers.inputs._base import InputSource

__all__ = ["HorovodTrainer", "import_horovod", "rank_gpu"]

logger = logging.getLogger("towerkit.trainers")

INSTALL_HINT = (
    "install horovod built for TensorFlow with gloo: `install-horovod` (from towerkit-tools), "
    "or run `nox -s horovod`, which builds it into its own environment"
)


def import_horovod() -> Any:
    """``horovod.tensorflow``, imported on demand.

    Raises:
        ImportError: horovod (or its TensorFlow extension) is not installed; the
            message says how to install it.
    """
    try:
        import horovod.tensorflow as hvd
    except ImportError as err:
        msg = f"HorovodTrainer needs horovod: {INSTALL_HINT}. The import failed with: {err}"
        raise ImportError(msg) from err
    return hvd


def rank_gpu(local_rank: int, num_visible_gpus: int) -> str | None:
    """The GPU a horovod process uses (for ``visible_device_list``), or None without GPUs.

    A process sees either every GPU of its machine and takes the one of its local
    rank, or exactly one (the launcher gave each process its own) and takes it.

    Raises:
        ValueError: more processes on the machine than GPUs.

    Examples:
        >>> rank_gpu(1, 4), rank_gpu(1, 1), rank_gpu(0, 0)
        ('1', '0', None)
        >>> rank_gpu(2, 2)
        Traceback (most recent call last):
        ...
        ValueError: local rank 2 has no GPU of its own: 2 visible (ids 0..1); run at most 2 processes on this machine, or hide the GPUs (CUDA_VISIBLE_DEVICES=) to train on CPUs
    """
    if num_visible_gpus == 0:
        return None
    if num_visible_gpus == 1:
        return "0"
    if local_rank >= num_visible_gpus:
        msg = (
            f"local rank {local_rank} has no GPU of its own: {num_visible_gpus} visible (ids "
            f"0..{num_visible_gpus - 1}); run at most {num_visible_gpus} processes on this "
            "machine, or hide the GPUs (CUDA_VISIBLE_DEVICES=) to train on CPUs"
        )
        raise ValueError(msg)
    return str(local_rank)


def _check_compression(hvd: Any, compression: Any) -> Any:
    if compression is None:
        return hvd.Compression.none
    if not all(callable(getattr(compression, m, None)) for m in ("compress", "decompress")):
        msg = (
            "'compression' must be hvd.Compression.none, hvd.Compression.fp16 or None; got "
            f"{compression!r}"
        )
        raise TypeError(msg)
    return compression


class HorovodTrainer(ChiefOwnsLogdir, SingleCostTrainer):
    """Data-parallel training with horovod: one process per device, on one or many machines.

    Each process (a horovod rank) builds one training tower on its own batch, the
    gradients are all-reduced across the ranks (averaged or summed) and every rank
    applies the result to its own copy of the variables. Rank 0 is the chief: only
    there do chief-only callbacks run (savers, monitors: checkpoints, ``stats.json``
    and event files), and only there does the trainer create, move or write the log
    directory; other ranks keep the path, for callbacks that are not chief-only.

    At the start, after ``session_init`` (a restore, e.g. by
    `AutoResumeTrainConfig`), the global variables that exist when ``setup_graph``
    ends (the model's, its optimizer's and the global step: those every rank has;
    not the ones callbacks create, which may be chief-only) are broadcast from rank 0,
    so all ranks start from rank 0's values and global step even where the others
    could not read the checkpoint; the loop's ``steps_per_epoch``, ``starting_epoch`` and
    ``max_epoch`` are also taken from rank 0. With ``BROADCAST_EVERY_EPOCH`` the
    variables are broadcast again after every epoch.

    Inputs: every rank reads its own input. A graph-level seed
    (``graph.seed``) is offset by the rank when ``setup_graph`` runs, so seeded
    pipelines shuffle differently on each rank yet reproducibly; unseeded ones
    differ anyway. An input seeded at op level only (``NumpyInput(seed=1)`` with no
    graph seed) draws the same batches on every rank: seed the graph instead.

    The rank facts are available as ``trainer.rank``, ``trainer.size``,
    ``trainer.local_rank`` and ``trainer.local_size``, or from horovod itself
    (``hvd.rank()``, ``hvd.size()``) once the trainer exists. With GPUs, each
    process uses the GPU of its local rank (``visible_device_list``), or its only
    visible GPU when the launcher gives each process one (see `rank_gpu`); do not
    create a CUDA context (e.g. by running a session) before the trainer is created.

    Launch with horovod's launcher, e.g. on one machine with 4 processes over gloo::

        horovodrun -np 4 --gloo -H localhost:4 python train.py

    or ``mpirun -np 8 -H server1:4,server2:4 -bind-to none -map-by slot python
    train.py`` with MPI. When a rank dies, the launcher stops the others; a rank
    whose collective fails ends its loop cleanly and raises `CollectiveError`. Set
    ``HOROVOD_GLOO_TIMEOUT_SECONDS`` (and ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS``)
    to bound how long ranks wait for one that hangs. Processes that fork (e.g. a
    multiprocess data flow) may misbehave under MPI. A preemption signal (SIGTERM,
    SIGUSR1) to any rank stops every rank after the same step (`PreemptionVote`): rank
    0 saves there, and each rank raises `TrainingPreempted` (exit status 143).

    Elastic (``elastic=True``, in a job launched in horovod's elastic mode: ``horovodrun
    --min-np A --max-np B --host-discovery-script SCRIPT``, or `launch_horovod_job`
    with ``min_processes``): the trainer commits its state in memory (the global
    variables, the loop position, the hyper-parameter setters' values) every
    ``commit_every_k_steps`` steps and at the end of every epoch, after its callbacks.
    When a rank dies, the others roll back to their last commit, horovod re-forms with
    the ranks left, rank 0's state is broadcast, and the loop goes on; hosts that the
    discovery script adds join at the next commit. The run ends at the global step of
    an uninterrupted run and every epoch ends once. The process that was rank 0 at the
    start keeps the logdir while it lives; when it is lost, the rank 0 of the re-formed
    ring takes the logdir over. Every process builds the chief-only callbacks (behind a
    gate), the owner alone runs them; a new owner's start as a run resumed at the
    commit would (``stats.json`` keeps the epochs before it, later checkpoints are moved
    aside). Variables are rolled back, the input pipelines are not (the steps re-run
    draw new batches).

    Args:
        average: average (True) or sum (False) the gradients across ranks.
        compression: ``hvd.Compression.fp16`` to send float gradients as float16,
            or ``hvd.Compression.none``/None.
        elastic: train in horovod's elastic mode (see above).
        commit_every_k_steps: with ``elastic``, steps between commits inside an
            epoch (default 1; an epoch's end always commits).

    Attributes:
        BROADCAST_EVERY_EPOCH: broadcast rank 0's variables after every epoch.

    Raises:
        ImportError: horovod is not installed (the message says how to get it).
        TypeError: bad `average` or `compression`.
        ValueError: more processes on this machine than GPUs; ``elastic`` outside an
            elastic launch; a bad ``commit_every_k_steps``.
    """

    SUPPORTS_STEPS_PER_EXECUTION = False

    def _k_refusal(self) -> str:
        return (
            "each step's all-reduce is a collective every rank must enter in the same "
            "order; inside a K-step loop a rank that stops early (StopTraining, a "
            "failure) would leave the others blocked in the loop, out of reach of the "
            "per-call health checks"
        )

    BROADCAST_EVERY_EPOCH: bool = True

    def __init__(
        self,
        average: bool = True,
        compression: Any = None,
        *,
        elastic: bool = False,
        commit_every_k_steps: int | None = None,
    ) -> None:
        if not isinstance(average, (bool, np.bool_)):
            msg = f"'average' must be a bool; got {type(average).__name__}"
            raise TypeError(msg)
        if not isinstance(elastic, (bool, np.bool_)):
            msg = f"'elastic' must be a bool; got {type(elastic).__name__}"
            raise TypeError(msg)
        if commit_every_k_steps is not None and not elastic:
            msg = "'commit_every_k_steps' is for elastic training: give it with elastic=True"
            raise ValueError(msg)
        self._commit_every = check_commit_every(
            1 if commit_every_k_steps is None else commit_every_k_steps
        )
        hvd = import_horovod()
        if elastic:
            from towerkit.trainers.parallel._elastic import check_elastic_launch

            check_elastic_launch()
        join_slurm_step()  # a task srun started: horovod's variables from its step
        hvd.init()
        super().__init__()
        self._hvd = hvd
        self._average = bool(average)
        self._compression = _check_compression(hvd, compression)
        self._rank = int(hvd.rank())
        self._size = int(hvd.size())
        self._local_rank = int(hvd.local_rank())
        self._local_size = int(hvd.local_size())
        self.is_chief = self._rank == 0
        self._gpu = rank_gpu(self._local_rank, visible_gpu_count())
        self._broadcast_op: Any = None
        self._loop_feed: Any = None
        self._loop_value: Any = None
        self._elastic_state: Any = None
        self._took_over_at: int | None = None
        if elastic:
            from towerkit.trainers.parallel._elastic import GraphState, TrainerMoves

            moves = TrainerMoves(
                self._elastic_moved_to, self._take_over_logdir, self._elastic_reset
            )
            self._elastic_state = GraphState(self, moves)
        logger.info(
            "HorovodTrainer: rank %d of %d (local rank %d of %d)%s",
            self._rank,
            self._size,
            self._local_rank,
            self._local_size,
            ", the chief" if self.is_chief else "",
        )

    # -- the rank facts ---------------------------------------------------------------

    @property
    def hvd(self) -> Any:
        """The ``horovod.tensorflow`` module the trainer uses."""
        return self._hvd

    @property
    def rank(self) -> int:
        """This process's rank (0-based); rank 0 is the chief."""
        return self._rank

    @property
    def size(self) -> int:
        """How many processes take part."""
        return self._size

    @property
    def local_rank(self) -> int:
        """This process's rank among the processes of its machine (its GPU when there are GPUs)."""
        return self._local_rank

    @property
    def local_size(self) -> int:
        """How many processes run on this machine."""
        return self._local_size

    @property
    def elastic(self) -> bool:
        """Whether the trainer runs in horovod's elastic mode."""
        return self._elastic_state is not None

    @property
    def average(self) -> bool:
        """Whether gradients are averaged (True) or summed across ranks."""
        return self._average

    # -- the graph ---------------------------------------------------------------------------

    def setup_graph(
        self,
        inputs_desc: Sequence[tf.TensorSpec],
        input: InputSource,
        get_cost_fn: TowerFn,
        get_opt_fn: OptimizerFactory,
        *,
        steps_per_execution: int = 1,
        precision: str | Precision = FLOAT32,
        xla: bool | str | None = None,
    ) -> list[Callback]:
        """As `SingleCostTrainer.setup_graph`, with the graph seed offset by the rank."""
        self._set_steps_per_execution(steps_per_execution)
        seed = self._graph.seed
        if seed is not None and self._rank > 0:
            self._graph.seed = seed + self._rank
            logger.info("rank %d: graph seed %d -> %d", self._rank, seed, self._graph.seed)
        args = (inputs_desc, input, get_cost_fn, get_opt_fn)
        return super().setup_graph(*args, precision=precision, xla=xla)

    def _device(self) -> str:
        return "/cpu:0" if self._gpu is None else "/gpu:0"

    def _setup_graph(
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
    ) -> list[Callback]:
        hvd = self._hvd
        with tf1.device(self._device()), TowerContext("", is_training=True):
            grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
        # the preemption vote rides in the gradients' all-reduce, one collective per step
        # (`PreemptionVote`); not inside a K-step loop, whose body's values cannot be fetched
        carry = self._elastic_state is None and self.steps_per_execution == 1
        tensors = [g for g, _ in grads]
        if carry:
            with tf1.device("/cpu:0"), tf1.name_scope("preemption_vote"):
                feed = tf1.placeholder_with_default(
                    tf.constant(0.0, tf.float32), [], name="signalled"
                )
            with tf1.device(self._device()):
                tensors.append(tf.identity(feed, name="preemption_vote/signalled_here"))
        with tf1.name_scope("horovod_allreduce"):
            reduced = hvd.grouped_allreduce(
                tensors,
                op=hvd.Average if self._average else hvd.Sum,
                compression=self._compression,
            )
        voted = reduced.pop() if carry else None
        opt = get_opt_fn()
        with tf1.control_dependencies([] if voted is None else [voted]):
            self.train_op = opt.apply_gradients(
                list(zip(reduced, [v for _, v in grads])), name="train_op"
            )
        self._build_broadcasts()
        if self._elastic_state is not None:
            # every commit's sync does it, and an epoch's end must not run a collective
            # after the monitors wrote the epoch
            with self._graph.as_default():
                self._elastic_state.build_sync(tf1.global_variables())
            return []
        vote = PreemptionVote(
            lambda t: hvd.allreduce(t, op=hvd.Sum),
            self._rank,
            lambda: self._interrupt,
            carried=(None if voted is None else (feed, voted, self._size if self._average else 1)),
        )
        if self.BROADCAST_EVERY_EPOCH:
            return [
                vote,
                RunOpEachEpoch(lambda: self._broadcast_op, "broadcast rank 0's variables"),
            ]
        return [vote]

    def _preemption_here(self) -> tuple[Any, bool]:
        """Every rank takes the preemption signals, and the ranks agree on the step (`PreemptionVote`).

        Elastic jobs keep the lone trainer's rule (the chief alone).
        """
        if self._elastic_state is not None:
            return (self._preemption if self.is_chief else None), False
        return self._preemption, True

    def _build_broadcasts(self) -> None:
        """The broadcasts from rank 0 of the model's global variables and the loop parameters.

        They are built at the end of ``setup_graph``, so they cover the variables every
        rank has (the model's, its optimizer's, the global step) and not those that
        callbacks create later, which may exist on some ranks only (chief-only ones).
        """
        hvd = self._hvd
        with self._graph.as_default(), tf1.name_scope("horovod_broadcast"):
            self._broadcast_op = hvd.broadcast_variables(tf1.global_variables(), root_rank=0)
            self._loop_feed = tf1.placeholder(tf.int64, [5], name="loop_parameters")
            self._loop_value = hvd.broadcast(self._loop_feed, 0, name="loop_parameters")

    # -- session and loop --------------------------------------------------------------------

    def initialize(
        self, session_creator: SessionCreatorLike, session_init: SessionInit | None
    ) -> None:
        """As `Trainer.initialize`, then rank 0's variables are broadcast to every rank.

        With GPUs, a `NewSessionCreator`'s config is given this rank's GPU.

        Raises:
            CollectiveError: the broadcast failed (another rank is gone).
        """
        if self._broadcast_op is None:
            self._build_broadcasts()
        if isinstance(session_creator, NewSessionCreator) and self._gpu is not None:
            config = tf1.ConfigProto()
            config.CopyFrom(session_creator.config)
            if not config.gpu_options.visible_device_list:
                config.gpu_options.visible_device_list = self._gpu
            session_creator = NewSessionCreator(target=session_creator.target, config=config)
        if self._elastic_state is not None:
            # no collective before the elastic loop: a joining rank meets the others in
            # its first sync
            with self._graph.as_default():
                if self._elastic_state.sync_op is None:  # a train_op set without setup_graph
                    self._elastic_state.build_sync(tf1.global_variables())
                self._elastic_state.build_restore(tf1.global_variables())
            super().initialize(session_creator, session_init)
            return
        wrapped = SessionInitThenRun(
            session_init,
            [self._broadcast_op],
            f"rank {self._rank}: variables broadcast from rank 0",
            on_error=lambda err: self._collective_error("the initial broadcast", err),
        )
        super().initialize(session_creator, wrapped)

    def _main_loop(self, bounds: LoopBounds) -> None:
        """As `Trainer.main_loop`, with the loop parameters of rank 0 on every rank.

        Raises:
            CollectiveError: a collective failed during training (another rank is gone).
        """
        self._require_phase("main_loop", "initialized")
        mine = (bounds.steps_per_epoch, bounds.starting_epoch, bounds.max_epoch)
        if self._elastic_state is not None:
            self._elastic_state.bounds = mine
            self._elastic_state.position = LoopCommit(
                self._driver.start_global_step, bounds.starting_epoch, 0
            )
            super()._main_loop(bounds)
            return
        # a failure here is a failure before the first step: the logdir is given back
        # where a resumed run starts inside its epoch, and the input steps it skips
        position = (self._run_dir.resumed_in_epoch, self._run_dir.data_steps_at_start or 0)
        with self._run_dir.failed_start_cleanup():
            try:
                sent = np.asarray(mine + position)
                agreed_all = self.sess.run(self._loop_value, {self._loop_feed: sent})
            except tf.errors.OpError as err:
                self.sess.close()
                what = "agreeing on the loop parameters"
                raise self._collective_error(what, err) from err
        agreed_all = tuple(int(x) for x in agreed_all)
        agreed, at = agreed_all[:3], agreed_all[3:]
        if agreed_all != mine + position:
            logger.warning(
                "rank %d: (steps_per_epoch, starting_epoch, max_epoch, steps into the epoch, "
                "data steps) = %s here, %s on rank 0: using rank 0's",
                self._rank,
                mine + position,
                agreed_all,
            )
        if at != position:
            skipped = self.input_source is not None and self.input_source.skip_steps(at[1])
            self.set_resume_position(at[0], at[1] if skipped else 0)
        try:
            super()._main_loop(bounds if agreed == mine else self._bounds_for(*agreed))
        except tf.errors.OpError as err:
            if not is_collective_failure(err):
                raise
            what = "training"
            raise self._collective_error(what, err) from err

    def _loop(self, bounds: LoopBounds, interrupt: StopControl) -> None:
        if self._elastic_state is None:
            super()._loop(bounds, interrupt)
            return
        from towerkit.trainers.parallel._elastic import run_elastic_loop

        run = LoopRun(self._callbacks, self.run_step, self.hooked_sess.should_stop, interrupt)
        try:
            run_elastic_loop(self, self._elastic_state, self._commit_every, self._driver, run)
        except tf.errors.OpError as err:
            if not is_collective_failure(err):
                raise
            what = "elastic training"
            raise self._collective_error(what, err) from err

    def _on_this_process(self, cb: Callback) -> Callback | None:
        if self._elastic_state is None:
            return super()._on_this_process(cb)
        # the logdir can move to another process: every one builds the chief-only
        # callbacks, the one owning the logdir runs them
        from towerkit.trainers.parallel._chief_gate import gate_chief_only

        return gate_chief_only(cb, lambda: self.is_chief)

    def _elastic_moved_to(
        self, commit: LoopCommit, bounds: tuple[int, int, int] | None = None
    ) -> None:
        """The loop's counters at `commit` (and rank 0's loop bounds), after a sync or restore.

        A process that took the logdir over counts its run from the epoch it took it at
        (``starting_epoch``), as a resumed run would: its writers keep the records of the
        epochs before, and write that epoch and the next ones.
        """
        runs = self.hooked_sess.run_calls if self.hooked_sess is not None else 0
        self._driver.rebase(commit.global_step, runs)
        if bounds is not None:
            steps_per_epoch, starting_epoch, max_epoch = bounds
            if self._took_over_at is not None:
                starting_epoch = self._took_over_at
            self._driver.bounds = self._bounds_for(steps_per_epoch, starting_epoch, max_epoch)

    def _take_over_logdir(self, commit: LoopCommit) -> None:
        """Own the logdir from `commit` on: its owner was lost and this process is rank 0 now.

        The lock is taken over; the chief-only callbacks start at their next phase, reading
        the directory as a run resumed at `commit` would (``stats.json`` keeps the epochs
        before ``commit.epoch``; checkpoints saved after its global step are moved aside).
        """
        if self._run_dir.path is not None:
            before = self._run_dir.take_over()
            lost = "no lock file" if before is None else f"pid {before.pid} on {before.host!r}"
            logger.warning(
                "rank 0 of %d: the process that owned the logdir %s (%s) was lost; this "
                "process takes it over at epoch %d, global step %d: checkpoints, stats.json "
                "and event files are written from here on",
                self._size,
                self._run_dir.path,
                lost,
                commit.epoch,
                commit.global_step,
            )
        self.is_chief = True
        b = self._driver.bounds
        assert b is not None, "a sync comes after main_loop set the bounds"
        self._took_over_at = min(commit.epoch, b.max_epoch + 1)
        self._driver.bounds = attrs.evolve(b, starting_epoch=self._took_over_at)

    def _elastic_reset(self) -> None:
        """The rank facts again, once horovod re-formed with the ranks there are now."""
        hvd = self._hvd
        old = (self._rank, self._size)
        self._rank, self._size = int(hvd.rank()), int(hvd.size())
        self._local_rank, self._local_size = int(hvd.local_rank()), int(hvd.local_size())
        logger.warning(
            "elastic reset: rank %d of %d is now rank %d of %d%s",
            *old,
            self._rank,
            self._size,
            " (owns the logdir)" if self.is_chief else "",
        )

    def _collective_error(self, during: str, err: Exception) -> CollectiveError:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        msg = (
            f"HorovodTrainer rank {self._rank} of {self._size}: a collective operation failed "
            f"during {during}, most likely because another rank exited, crashed or lost its "
            f"connection (see the launcher's output for the first failure): "
            f"{type(err).__name__}: {first}"
        )
        return CollectiveError(msg)

    def make_process_sum(self, name: str) -> ProcessSumFn:
        """A sum over the ranks of a float64 vector: a horovod all-reduce named `name`.

        Raises:
            CallbackError: an elastic job (ranks come and go between its commits).

        .. versionadded:: 0.2
        """
        if self._elastic_state is not None:
            msg = (
                f"the process sum {name!r} (a reducing InferenceRunner) is not supported on an "
                "elastic HorovodTrainer: ranks may join or leave between commits; evaluate "
                "with a non-elastic HorovodTrainer, or with reduce=False"
            )
            raise CallbackError(msg)
        return horovod_process_sum(self._hvd, self._graph, name, lambda: self.sess)

    def __repr__(self) -> str:
        elastic = (
            f", elastic=True, commit_every_k_steps={self._commit_every}" if self.elastic else ""
        )
        return (
            f"HorovodTrainer(rank={self._rank}, size={self._size}, average={self._average}"
            f"{elastic}, phase={self._phase!r})"
        )
