"""The Callback base class as tensorpack-style callbacks use it: the trainer's counters."""

import pytest
import tensorflow as tf
from loop import LoopTrainer

from towerkit.callbacks import Callback, EnableCallbackIf, PeriodicCallback
from towerkit.towers.compat import tf1


def run(callbacks, *, steps=3, max_epoch=2):
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=0.0)
        train_op = tf1.assign_add(w, 1.0)
        trainer = LoopTrainer(g, train_op, callbacks, steps_per_epoch=steps, max_epoch=max_epoch)
        return trainer.train()


class CountersSeen(Callback):
    """Reads its own ``epoch_num``, ``global_step`` and ``local_step``, as tensorpack callbacks do."""

    def __init__(self):
        self.steps = []
        self.epochs = []

    def _trigger_step(self):
        self.steps.append((self.epoch_num, self.local_step, self.global_step))

    def _trigger_epoch(self):
        self.epochs.append((self.epoch_num, self.global_step))


class TestCounters:
    """``Callback.epoch_num``, ``global_step``, ``local_step`` delegate to the trainer."""

    def test_read_in_a_callback(self):
        """A callback reads the counters as ``self.<name>`` at every step and epoch."""
        cb = CountersSeen()
        run([cb], steps=3, max_epoch=2)
        assert cb.steps == [(1, 0, 1), (1, 1, 2), (1, 2, 3), (2, 0, 4), (2, 1, 5), (2, 2, 6)]
        assert cb.epochs == [(1, 3), (2, 6)]

    def test_same_as_trainer(self):
        """The properties give what ``self.trainer`` gives at that moment."""
        seen = []

        class Both(Callback):
            def _trigger_step(self):
                t = self.trainer
                seen.append(
                    (self.epoch_num, self.global_step, self.local_step)
                    == (t.epoch_num, t.global_step, t.local_step)
                )

        run([Both()], steps=2, max_epoch=2)
        assert seen == [True] * 4

    def test_in_enable_callback_if_predicate(self):
        """A predicate of EnableCallbackIf reads the counters on the wrapper it is given."""
        cb = CountersSeen()
        run([EnableCallbackIf(cb, lambda self: self.global_step % 2 == 0)], steps=3, max_epoch=2)
        assert cb.steps == [(1, 1, 2), (2, 0, 4), (2, 2, 6)]

    def test_wrapped_callback_reads_them(self):
        """A callback wrapped by PeriodicCallback is set up too, so it reads the counters."""
        cb = CountersSeen()
        run([PeriodicCallback(cb, every_k_epochs=2)], steps=2, max_epoch=2)
        assert cb.epochs == [(2, 4)]

    def test_read_only(self):
        """The counters cannot be assigned: they belong to the trainer."""
        cb = CountersSeen()
        for name in ("epoch_num", "global_step", "local_step"):
            with pytest.raises(AttributeError):
                setattr(cb, name, 3)

    def test_fail(self):
        """Read before a trainer drives the callback: a clear error."""
        with pytest.raises(AttributeError, match=r"CountersSeen.global_step reads the trainer"):
            _ = CountersSeen().global_step

    def test_hasattr_before_setup(self):
        """``hasattr`` is False before setup, as for any missing attribute."""
        assert not hasattr(CountersSeen(), "epoch_num")
