"""Monitors: the trainer's statistics hub and the monitors that write them out."""

import numpy as np
import pytest
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    CallbackError,
    MissingStatError,
    MonitorBase,
    Monitors,
)
from towerkit.towers._compat import tf1


def make_train_op():
    """A one-variable model: each step adds 1 to `w`."""
    w = tf1.get_variable("w", initializer=0.0)
    return tf1.assign_add(w, 1.0)


class Recorder(MonitorBase):
    """Keeps what it processes, with the global step it saw it at."""

    def __init__(self):
        self.scalars, self.images, self.summaries, self.events = [], [], [], []
        self.phases = []

    def process_scalar(self, name, val):
        self.scalars.append((self.trainer.global_step, name, val))

    def process_image(self, name, val):
        self.images.append((name, val.shape))

    def process_summary(self, summary):
        self.summaries.append(summary)

    def process_event(self, evt):
        self.events.append(evt)

    def _before_train(self):
        self.phases.append("before_train")

    def _trigger_epoch(self):
        self.phases.append(("trigger_epoch", self.trainer.epoch_num))

    def _after_train(self):
        self.phases.append("after_train")


class PutEveryEpoch(Callback):
    """Puts `epoch * 10` as 'val' and the step count as 'steps' each epoch."""

    def _trigger(self):
        self.trainer.monitors.put_scalar("val", np.float32(self.trainer.epoch_num * 10))
        self.trainer.monitors.put_scalar("steps", np.int64(self.trainer.global_step))


class ScalarOnly(MonitorBase):
    """Processes scalars only."""

    def __init__(self):
        self.names = []

    def process_scalar(self, name, val):
        self.names.append(name)


class TestMonitors:
    """`Monitors` dispatches, keeps the history and drives its monitors."""

    def test_history_in_a_loop(self, graph):
        """Scalars put by a callback each epoch are in the history with their global step."""
        rec = Recorder()
        mons = Monitors([rec])
        LoopTrainer(graph, make_train_op(), [PutEveryEpoch()], mons, steps_per_epoch=3, max_epoch=3).train()
        assert mons.get_history("val") == [(3, 10.0), (6, 20.0), (9, 30.0)]
        assert mons.get_latest("steps") == 9
        assert isinstance(mons.get_latest("steps"), int)
        assert isinstance(mons.get_latest("val"), float)
        assert [s[:2] for s in rec.scalars] == [(3, "val"), (3, "steps"), (6, "val"), (6, "steps"), (9, "val"), (9, "steps")]
        assert len(rec.summaries) == 6
        assert rec.summaries[0].value[0].tag == "val"
        assert rec.summaries[0].value[0].simple_value == 10.0
        assert rec.phases == ["before_train", ("trigger_epoch", 1), ("trigger_epoch", 2), ("trigger_epoch", 3), "after_train"]
        assert mons.stat_names == ["steps", "val"]

    def test_missing_stat(self, graph):
        """Asking for a stat never put names the stats that exist."""
        mons = Monitors([])
        LoopTrainer(graph, make_train_op(), [PutEveryEpoch()], mons, max_epoch=1).train()
        with pytest.raises(MissingStatError, match=r"no statistic named 'loss' .* \['steps', 'val'\]"):
            mons.get_latest("loss")
        with pytest.raises(KeyError, match="'loss'"):
            mons.get_history("loss")

    def test_summary_image_event(self, graph):
        """Summaries from summary ops feed the scalar history; images and events are dispatched."""
        x = tf1.constant(2.5)
        summary_op = tf1.summary.merge(
            [tf1.summary.scalar("x", x), tf1.summary.histogram("h", tf1.constant([1.0, 2.0]))]
        )
        rec, only = Recorder(), ScalarOnly()
        mons = Monitors([rec, only])

        class PutAll(Callback):
            def _setup_graph(self):
                self.op = summary_op

            def _trigger(self):
                m = self.trainer.monitors
                m.put_summary(self.trainer.sess.run(self.op))
                m.put_image("img", np.zeros((4, 5, 3)))
                m.put_image("many", np.full((2, 4, 5, 1), 255.0))
                m.put_event(tf1.Event(file_version="x"))

        LoopTrainer(graph, make_train_op(), [PutAll()], mons, steps_per_epoch=2, max_epoch=1).train()
        assert mons.get_history("x") == [(2, 2.5)]
        assert only.names == ["x"]
        assert rec.images == [("img", (1, 4, 5, 3)), ("many", (2, 4, 5, 1))]
        tags = [[v.tag for v in s.value] for s in rec.summaries]
        assert tags == [["x", "h"], ["img"], ["many/0", "many/1"]]
        img = rec.summaries[1].value[0].image
        assert (img.height, img.width, img.colorspace) == (4, 5, 3)
        assert rec.events[0].step == 2
        assert rec.events[0].wall_time > 0

    def test_png_round_trip(self):
        """Images are encoded as real PNG files that TensorFlow decodes back."""
        import tensorflow as tf

        from towerkit.callbacks._monitors import encode_png

        rng = np.random.default_rng(0)
        for c in (1, 2, 3, 4):
            img = rng.integers(0, 256, size=(7, 5, c)).astype(np.float32)
            png = encode_png(img)
            with tf.Graph().as_default() as g, tf1.Session(graph=g) as s:
                back = s.run(tf1.image.decode_png(png, channels=0))
            np.testing.assert_array_equal(back, img.astype(np.uint8))

    def test_fail(self, graph):
        """Wrong kinds and shapes are rejected with the entry at fault."""
        with pytest.raises(TypeError, match=r"'monitors' must hold MonitorBase instances; got #1: Callback"):
            Monitors([Recorder(), Callback()])

        class Hooking(MonitorBase):
            def _before_run(self, ctx):
                return None

        with pytest.raises(TypeError, match=r"monitors \['Hooking'\] define before_run/after_run"):
            Monitors([Hooking()])
        mons = Monitors([])
        with pytest.raises(CallbackError, match="only after setup_graph"):
            mons.put_scalar("a", 1.0)
        LoopTrainer(graph, make_train_op(), [], mons, max_epoch=1).train()
        with pytest.raises(TypeError, match="statistic 'a' must be a real number; got str"):
            mons.put_scalar("a", "1.0")
        with pytest.raises(ValueError, match=r"image 'im' must be a 2-D .* got shape \(3,\)"):
            mons.put_image("im", np.zeros(3))
        with pytest.raises(ValueError, match=r"image 'im' must have 1, 2, 3 or 4 channels .* \(2, 2, 7\)"):
            mons.put_image("im", np.zeros((2, 2, 7)))
        with pytest.raises(TypeError, match=r"'summary' must be a tf\.compat\.v1\.Summary"):
            mons.put_summary("x")

    def test_has_hook(self):
        """Monitors hooks exactly the phases its monitors hook, and never session runs."""
        mons = Monitors([ScalarOnly()])
        assert not mons.has_hook("_trigger_epoch")
        assert not mons.has_hook("_before_run")
        assert Monitors([Recorder()]).has_hook("_trigger_epoch")
