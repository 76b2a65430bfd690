"""The base trainer's loop against the pure event stream: order, counters, stopping, phases."""

import gc
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import Probe, as_tuples, counter_trainer, creator, truncated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainers_strategies import loop_runs

from towerkit.callbacks import (
    Callback,
    EventKind,
    MonitorBase,
    Monitors,
    StopTraining,
    loop_events,
)
from towerkit.sessinit import DictRestore
from towerkit.towers.compat import tf1
from towerkit.trainers import LOCK_FILENAME, Trainer, TrainerStateError, parse_lock


def run_probe(starting, max_epoch, steps, start_gs=0, probe=None, trainer_cls=Trainer, **kw):
    """Train a counter model in a fresh graph with a probe; return (probe, trainer, None)."""
    graph = tf.Graph()
    with graph.as_default():
        trainer, _ = counter_trainer(trainer_cls)
        probe = probe or Probe()
        init = DictRestore({"global_step": np.int64(start_gs)}) if start_gs else None
        trainer.train([probe], [], creator(), init, steps, starting, max_epoch, **kw)
    return probe, trainer, None


class TestEventOrder:
    """The loop calls callbacks exactly in the order and at the positions of `loop_events`."""

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(loop_runs())
    def test_matches_loop_events(self, run):
        """Any (starting_epoch, max_epoch, steps_per_epoch, restored global step) run matches."""
        starting, max_epoch, steps, start_gs = run
        probe, trainer, _ = run_probe(starting, max_epoch, steps, start_gs)
        assert probe.events == as_tuples(
            loop_events(starting, max_epoch, steps, start_global_step=start_gs)
        )
        assert trainer.global_step == start_gs + max(0, max_epoch - starting + 1) * steps

    @pytest.mark.parametrize("runs", [0, 2])
    def test_runs_per_step(self, graph, runs):
        """A run_step making 0 or 2 hooked runs gives the stream with that many runs per step."""

        class Multi(Trainer):
            def run_step(self):
                for _ in range(runs):
                    self.hooked_sess.run(self.train_op)

        probe, trainer, _ = run_probe(1, 2, 3, trainer_cls=Multi)
        assert probe.events == as_tuples(loop_events(1, 2, 3, runs_per_step=runs))
        assert trainer.global_step == 2 * 3 * runs

    def test_global_step_variable_follows(self, graph):
        """The TF global step variable equals `global_step` and the train op ran once per step."""
        trainer, x = counter_trainer()
        seen = []

        class Read(Callback):
            def _trigger_epoch(self):
                gs = tf1.train.get_global_step()
                seen.append(
                    (
                        int(self.trainer.sess.run(gs)),
                        self.trainer.global_step,
                        float(self.trainer.sess.run(x)),
                    )
                )

        trainer.train([Read()], [], creator(), None, 4, 1, 3)
        assert seen == [(4, 4, 4.0), (8, 8, 8.0), (12, 12, 12.0)]

    def test_empty_run(self, graph):
        """max_epoch = starting_epoch - 1 runs before_train and after_train only."""
        probe, _, _ = run_probe(3, 2, 5)
        assert probe.events == [("before_train", 2, -1, 0), ("after_train", 2, -1, 0)]


STOP_POINTS = [
    (EventKind.BEFORE_TRAIN, 0),
    (EventKind.BEFORE_EPOCH, 1),
    (EventKind.BEFORE_RUN, 4),
    (EventKind.AFTER_RUN, 2),
    (EventKind.TRIGGER_STEP, 3),
    (EventKind.AFTER_EPOCH, 0),
    (EventKind.TRIGGER_EPOCH, 1),
]


def index_of(events, kind, nth):
    """Index in `events` of the nth (0-based) event of `kind`."""
    seen = -1
    for i, e in enumerate(events):
        if e.kind is kind:
            seen += 1
            if seen == nth:
                return i
    raise AssertionError((kind, nth))


