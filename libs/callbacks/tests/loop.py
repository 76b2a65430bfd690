"""The training loop that drives callbacks in this lib's tests.

Two drivers with one constructor, ``LoopTrainer(graph, train_op, callbacks, monitors,
...)``, chosen by the environment variable ``TOWERKIT_CALLBACKS_DRIVER``:

- ``trainer``: the trainers lib's real `towerkit.trainers.Trainer`, its loop, session
  creator and logdir handling. The cross-lib nox session runs these tests so.
- ``loop``: a small real loop over a real session, kept here because this lib's own
  venv must not hold the trainers lib. It is driven by `towerkit.callbacks.loop_events`
  itself: epochs ``starting_epoch..max_epoch`` inclusive, ``steps_per_epoch`` steps
  each, one ``hooked_sess.run(train_op)`` per step, `StopTraining` ends the loop and
  ``after_train`` still runs.

Unset, the real trainer is used when it can be imported.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from towerkit.callbacks import Callbacks, EventKind, HookedSession, LoopBounds, StopTraining
from towerkit.towers.compat import tf1


class SmallLoop:
    """A minimal trainer implementing `TrainerView`, for tests of single callbacks.

    Build the graph (with `train_op`) first, inside `graph`; then `train()`.
    """

    def __init__(
        self,
        graph,
        train_op,
        callbacks=(),
        monitors=None,
        *,
        steps_per_epoch=3,
        max_epoch=2,
        starting_epoch=1,
        logdir=None,
        is_chief=True,
        tower_func=None,
        session_init=None,
        session_config=None,
    ):
        self.graph = graph
        self.train_op = train_op
        self.logdir = str(logdir) if logdir is not None else None
        self.is_chief = is_chief
        self.tower_func = tower_func
        self.steps_per_epoch = steps_per_epoch
        self.max_epoch = max_epoch
        self.starting_epoch = starting_epoch
        self.epoch_num = starting_epoch - 1
        self.local_step = -1
        self.session_init = session_init
        self.session_config = session_config
        cbs = [cb for cb in callbacks if is_chief or not cb.chief_only]
        from towerkit.callbacks import Monitors

        if monitors is None:
            monitors = Monitors([])
        elif not isinstance(monitors, Monitors):
            monitors = Monitors(list(monitors))  # a list of monitors, as Trainer.train takes
        self.monitors = monitors
        self._callbacks = Callbacks([*cbs, monitors])
        self.sess = None
        self.hooked_sess = None
        self.run_failure = None  # the exception that ended training, as the trainer's
        with graph.as_default():
            self._gs = tf1.train.get_or_create_global_step()
            self._gs_inc = tf1.assign_add(self._gs, 1)
        self._start_gs = 0

    @property
    def towers(self):
        return self.tower_func.towers if self.tower_func is not None else None

    @property
    def global_step(self):
        return self._start_gs + (self.hooked_sess.run_calls if self.hooked_sess else 0)

    @property
    def callbacks(self):
        """The registered callbacks, as the real trainer's ``callbacks``."""
        return tuple(self._callbacks.cbs)

    def run_step(self):
        self.hooked_sess.run(self.train_op)

    def train(self):
        """Set up callbacks, make the session, run the loop; returns the trainer."""
        self._callbacks.setup_graph(self)
        self.sess = tf1.Session(graph=self.graph, config=self.session_config)
        with self.graph.as_default():
            self.sess.run(tf1.global_variables_initializer())
            if self.session_init is not None:
                self.session_init.init(self.sess)
        self.graph.finalize()
        self._start_gs = int(np.asarray(self.sess.run(self._gs)))
        self.hooked_sess = HookedSession(self.sess, self._callbacks.cbs, step_op=self._gs_inc)
        cbs = self._callbacks
        calls = {
            EventKind.BEFORE_TRAIN: cbs.before_train,
            EventKind.BEFORE_EPOCH: cbs.before_epoch,
            EventKind.AFTER_EPOCH: cbs.after_epoch,
            EventKind.TRIGGER_EPOCH: cbs.trigger_epoch,
        }
        bounds = LoopBounds(
            starting_epoch=self.starting_epoch,
            max_epoch=self.max_epoch,
            steps_per_epoch=self.steps_per_epoch,
        )
        try:
            with self.sess.as_default():
                # One step per trigger_step event; its hooked run makes the before_run and
                # after_run calls itself. after_train runs below, however the loop ends.
                for event in bounds.events(runs_per_step=0):
                    self.epoch_num, self.local_step = event.epoch_num, event.local_step
                    if event.kind is EventKind.TRIGGER_STEP:
                        self.run_step()
                        cbs.trigger_step()
                        if self.hooked_sess.should_stop():
                            raise StopTraining
                    elif event.kind is not EventKind.AFTER_TRAIN:
                        calls[event.kind]()
        except StopTraining:
            pass
        except BaseException as err:  # as the trainer: after_train sees why the run ended
            self.run_failure = err
            raise
        finally:
            with self.sess.as_default():
                cbs.after_train()
            self.sess.close()
        return self


OPTIONS = {
    "steps_per_epoch": 3,
    "max_epoch": 2,
    "starting_epoch": 1,
    "logdir": None,
    "is_chief": True,
    "tower_func": None,
    "session_init": None,
    "session_config": None,
}
"""The keyword options of both drivers and their defaults (those of `SmallLoop`)."""


def _driver() -> str:
    """Which driver the environment asks for (see the module docstring)."""
    want = os.environ.get("TOWERKIT_CALLBACKS_DRIVER", "")
    if want in ("trainer", "loop"):
        return want
    if want:
        msg = f"TOWERKIT_CALLBACKS_DRIVER must be 'trainer' or 'loop'; got {want!r}"
        raise ValueError(msg)
    return "trainer" if importlib.util.find_spec("towerkit.trainers") else "loop"


DRIVER = _driver()


def _real_trainer_class():
    """`Trainer` from the trainers lib, adapted to `SmallLoop`'s constructor."""
    from towerkit.trainers import NewSessionCreator, Trainer, get_default_sess_config

    class RealTrainer(Trainer):
        """The trainers lib's `Trainer` running `train_op`, built in `graph`."""

        def __init__(self, graph, train_op, callbacks=(), monitors=None, **options):
            unknown = sorted(set(options) - set(OPTIONS))
            if unknown:
                msg = f"unknown LoopTrainer options {unknown}; known: {sorted(OPTIONS)}"
                raise TypeError(msg)
            with graph.as_default():
                super().__init__()
            self.train_op = train_op
            self._opt = {**OPTIONS, **options}
            self.is_chief = self._opt["is_chief"]
            self._given = (list(callbacks), monitors)

        @property
        def tower_func(self):
            return self._opt["tower_func"]

        @property
        def towers(self):
            tf = self._opt["tower_func"]
            return tf.towers if tf is not None else None

        def train(self):
            """Run the real trainer's three phases; returns the trainer."""
            callbacks, monitors = self._given
            opt = self._opt
            config = opt["session_config"]
            super().train(
                callbacks,
                monitors,
                NewSessionCreator(config=config or get_default_sess_config()),
                opt["session_init"],
                opt["steps_per_epoch"],
                opt["starting_epoch"],
                opt["max_epoch"],
                logdir=opt["logdir"],
                logdir_action="keep",
            )
            return self

    return RealTrainer


LoopTrainer = _real_trainer_class() if DRIVER == "trainer" else SmallLoop
"""What the tests construct: the real trainer or the small loop, per `DRIVER`."""
