"""MovingAverageSummary, MergeAllSummaries and SimpleMovingAverage in a real loop."""

import logging

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    MergeAllSummaries,
    MovingAverageSummary,
    SimpleMovingAverage,
)
from towerkit.callbacks._summaries import summary_due, window_mean
from towerkit.towers import MOVING_SUMMARY_OPS_KEY, TowerContext, add_moving_summary
from towerkit.towers.compat import tf1


def stream_model():
    """`loss` takes the values 1, 2, 3, ... in successive session calls; the step sums them."""
    ds = tf.data.Dataset.range(1, 1000).map(lambda v: tf.cast(v, tf.float32))
    loss = tf.identity(tf1.data.make_one_shot_iterator(ds).get_next(), name="loss")
    total = tf1.get_variable("total", initializer=0.0, trainable=False)
    return loss, tf1.assign_add(total, loss).op


class Probe(Callback):
    """Reads tensors in after_train (the loop closes its session afterwards)."""

    _chief_only = False

    def __init__(self, *tensors):
        self.tensors = tensors
        self.values = None

    def _after_train(self):
        self.values = self.trainer.sess.run(list(self.tensors))


def ema(values, decay=0.95):
    avg = values[0]
    for v in values[1:]:
        avg = avg - (avg - v) * (1 - decay)
    return avg


class TestMovingAverageSummary:
    """The EMA update ops run once per step."""

    def model(self):
        loss, train = stream_model()
        with TowerContext("", is_training=True):
            add_moving_summary(loss)
        average = next(v for v in tf1.global_variables() if v.op.name == "EMA/loss/average")
        return train, average

    def test_hooked(self, graph):
        """By default the updates are fetched with each step's call."""
        train, average = self.model()
        probe = Probe(average)
        cb = MovingAverageSummary()
        t = LoopTrainer(graph, train, [cb, probe], steps_per_epoch=3, max_epoch=2).train()
        assert probe.values[0] == pytest.approx(ema([1.0, 2, 3, 4, 5, 6]))
        assert cb in t.hooked_sess._before

    def test_attached_to_train_op(self, graph):
        """With train_op the updates run with the training op, without a hook."""
        train, average = self.model()
        probe = Probe(average)
        cb = MovingAverageSummary(train_op=train.name)
        t = LoopTrainer(graph, train, [cb, probe], steps_per_epoch=2, max_epoch=2).train()
        assert probe.values[0] == pytest.approx(ema([1.0, 2, 3, 4]))
        assert not cb.has_hook("_before_run")
        assert cb not in t.hooked_sess._before

    def test_empty(self, graph, caplog):
        """An empty collection costs nothing and is noted at debug level only (a default callback)."""
        _, train = stream_model()
        cb = MovingAverageSummary(collection="nothing")
        with caplog.at_level(logging.DEBUG, logger="towerkit.callbacks"):
            t = LoopTrainer(graph, train, [cb], max_epoch=1).train()
        (record,) = [r for r in caplog.records if "collection 'nothing' is empty" in r.getMessage()]
        assert record.levelno == logging.DEBUG
        assert not t.hooked_sess._hooked
        assert MOVING_SUMMARY_OPS_KEY == "MOVING_SUMMARY_OPS"

    def test_fail(self):
        """Arguments are checked at construction."""
        with pytest.raises(TypeError, match=r"'collection' must be a collection name; got int"):
            MovingAverageSummary(collection=1)
        with pytest.raises(
            TypeError, match=r"'train_op' must be an op, a tensor, an op name or None; got float"
        ):
            MovingAverageSummary(train_op=1.0)


