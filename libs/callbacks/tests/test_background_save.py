"""ModelSaver(background=True): checkpoints written by a thread while training goes on."""

import json
import os
import re
import threading

import numpy as np
import pytest
import tensorflow as tf
from loop import LoopTrainer
from test_savers import PutSeries, listing, train, values

from towerkit.callbacks import (
    Callback,
    CallbackError,
    MinSaver,
    ModelSaver,
    PeriodicTrigger,
)
from towerkit.callbacks.plumbing import read_positions
from towerkit.towers.compat import tf1


def state_entries(d):
    """The checkpoint names of the state file, oldest first, and the newest."""
    text = (d / "checkpoint").read_text()
    return re.findall(r'all_model_checkpoint_paths: "([^"]*)"', text), re.findall(
        r'^model_checkpoint_path: "([^"]*)"', text, re.M
    )


def writer_threads():
    return [t for t in threading.enumerate() if t.name.startswith("towerkit-save")]


@pytest.mark.parametrize(
    "every",
    [None, 1, 3],
    ids=["epoch", "every-step", "every-3-steps"],
)
def test_same_checkpoints_as_a_blocking_saver(tmp_path, every):
    """The same files, state file, positions and values as the blocking saver, save for save."""

    def saver(background):
        cb = ModelSaver(max_to_keep=2, background=background)
        return cb if every is None else PeriodicTrigger(cb, every_k_steps=every)

    train([saver(False)], tmp_path / "blocking", steps=3, max_epoch=3)
    train([saver(True)], tmp_path / "background", steps=3, max_epoch=3)
    blocking, background = tmp_path / "blocking", tmp_path / "background"
    assert listing(background) == listing(blocking)
    assert state_entries(background) == state_entries(blocking)
    assert read_positions(str(background)) == read_positions(str(blocking))
    for name in listing(blocking):
        if name.endswith(".index"):
            prefix = name[: -len(".index")]
            assert values(background / prefix) == values(blocking / prefix)
    assert not writer_threads(), "the writer thread ends with training"


class Meddle(Callback):
    """Adds 1000 to w right after the saver's turn at each epoch end (training goes on)."""

    def _setup_graph(self):
        w = next(v for v in tf1.global_variables() if v.op.name == "w")
        self.op = tf1.assign_add(w, 1000.0)

    def _trigger(self):
        self.trainer.sess.run(self.op)


def test_checkpoint_holds_the_state_at_its_step(tmp_path):
    """What changes after the snapshot (here at once, while a large checkpoint is written)
    is not in the checkpoint: model-<step> holds the variables at that step."""
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=0.0)
        tf1.get_variable("big", shape=[4_000_000], initializer=tf1.zeros_initializer())
        trainer = LoopTrainer(
            g,
            tf1.assign_add(w, 1.0),
            [ModelSaver(max_to_keep=0, background=True), Meddle()],
            steps_per_epoch=2,
            max_epoch=3,
            logdir=str(tmp_path),
        )
        trainer.train()
    # step 2: w = 2 at the save, then +1000; step 4: 1002 + 2, then +1000; ...
    assert [float(values(tmp_path / f"model-{s}")["w"]) for s in (2, 4, 6)] == [
        2.0,
        1004.0,
        2006.0,
    ]


class StepLog(Callback):
    """Records the global step after each step (before the saver's turn)."""

    def __init__(self):
        self.steps = []

    def _trigger_step(self):
        self.steps.append(self.trainer.global_step)


class BreakDirectory(Callback):
    """At the end of epoch 2, before the saver's turn (and once its save of epoch 1 is on
    disk): the checkpoint directory becomes a file."""

    def __init__(self, directory, saver):
        self.directory, self.saver = directory, saver

    def _trigger(self):
        if self.trainer.epoch_num == 2:
            self.saver.settle()
            os.rename(self.directory, str(self.directory) + ".moved")
            with open(self.directory, "w") as f:
                f.write("not a directory")


class Settle(Callback):
    """Waits (after the saver's turn) for its save in flight, leaving its outcome to the saver."""

    def __init__(self, saver):
        self.saver = saver

    def _trigger(self):
        self.saver.settle()


