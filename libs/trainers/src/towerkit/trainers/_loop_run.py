"""The trainer's loop run (phase 3): the callbacks around the loop driver, and how a run ends.

`TrainerLoop` is the second layer of `Trainer`, over `TrainerState` (whose fields it
reads): ``main_loop`` checks the bounds, ``_run_loop`` installs the stop control
(`deferred_sigint`), runs ``before_train``, has the loop driver drive the epochs
(``_loop``, the seam elastic horovod overrides) and ends the run: a `StopTraining`, a
preemption (saved, then `TrainingPreempted`), Ctrl-C (``KeyboardInterrupt``) or a
failure (explained by the input's callbacks), then ``after_train`` and the session closed.
"""

from __future__ import annotations

import logging

from towerkit.callbacks import LoopBounds, StopTraining
from towerkit.callbacks.plumbing import console_lines
from towerkit.trainers._heap import frozen_heap
from towerkit.trainers._interrupt import StopControl, deferred_sigint
from towerkit.trainers._loop_driver import LoopRun, epoch_starts
from towerkit.trainers._loop_end import SignalStop, stop_line
from towerkit.trainers._preempt import TrainingPreempted, save_for_resume
from towerkit.trainers._stop import StopEvent, stop_outcome
from towerkit.trainers._trainer_view import TrainerState
from towerkit.trainers.inputs._callbacks import input_failure

__all__ = ["TrainerLoop"]

logger = logging.getLogger("towerkit.trainers")

_STOP_WINS = (
    "a preemption signal arrived too, but training stopped: the run ends as stopped at "
    "global step %d (status 0), and the same command does no more than after any stop"
)


class TrainerLoop(TrainerState):
    """Phase 3 of `Trainer`: ``run_step``, ``main_loop`` and the run of the loop (see the module)."""

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
            bounds.steps_per_epoch, bounds.starting_epoch, self._driver.steps_per_execution
        )
        self._driver.start(bounds)
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
                line = stop_line(self._driver.epoch_num, self.global_step, err)
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
        """The loop proper over `bounds`: the loop driver's plain drive.

        A resumed run enters its first epoch after the steps it had done.
        """
        run = LoopRun(self._callbacks, self.run_step, self.hooked_sess.should_stop, interrupt)
        self._driver.drive(run, epoch_starts(bounds, self._run_dir.resumed_in_epoch))

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
