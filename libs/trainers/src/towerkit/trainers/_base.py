"""The base trainer: callbacks, session, and the loop that drives them step by step."""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from towerkit.callbacks import Callback, Callbacks, HookedSession, LoopBounds, StopTraining
from towerkit.callbacks.plumbing import console_lines
from towerkit.towers import FLOAT32, Precision
from towerkit.towers.compat import tf1
from towerkit.trainers._callback_checks import (
    _as_callback_list,
    _check_file_claims,
    _check_inputs_registered,
    _expand_input_callbacks,
    _reject_monitors,
)
from towerkit.trainers._errors import TrainerStateError
from towerkit.trainers._graph_mode import TrainerMeta
from towerkit.trainers._heap import frozen_heap
from towerkit.trainers._interrupt import StopControl, deferred_sigint
from towerkit.trainers._loop_end import (
    SignalStop,
    end_epoch,
    stop_line,
    stop_requested,
)
from towerkit.trainers._multistep import StepsPerExecution, check_callbacks_for_k
from towerkit.trainers._precision import built_in_refusal
from towerkit.trainers._preempt import (
    PreemptionPolicy,
    ResumeAndPreemption,
    TrainingPreempted,
    save_for_resume,
)
from towerkit.trainers._process_sum import ProcessSum
from towerkit.trainers._queue_runners import QueueRunnerThreads, start_queue_runners
from towerkit.trainers._run_dir import RunDir
from towerkit.trainers._stop import StopEvent, stop_outcome
from towerkit.trainers._train_calls import TrainCalls
from towerkit.trainers._trainer_view import TrainerViewMixin
from towerkit.trainers.inputs._callbacks import input_failure

if TYPE_CHECKING:
    from towerkit.callbacks import MonitorBase, Monitors, TrainerView
    from towerkit.sessinit import SessionInit
    from towerkit.trainers._sesscreate import SessionCreatorLike

logger = logging.getLogger("towerkit.trainers")

_PHASES = ("new", "callbacks", "initialized", "running", "done")

_STOP_WINS = (
    "a preemption signal arrived too, but training stopped: the run ends as stopped at "
    "global step %d (status 0), and the same command does no more than after any stop"
)


