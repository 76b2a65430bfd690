"""Hyper-parameters and their setters in a real training loop."""

import logging

import pytest
import tensorflow as tf
from callbacks_strategies import reference_in_effect, schedule_points
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    CallbackError,
    GraphVarParam,
    HumanHyperParamSetter,
    HyperParam,
    HyperParamSetter,
    HyperParamSetterWithFunc,
    Monitors,
    ObjAttrParam,
    OnSchedule,
    PiecewiseSchedule,
    ScheduledHyperParamSetter,
    StatMonitorParamSetter,
    StatMonitorRule,
)
from towerkit.towers.compat import tf1

SMALL = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class SetGlobalStep:
    """A session init that sets the global step, as a restored checkpoint would."""

    def __init__(self, step):
        self.step = step

    def init(self, sess):
        tf1.train.get_global_step(sess.graph).load(self.step, sess)


class LrLog(Callback):
    """Records (epoch_num, global_step, lr) after every step and every epoch."""

    def __init__(self, every_step=False):
        self.seen = []
        self.every_step = every_step

    def _setup_graph(self):
        (var,) = [v for v in tf1.global_variables() if v.op.name == "learning_rate"]
        self.lr = var.read_value()

    def _log(self):
        value = float(self.trainer.sess.run(self.lr))
        self.seen.append((self.trainer.epoch_num, self.trainer.global_step, value))

    def _before_train(self):
        self._log()

    def _trigger_step(self):
        if self.every_step:
            self._log()

    def _trigger_epoch(self):
        self._log()

    def has_hook(self, method):
        if method == "_trigger_step":
            return self.every_step
        return super().has_hook(method)


def train(
    callbacks,
    *,
    steps=2,
    max_epoch=3,
    starting=1,
    start_gs=0,
    lr=1.0,
    monitors=None,
    logdir=None,
    count=None,
):
    g = tf.Graph()
    with g.as_default():
        lr_var = tf1.get_variable("learning_rate", initializer=lr, trainable=False)
        w = tf1.get_variable("w", initializer=0.0)
        train_op = tf1.assign_add(w, lr_var)
        if count is not None:
            tf1.get_variable("count", initializer=count, trainable=False)
        return LoopTrainer(
            g,
            train_op,
            callbacks,
            monitors,
            steps_per_epoch=steps,
            max_epoch=max_epoch,
            starting_epoch=starting,
            logdir=logdir,
            session_init=SetGlobalStep(start_gs) if start_gs else None,
        ).train()


class TestGraphVarParam:
    """A graph variable read and set through one assign op."""

    def test_one_assign_op(self):
        """Setting many times runs the op built in setup_graph: the finalized graph never grows."""
        setter = ScheduledHyperParamSetter("learning_rate", [(e, 0.1 * e) for e in range(1, 6)])
        trainer = train([setter], max_epoch=5)
        ops = [
            op.name
            for op in trainer.graph.get_operations()
            if op.type in ("Assign", "AssignVariableOp")
        ]
        assert sum("set_value" in n for n in ops) == 1
        assert trainer.graph.finalized

    def test_fail(self):
        """A missing variable names the variables that exist; a wrong shape names both shapes."""
        with pytest.raises(
            ValueError,
            match=r"no global variable named 'lr' .* \['global_step', 'learning_rate', 'w'\]",
        ):
            train([ScheduledHyperParamSetter("lr", [(1, 0.1)])])
        with pytest.raises(
            ValueError, match=r"variable 'learning_rate' has shape \(\); expected \(2,\)"
        ):
            train(
                [ScheduledHyperParamSetter(GraphVarParam("learning_rate", shape=(2,)), [(1, 0.1)])]
            )
        with pytest.raises(TypeError, match="'name' must be a non-empty variable name"):
            GraphVarParam("")
        with pytest.raises(CallbackError, match="used before setup_graph"):
            GraphVarParam("learning_rate").get_value()

    def test_names(self):
        """':0' is dropped from the readable name."""
        assert GraphVarParam("learning_rate:0").readable_name == "learning_rate"
        assert repr(GraphVarParam("lr")) == "GraphVarParam('lr', shape=())"


