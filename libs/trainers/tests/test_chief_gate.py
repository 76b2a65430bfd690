"""Chief-only callbacks behind a gate: built everywhere, run from the moment a process owns the logdir.

An elastic job's process can become the logdir's owner mid-run (its owner was lost).
These tests drive real trainer loops in which ownership arrives at a chosen step, and
check what the gated callbacks see: nothing before, ``before_train`` (and
``before_epoch`` inside an epoch) first, every phase after, ``after_train`` only when
started; a gated monitor's statistics likewise. The lock's takeover is tested on a
real lock file held by a live process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from helpers import Probe, counter_trainer, creator

from towerkit.callbacks import Callback, EventKind, JSONWriter, Monitors, ScalarPrinter
from towerkit.trainers import LOCK_FILENAME, LockOwner, LogdirLock, Trainer, format_lock, parse_lock
from towerkit.trainers._logdir import take_over_logdir
from towerkit.trainers.parallel._chief_gate import ChiefGate, GatedMonitor, gate_chief_only


class Movable(Trainer):
    """A trainer that gates chief-only callbacks and owns the logdir from global step `at` on."""

    def __init__(self, at: int | None) -> None:
        super().__init__()
        self.is_chief = False
        self.at = at

    def _on_this_process(self, cb):
        return gate_chief_only(cb, lambda: self.is_chief)


class TakeOver(Callback):
    """Not chief-only: makes the trainer the owner once the global step reaches its `at`."""

    _chief_only = False

    def _trigger_step(self):
        t = self.trainer
        if t.at is not None and t.global_step >= t.at:
            t.is_chief = True


class PutEpoch(Callback):
    """Not chief-only: puts the epoch number as statistic ``e`` at each epoch's end."""

    _chief_only = False

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar("e", self.trainer.epoch_num)


def run(at, callbacks, monitors=(), logdir=None, steps=3, epochs=3):
    trainer, _ = counter_trainer(lambda: Movable(at))
    trainer.train(
        [TakeOver(), PutEpoch(), *callbacks],
        list(monitors),
        creator(),
        None,
        steps_per_epoch=steps,
        max_epoch=epochs,
        logdir=logdir,
    )
    return trainer


class TestChiefGate:
    """A gated callback in a loop where the process becomes the owner mid-run."""

    def test_takeover_inside_an_epoch(self, graph):
        """Owner from global step 5 (epoch 2, its second step): the callback starts there.

        Its first phases are before_train then before_epoch (the epoch had begun), at
        the first phase it is given: the trigger_step of step 5, which runs after the
        one that made the process the owner.
        """
        probe = Probe(chief_only=True)
        run(5, [probe])
        assert probe.events[:3] == [
            ("before_train", 2, 1, 5),
            ("before_epoch", 2, 1, 5),
            ("trigger_step", 2, 1, 5),
        ]
        assert [e[0] for e in probe.events[3:6]] == ["before_run", "after_run", "trigger_step"]
        assert probe.events[-1][0] == "after_train"
        assert [e for e in probe.events if e[0] == "before_epoch"] == [
            ("before_epoch", 2, 1, 5),
            ("before_epoch", 3, -1, 6),
        ]
        assert [e[3] for e in probe.events if e[0] == "trigger_step"] == [5, 6, 7, 8, 9]
        assert probe.counts[EventKind.TRIGGER_EPOCH] == 2

    def test_takeover_at_an_epoch_end(self, graph):
        """Owner from global step 6 (epoch 2's last step): then epoch 2's end, epoch 3."""
        probe = Probe(chief_only=True)
        run(6, [probe])
        assert [e[0] for e in probe.events[:5]] == [
            "before_train",
            "before_epoch",
            "trigger_step",
            "after_epoch",
            "trigger_epoch",
        ]
        assert probe.events[5] == ("before_epoch", 3, -1, 6)

    def test_never_owner(self, graph):
        """A process that never owns the logdir runs none of the callback's phases."""
        probe = Probe(chief_only=True)
        run(None, [probe])
        assert probe.events == []
        assert probe.setup_done  # the graph part is built everywhere

    def test_owner_from_the_start(self, graph):
        """An owner from the start: the gated callback sees exactly what an ungated one sees."""
        gated, plain = Probe(chief_only=True), Probe(chief_only=False)
        trainer, _ = counter_trainer(lambda: Movable(None))
        trainer.is_chief = True
        trainer.train([gated, plain], [], creator(), None, steps_per_epoch=3, max_epoch=2)
        assert gated.events == plain.events
        assert gated.events[0][0] == "before_train"

    def test_hooks_are_the_callbacks(self, graph):
        """A gate has the phases of its callback only; it prints as its callback."""

        class EpochOnly(Callback):
            def _trigger_epoch(self):
                pass

        cb = EpochOnly()
        gate = ChiefGate(cb, lambda: True)
        assert gate.has_hook("_trigger_epoch")
        assert not gate.has_hook("_trigger_step")
        assert not gate.has_hook("_before_run")
        assert (str(gate), gate.gated, gate.chief_only) == ("EpochOnly", cb, False)
        assert gate_chief_only(gate, lambda: True) is gate  # not chief-only: as it is

    def test_registered_twice(self, graph):
        """A callback given twice is refused, although the trainer keeps its gate."""
        probe = Probe(chief_only=True)
        trainer, _ = counter_trainer(lambda: Movable(None))
        trainer.register_callback(probe)
        with pytest.raises(ValueError, match="registered twice"):
            trainer.register_callback(probe)