class TestMergeAllSummaries:
    """Summaries reach the monitors once per epoch, plus every period steps."""

    def test_last_step_of_each_epoch(self, graph):
        """By default the summary comes with the last step's call of each epoch."""
        loss, train = stream_model()
        tf1.summary.scalar("cost", loss)
        t = LoopTrainer(graph, train, [MergeAllSummaries()], steps_per_epoch=3, max_epoch=2).train()
        assert t.monitors.get_history("cost") == [(3, 3.0), (6, 6.0)]

    def test_period(self, graph):
        """period adds the calls that bring the global step to its multiples."""
        loss, train = stream_model()
        tf1.summary.scalar("cost", loss)
        t = LoopTrainer(
            graph, train, [MergeAllSummaries(period=2)], steps_per_epoch=3, max_epoch=2
        ).train()
        assert t.monitors.get_history("cost") == [(2, 2.0), (3, 3.0), (4, 4.0), (6, 6.0)]

    def test_run_alone(self, graph):
        """run_alone evaluates the summaries alone after each epoch and every period steps."""
        steps = tf1.get_variable("steps", initializer=0.0, trainable=False)
        tf1.summary.scalar("progress", steps)
        train = tf1.assign_add(steps, 1.0).op
        cb = MergeAllSummaries(period=2, run_alone=True)
        t = LoopTrainer(graph, train, [cb], steps_per_epoch=3, max_epoch=2).train()
        assert t.monitors.get_history("progress") == [
            (2, 2.0),
            (3, 3.0),
            (4, 4.0),
            (6, 6.0),
            (6, 6.0),
        ]
        assert cb not in t.hooked_sess._before

    def test_key(self, graph):
        """key picks the summary collection."""
        loss, train = stream_model()
        tf1.summary.scalar("cost", loss)
        tf1.summary.scalar("twice", loss * 2, collections=["mine"])
        t = LoopTrainer(
            graph, train, [MergeAllSummaries(key="mine")], steps_per_epoch=2, max_epoch=1
        ).train()
        assert t.monitors.stat_names == ["twice"]

    def test_no_summaries(self, graph, caplog):
        """Without summaries nothing is fetched; it is noted at debug level only (a default callback)."""
        _, train = stream_model()
        cb = MergeAllSummaries()
        with caplog.at_level(logging.DEBUG, logger="towerkit.callbacks"):
            t = LoopTrainer(
                graph, train, [cb, MergeAllSummaries(run_alone=True)], max_epoch=1
            ).train()
        notes = [r for r in caplog.records if "no summary" in r.getMessage()]
        assert notes
        assert {r.levelno for r in notes} == {logging.DEBUG}
        assert not t.hooked_sess._hooked

    def test_fail(self):
        """Arguments are checked when the callback is made."""
        with pytest.raises(
            ValueError, match=r"'period' must be >= 0 \(0: once per epoch only\); got -1"
        ):
            MergeAllSummaries(period=-1)
        with pytest.raises(TypeError, match=r"'period' must be an int \(steps\); got str 'one'"):
            MergeAllSummaries(period="one")
        with pytest.raises(TypeError, match=r"'key' must be a collection name or None; got int"):
            MergeAllSummaries(key=1)

    @given(st.integers(1, 8), st.integers(1, 5), st.integers(0, 6))
    def test_summary_due(self, steps_per_epoch, epochs, period):
        """Due calls are the epochs' last steps and the multiples of period."""
        due = {
            gs + 1
            for gs in range(steps_per_epoch * epochs)
            if summary_due(gs % steps_per_epoch, steps_per_epoch, gs + 1, period)
        }
        want = {k for k in range(1, steps_per_epoch * epochs + 1) if k % steps_per_epoch == 0}
        if period:
            want |= {k for k in range(1, steps_per_epoch * epochs + 1) if k % period == 0}
        assert due == want


class TestSimpleMovingAverage:
    """The mean of the last window_size values goes to the monitors on trigger."""

    def test_values(self, graph):
        """After each epoch, the mean over the window (or over all steps so far)."""
        _, train = stream_model()
        cb = SimpleMovingAverage("loss", window_size=4)
        t = LoopTrainer(graph, train, [cb], steps_per_epoch=3, max_epoch=2).train()
        assert t.monitors.get_history("loss/SMA") == [(3, 2.0), (6, 4.5)]

    def test_fail(self, graph):
        """Bad windows and non-scalar tensors are refused."""
        with pytest.raises(ValueError, match=r"'window_size' must be >= 1 \(steps\); got 0"):
            SimpleMovingAverage("a", 0)
        with pytest.raises(
            TypeError, match=r"'window_size' must be an int \(steps\); got float 2\.5"
        ):
            SimpleMovingAverage("a", 2.5)
        with pytest.raises(ValueError, match=r"'tensors' is empty"):
            SimpleMovingAverage([], 2)
        _, train = stream_model()
        tf.zeros([3], name="vec")
        with pytest.raises(ValueError, match=r"the tensors must be scalars; got vec:0 \(3,\)"):
            LoopTrainer(graph, train, [SimpleMovingAverage(["loss", "vec"], 2)]).train()

    @given(
        st.lists(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2), min_size=1, max_size=30),
        st.integers(1, 9),
    )
    def test_ring_buffer(self, rows, window):
        """The callback's window agrees with window_mean over the values seen."""
        cb = SimpleMovingAverage(["a", "b"], window)
        for r in rows:
            cb._after_run(
                None, tf1.train.SessionRunValues(results=r, options=None, run_metadata=None)
            )
        np.testing.assert_allclose(cb.averages(), window_mean(rows, window), atol=1e-9)


class TestMovingAverageRead:
    """The summary of a moving average shows the average after the update of its own call."""

    @pytest.mark.parametrize("attach", [False, True])
    def test_summary_after_update(self, graph, attach):
        """Over many epochs each epoch's summary equals the EMA of every value so far."""
        loss, train = stream_model()
        with TowerContext("", is_training=True):
            add_moving_summary(loss, decay=0.5)
        cbs = [MovingAverageSummary(train_op=train.name if attach else None), MergeAllSummaries()]
        t = LoopTrainer(graph, train, cbs, steps_per_epoch=2, max_epoch=60).train()
        history = t.monitors.get_history("loss")
        assert [s for s, _ in history] == list(range(2, 121, 2))
        for step, value in history:
            expected = ema([float(v) for v in range(1, step + 1)], decay=0.5)
            assert value == pytest.approx(expected, rel=1e-6), step  # one step behind: off by 0.5

    def test_summary_depends_on_update(self, graph):
        """In the graph, the summary's value is the update's output."""
        loss, _ = stream_model()
        with TowerContext("", is_training=True):
            [update] = add_moving_summary(loss)
        [summary] = [op for op in graph.get_operations() if op.type == "ScalarSummary"]
        assert summary.inputs[1] is update