class Trainer(
    TrainerViewMixin,
    StepsPerExecution,
    ResumeAndPreemption,
    TrainCalls,
    ProcessSum,
    metaclass=TrainerMeta,
):
    """The base trainer: it runs ``run_step`` in epochs and calls the callbacks around it.

    A run has three phases, which ``train`` calls in order (call them yourself for
    finer control):

    1. ``setup_callbacks(callbacks, monitors)``: every callback builds its ops
       (``setup_graph``), while the graph can still change.
    2. ``initialize(session_creator, session_init)``: creates the session, loads
       values with ``session_init``, finalizes the graph and makes ``hooked_sess``.
    3. ``main_loop(steps_per_epoch, starting_epoch, max_epoch)``: the loop. Epochs
       run from ``starting_epoch`` to ``max_epoch`` inclusive (1-based), each ``steps_per_epoch``
       calls of ``run_step``, each followed by the callbacks' ``trigger_step``.

    The trainer works in the default graph of its creation (``self.graph``); created at the
    top level (eagerly), in a new graph its whole construction runs in (`TrainerMeta`).
    The log directory (``trainer.logdir``; None: no files) is an argument of ``train``
    and ``TrainConfig``, or set with ``set_logdir`` before ``setup_callbacks``. A run
    failing before its first step leaves it as it found it (see ``set_logdir``).

    A subclass sets ``train_op`` (run by ``run_step``) or overrides ``run_step``.
    Counters follow `towerkit.callbacks.loop_events`: ``epoch_num`` runs from just
    before ``before_epoch`` to just after ``trigger_epoch``; ``local_step`` is the
    step's 0-based index in its epoch; ``global_step`` counts steps, ``steps_per_execution``
    (K, default 1) per ``hooked_sess.run``; with K > 1 the per-step hooks run once per call.

    Ctrl-C (SIGINT) in the loop stops it after the current step, then raises
    ``KeyboardInterrupt``; a second one interrupts at once (``deferred_sigint``).

    A preemption signal (SIGTERM, SIGUSR1: ``set_preemption``) on the chief (every
    horovod rank: they stop together, `PreemptionVote`) stops the loop after the session
    call in flight (an epoch's last step lets the epoch end first), saves every
    `ModelSaver` at that step with its position, runs ``after_train``, and raises
    `TrainingPreempted` (status 143); `AutoResumeTrainConfig` resumes there.

    Attributes:
        is_chief: whether this process is the chief worker (it owns the logdir);
            callbacks with ``chief_only`` are not registered on other workers, or are
            registered behind a gate where the logdir can move (elastic horovod).
        train_op: the op the default ``run_step`` runs.
        sess: the ``tf.compat.v1.Session``, from ``initialize`` on.
        hooked_sess: the `HookedSession` whose ``run`` calls the callbacks'
            ``before_run``/``after_run``, from ``initialize`` on.
    """

    is_chief: bool = True
    CHIEF_OWNS_LOGDIR = False
    """Whether only the chief creates, moves or locks the logdir (`ChiefOwnsLogdir`): on
    other processes ``set_logdir`` keeps its path only."""

    def __init__(self) -> None:
        self._graph = tf1.get_default_graph()
        self.train_op: Any = None
        self.sess: Any = None
        self.hooked_sess: Any = None
        self._queue_runners: QueueRunnerThreads | None = None
        self._registered: list[Callback] = []
        self._callbacks: Callbacks = Callbacks(())
        self._monitors: Monitors | None = None
        self._phase = "new"
        self._epoch_num = 0
        self._local_step = -1
        self._bounds: LoopBounds | None = None
        self._start_global_step = 0
        self._global_step_var: Any = None
        self._step_op: Any = None
        self._interrupt: StopControl | None = None
        self._failure: BaseException | None = None
        self._run_dir = RunDir(self._stepped)
        self._preemption = PreemptionPolicy()
        self._preempted = False

    # -- phase 0: the log directory ------------------------------------------------------

    def set_logdir(
        self, logdir: str | os.PathLike[str] | None, logdir_action: str = "error"
    ) -> None:
        """Choose the directory the run writes to; call before ``setup_callbacks``.

        Args:
            logdir: the directory (created when missing), or None to write nothing.
            logdir_action: what to do when it already holds files: ``"error"``
                (refuse), ``"overwrite"`` (rename it to ``<logdir>.old-<timestamp>``
                atomically and start empty), or ``"keep"`` (write into it, as resuming does).

        A run failing before its first step removes what it added (and the directory if
        it made it; what ``"overwrite"`` or `ModelSaver` moved aside goes back), so the same
        command runs again. The chief holds the directory's `LogdirLock` from here until
        ``main_loop`` ends or the run fails (a killed owner's lock is taken over).

        Raises:
            LogdirNotEmptyError: the directory holds files and the action is ``"error"``.
            LogdirLockedError: another run holds the directory (its pid and host named).
            GlobPathError: the path holds a character TensorFlow globs (``[``...).
            ValueError: an unknown action.
            TrainerStateError: callbacks are already set up.
        """
        self._require_phase("set_logdir", "new")
        self._run_dir.take(
            logdir,
            logdir_action,
            lock=self.is_chief,
            path_only=self.CHIEF_OWNS_LOGDIR and not self.is_chief,
        )

    # -- phase 1: callbacks ------------------------------------------------------------

    def register_callback(self, cb: Callback | Sequence[Callback]) -> bool:
        """Register a callback (or a list of them) before ``setup_callbacks`` finishes.

        A ``chief_only`` callback is not registered on a non-chief worker.

        Returns:
            Whether the (last) callback was registered.

        Raises:
            TypeError: not a Callback.
            TrainerStateError: callbacks are already set up.
        """
        cbs = _as_callback_list("cb", cb)
        if self._phase != "new":
            msg = (
                f"register_callback({', '.join(map(str, cbs))}) must be called before "
                f"setup_callbacks; the trainer is already in phase {self._phase!r}"
            )
            raise TrainerStateError(msg)
        ok = True
        for one in cbs:
            if any(one is seen or getattr(seen, "gated", None) is one for seen in self._registered):
                msg = f"callback {one} is registered twice: register each callback once"
                raise ValueError(msg)
            _reject_monitors("callbacks", [one])
            kept = self._on_this_process(one)
            ok = kept is not None
            if kept is not None:
                self._registered.append(kept)
        return ok

    def _on_this_process(self, cb: Callback) -> Callback | None:
        """`cb` as this process runs it: None for a chief-only one on a non-chief worker.

        A trainer whose logdir can move between processes registers chief-only
        callbacks everywhere, behind a gate (elastic `HorovodTrainer`).
        """
        if self.is_chief or not cb.chief_only:
            return cb
        logger.info("callback %s is chief-only: skipped on this worker", cb)
        return None

    def setup_callbacks(
        self,
        callbacks: Sequence[Callback] | None,
        monitors: Sequence[MonitorBase] | Monitors | None,
    ) -> None:
        """Register `callbacks`, then `monitors`, and call every callback's ``setup_graph``.

        Monitors are grouped in a `Monitors` (``trainer.monitors``) that runs after
        the other callbacks in each phase, so statistics put in ``trigger_epoch`` reach
        the files in the same epoch. A `Monitors` group made beforehand becomes
        ``trainer.monitors`` as it is (its history readable after training), unless
        this worker is not the chief and some are chief-only (a group of the others).
        Callbacks that would write the same files (two `ModelSaver` on one directory,
        two `JSONWriter`) are refused once set up, before anything is written; so are,
        with ``steps_per_execution`` > 1, those needing a step inside a call.

        Raises:
            TypeError: entries that are not callbacks, or monitors among the callbacks
                (they would receive no statistics).
            ValueError: callbacks that would write the same files (named, with the
                files), or that need a step inside a session call of K steps.
            TrainerStateError: called twice.
        """
        self._require_phase("setup_callbacks", "new")
        with self._run_dir.failed_start_cleanup():
            self._setup_callbacks(callbacks, monitors)
        self._phase = "callbacks"

    def _setup_callbacks(
        self,
        callbacks: Sequence[Callback] | None,
        monitors: Sequence[MonitorBase] | Monitors | None,
    ) -> None:
        from towerkit.callbacks import Monitors

        self.register_callback(_as_callback_list("callbacks", callbacks))
        given = monitors.monitors if isinstance(monitors, Monitors) else monitors
        kept = [self._on_this_process(m) for m in _as_callback_list("monitors", given)]
        mons: list[Any] = [m for m in kept if m is not None]
        self._ensure_global_step()
        if isinstance(monitors, Monitors) and mons == list(
            monitors.monitors
        ):  # none dropped or gated
            self._monitors = monitors
        else:
            self._monitors = Monitors(mons)
        self._registered.append(self._monitors)
        self._registered = _expand_input_callbacks(self._registered)
        self._callbacks = Callbacks(self._registered)
        with self._graph.as_default():
            # a TrainerView: `monitors` is set just above
            self._callbacks.setup_graph(cast("TrainerView", self))
        _check_inputs_registered(self._graph)
        _check_file_claims(self._registered)
        if self._steps_per_execution != 1:
            check_callbacks_for_k(self._registered, self._steps_per_execution)
        self._phase = "callbacks"

    # -- phase 2: session ----------------------------------------------------------------

    def initialize(
        self, session_creator: SessionCreatorLike, session_init: SessionInit | None
    ) -> None:
        """Create the session, load values, finalize the graph and hook the callbacks on.

        ``session_init.setup_graph`` (if any) runs before the graph is finalized,
        ``session_init.init(sess)`` once the session initialized its variables; then
        the global step is read, so a restored checkpoint's step counts.

        Args:
            session_creator: has ``create_session()`` (e.g. ``NewSessionCreator()``).
            session_init: has ``init(sess)`` (e.g. ``SmartInit(path)``), or None.

        Raises:
            TypeError: objects without those methods.
            TrainerStateError: ``setup_callbacks`` has not run, or ``initialize`` ran already.
        """
        self._require_phase("initialize", "callbacks")
        if not callable(getattr(session_creator, "create_session", None)):
            msg = f"'session_creator' must have a create_session() method; got {type(session_creator).__name__}"
            raise TypeError(msg)
        if session_init is not None and not callable(getattr(session_init, "init", None)):
            msg = f"'session_init' must have an init(sess) method or be None; got {type(session_init).__name__}"
            raise TypeError(msg)
        self._ensure_global_step()
        with self._run_dir.failed_start_cleanup(), self._graph.as_default():
            setup = getattr(session_init, "setup_graph", None)
            if callable(setup):
                setup()
            self.sess = session_creator.create_session()
            if self.sess.graph is not self._graph:
                msg = "the session creator made a session for another graph than the trainer's"
                raise ValueError(msg)
            if session_init is not None:
                session_init.init(self.sess)
        self._graph.finalize()
        self._start_global_step = int(self.sess.run(self._global_step_var))
        # as tensorpack's MonitoredSession did: the graph's queues fill from here on
        self._queue_runners = start_queue_runners(self.sess)
        self.initialize_hooks()
        self._phase = "initialized"

    def initialize_hooks(self) -> None:
        """Make ``hooked_sess``: ``self.sess`` with every callback's before_run/after_run.

        Each ``hooked_sess.run`` also increments the global step variable, in the same
        session call. A trainer with several kinds of iteration may override this to
        make several hooked sessions.
        """
        self.hooked_sess = HookedSession(self.sess, self._callbacks.cbs, step_op=self._step_op)

    # -- phase 3: the loop ---------------------------------------------------------------

    def run_step(self) -> None:
        """One iteration: ``self.hooked_sess.run(self.train_op)`` by default.

        Set ``train_op`` or override this to change what an iteration does.
        """
        self.hooked_sess.run(self.train_op)

    def main_loop(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> None:
        """Run epochs ``starting_epoch..max_epoch`` (inclusive) of ``steps_per_epoch`` steps.

        `StopTraining` raised by a callback or ``run_step``, or a hook asking the
        hooked session to stop, ends the loop cleanly; ``after_train`` always runs
        and the session is closed.

        Raises:
            ValueError: bad loop parameters.
            TrainerStateError: ``initialize`` has not run.
            KeyboardInterrupt: after a clean shutdown, when Ctrl-C stopped the loop.
        """
        self._require_phase("main_loop", "initialized")
        self._main_loop(self._bounds_for(steps_per_epoch, starting_epoch, max_epoch))

    def _main_loop(self, bounds: LoopBounds) -> None:
        """`main_loop` over the record `bounds` (validated): the seam trainers override."""
        self._require_phase("main_loop", "initialized")
        self._run_dir.check_resume_position(
            bounds.steps_per_epoch, bounds.starting_epoch, self._steps_per_execution
        )
        self._bounds = bounds
        self._epoch_num = bounds.starting_epoch - 1
        self._local_step = -1
        self._phase = "running"
        try:
            with self._run_dir.failed_start_cleanup():
                self._run_loop(bounds)
        finally:
            self._run_dir.release()

    def _run_loop(self, bounds: LoopBounds) -> None:
        """``main_loop`` once the counters are set: the callbacks around `_loop`, then cleanup."""
        cbs = self._callbacks
        interrupted = False
        failed: BaseException | None = None
        policy, coordinated = self._preemption_here()
        with (
            self._graph.as_default(),
            self.sess.as_default(),
            deferred_sigint(policy, coordinated=coordinated) as interrupt,
        ):
            self._interrupt = interrupt
            try:
                logger.info(
                    "training epochs %d..%d, %d steps each, from global step %d",
                    bounds.starting_epoch,
                    bounds.max_epoch,
                    bounds.steps_per_epoch,
                    self.global_step,
                )
                cbs.before_train()
                with frozen_heap():
                    self._loop(bounds, interrupt)
            except StopTraining as err:
                line = stop_line(self._epoch_num, self.global_step, err)
                if not isinstance(err, SignalStop):
                    interrupt.take(StopEvent.STOP_TRAINING)
                outcome = stop_outcome(interrupt.state)
                if outcome == "preempted":  # saved here; the run ends by TrainingPreempted below
                    self._preempted = True
                    logger.warning("%s", line)
                    save_for_resume(self, self._registered)
                elif outcome == "interrupted":  # Ctrl-C: the run ends by KeyboardInterrupt below
                    self._failure = KeyboardInterrupt()
                    logger.info("%s", line)
                else:  # the one line saying who stopped training and why
                    console_lines(logger, [line])
                    if interrupt.preempted:
                        logger.warning(_STOP_WINS, self.global_step)
            except KeyboardInterrupt as err:
                interrupted = True
                self._failure = err
                logger.warning("training interrupted at global step %d", self.global_step)
            except BaseException as err:
                self._failure = err
                if not interrupt.aborted:  # else: a blocked step cancelled by the second Ctrl-C
                    failed = input_failure(err, self._registered, self)
                    if failed is err:
                        raise
                    raise failed from failed.__cause__
                interrupted = True
                logger.warning("training aborted at global step %d", self.global_step)
            finally:
                # a preemption signal never makes a run that ended otherwise a KeyboardInterrupt
                interrupted = interrupted or interrupt.state.ctrl_c
                self._finish(failed)
        if self._preempted:
            raise TrainingPreempted(self.global_step, self._preemption)
        if interrupted:
            raise KeyboardInterrupt

    def _loop(self, bounds: LoopBounds, interrupt: StopControl) -> None:
        """The loop proper over `bounds`; everything invariant in an epoch is looked up once."""
        steps_per_epoch = bounds.steps_per_epoch
        cbs = self._callbacks
        run_step = self.run_step
        triggers = tuple(cb.trigger_step for cb in cbs.with_hook("_trigger_step"))
        should_stop = self.hooked_sess.should_stop
        k = self._steps_per_execution
        steps = range(k - 1, steps_per_epoch, k)  # each run_step makes k steps
        first = range(self._run_dir.resumed_in_epoch + k - 1, steps_per_epoch, k)
        last = steps_per_epoch - 1
        for epoch in bounds.epochs:
            self._epoch_num = epoch
            self._local_step = -1
            start = time.perf_counter()
            cbs.before_epoch()
            for step in first if epoch == bounds.starting_epoch else steps:
                self._local_step = step
                run_step()
                for trigger in triggers:
                    trigger()
                if should_stop() or interrupt.requested:
                    if interrupt.preempted and step == last and not should_stop():
                        break  # the epoch's end first: its statistics, checkpoint and stoppers
                    raise stop_requested(should_stop())
            elapsed = time.perf_counter() - start
            # after after_epoch, which ends the progress bar's line; ScalarPrinter's
            # epoch line says the same at INFO
            done = functools.partial(
                logger.debug, "epoch %d done: %d steps in %.2f s", epoch, steps_per_epoch, elapsed
            )
            end_epoch(cbs, done)
            if should_stop() or interrupt.requested:
                raise stop_requested(should_stop())

    def _finish(self, failed: BaseException | None) -> None:
        """``after_train`` on every callback, then close the session; never hides `failed`."""
        try:
            with self.sess.as_default():
                self._callbacks.after_train()
        except StopTraining:
            pass
        except Exception:
            if failed is None:
                raise
            logger.exception("after_train failed while handling an earlier error")
        finally:
            self._phase = "done"
            self._interrupt = None
            try:
                self._stop_queue_runners()
            finally:
                self._close_session()

    def _stop_queue_runners(self) -> None:
        """Stop the graph's queue runners while the session is still open; log a runner's error."""
        runners, self._queue_runners = self._queue_runners, None
        if runners is None:
            return
        err = runners.stop()
        if err is not None:
            logger.error("a queue runner of the graph stopped on: %s: %s", type(err).__name__, err)

    def _close_session(self) -> None:
        """Close ``self.sess`` at the end of the loop (a trainer may bound how long it waits)."""
        self.sess.close()

    # -- a run that fails before its first step ------------------------------------------

    def _stepped(self) -> bool:
        """Whether a step of this run has finished (read once, when the run fails)."""
        if self.hooked_sess is not None and self.global_step != self._start_global_step:
            return True
        return self._phase in ("running", "done") and (
            self._local_step > 0 or self._epoch_num > self.starting_epoch
        )

    @property
    def run_dir(self) -> RunDir:
        """The trainer's run directory part (`RunDir`); plumbing, no stability promise.

        It holds the logdir, its lock, the resume position and what a failing start
        gives back; ``launch_train_with_config`` wraps its own start in
        ``run_dir.failed_start_cleanup()``.
        """
        return self._run_dir

    # -- all three (``train`` and ``train_with_defaults``: `TrainCalls`) ---------------

    def _train(
        self,
        bounds: LoopBounds,
        callbacks: Sequence[Callback] | None,
        monitors: Sequence[MonitorBase] | Monitors | None,
        session_creator: SessionCreatorLike,
        session_init: SessionInit | None,
    ) -> None:
        """Set up callbacks, initialize and run the loop over the record `bounds`.

        `train` and `launch_train_with_config` (which carries the config's record) end
        here. A subclass that overrides the documented ``main_loop`` is called through it.
        """
        self.setup_callbacks(callbacks, monitors)
        self.initialize(session_creator, session_init)
        if type(self).main_loop is not Trainer.main_loop:
            self.main_loop(bounds.steps_per_epoch, bounds.starting_epoch, bounds.max_epoch)
        else:
            self._main_loop(bounds)

    @property
    def precision(self) -> Precision:
        """The mixed-precision policy the graph was built in (float32: a trainer without towers)."""
        return FLOAT32

    def _check_built_for(self, k: int | None, precision: Precision | None) -> None:
        """``train(steps_per_execution=..., precision=...)`` must name what the graph was built for."""
        if precision is not None:
            refusal = built_in_refusal(precision, self.precision, type(self).__name__)
            if refusal is not None:
                raise ValueError(refusal)
        self._check_train_k(k)

    # -- helpers -------------------------------------------------------------------------

    def _require_phase(self, what: str, phase: str) -> None:
        if self._phase != phase:
            order = " -> ".join(_PHASES)
            msg = (
                f"{type(self).__name__}.{what}() needs the trainer in phase {phase!r} "
                f"({order}); it is in phase {self._phase!r}"
            )
            raise TrainerStateError(msg)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(phase={self._phase!r}, logdir={self._run_dir.path!r})"