class TestGatedMonitor:
    """A gated monitor gets statistics, and writes files, only while its process owns the logdir."""

    def test_json_writer_from_the_takeover(self, graph, tmp_path):
        """stats.json holds the epochs whose end came after the takeover at step 5."""
        run(5, [], [JSONWriter(), ScalarPrinter()], logdir=tmp_path / "log")
        with open(tmp_path / "log" / "stats.json") as f:
            records = json.load(f)
        assert [(r["epoch_num"], r["global_step"], r["e"]) for r in records] == [
            (2, 6, 2),
            (3, 9, 3),
        ]

    def test_never_owner_writes_nothing(self, graph, tmp_path):
        """Not the owner: the gated JSONWriter neither reads nor writes stats.json."""
        (tmp_path / "log").mkdir()
        run(None, [], [JSONWriter()], logdir=tmp_path / "log")
        assert not (tmp_path / "log" / "stats.json").exists()

    def test_kinds_and_group(self, graph):
        """A gated monitor processes the kinds its monitor does; a Monitors group takes it."""
        writer = JSONWriter()
        gated = gate_chief_only(writer, lambda: False)
        assert isinstance(gated, GatedMonitor)
        assert gated.processes("process_scalar")
        assert not gated.processes("process_image")
        group = Monitors([gated])
        assert group.monitors == (gated,)


@pytest.mark.procs
class TestTakeOverLock:
    """The lock of a directory taken from an owner known to be lost."""

    def test_from_a_live_process(self, tmp_path):
        """Even a live owner's lock (a hung process) is replaced in one step; release removes it."""
        other = subprocess.Popen(["sleep", "60"])
        try:
            owner = LockOwner(pid=other.pid, host=socket.gethostname(), since=1.0)
            (tmp_path / LOCK_FILENAME).write_text(format_lock(owner))
            lock = LogdirLock(str(tmp_path))
            assert lock.take_over() == owner
            assert lock.held
            mine = parse_lock((tmp_path / LOCK_FILENAME).read_text())
            assert (mine.pid, mine.host) == (os.getpid(), socket.gethostname())
            assert sorted(os.listdir(tmp_path)) == [LOCK_FILENAME]  # no temporary left
            lock.release()
            assert not (tmp_path / LOCK_FILENAME).exists()
        finally:
            other.kill()
            other.wait()

    def test_without_a_lock_file(self, tmp_path):
        """No lock file: the takeover makes one and names no previous owner."""
        (tmp_path / "stats.json").write_text("[]")
        taken, before = take_over_logdir(str(tmp_path))
        assert before is None
        assert taken.path == str(tmp_path)
        assert not taken.made
        assert "stats.json" in taken.before
        assert taken.lock.held
        taken.lock.release()
        assert sorted(os.listdir(tmp_path)) == ["stats.json"]