class TestStopTraining:
    """StopTraining from any callback method, run_step or a hook ends the loop cleanly."""

    @pytest.mark.parametrize(
        ("kind", "nth"), STOP_POINTS, ids=[f"{k.value}-{n}" for k, n in STOP_POINTS]
    )
    def test_from_callback(self, graph, kind, nth):
        """The trace is the stream up to the raising event, then after_train at its position;
        raised in after_epoch, the epoch's trigger_epoch still runs (the epoch stays whole)."""
        probe, trainer, _ = run_probe(1, 3, 3, probe=Probe(stop_at=(kind, nth)))
        full = list(loop_events(1, 3, 3))
        if kind is EventKind.AFTER_EPOCH:
            kind = EventKind.TRIGGER_EPOCH
        assert probe.events == as_tuples(truncated(full, index_of(full, kind, nth)))
        with pytest.raises(RuntimeError, match="closed Session"):
            trainer.sess.run(trainer.train_op)

    def test_from_run_step(self, graph):
        """StopTraining raised by run_step after its run ends the loop; after_train runs."""

        class StopAt5(Trainer):
            def run_step(self):
                self.hooked_sess.run(self.train_op)
                if self.global_step == 5:
                    raise StopTraining

        probe, trainer, _ = run_probe(1, 3, 3, trainer_cls=StopAt5)
        full = list(loop_events(1, 3, 3))
        after_run_5 = [i for i, e in enumerate(full) if e.kind is EventKind.AFTER_RUN][4]
        assert probe.events == as_tuples(truncated(full, after_run_5))
        assert trainer.global_step == 5

    def test_request_stop(self, graph):
        """A hook's request_stop ends the loop after that step's trigger_step."""
        probe, trainer, _ = run_probe(1, 3, 3, probe=Probe(request_stop_at=4))
        full = list(loop_events(1, 3, 3))
        fourth_step = [i for i, e in enumerate(full) if e.kind is EventKind.TRIGGER_STEP][3]
        assert probe.events == as_tuples(truncated(full, fourth_step))
        assert trainer.hooked_sess.should_stop()

    def test_error_still_runs_after_train(self, graph):
        """Another error propagates, after after_train ran and the session closed."""
        probe = Probe(error_at=(EventKind.TRIGGER_STEP, 1), error=ZeroDivisionError("boom"))
        with pytest.raises(ZeroDivisionError, match="boom"):
            run_probe(1, 2, 2, probe=probe)
        assert probe.events[-1][0] == "after_train"
        assert probe.events[-2][0] == "trigger_step"

    def test_failing_after_train_does_not_hide_the_error(self, graph):
        """When after_train fails while an error propagates, the first error is raised."""

        class Bad(Callback):
            def _after_train(self):
                raise KeyError("after")

        trainer, _ = counter_trainer()
        probe = Probe(error_at=(EventKind.BEFORE_EPOCH, 0), error=ValueError("first"))
        with pytest.raises(ValueError, match="first"):
            trainer.train([probe, Bad()], [], creator(), None, 2, 1, 2)
        assert trainer.sess._closed