class TestScheduledHyperParamSetter:
    """Scheduled values are set after the scheduled epochs (or steps), as documented."""

    def test_epochs(self):
        """(ep, v): v is in effect from the end of epoch ep; ep == 0 means from the start."""
        log = LrLog()
        mons = Monitors([])
        train(
            [ScheduledHyperParamSetter("learning_rate", [(0, 0.5), (2, 0.1)]), log],
            max_epoch=3,
            monitors=mons,
        )
        assert log.seen == [
            (0, 0, 0.5),
            (1, 2, 0.5),
            (2, 4, pytest.approx(0.1)),
            (3, 6, pytest.approx(0.1)),
        ]
        # put when set, and at the start of each epoch (but the first: before_train put it)
        assert mons.get_history("learning_rate") == [
            (0, 0.5),
            (2, 0.5),
            (4, pytest.approx(0.1)),
            (4, pytest.approx(0.1)),
        ]

    def test_linear(self):
        """With interp='linear', every epoch between points gets the interpolation, none after."""
        log = LrLog()
        train(
            [
                ScheduledHyperParamSetter("learning_rate", [(1, 1.0), (3, 3.0)], interp="linear"),
                log,
            ],
            max_epoch=5,
        )
        assert [v for _, _, v in log.seen] == pytest.approx([1.0, 1.0, 2.0, 3.0, 3.0, 3.0])

    def test_step_based(self):
        """step_based schedules are checked after every step, against the global step."""
        log = LrLog(every_step=True)
        setter = ScheduledHyperParamSetter("learning_rate", [(3, 0.3), (4, 0.4)], step_based=True)
        assert setter.has_hook("_trigger_step")
        assert not setter.has_hook("_trigger_epoch")
        train([setter, log], steps=2, max_epoch=3)
        by_step = {gs: v for _, gs, v in log.seen}
        assert by_step == pytest.approx({0: 1.0, 1: 1.0, 2: 1.0, 3: 0.3, 4: 0.4, 5: 0.4, 6: 0.4})

    def test_epoch_based_adds_no_step_work(self):
        """An epoch schedule does nothing per step."""
        setter = ScheduledHyperParamSetter("learning_rate", [(1, 0.3)])
        assert not setter.has_hook("_trigger_step")
        assert not setter.has_hook("_before_run")

    @SMALL
    @given(schedule_points(max_point=6), st.sampled_from([None, "linear"]), st.integers(1, 5))
    def test_resume_in_the_middle(self, points, interp, starting):
        """On a resumed run, before_train sets the value in effect at the restored point."""
        log = LrLog()
        steps = 2
        train(
            [ScheduledHyperParamSetter("learning_rate", points, interp=interp), log],
            steps=steps,
            starting=starting,
            max_epoch=starting,
            start_gs=(starting - 1) * steps,
            lr=-7.0,
        )
        want = reference_in_effect(points, interp, starting - 1)
        assert log.seen[0][2] == pytest.approx(-7.0 if want is None else want, rel=1e-6)

    def test_resumed_sets_without_putting(self):
        """A run starting after epoch 1 sets the value in effect without putting it in before_train.

        A checkpoint saved before the setter acted (ModelSaver listed first) holds the
        older value. The start of the first epoch puts the value in effect, at the same
        step as the uninterrupted run put it (the change at the end of epoch 2).
        """
        log = LrLog()
        mons = Monitors([])
        setter = ScheduledHyperParamSetter("learning_rate", [(0, 0.5), (2, 0.25), (3, 0.125)])
        train([setter, log], starting=3, max_epoch=3, start_gs=4, lr=0.5, monitors=mons)
        assert [v for _, _, v in log.seen] == [0.25, 0.125]
        assert mons.get_history("learning_rate") == [(4, 0.25), (6, 0.125)]

    def test_without_set_at_beginning(self):
        """With set_at_beginning=False a resumed run keeps the restored value until a scheduled point."""
        log = LrLog()
        train(
            [
                ScheduledHyperParamSetter(
                    "learning_rate", [(1, 0.5), (4, 0.25)], set_at_beginning=False
                ),
                log,
            ],
            starting=3,
            max_epoch=4,
            start_gs=4,
            lr=0.9,
        )
        assert [v for _, _, v in log.seen] == pytest.approx([0.9, 0.9, 0.25])

    def test_properties(self):
        """The schedule and its trigger record are read-only properties."""
        s = ScheduledHyperParamSetter(
            "learning_rate", [(1, 0.5)], interp="linear", set_at_beginning=False
        )
        assert s.schedule == PiecewiseSchedule(points=[(1, 0.5)], interp="linear")
        assert s.trigger_record == OnSchedule(schedule=s.schedule, set_at_beginning=False)
        with pytest.raises(AttributeError):
            s.schedule = None
        assert ScheduledHyperParamSetter(
            "lr", PiecewiseSchedule(points=[(3, 1.0)], unit="step")
        ).step_based

    def test_fail(self):
        """Bad schedules fail at construction, naming the entries at fault."""
        with pytest.raises(
            ValueError, match=r"entries out of order: #1 \(30, 0.01\) after #0 \(60, 0.001\)"
        ):
            ScheduledHyperParamSetter("learning_rate", [(60, 1e-3), (30, 1e-2)])
        with pytest.raises(
            ValueError, match=r"'interp' must be one of \(None, 'linear'\); got 'Linear'"
        ):
            ScheduledHyperParamSetter("learning_rate", [(1, 1.0)], interp="Linear")
        with pytest.raises(ValueError, match="the schedule record says interp=None"):
            ScheduledHyperParamSetter("lr", PiecewiseSchedule(points=[(1, 1.0)]), interp="linear")
        with pytest.raises(TypeError, match="'param' must be a HyperParam or a variable name"):
            ScheduledHyperParamSetter(3, [(1, 1.0)])