def test_failure_is_raised_at_the_next_step(tmp_path):
    """A write that fails on the thread stops training at the next step with a CallbackError
    naming the step and the cause; nothing of it is published; earlier checkpoints stay."""
    ckpt = tmp_path / "ckpt"
    log = StepLog()
    saver = ModelSaver(checkpoint_dir=ckpt, background=True)
    with pytest.raises(CallbackError) as info:
        train(
            [log, BreakDirectory(ckpt, saver), saver, Settle(saver)],
            tmp_path,
            steps=2,
            max_epoch=4,
        )
    message = str(info.value)
    assert "the background save of global step 4 to" in message, message
    assert "FileExistsError" in message, message
    assert "nothing of it was published" in message
    assert log.steps == [1, 2, 3, 4, 5], "raised at the first step after the failed save"
    moved = tmp_path / "ckpt.moved"
    assert [n for n in listing(moved) if n.startswith("model-")] == [
        "model-2.data-00000-of-00001",
        "model-2.index",
    ]
    assert state_entries(moved) == (["model-2"], ["model-2"])
    assert not writer_threads()


def test_failure_of_the_last_save_is_raised_at_the_end(tmp_path):
    """A failed save in flight when training ends is raised by after_train."""
    ckpt = tmp_path / "ckpt"
    saver = ModelSaver(checkpoint_dir=ckpt, background=True)
    with pytest.raises(CallbackError, match=r"background save of global step 4 to"):
        train(
            [BreakDirectory(ckpt, saver), saver],
            tmp_path,
            steps=2,
            max_epoch=2,
        )
    assert not writer_threads()


def test_one_save_in_flight_at_most(tmp_path):
    """A save due while one is in flight waits for it: every step's checkpoint, in order."""
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=0.0)
        tf1.get_variable("big", shape=[2_000_000], initializer=tf1.ones_initializer())
        saver = ModelSaver(max_to_keep=0, background=True)
        LoopTrainer(
            g,
            tf1.assign_add(w, 1.0),
            [PeriodicTrigger(saver, every_k_steps=1)],
            steps_per_epoch=3,
            max_epoch=2,
            logdir=str(tmp_path),
        ).train()
    names, newest = state_entries(tmp_path)
    assert names == [f"model-{s}" for s in range(1, 7)]
    assert newest == ["model-6"]
    for s in range(1, 7):
        got = values(tmp_path / f"model-{s}")
        assert float(got["w"]) == s
        assert int(got["global_step"]) == s
        assert np.all(got["big"] == 1.0)
    assert [p.step for p in read_positions(str(tmp_path))] == list(range(1, 7))


def test_min_saver_copies_the_checkpoint_of_its_step(tmp_path):
    """MinSaver waits for the background save of the current step before copying it."""
    series = [3.0, 1.0, 2.0, 0.5, 4.0]
    train(
        [
            PutSeries(series),
            ModelSaver(max_to_keep=1, background=True),
            MinSaver("val-error"),
            MinSaver("val-error", top_k=2, filename="best.tfmodel"),
        ],
        tmp_path,
        steps=2,
        max_epoch=5,
    )
    assert float(values(tmp_path / "min-val-error.tfmodel")["w"]) == 8.0
    record = json.loads((tmp_path / "best.tfmodel.json").read_text())
    assert [(e["step"], e["value"]) for e in record["kept"]] == [(8, 0.5), (4, 1.0)]
    for entry in record["kept"]:
        assert float(values(tmp_path / entry["name"])["w"]) == entry["step"]


def test_save_now_waits(tmp_path):
    """save_now (a preemption) returns once the checkpoint of the step is on disk."""

    class Preempt(Callback):
        def __init__(self, saver):
            self.saver = saver

        def _trigger_step(self):
            if self.trainer.global_step == 3:
                self.saver.save_now()
                assert os.path.isfile(tmp_path / "model-3.index")
                assert "model-3" in state_entries(tmp_path)[0]

    saver = ModelSaver(background=True)
    train([saver, Preempt(saver)], tmp_path, steps=2, max_epoch=2)
    assert float(values(tmp_path / "model-3")["w"]) == 3.0


def test_bad_input(tmp_path):
    """background must be a bool; partitioned variables are refused at setup, by name."""
    with pytest.raises(TypeError, match=r"'background' must be True or False; got 'yes'"):
        ModelSaver(background="yes")
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("parted", shape=[4, 2], partitioner=tf1.fixed_size_partitioner(2))
        del w
        trainer = LoopTrainer(
            g,
            tf1.no_op(),
            [ModelSaver(background=True)],
            steps_per_epoch=1,
            max_epoch=1,
            logdir=str(tmp_path),
        )
        with pytest.raises(
            ValueError, match=r"parted/part_0.* is a part of a partitioned variable"
        ):
            trainer.train()
    assert not os.path.exists(tmp_path / "checkpoint")
