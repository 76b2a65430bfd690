"""The base trainer: callbacks, session, and the loop that drives them step by step."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from towerkit.callbacks import Callback, Callbacks, HookedSession, LoopBounds
from towerkit.towers import Precision, precision_policy
from towerkit.trainers._callback_checks import (
    _as_callback_list,
    _check_file_claims,
    _check_inputs_registered,
    _expand_input_callbacks,
    _reject_monitors,
)
from towerkit.trainers._defaults import callbacks_with_defaults
from towerkit.trainers._errors import TrainerStateError
from towerkit.trainers._graph_mode import TrainerMeta
from towerkit.trainers._loop_run import TrainerLoop
from towerkit.trainers._multistep import check_callbacks_for_k
from towerkit.trainers._process_sum import ProcessSum
from towerkit.trainers._queue_runners import start_queue_runners
from towerkit.trainers._sesscreate import default_session_creator
from towerkit.trainers._traceback import filter_traceback

if TYPE_CHECKING:
    from towerkit.callbacks import MonitorBase, Monitors, TrainerView
    from towerkit.sessinit import SessionInit
    from towerkit.trainers._sesscreate import SessionCreatorLike

logger = logging.getLogger("towerkit.trainers")


class Trainer(TrainerLoop, ProcessSum, metaclass=TrainerMeta):
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

    CHIEF_OWNS_LOGDIR = False
    """Whether only the chief creates, moves or locks the logdir (`ChiefOwnsLogdir`): on
    other processes ``set_logdir`` keeps its path only."""

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
        k = self._driver.steps_per_execution
        if k != 1:
            check_callbacks_for_k(self._registered, k)
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
        self._driver.start_global_step = int(self.sess.run(self._global_step_var))
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

    # -- all three -----------------------------------------------------------------------

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

    @filter_traceback
    def train_with_defaults(
        self,
        _sentinel: Any = None,
        callbacks: Sequence[Callback] | None = None,
        monitors: Sequence[MonitorBase] | Monitors | None = None,
        session_creator: SessionCreatorLike | None = None,
        session_init: SessionInit | None = None,
        steps_per_epoch: int | None = None,
        starting_epoch: int = 1,
        max_epoch: int = 9999999,
        extra_callbacks: Sequence[Callback] | None = None,
        *,
        logdir: str | os.PathLike[str] | None = None,
        logdir_action: str = "error",
        steps_per_execution: int | None = None,
        precision: str | Precision | None = None,
    ) -> None:
        """``train`` with defaults for every option but ``steps_per_epoch``.

        Callbacks are ``callbacks + extra_callbacks`` (default ``DEFAULT_CALLBACKS()``);
        ``monitors`` default to ``DEFAULT_MONITORS()`` (they write files: a ``logdir``
        is needed), ``session_creator`` to ``NewSessionCreator`` with the default
        config, ``session_init`` to none, ``steps_per_epoch`` to the input's size. Keywords only.

        Raises:
            TypeError: positional arguments.
            ValueError: no ``steps_per_epoch`` and no input size to take it from, or
                default monitors without a ``logdir``.
        """
        if _sentinel is not None:
            msg = "train_with_defaults() takes keyword arguments only"
            raise TypeError(msg)
        if steps_per_epoch is None:
            steps_per_epoch = self._default_steps_per_epoch()
        cbs, monitors = callbacks_with_defaults(callbacks, monitors, extra_callbacks, logdir)
        if session_creator is None:
            session_creator = default_session_creator()
        self.train(
            cbs,
            monitors,
            session_creator,
            session_init,
            steps_per_epoch,
            starting_epoch,
            max_epoch,
            logdir=logdir,
            logdir_action=logdir_action,
            steps_per_execution=steps_per_execution,
            precision=precision,
        )

    def _default_steps_per_epoch(self) -> int:  # none for the base trainer
        msg = "'steps_per_epoch' is required: this trainer has no input whose size could give it"
        raise ValueError(msg)

    @filter_traceback
    def train(
        self,
        callbacks: Sequence[Callback] | None,
        monitors: Sequence[MonitorBase] | Monitors | None,
        session_creator: SessionCreatorLike,
        session_init: SessionInit | None,
        steps_per_epoch: int,
        starting_epoch: int = 1,
        max_epoch: int = 9999999,
        *,
        logdir: str | os.PathLike[str] | None = None,
        logdir_action: str = "error",
        steps_per_execution: int | None = None,
        precision: str | Precision | None = None,
    ) -> None:
        """Set the log directory, set up callbacks, initialize and run the loop.

        Same as ``set_logdir(logdir, logdir_action)``, ``setup_callbacks(callbacks,
        monitors)``, ``initialize(session_creator, session_init)``,
        ``main_loop(steps_per_epoch, starting_epoch, max_epoch)``. ``steps_per_execution``
        and ``precision``, when given, must be those the graph was built for.
        """
        self._check_built_for(
            steps_per_execution, None if precision is None else precision_policy(precision)
        )
        bounds = self._bounds_for(steps_per_epoch, starting_epoch, max_epoch)
        # taken on a fresh trainer, else the one already taken (or None) must be named
        if self._run_dir.check_train_logdir(logdir, fresh=self._phase == "new"):
            self.set_logdir(logdir, logdir_action)
        self._train(bounds, callbacks, monitors, session_creator, session_init)
