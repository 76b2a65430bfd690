"""EarlyStopping: the pure decision (property-tested) and the callback in a real loop."""

import logging
import math

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    EarlyStopping,
    EarlyStoppingState,
    JSONWriter,
    MinSaver,
    ModelSaver,
    Monitors,
    advance_early_stopping,
    read_stats_file,
    should_stop,
)
from towerkit.towers.compat import tf1

values = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
"""Finite observations."""

observations = st.one_of(values, st.sampled_from([math.nan, math.inf, -math.inf]))
"""Observations, diverged ones included."""


def reference_wait(history):
    """Observations since the first minimum among the finite values (all of them if none)."""
    finite = [(v, i) for i, v in enumerate(history) if math.isfinite(v)]
    if not finite:
        return len(history)
    best = min(v for v, _ in finite)
    first = min(i for v, i in finite if v == best)
    return len(history) - 1 - first


class TestShouldStop:
    """The decision over a history, as the fold of `advance_early_stopping`."""

    @given(st.lists(observations, max_size=30), st.integers(0, 10))
    def test_matches_reference_without_delta(self, history, patience):
        """With min_delta=0: stop once `patience` values (at least one) have come since the first best."""
        want = bool(history) and reference_wait(history) >= max(patience, 1)
        assert should_stop(history, patience=patience) == want

    @given(st.lists(observations, max_size=30), st.integers(0, 10), st.floats(0, 10))
    def test_max_mirrors_min(self, history, patience, delta):
        """'max' over a history decides as 'min' over its negation."""
        negated = [-v for v in history]
        assert should_stop(history, mode="max", patience=patience, min_delta=delta) == (
            should_stop(negated, mode="min", patience=patience, min_delta=delta)
        )

    @given(values, st.integers(1, 20), st.integers(1, 10), st.floats(0, 1))
    def test_steady_improvement_never_stops(self, start, n, patience, delta):
        """Values each better than the last by more than min_delta never stop training."""
        history = [start - i * (delta + 1.0) for i in range(n)]
        assert not should_stop(history, patience=patience, min_delta=delta)

    @given(st.lists(values, min_size=1, max_size=20), st.integers(0, 10), st.floats(0, 1))
    def test_a_larger_delta_stops_no_later(self, history, patience, delta):
        """Asking for more improvement never delays the stop."""
        if should_stop(history, patience=patience, min_delta=0.0):
            assert should_stop(history, patience=patience, min_delta=delta)

    @given(st.lists(observations, min_size=1, max_size=20), st.integers(1, 5))
    def test_repeated_step_is_one_observation(self, history, patience):
        """A value read again at the same step changes nothing."""
        state = EarlyStoppingState()
        for step, v in enumerate(history):
            state, _ = advance_early_stopping(state, step, v, patience=patience)
            again, stop = advance_early_stopping(state, step, v, patience=patience)
            assert again == state
            assert not stop

    def test_examples(self):
        """A plateau of `patience` values stops; a NaN never becomes the best."""
        assert should_stop([0.5, 0.4, 0.4, 0.4], patience=2)
        assert not should_stop([0.5, 0.4, 0.4], patience=2)
        assert should_stop([math.nan, math.nan], patience=2)
        state = EarlyStoppingState()
        for step, v in enumerate([0.5, math.nan, 0.6]):
            state, _ = advance_early_stopping(state, step, v, patience=5)
        assert (state.best, state.best_step, state.wait) == (0.5, 0, 2)

    def test_repr(self):
        """The state prints its fields."""
        assert repr(EarlyStoppingState(best=0.5, best_step=3, wait=1, last_step=4)) == (
            "EarlyStoppingState(best=0.5, best_step=3, wait=1, last_step=4)"
        )

    def test_fail(self):
        """Every argument out of range is named."""
        with pytest.raises(
            ValueError,
            match=r"'mode' must be 'min' or 'max'; got 'auto'; 'patience' must be an int >= 0 "
            r"\(epochs\); got -1; 'min_delta' must be a finite number >= 0; got nan",
        ):
            should_stop([1.0], mode="auto", patience=-1, min_delta=math.nan)
        with pytest.raises(TypeError, match="'monitor' must be a statistic's name"):
            EarlyStopping("")
        with pytest.raises(ValueError, match="'patience' must be an int >= 0"):
            EarlyStopping("val", patience=1.5)