class TestInterrupt:
    """Ctrl-C ends training cleanly, then raises KeyboardInterrupt."""

    def test_keyboard_interrupt_from_callback(self, graph):
        """A KeyboardInterrupt in a callback still runs after_train and closes the session."""
        probe = Probe(error_at=(EventKind.TRIGGER_STEP, 2), error=KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            run_probe(1, 2, 2, probe=probe)
        assert probe.events[-1] == ("after_train", 2, 0, 3)

    def test_sigint_stops_after_the_step(self, graph, default_sigint):
        """A real SIGINT mid-step lets the step and its trigger_step finish, then stops."""

        class Interrupt(Callback):
            def _after_run(self, ctx, values):
                if self.trainer.global_step == 3:
                    os.kill(os.getpid(), signal.SIGINT)

        probe = Probe()
        trainer, _ = counter_trainer()
        with pytest.raises(KeyboardInterrupt):
            trainer.train([Interrupt(), probe], [], creator(), None, 2, 1, 4)
        full = list(loop_events(1, 4, 2))
        third_step = [i for i, e in enumerate(full) if e.kind is EventKind.TRIGGER_STEP][2]
        assert probe.events == as_tuples(truncated(full, third_step))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class TestChiefOnly:
    """Chief-only callbacks are not registered on non-chief workers."""

    def test_non_chief(self, graph):
        """On a non-chief trainer only callbacks with chief_only=False run."""
        trainer, _ = counter_trainer()
        trainer.is_chief = False
        chief, everyone = Probe(chief_only=True), Probe(chief_only=False)
        assert trainer.register_callback(chief) is False
        assert trainer.register_callback(everyone) is True
        trainer.train([], [], creator(), None, 1, 1, 1)
        assert chief.events == []
        assert not chief.setup_done
        assert len(everyone.events) == 8

    def test_chief(self, graph):
        """On the chief, chief-only callbacks run."""
        trainer, _ = counter_trainer()
        chief = Probe(chief_only=True)
        trainer.train([chief], [], creator(), None, 1, 1, 1)
        assert len(chief.events) == 8


class _Seen(MonitorBase):
    """A monitor that writes down the scalars it gets."""

    def __init__(self, chief_only):
        self.chief_only = chief_only
        self.scalars = []

    def process_scalar(self, name, val):
        self.scalars.append((name, val))


class _PutEpoch(Callback):
    """Puts the epoch number as the scalar 'epoch' at every epoch's end."""

    chief_only = False

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar("epoch", self.trainer.epoch_num)


class TestMonitorsGroup:
    """`monitors` may be a list of monitors or a `Monitors` group made beforehand."""

    def test_group_used_as_is(self, graph):
        """The group given becomes trainer.monitors, so its history is read from it."""
        trainer, _ = counter_trainer()
        seen = _Seen(chief_only=True)
        group = Monitors([seen])
        trainer.train([_PutEpoch()], group, creator(), None, 2, 1, 3)
        assert trainer.monitors is group
        assert group.get_history("epoch") == [(2, 1), (4, 2), (6, 3)]
        assert seen.scalars == [("epoch", 1), ("epoch", 2), ("epoch", 3)]

    def test_group_on_a_non_chief(self, graph):
        """On a non-chief worker the group's chief-only monitors are left out of a new group."""
        trainer, _ = counter_trainer()
        trainer.is_chief = False
        chief, everyone = _Seen(chief_only=True), _Seen(chief_only=False)
        group = Monitors([chief, everyone])
        trainer.train([_PutEpoch()], group, creator(), None, 1, 1, 2)
        assert trainer.monitors is not group
        assert trainer.monitors.monitors == (everyone,)
        assert chief.scalars == []
        assert everyone.scalars == [("epoch", 1), ("epoch", 2)]
        assert trainer.monitors.get_history("epoch") == [(1, 1), (2, 2)]


class TestPhases:
    """Methods called out of order fail with the phase named."""

    def test_register_after_setup(self, graph):
        """Callbacks cannot be registered once set up."""
        trainer, _ = counter_trainer()
        trainer.setup_callbacks([], [])
        with pytest.raises(
            TrainerStateError,
            match=r"register_callback\(Probe\) must be called before setup_callbacks",
        ):
            trainer.register_callback(Probe())

    def test_main_loop_before_initialize(self, graph):
        """main_loop needs initialize first."""
        trainer, _ = counter_trainer()
        trainer.setup_callbacks([], [])
        with pytest.raises(
            TrainerStateError, match=r"main_loop\(\) needs the trainer in phase 'initialized'"
        ):
            trainer.main_loop(1, 1, 1)

    def test_train_twice(self, graph):
        """A trainer trains once."""
        trainer, _ = counter_trainer()
        trainer.train([], [], creator(), None, 1, 1, 1)
        with pytest.raises(TrainerStateError, match="it is in phase 'done'"):
            trainer.train([], [], creator(), None, 1, 1, 1)

    def test_bad_callbacks(self, graph):
        """Non-callbacks are rejected with their position."""
        trainer, _ = counter_trainer()
        with pytest.raises(
            TypeError, match=r"'callbacks' must hold Callback instances; entries at fault: #1: int"
        ):
            trainer.setup_callbacks([Probe(), 3], [])

    def test_twice_registered(self, graph):
        """The same callback object cannot be registered twice."""
        trainer, _ = counter_trainer()
        p = Probe()
        with pytest.raises(ValueError, match="registered twice"):
            trainer.setup_callbacks([p, p], [])

    def test_bad_loop_parameters(self, graph, tmp_path):
        """Loop parameters are refused before anything is set up: no logdir taken, no session."""
        trainer, _ = counter_trainer()
        logdir = tmp_path / "log"
        with pytest.raises(ValueError, match=r"'steps_per_epoch' must be an int >= 0 .*; got -1"):
            trainer.train([], [], creator(), None, -1, 1, 1, logdir=logdir)
        assert not logdir.exists()
        assert trainer.sess is None
        with pytest.raises(ValueError, match="'starting_epoch'"):
            trainer.train_with_defaults(monitors=[], steps_per_epoch=2, starting_epoch=0)
        assert trainer.sess is None

    def test_overridden_main_loop_is_called(self, graph):
        """A subclass overriding the documented ``main_loop`` runs through it, with the bounds."""
        seen = []

        class Counted(Trainer):
            def main_loop(self, steps_per_epoch, starting_epoch, max_epoch):
                seen.append((steps_per_epoch, starting_epoch, max_epoch))
                super().main_loop(steps_per_epoch, starting_epoch, max_epoch)

        trainer, _x = counter_trainer(Counted)
        trainer.train([], [], creator(), None, 3, 2, 3)
        assert seen == [(3, 2, 3)]
        assert trainer.global_step == 6
        assert trainer.loop_bounds.starting_epoch == 2

    def test_bad_session_objects(self, graph):
        """Session creator and init must have the methods the trainer calls."""
        trainer, _ = counter_trainer()
        trainer.setup_callbacks([], [])
        with pytest.raises(TypeError, match="'session_creator' must have a create_session"):
            trainer.initialize(object(), None)
        with pytest.raises(TypeError, match=r"'session_init' must have an init\(sess\)"):
            trainer.initialize(creator(), 3)

    def test_graph_finalized_and_session_default(self, graph):
        """After initialize the graph is finalized; in the loop the session is the default."""
        trainer, _ = counter_trainer()
        seen = []

        class Default(Callback):
            def _before_train(self):
                seen.append(tf1.get_default_session() is self.trainer.sess)

        trainer.train([Default()], [], creator(), None, 1, 1, 1)
        assert graph.finalized
        assert seen == [True]

    def test_keyword_only_defaults(self, graph):
        """train_with_defaults takes keywords only; with no logdir the default monitors write no file."""
        trainer, _ = counter_trainer()
        with pytest.raises(TypeError, match="keyword arguments only"):
            trainer.train_with_defaults([Probe()])
        trainer.train_with_defaults(steps_per_epoch=1, max_epoch=1)
        assert [type(m).__name__ for m in trainer.monitors.monitors] == ["ScalarPrinter"]
        with pytest.raises(ValueError, match="'steps_per_epoch' is required"):
            trainer.train_with_defaults(monitors=[], max_epoch=1)


class TestLogdir:
    """The log directory is explicit, and a non-empty one needs a decision."""

    def test_none_writes_nothing(self, graph, tmp_path):
        """logdir=None: the trainer has no logdir."""
        trainer, _ = counter_trainer()
        trainer.train([], [], creator(), None, 1, 1, 1)
        assert trainer.logdir is None

    def test_created(self, graph, logdir):
        """A missing logdir is created; callbacks see its absolute path."""
        trainer, _ = counter_trainer()
        trainer.train([], [], creator(), None, 1, 1, 1, logdir=logdir)
        assert trainer.logdir == str(logdir)
        assert logdir.is_dir()

    def test_not_empty_is_an_error(self, graph, logdir):
        """A logdir holding files is refused, the files listed."""
        logdir.mkdir()
        (logdir / "stats.json").write_text("[]")
        trainer, _ = counter_trainer()
        with pytest.raises(
            FileExistsError,
            match=r"the logdir '.*log' is not empty \(it holds 'stats.json'\): pass "
            r"logdir_action='overwrite' to move it aside to '.*log.old-<timestamp>'",
        ):
            trainer.train([], [], creator(), None, 1, 1, 1, logdir=logdir)

    def test_overwrite_moves_aside(self, graph, logdir):
        """'overwrite' renames the old directory aside and starts empty."""
        logdir.mkdir()
        (logdir / "old.txt").write_text("x")
        trainer, _ = counter_trainer()
        trainer.train([], [], creator(), None, 1, 1, 1, logdir=logdir, logdir_action="overwrite")
        assert list(logdir.iterdir()) == []
        aside = [p for p in logdir.parent.iterdir() if p.name.startswith("log.old-")]
        assert len(aside) == 1
        assert (aside[0] / "old.txt").read_text() == "x"

    def test_overwrite_counts_old_copies(self, graph, logdir, caplog):
        """Each 'overwrite' says how many old copies sit beside the logdir, and how to remove them."""
        (logdir.parent / "log.old-20200101-000000").mkdir()
        (logdir.parent / "logs.old-20200101-000000").mkdir()  # another logdir's copy
        logdir.mkdir()
        (logdir / "old.txt").write_text("x")
        trainer, _ = counter_trainer()
        with caplog.at_level("WARNING", logger="towerkit.trainers"):
            trainer.train(
                [], [], creator(), None, 1, 1, 1, logdir=logdir, logdir_action="overwrite"
            )
        (message,) = [r.getMessage() for r in caplog.records if "aside" in r.getMessage()]
        assert f"moved the existing logdir {logdir} aside to {logdir}.old-" in message
        assert message.endswith(
            f"; 2 such copies sit next to it now (remove them with: rm -r {logdir}.old-*)"
        )

    def test_lock_held_while_running(self, graph, logdir):
        """The lock names this process while the run is set up, and is gone after training."""

        class Look(Callback):
            def _before_train(self):
                self.owner = parse_lock((logdir / LOCK_FILENAME).read_text())

        trainer, _ = counter_trainer()
        look = Look()
        trainer.train([look], [], creator(), None, 1, 1, 1, logdir=logdir)
        assert look.owner.pid == os.getpid()
        assert not (logdir / LOCK_FILENAME).exists()

    def test_keep(self, graph, logdir):
        """'keep' writes into the directory as it is."""
        logdir.mkdir()
        (logdir / "old.txt").write_text("x")
        trainer, _ = counter_trainer()
        trainer.train([], [], creator(), None, 1, 1, 1, logdir=logdir, logdir_action="keep")
        assert (logdir / "old.txt").read_text() == "x"

    def test_bad_action(self, graph, logdir):
        """Unknown actions are refused."""
        trainer, _ = counter_trainer()
        with pytest.raises(ValueError, match="'logdir_action' must be one of"):
            trainer.set_logdir(logdir, "delete")

    def test_file_in_the_way(self, graph, tmp_path):
        """A file where the directory should be is an error."""
        (tmp_path / "f").write_text("")
        trainer, _ = counter_trainer()
        with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
            trainer.set_logdir(tmp_path / "f")


@pytest.mark.procs
class TestTerminalOutput:
    """What a run shows on a terminal or a pipe."""

    def test_piped_no_bar_frames(self, tmp_path):
        """Piped, the progress bar draws nothing; 'epoch N done' is a DEBUG line of its own."""
        script = tmp_path / "run.py"
        script.write_text(
            "import logging\n"
            "logging.basicConfig(level=logging.DEBUG, format='%(message)s')\n"
            "import tensorflow as tf\n"
            "from towerkit.callbacks import ProgressBar\n"
            "from towerkit.towers.compat import tf1\n"
            "from towerkit.trainers import NewSessionCreator, Trainer\n"
            "g = tf.Graph()\n"
            "with g.as_default():\n"
            "    w = tf1.get_variable('w', initializer=0.0)\n"
            "    t = Trainer()\n"
            "    t.train_op = tf1.assign_add(w, 1.0).op\n"
            "    t.train([ProgressBar()], [], NewSessionCreator(), None, 5, 1, 2)\n"
        )
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        lines = done.stderr.splitlines()
        ends = [line for line in lines if "epoch 1 done" in line]
        assert len(ends) == 1
        assert ends[0].startswith("epoch 1 done: 5 steps in "), ends[0]
        assert "step/s" not in done.stderr
        assert "\r" not in done.stderr


def tree(path):
    """``{relative path: bytes}`` of every file under `path` (directories as None); {} when absent."""
    out = {}
    if not os.path.exists(path):
        return out
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path)] = None
        for f in files:
            full = os.path.join(root, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


class Boom(Callback):
    """Raises ``RuntimeError("boom")`` in the callback method named by `where`."""

    def __init__(self, where):
        self.where = where

    def _before_train(self):
        if self.where == "before_train":
            raise RuntimeError("boom")

    def _trigger_epoch(self):
        if self.where == "trigger_epoch" and self.trainer.epoch_num == 2:
            raise RuntimeError("boom")


def writing_run(logdir, callbacks=(), session_init=None, train_op=None, **kw):
    """A counter run with an event writer, a stats file and a saver, in a fresh graph."""
    from towerkit.callbacks import JSONWriter, ModelSaver, TFEventWriter

    with tf.Graph().as_default():
        trainer, _ = counter_trainer()
        if train_op is not None:
            trainer.train_op = train_op()
        trainer.train(
            [*callbacks, ModelSaver()],
            [TFEventWriter(), JSONWriter()],
            creator(),
            session_init,
            2,
            1,
            2,
            logdir=logdir,
            **kw,
        )
    return trainer


def failing_step():
    """A train op that fails when it runs: a numerics check on a NaN."""
    return tf.debugging.check_numerics(tf.constant(np.nan), "bad batch").op


class TestFailedRun:
    """A run failing before its first step leaves the logdir as it found it."""

    @pytest.mark.parametrize(
        "how",
        [
            {"callbacks": [Boom("before_train")]},
            {"session_init": DictRestore({"x": np.zeros(3, np.float32)})},
            {"train_op": failing_step},
        ],
        ids=["before_train", "restore", "first_step"],
    )
    def test_rerun_is_not_blocked(self, logdir, how):
        """The directory the run made is removed; the same command then runs."""
        with pytest.raises((RuntimeError, ValueError, tf.errors.InvalidArgumentError)):
            writing_run(logdir, **how)
        assert not logdir.exists()
        writing_run(logdir)
        assert (logdir / "stats.json").is_file()

    def test_empty_dir_kept(self, logdir):
        """A directory that existed (empty) is emptied again, not removed."""
        logdir.mkdir()
        with pytest.raises(RuntimeError, match="boom"):
            writing_run(logdir, callbacks=[Boom("before_train")])
        assert logdir.is_dir()
        assert list(logdir.iterdir()) == []

    def test_overwrite_moved_back(self, logdir):
        """'overwrite' moved the old directory aside: it is moved back."""
        logdir.mkdir()
        (logdir / "old.txt").write_text("x")
        before = tree(logdir)
        with pytest.raises(RuntimeError, match="boom"):
            writing_run(logdir, callbacks=[Boom("before_train")], logdir_action="overwrite")
        assert tree(logdir) == before
        assert [p.name for p in logdir.parent.iterdir()] == ["log"]

    def test_keep_touches_nothing_that_was_there(self, logdir):
        """'keep': only the entries the run added are removed; the old ones are byte-identical."""
        writing_run(logdir)
        (logdir / "sub").mkdir()
        (logdir / "sub" / "notes.txt").write_text("mine")
        before = tree(logdir)
        with pytest.raises(RuntimeError, match="boom"):
            writing_run(logdir, callbacks=[Boom("before_train")], logdir_action="keep")
        assert tree(logdir) == before

    def test_after_a_step_everything_stays(self, logdir):
        """A run failing after steps keeps its files (its checkpoints are worth resuming from)."""
        with pytest.raises(RuntimeError, match="boom"):
            writing_run(logdir, callbacks=[Boom("trigger_epoch")])
        names = sorted(p.name for p in logdir.iterdir())
        assert "stats.json" in names
        assert any(n.startswith("events.out.tfevents") for n in names)
        assert "model-2.index" in names
        with pytest.raises(FileExistsError, match=r"the logdir '.*' is not empty"):
            writing_run(logdir)

    def test_no_event_file_before_training(self, logdir):
        """The event writer writes no file for a run that fails in setup."""
        from towerkit.callbacks import TFEventWriter

        with tf.Graph().as_default():
            trainer, _ = counter_trainer()
            trainer.set_logdir(logdir)
            trainer.setup_callbacks([], [TFEventWriter()])
            assert [p.name for p in logdir.iterdir()] == [LOCK_FILENAME], "only the run's lock"

    @given(st.lists(st.text(min_size=1, max_size=4)), st.lists(st.text(min_size=1, max_size=4)))
    def test_new_entries(self, before, added):
        """new_entries: exactly the names of `after` absent from `before`, sorted."""
        from towerkit.trainers._logdir import new_entries

        got = new_entries(before, before + added)
        assert got == sorted(n for n in added if n not in set(before))


class TestWritersAtSetup:
    """Callbacks that would fight over files, or write nothing, are refused at setup."""

    @pytest.mark.parametrize(
        ("callbacks", "monitors", "match"),
        [
            ("two_savers", [], r"'.*/log/model-\*' \(ModelSaver, ModelSaver\)"),
            ("periodic_saver", [], r"'.*/log/model-\*' \(ModelSaver, ModelSaver\)"),
            ([], "two_writers", r"'.*/log/stats.json' \(JSONWriter, JSONWriter\)"),
        ],
    )
    def test_same_files(self, graph, logdir, callbacks, monitors, match):
        """Two savers (one wrapped) or two stats writers on one directory: ValueError, nothing written."""
        from towerkit.callbacks import JSONWriter, ModelSaver, PeriodicTrigger

        made = {
            "two_savers": lambda: [ModelSaver(), ModelSaver(max_to_keep=2)],
            "periodic_saver": lambda: [
                ModelSaver(),
                PeriodicTrigger(ModelSaver(), every_k_steps=1),
            ],
            "two_writers": lambda: [JSONWriter(), JSONWriter()],
        }
        cbs = made[callbacks]() if isinstance(callbacks, str) else callbacks
        mons = made[monitors]() if isinstance(monitors, str) else monitors
        trainer, _ = counter_trainer()
        with pytest.raises(ValueError, match=r"callbacks would write the same files: " + match):
            trainer.train(cbs, mons, creator(), None, 1, 1, 1, logdir=logdir)
        assert not logdir.exists()

    def test_savers_in_two_directories(self, graph, logdir):
        """Two savers with different directories are fine."""
        from towerkit.callbacks import ModelSaver

        trainer, _ = counter_trainer()
        savers = [ModelSaver(), ModelSaver(checkpoint_dir=logdir / "best")]
        trainer.train(savers, [], creator(), None, 1, 1, 1, logdir=logdir)
        assert (logdir / "model-1.index").is_file()
        assert (logdir / "best" / "model-1.index").is_file()

    def test_monitor_as_callback(self, graph, logdir):
        """A monitor given as a callback would write nothing: TypeError naming it."""
        from towerkit.callbacks import JSONWriter

        trainer, _ = counter_trainer()
        with pytest.raises(
            TypeError,
            match=r"'callbacks' holds monitors \(#0: JSONWriter\): .*pass it in 'monitors'",
        ):
            trainer.train([JSONWriter()], [], creator(), None, 1, 1, 1, logdir=logdir)
        assert not logdir.exists()

    def test_claim_conflicts(self):
        """claim_conflicts: each path claimed twice or more, with every claimant."""
        from towerkit.trainers._callback_checks import claim_conflicts

        claims = [("a", "X"), ("b", "Y"), ("a", "Z"), ("a", "X")]
        assert claim_conflicts(claims) == ["'a' (X, Z, X)"]
        assert claim_conflicts([("a", "X"), ("b", "X")]) == []


class _FreezeProbe(Callback):
    """Records ``gc.get_freeze_count()`` before training and at each step."""

    def __init__(self):
        self.before = None
        self.steps = []

    def _before_train(self):
        self.before = gc.get_freeze_count()

    def _trigger_step(self):
        self.steps.append(gc.get_freeze_count())


class TestFrozenHeap:
    """The objects alive when the loop starts stay out of GC scans during it, then come back."""

    def _run(self):
        probe = _FreezeProbe()
        graph = tf.Graph()
        with graph.as_default():
            trainer, _ = counter_trainer()
            trainer.train([probe], [], creator(), None, 3, 1, 2)
        return probe

    def test_frozen_during_the_loop(self):
        """Nothing frozen in before_train; the graph's objects frozen at every step; none after."""
        assert gc.get_freeze_count() == 0
        probe = self._run()
        assert probe.before == 0
        assert len(probe.steps) == 6
        assert min(probe.steps) > 1000
        assert gc.get_freeze_count() == 0

    def test_unfrozen_after_a_failure(self):
        """A step that raises leaves nothing frozen."""
        graph = tf.Graph()
        with graph.as_default():
            trainer, _ = counter_trainer()
            trainer.train_op = failing_step()
            with pytest.raises(tf.errors.InvalidArgumentError):
                trainer.train([], [], creator(), None, 3, 1, 1)
        assert gc.get_freeze_count() == 0

    def test_left_to_the_owner(self):
        """A process that froze objects itself, or disabled the collector, is left as it was."""
        gc.freeze()
        try:
            frozen = gc.get_freeze_count()
            probe = self._run()
            # Frozen objects that die meanwhile leave the count (starting a thread, as the
            # Ctrl-C watcher does, drops dead weak references of ended threads): the loop
            # must neither freeze more (a jump of the graph's size) nor unfreeze (0).
            assert len(probe.steps) == 6
            assert all(frozen - 50 <= n <= frozen for n in probe.steps), (frozen, probe.steps)
            assert frozen - 50 <= gc.get_freeze_count() <= frozen
        finally:
            gc.unfreeze()
        gc.disable()
        try:
            probe = self._run()
            assert probe.steps == [0] * 6
        finally:
            gc.enable()