class TestStartInTheMiddle:
    """A run that starts past a scheduled point, off the schedule, says so (as tensorpack does)."""

    class Holder:
        def __init__(self):
            self.param = 1.0
            self.history = []

        def __setattr__(self, name, value):
            if name == "param":
                self.__dict__.setdefault("history", []).append(value)
            super().__setattr__(name, value)

    def _run(self, schedule, starting, max_epoch, **kw):
        holder = self.Holder()
        setter = ScheduledHyperParamSetter(ObjAttrParam(holder, "param"), schedule, **kw)
        train([setter], steps=1, starting=starting, max_epoch=max_epoch, start_gs=starting - 1)
        return holder.history

    def test_warns(self, caplog):
        """Starting at epoch 20 of [(10, 0.3), (20, 0.4), ...] with the value 1.0: a warning, then 0.3."""
        with caplog.at_level(logging.WARNING, logger="towerkit.callbacks"):
            history = self._run([(10, 0.3), (20, 0.4), (30, 0.5)], starting=20, max_epoch=21)
        assert history == [0.3, 0.4]
        (record,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert record.name == "towerkit.callbacks"
        assert record.getMessage() == (
            "ScheduledHyperParamSetter(param): the run starts in the middle of the schedule, "
            "at epoch 19: 'param' should be 0.3 (since epoch 10), but it is 1.0; setting it to 0.3"
        )

    def test_warns_without_setting(self, caplog):
        """With set_at_beginning=False the value is left, and the warning says what to check."""
        with caplog.at_level(logging.WARNING, logger="towerkit.callbacks"):
            history = self._run(
                [(10, 0.3), (20, 0.4)], starting=15, max_epoch=16, set_at_beginning=False
            )
        assert history == []
        assert "but it is 1.0; leaving it (set_at_beginning=False)" in caplog.text

    def test_step_based(self, caplog):
        """Step schedules count global steps."""
        with caplog.at_level(logging.WARNING, logger="towerkit.callbacks"):
            self._run([(3, 0.5)], starting=6, max_epoch=6, step_based=True)
        assert "at global step 5: 'param' should be 0.5 (since global step 3)" in caplog.text

    @pytest.mark.parametrize(
        ("schedule", "starting", "interp"),
        [
            ([(10, 0.3), (20, 1.0), (30, 1.5)], 21, None),  # the start is a scheduled point
            ([(10, 0.3), (30, 1.5)], 21, "linear"),  # between points: interpolated, set
            ([(10, 1.0), (30, 1.5)], 21, None),  # off the points, but the value is right
            ([(10, 0.3)], 5, None),  # before the schedule
        ],
    )
    def test_no_warning(self, caplog, schedule, starting, interp):
        """No warning where nothing is off the schedule."""
        with caplog.at_level(logging.WARNING, logger="towerkit.callbacks"):
            self._run(schedule, starting=starting, max_epoch=starting + 1, interp=interp)
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []

    def test_resumed_float32(self, caplog):
        """A restored float32 value equal to the schedule's (in float32) is not off the schedule."""
        mons = Monitors([])
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            train(
                [ScheduledHyperParamSetter("learning_rate", [(0, 0.1), (2, 0.003)])],
                starting=4,
                max_epoch=4,
                start_gs=6,
                lr=0.003,
                monitors=mons,
            )
        assert caplog.records == []
        # nothing set; the value in effect is put when the epoch starts
        assert mons.get_history("learning_rate") == [(6, pytest.approx(0.003))]


class TestValuesInTheParamDtype:
    """Values are compared, checked and printed as the parameter holds them."""

    def test_same_float32_not_set_again(self, caplog):
        """0.003 in a float32 variable that holds float32(0.003) is no change, logged nowhere.

        Only the start of each epoch puts the value in effect, and the real change.
        """
        mons = Monitors([])
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            train(
                [ScheduledHyperParamSetter("learning_rate", [(0, 0.003), (1, 0.003), (2, 7e-4)])],
                lr=0.003,
                monitors=mons,
            )
        assert [r.getMessage() for r in caplog.records] == [
            "ScheduledHyperParamSetter: learning_rate changes from 0.003 to 0.0007 at global step 4"
        ]
        history = mons.get_history("learning_rate")
        assert [step for step, _ in history] == [0, 2, 4, 4]
        assert [v for _, v in history] == pytest.approx([0.003, 0.003, 7e-4, 7e-4])

    def test_log_as_written(self, caplog):
        """The log shows float32 values as written: 0.003, not 0.003000000026077032."""
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            train(
                [ScheduledHyperParamSetter("learning_rate", [(1, 0.0007), (3, 0.0001)], "linear")],
                lr=0.003,
            )
        assert [r.getMessage() for r in caplog.records] == [
            "ScheduledHyperParamSetter: learning_rate changes from 0.003 to 0.0007 at global step 2",
            "ScheduledHyperParamSetter: learning_rate changes from 0.0007 to 0.0004 at global step 4",
            "ScheduledHyperParamSetter: learning_rate changes from 0.0004 to 0.0001 at global step 6",
        ]

    def test_stat_monitor_log_as_written(self, caplog):
        """StatMonitorParamSetter prints old and new values the same way."""
        setter = StatMonitorParamSetter(
            "learning_rate", "val-error", lambda x: x * 0.5, threshold=0.0, last_k=1
        )
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            train([PutSeries([1.0, 1.0]), setter], max_epoch=2, lr=0.3)
        assert "learning_rate: 0.3 -> 0.15" in caplog.text
        assert "changes from 0.3 to 0.15 at global step 4" in caplog.text

    def test_integer_variable(self):
        """An int32 variable takes an integral schedule, linear too, and records what it holds."""
        mons = Monitors([])
        seen = []

        class ReadCount(Callback):
            def _setup_graph(self):
                (self.var,) = [v for v in tf1.global_variables() if v.op.name == "count"]

            def _trigger_epoch(self):
                seen.append(self.trainer.sess.run(self.var))

        setter = ScheduledHyperParamSetter("count", [(1, 2), (3, 6.0)], interp="linear")
        train([setter, ReadCount()], max_epoch=4, count=1, monitors=mons)
        assert seen == [2, 4, 6, 6]
        assert [v for _, v in mons.get_history("count")] == [1, 2, 2, 4, 4, 6, 6]

    def test_integer_variable_fail(self):
        """A schedule that would set a non-integer into an integer variable fails at setup, listing it."""
        # the message exactly (the real trainer adds a note about the traceback after it)
        with pytest.raises(ValueError) as info:
            train([ScheduledHyperParamSetter("count", [(0, 2), (1, 2.7), (3, 0.5)])], count=1)
        assert str(info.value) == (
            "ScheduledHyperParamSetter(count): 'count' holds int32 values, but the schedule "
            "sets values that are not integers: #1 (1, 2.7); #2 (3, 0.5)"
        )
        with pytest.raises(ValueError) as info:
            train([ScheduledHyperParamSetter("count", [(0, 1), (4, 3)], "linear")], count=1)
        assert str(info.value).endswith(
            "values that are not integers: between #0 (0, 1.0) and #1 (4, 3.0): 1.5 at 1"
        )

    def test_integer_variable_other_setters(self):
        """Other setters check each value before setting it: the variable is never set to a rounded one."""
        with pytest.raises(
            ValueError, match=r"'count' holds int32 values; 2.5 is not one \(it would be stored"
        ):
            train([HyperParamSetterWithFunc("count", lambda e, x: x + 1.5)], count=1)


class TestHyperParamSetter:
    """The base class and the function, file and object-attribute setters."""

    def test_abstract(self):
        """The base class alone cannot be used."""
        with pytest.raises(TypeError, match="must define _get_value_to_set"):
            HyperParamSetter("learning_rate")

    def test_with_func(self):
        """func gets the epochs finished and the old value."""
        calls = []

        def decay(e, x):
            calls.append((e, round(x, 6)))
            return x * 0.5 if e % 2 == 0 else x

        log = LrLog()
        train([HyperParamSetterWithFunc("learning_rate", decay), log], max_epoch=4)
        assert calls == [(1, 1.0), (2, 1.0), (3, 0.5), (4, 0.5)]
        assert [v for _, _, v in log.seen] == [1.0, 1.0, 0.5, 0.5, 0.25]

    def test_human(self, tmp_path):
        """The value paired with the parameter's name in the file is set; other names are ignored."""
        (tmp_path / "hyper.txt").write_text(
            "# tuned by hand\nmomentum: 0.9\n\nlearning_rate:0.125\n"
        )
        log = LrLog()
        setter = HumanHyperParamSetter("learning_rate")
        train([setter, log], max_epoch=1, logdir=tmp_path)
        assert setter.path == str(tmp_path / "hyper.txt")
        assert [v for _, _, v in log.seen] == [0.125, 0.125]

    def test_human_missing_file(self, tmp_path):
        """A missing file changes nothing."""
        log = LrLog()
        train(
            [HumanHyperParamSetter("learning_rate", str(tmp_path / "none.txt")), log], max_epoch=1
        )
        assert [v for _, _, v in log.seen] == [1.0, 1.0]

    def test_human_fail(self, tmp_path):
        """Malformed lines are all reported; no logdir for a relative name is an error."""
        (tmp_path / "hyper.txt").write_text("learning_rate=0.1\nok:1\nmomentum:fast\n")
        with pytest.raises(
            ValueError, match=r"wrong lines: line 1: 'learning_rate=0.1'; line 3: 'momentum:fast'"
        ):
            train([HumanHyperParamSetter("learning_rate")], max_epoch=1, logdir=tmp_path)
        with pytest.raises(
            CallbackError,
            match=r"HumanHyperParamSetter\(learning_rate\) writes files and needs a directory",
        ):
            train([HumanHyperParamSetter("learning_rate")], max_epoch=1)

    def test_obj_attr(self):
        """An attribute of an object is a parameter too, and its changes reach the monitors."""

        class Holder:
            rate = 2.0

        h = Holder()
        mons = Monitors([])
        train(
            [ScheduledHyperParamSetter(ObjAttrParam(h, "rate", "my_rate"), [(1, 3.0), (2, 3.0)])],
            max_epoch=2,
            monitors=mons,
        )
        assert h.rate == 3.0
        assert mons.get_history("my_rate") == [(0, 2.0), (2, 3.0), (2, 3.0)]
        with pytest.raises(ValueError, match="Holder object has no attribute 'speed'"):
            ObjAttrParam(h, "speed")
        assert isinstance(ObjAttrParam(h, "rate"), HyperParam)


class PutSeries(Callback):
    """Puts the next value of a series as 'val-error' each epoch."""

    def __init__(self, series):
        self.series = list(series)

    def _trigger(self):
        self.trainer.monitors.put_scalar("val-error", self.series[self.trainer.epoch_num - 1])


class TestStatMonitorParamSetter:
    """The parameter changes when the statistic stops improving, then the history restarts."""

    def test_decays_when_flat(self, caplog):
        """A flat statistic halves the rate after last_k + 1 observations, then again k + 1 later."""
        log = LrLog()
        setter = StatMonitorParamSetter(
            "learning_rate", "val-error", lambda x: x * 0.5, threshold=0.01, last_k=2
        )
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            train(
                [PutSeries([5.0, 4.0, 3.995, 3.99, 3.99, 3.99, 3.99, 3.99]), setter, log],
                max_epoch=8,
            )
        rates = [v for _, _, v in log.seen[1:]]
        # observations: 5, 4, 3.995, 3.99 -> change at epoch 4 (window 4, 3.995, 3.99); restart; change at 7
        assert rates == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]
        assert "has not improved" in caplog.text

    def test_reverse(self):
        """With reverse, a statistic that stops increasing triggers the change."""
        log = LrLog()
        setter = StatMonitorParamSetter(
            "learning_rate", "val-error", lambda x: x + 1, threshold=0.0, last_k=1, reverse=True
        )
        train([PutSeries([1.0, 2.0, 3.0, 2.0, 5.0]), setter, log], max_epoch=5)
        assert [v for _, _, v in log.seen[1:]] == [1.0, 1.0, 1.0, 2.0, 2.0]

    def test_missing_stat_waits(self, caplog):
        """Before the statistic exists, triggers change nothing and say why."""
        log = LrLog()
        with caplog.at_level(logging.WARNING, logger="towerkit.callbacks"):
            train(
                [StatMonitorParamSetter("learning_rate", "nope", lambda x: 0.0, 0.0, 1), log],
                max_epoch=2,
            )
        assert [v for _, _, v in log.seen] == [1.0, 1.0, 1.0]
        assert "statistic 'nope' not available yet" in caplog.text

    def test_fail(self):
        """Bad arguments are rejected at construction."""
        with pytest.raises(ValueError, match="'last_k' must be an int >= 1; got 0"):
            StatMonitorParamSetter("lr", "s", lambda x: x, 0.0, 0)
        with pytest.raises(ValueError, match="'threshold' must be a finite number >= 0; got -1"):
            StatMonitorParamSetter("lr", "s", lambda x: x, -1, 2)
        with pytest.raises(TypeError, match="'value_func' must be a callable"):
            StatMonitorParamSetter("lr", "s", 0.5, 0.0, 2)
        setter = StatMonitorParamSetter("lr", "s", lambda x: x, 0, 2, reverse=True)
        assert setter.state.history == ()
        assert setter.rule == StatMonitorRule(threshold=0.0, last_k=2, reverse=True)