class PutSeries(Callback):
    """Puts the next value of a series as 'val' each epoch."""

    def __init__(self, series):
        self.series = list(series)

    def _trigger(self):
        self.trainer.monitors.put_scalar("val", self.series[self.trainer.epoch_num - 1])


def run(callbacks, max_epoch, logdir=None):
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=0.0)
        return LoopTrainer(
            g,
            tf1.assign_add(w, 1.0),
            callbacks,
            Monitors([]),
            steps_per_epoch=2,
            max_epoch=max_epoch,
            logdir=logdir,
        ).train()


class TestEarlyStopping:
    """The callback stops the loop and names the best epoch."""

    def test_stops_after_patience(self):
        """Best at epoch 2; three epochs without improvement: training ends after epoch 5."""
        stop = EarlyStopping("val", mode="min", patience=3)
        t = run([PutSeries([0.5, 0.3, 0.31, 0.3, 0.4, 0.1, 0.1]), stop], max_epoch=7)
        assert t.epoch_num == 5
        assert (stop.best, stop.best_epoch, stop.stopped_epoch) == (0.3, 2, 5)
        assert stop.stop_message() == (
            "EarlyStopping('val', mode='min', patience=3): val has not improved for 3 epochs; "
            "the best, 0.3, was at epoch 2"
        )

    def test_stopping_epoch_stays_whole(self, tmp_path):
        """The callbacks after it in the stopping epoch still run: the statistics of epoch 3
        reach the monitors and stats.json, and the saver after it saves that epoch."""
        seen = []

        class After(Callback):
            def _trigger_epoch(self):
                seen.append(self.epoch_num)

        stop = EarlyStopping("val", patience=1)
        g = tf.Graph()
        with g.as_default():
            w = tf1.get_variable("w", initializer=0.0)
            mons = Monitors([JSONWriter()])
            t = LoopTrainer(
                g,
                tf1.assign_add(w, 1.0),
                [PutSeries([0.5, 0.2, 0.3, 0.1]), stop, After(), ModelSaver()],
                mons,
                steps_per_epoch=2,
                max_epoch=4,
                logdir=str(tmp_path),
            ).train()
        assert t.epoch_num == stop.stopped_epoch == 3
        assert seen == [1, 2, 3]
        assert [r["epoch_num"] for r in read_stats_file(str(tmp_path / "stats.json"))] == [1, 2, 3]
        assert (tmp_path / "model-6.index").is_file()

    def test_max_and_delta(self):
        """With 'max' and min_delta, small gains do not count."""
        stop = EarlyStopping("val", mode="max", patience=2, min_delta=0.05)
        t = run([PutSeries([0.5, 0.52, 0.54, 0.6, 0.9]), stop], max_epoch=5)
        assert t.epoch_num == 3
        assert stop.best_epoch == 1

    def test_runs_to_the_end_while_improving(self):
        """A statistic that keeps improving never stops the run."""
        stop = EarlyStopping("val", patience=1)
        t = run([PutSeries([0.5, 0.4, 0.3]), stop], max_epoch=3)
        assert t.epoch_num == 3
        assert stop.stopped_epoch is None

    def test_missing_stat_warns(self, caplog):
        """A statistic never put is a warning naming those that were; nothing stops."""
        stop = EarlyStopping("val_loss", patience=0)
        with caplog.at_level(logging.WARNING, logger="towerkit.callbacks"):
            t = run([PutSeries([0.5, 0.4]), stop], max_epoch=2)
        assert t.epoch_num == 2
        assert "nothing to decide on at epoch 1" in caplog.text
        assert "'val'" in caplog.text

    def test_names_the_min_saver_checkpoint(self, tmp_path):
        """With a MinSaver of the same statistic, the message names the copy of the best epoch."""
        saver = MinSaver("val")
        stop = EarlyStopping("val", patience=2)
        run(
            [PutSeries([0.5, 0.2, 0.3, 0.3, 0.1]), ModelSaver(), saver, stop],
            max_epoch=5,
            logdir=str(tmp_path),
        )
        assert saver.best_epoch == stop.best_epoch == 2
        assert (
            f"the best, 0.2, was at epoch 2, kept in {tmp_path}/min-val.tfmodel"
            in stop.stop_message()
        )
        assert (tmp_path / "min-val.tfmodel.index").is_file()
