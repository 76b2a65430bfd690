"""ModelDesc, TrainConfig, AutoResumeTrainConfig, launch_train_with_config and the defaults."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from helpers import blobs, mlp_cost

from towerkit.callbacks import (
    Callback,
    LoopBounds,
    MergeAllSummaries,
    ModelSaver,
    MovingAverageSummary,
    ProgressBar,
    RunUpdateOps,
)
from towerkit.sessinit import DictRestore, get_all_checkpoints
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    DEFAULT_CALLBACKS,
    AutoResumeTrainConfig,
    InputSizeUnknownError,
    ModelDesc,
    ModelDescBase,
    NewSessionCreator,
    NumpyInput,
    SessionCreatorAdapter,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)


class Blobs(ModelDesc):
    """The helpers' MLP as a ModelDesc."""

    def __init__(self):
        self.opt_calls = 0

    def inputs(self):
        return [tf.TensorSpec([None, 32], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]

    def build_graph(self, x, y):
        return mlp_cost(x, y)

    def optimizer(self):
        self.opt_calls += 1
        lr = tf1.get_variable("learning_rate", initializer=0.1, trainable=False)
        return tf1.train.GradientDescentOptimizer(lr)


class Losses(Callback):
    """Keeps the cost of every step, and the global step seen at before_train."""

    def __init__(self):
        self.values = []
        self.start = None

    def _setup_graph(self):
        self.cost = self.graph.get_tensor_by_name("cost:0")

    def _before_train(self):
        self.start = (self.trainer.epoch_num, self.trainer.global_step)

    def _before_run(self, ctx):
        return self.cost

    def _after_run(self, ctx, values):
        self.values.append(float(values.results))


def data(n=256, batch=32):
    """Blobs as a NumpyInput (n/batch steps per pass)."""
    return NumpyInput(list(blobs(n)), batch_size=batch, seed=0)


class TestModelDesc:
    """ModelDesc describes the inputs, the cost and the optimizer."""

    def test_signature_and_optimizer(self, graph):
        """inputs() is validated and cached; optimizer() is called once."""
        m = Blobs()
        assert m.input_names == ["x", "y"]
        assert m.get_input_signature() is m.get_input_signature()
        assert m.get_optimizer() is m.get_optimizer()
        assert m.opt_calls == 1

    def test_fail(self):
        """Missing overrides and bad signatures are named."""

        class Empty(ModelDesc):
            pass

        with pytest.raises(TypeError, match=r"Empty must override inputs\(\)"):
            Empty().get_input_signature()
        with pytest.raises(TypeError, match=r"Empty must override build_graph\(\*inputs\)"):
            Empty().build_graph()
        with pytest.raises(TypeError, match=r"Empty must override optimizer\(\)"):
            Empty().get_optimizer()

        class Unnamed(ModelDesc):
            def inputs(self):
                return [tf.TensorSpec([None], tf.float32)]

        with pytest.raises(ValueError, match="needs a name"):
            Unnamed().get_input_signature()


class TestTrainConfig:
    """Every option is validated at construction."""

    def test_defaults(self):
        """The documented defaults."""
        c = TrainConfig()
        assert (c.starting_epoch, c.max_epoch, c.steps_per_epoch) == (1, 99999, None)
        assert c.callbacks == ()
        assert c.extra_callbacks is None
        assert c.monitors is None
        assert c.logdir is None
        assert c.logdir_action == "error"

    def test_a_validated_record(self):
        """The options live in one frozen `TrainSpec`; setting one builds a new spec."""
        c = TrainConfig(max_epoch=4, steps_per_epoch=6, steps_per_execution=3)
        first = c.spec
        assert first.max_epoch == 4
        assert c.loop_bounds() == LoopBounds(max_epoch=4, steps_per_epoch=6)
        c.max_epoch = 5
        assert (c.max_epoch, c.spec.max_epoch, first.max_epoch) == (5, 5, 4), "spec stays frozen"
        assert c.spec is c.spec, "built once after a change"
        sized = TrainConfig(max_epoch=2, steps_per_execution=3)
        assert sized.loop_bounds(input_size=9).steps_per_epoch == 9
        with pytest.raises(ValueError, match="must divide 'steps_per_epoch' 10"):
            sized.loop_bounds(input_size=10)

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"data": data(), "dataflow": [1]}, ValueError, "'dataflow' or 'data', not both"),
            (
                {"data": [1, 2]},
                TypeError,
                r"'data' must be an InputSource, a tf.data.Dataset or a function of no argument "
                r"building one; got list \(give an iterable of datapoints as 'dataflow'\)",
            ),
            ({"model": object()}, TypeError, "'model' must be a ModelDesc; got object"),
            (
                {"callbacks": [1]},
                TypeError,
                "'callbacks' must hold Callback instances; entries at fault: #0: int",
            ),
            ({"monitors": ["x"]}, TypeError, "'monitors' must hold Callback"),
            (
                {"session_creator": object()},
                TypeError,
                r"'session_creator' must have a create_session\(\)",
            ),
            (
                {"session_config": 1, "session_creator": 2},
                ValueError,
                "'session_creator' or 'session_config', not both",
            ),
            ({"session_init": 3}, TypeError, r"'session_init' must have an init\(sess\) method"),
            (
                {"starting_epoch": 0},
                ValueError,
                r"'starting_epoch' must be an int >= 1 \(1-based\); got 0",
            ),
            (
                {"starting_epoch": 5, "max_epoch": 2},
                ValueError,
                "'max_epoch' must be >= 'starting_epoch' - 1",
            ),
            (
                {"steps_per_epoch": -1},
                ValueError,
                r"'steps_per_epoch' must be an int >= 0 \(0: epochs of no step, an evaluation\); "
                "got -1",
            ),
            ({"logdir_action": "wipe"}, ValueError, "'logdir_action' must be one of"),
            ({"logdir": 3}, TypeError, "'logdir' must be a path or None; got int"),
            ({"nr_tower": 2}, TypeError, r"TrainConfig got unknown options \['nr_tower'\]"),
        ],
    )
    def test_fail(self, kwargs, error, match):
        """Each bad option is refused with the option named."""
        with pytest.raises(error, match=match):
            TrainConfig(**kwargs)

    @pytest.mark.parametrize(
        ("name", "value", "error", "match"),
        [
            ("session_init", 3, TypeError, r"'session_init' must have an init\(sess\) method"),
            ("model", object(), TypeError, "'model' must be a ModelDesc; got object"),
            ("logdir_action", "wipe", ValueError, "'logdir_action' must be one of"),
            ("steps_per_execution", 4, ValueError, "must divide 'steps_per_epoch' 6"),
        ],
    )
    def test_set_after_construction_fails_at_launch(self, graph, name, value, error, match):
        """A bad option set after construction is refused when the run launches, with the
        constructor's message."""
        config = TrainConfig(model=Blobs(), data=data(), steps_per_epoch=6, max_epoch=1)
        setattr(config, name, value)
        with pytest.raises(error, match=match):
            launch_train_with_config(config, SimpleTrainer())
        with pytest.raises(error, match=match):
            TrainConfig(**{"model": Blobs(), "steps_per_epoch": 6, name: value})

    def test_several_epoch_errors_at_once(self):
        """All loop-parameter errors are listed together."""
        with pytest.raises(ValueError, match=r"'starting_epoch'.*; 'steps_per_epoch'"):
            TrainConfig(starting_epoch=-1, steps_per_epoch=-1)

    def test_repr(self):
        """The repr shows the loop options and the logdir."""
        r = repr(TrainConfig(model=Blobs(), steps_per_epoch=3, logdir=None))
        assert (
            r
            == "TrainConfig(model=Blobs, steps_per_epoch=3, starting_epoch=1, max_epoch=99999, logdir=None)"
        )


def test_monitor_as_callback_in_config():
    """TrainConfig refuses a monitor among the callbacks at construction."""
    from towerkit.callbacks import JSONWriter

    with pytest.raises(TypeError, match=r"'extra_callbacks' holds monitors \(#0: JSONWriter\)"):
        TrainConfig(model=Blobs(), extra_callbacks=[JSONWriter()])


class TestLaunch:
    """launch_train_with_config trains a ModelDesc end to end."""

    def test_trains(self, graph, logdir):
        """The loss falls, steps_per_epoch comes from the input, checkpoints land in logdir."""
        losses = Losses()
        config = TrainConfig(
            model=Blobs(),
            data=data(),
            callbacks=[losses, ModelSaver()],
            monitors=[],
            max_epoch=3,
            logdir=logdir,
        )
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
        assert trainer.steps_per_epoch == 8
        assert trainer.global_step == 24
        assert np.mean(losses.values[-4:]) < 0.5 * np.mean(losses.values[:4])
        assert [s for _, s in get_all_checkpoints(str(logdir))] == [8, 16, 24]
        names = [type(cb).__name__ for cb in trainer.callbacks]
        assert names[:1] == ["InitializeInput"] or "Input" in names[0], "input callbacks come first"
        assert "ProgressBar" in names, "extra_callbacks default to DEFAULT_CALLBACKS()"

    def test_dataflow(self, graph):
        """A plain list of datapoints as `dataflow` gets a prefetching input."""
        x, y = blobs(64)
        points = [(x[i : i + 16], y[i : i + 16]) for i in range(0, 64, 16)]
        losses = Losses()
        config = TrainConfig(
            model=Blobs(),
            dataflow=points,
            callbacks=[losses],
            monitors=[],
            extra_callbacks=[],
            max_epoch=2,
        )
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
        assert trainer.steps_per_epoch == 4
        assert len(losses.values) == 8

    def test_data_dataset(self, graph):
        """``data=`` a tf.data.Dataset built in the graph becomes a prefetching input."""
        x, y = blobs(64)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
        losses = Losses()
        config = TrainConfig(
            model=Blobs(),
            data=dataset,
            callbacks=[losses],
            monitors=[],
            extra_callbacks=[],
            max_epoch=2,
        )
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
        assert type(trainer.input_source).__name__ == "TFDatasetInput"
        assert trainer.steps_per_epoch == 4, "the size is the dataset's cardinality"
        assert len(losses.values) == 8

    def test_data_function(self, graph):
        """``data=`` a function building the dataset; it is called in the trainer's graph."""
        x, y = blobs(64)
        built_in = []

        def make():
            built_in.append(tf1.get_default_graph())
            return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

        losses = Losses()
        config = TrainConfig(
            model=Blobs(),
            data=make,
            callbacks=[losses],
            monitors=[],
            extra_callbacks=[],
            steps_per_epoch=3,
            max_epoch=2,
        )
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
        assert built_in == [trainer.graph]
        assert len(losses.values) == 6

    def test_session_init_and_starting_epoch(self, graph):
        """session_init loads values; starting_epoch starts the loop there."""
        losses = Losses()
        config = TrainConfig(
            model=Blobs(),
            data=data(),
            callbacks=[losses],
            monitors=[],
            extra_callbacks=[],
            session_init=DictRestore(
                {"global_step": np.int64(40), "learning_rate": np.float32(0.0)}
            ),
            starting_epoch=6,
            max_epoch=6,
        )
        launch_train_with_config(config, SimpleTrainer())
        assert losses.start == (5, 40)
        assert losses.values[0] == pytest.approx(losses.values[-1], rel=0.3), "lr 0: nothing learnt"

    def test_session_init_set_after_construction(self, graph, tmp_path):
        """tensorpack's boilerplate: ``config.session_init = SmartInit(path)`` after the
        config is made; the checkpoint's values are loaded when the run starts."""
        from towerkit.sessinit import SmartInit, save_checkpoint_vars

        prefix = str(tmp_path / "init" / "model-40")
        os.makedirs(os.path.dirname(prefix))
        save_checkpoint_vars(
            {"global_step": np.int64(40), "learning_rate": np.float32(0.0)}, prefix
        )
        losses = Losses()
        config = TrainConfig(
            model=Blobs(), data=data(), callbacks=[losses], monitors=[], extra_callbacks=[]
        )
        config.session_init = SmartInit(prefix)
        config.starting_epoch = config.max_epoch = 6
        launch_train_with_config(config, SimpleTrainer())
        assert losses.start == (5, 40)
        assert losses.values[0] == pytest.approx(losses.values[-1], rel=0.3), "lr 0: nothing learnt"

    def test_session_config(self, graph):
        """session_config reaches the default session creator."""
        seen = []

        class Threads(Callback):
            def _before_train(self):
                seen.append(self.trainer.sess._config.inter_op_parallelism_threads)

        config = TrainConfig(
            model=Blobs(),
            data=data(),
            callbacks=[Threads()],
            monitors=[],
            extra_callbacks=[],
            session_config=tf1.ConfigProto(inter_op_parallelism_threads=1),
            max_epoch=1,
        )
        launch_train_with_config(config, SimpleTrainer())
        assert seen == [1]

    def test_session_creator(self, graph):
        """A given session_creator makes the session the trainer uses."""
        made = []

        def keep(sess):
            made.append(sess)
            return sess

        config = TrainConfig(
            model=Blobs(),
            data=data(),
            monitors=[],
            extra_callbacks=[],
            session_creator=SessionCreatorAdapter(NewSessionCreator(), keep),
            max_epoch=1,
        )
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
        assert made == [trainer.sess]

    def test_unknown_size(self, graph):
        """No steps_per_epoch and an input of unknown size: a clear error."""
        x, y = blobs(64)
        config = TrainConfig(
            model=Blobs(),
            data=None,
            dataflow=lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat(),
            monitors=[],
        )
        with pytest.raises(InputSizeUnknownError, match="pass 'steps_per_epoch' explicitly"):
            launch_train_with_config(config, SimpleTrainer())

    def test_fail(self, graph):
        """Wrong kinds of config or trainer, and configs without model or data."""
        with pytest.raises(TypeError, match="'config' must be a TrainConfig; got dict"):
            launch_train_with_config({}, SimpleTrainer())
        with pytest.raises(TypeError, match="'trainer' must be a SingleCostTrainer"):
            launch_train_with_config(TrainConfig(), object())
        with pytest.raises(ValueError, match="needs a config with model and data or dataflow"):
            launch_train_with_config(TrainConfig(), SimpleTrainer())

        class InferenceOnly(ModelDescBase):
            pass

        config = TrainConfig(model=InferenceOnly(), data=data())
        with pytest.raises(
            TypeError, match=r"'config.model' must be a ModelDesc \(with optimizer\(\)\)"
        ):
            launch_train_with_config(config, SimpleTrainer())

    def test_no_logdir_uses_the_monitors_that_write_no_file(self, graph, tmp_path, monkeypatch):
        """Default monitors without a logdir: those that write no file (``ScalarPrinter``);
        the run trains and nothing is written."""
        monkeypatch.chdir(tmp_path)
        config = TrainConfig(model=Blobs(), data=data(), max_epoch=1)
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
        assert [type(m).__name__ for m in trainer.monitors.monitors] == ["ScalarPrinter"]
        assert trainer.global_step > 0
        assert list(tmp_path.iterdir()) == []


def resume_run(logdir, max_epoch, **kw):
    """Train Blobs with AutoResumeTrainConfig (ModelSaver every epoch) in a fresh graph."""
    losses = Losses()
    with tf.Graph().as_default():
        config = AutoResumeTrainConfig(
            model=Blobs(),
            data=data(),
            callbacks=[losses, ModelSaver()],
            monitors=[],
            extra_callbacks=[],
            max_epoch=max_epoch,
            logdir=logdir,
            **kw,
        )
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
    return config, trainer, losses


class TestAutoResume:
    """AutoResumeTrainConfig continues a run from its logdir (in-process; see test_processes)."""

    def test_continues(self, logdir):
        """A second run with a larger max_epoch continues at the next epoch and global step."""
        first, _, _ = resume_run(logdir, 2)
        assert first.plan_resume(8).checkpoint == os.path.join(str(logdir), "model-16")
        config, trainer, losses = resume_run(logdir, 4)
        assert losses.start == (2, 16)
        assert trainer.global_step == 32
        assert config.session_init is None, "the config keeps the options as given"
        assert config.starting_epoch == 1

    def test_plan_at_launch(self, logdir, tmp_path):
        """Construction reads nothing; plan_resume reads the logdir when called."""
        config = AutoResumeTrainConfig(
            model=Blobs(), data=data(), steps_per_epoch=8, logdir=logdir, monitors=[]
        )
        assert config.plan_resume(8).checkpoint is None
        resume_run(logdir, 1, steps_per_epoch=8)
        plan = config.plan_resume(8)
        assert (plan.checkpoint, plan.starting_epoch) == (os.path.join(str(logdir), "model-8"), 2)
        assert config.session_init is None
        assert config.starting_epoch == 1
        missing = AutoResumeTrainConfig(model=Blobs(), logdir=tmp_path / "nothing" / "here")
        assert not (tmp_path / "nothing").exists()
        assert missing.plan_resume(8).checkpoint is None

    def test_always_resume_false(self, logdir):
        """always_resume=False: a user's session_init and starting_epoch win."""
        resume_run(logdir, 1)
        user_init = DictRestore({"global_step": np.int64(0)})
        config = AutoResumeTrainConfig(
            always_resume=False,
            model=Blobs(),
            data=data(),
            steps_per_epoch=8,
            session_init=user_init,
            starting_epoch=1,
            logdir=logdir,
            monitors=[],
        )
        plan = config.plan_resume(8)
        assert (plan.checkpoint, plan.starting_epoch) == (None, 1)
        config = AutoResumeTrainConfig(
            model=Blobs(),
            data=data(),
            steps_per_epoch=8,
            session_init=user_init,
            logdir=logdir,
            monitors=[],
        )
        assert config.plan_resume(8).checkpoint is not None, "always_resume=True: resuming wins"

    def test_session_init_set_after_construction_is_the_users(self, logdir):
        """A session_init set after construction counts as given (always_resume=False)."""
        resume_run(logdir, 1)
        config = AutoResumeTrainConfig(
            always_resume=False,
            model=Blobs(),
            data=data(),
            steps_per_epoch=8,
            logdir=logdir,
            monitors=[],
        )
        assert config.plan_resume(8).checkpoint is not None
        config.session_init = DictRestore({"global_step": np.int64(0)})
        config.starting_epoch = 1
        plan = config.plan_resume(8)
        assert (plan.checkpoint, plan.starting_epoch) == (None, 1)

    def test_failed_resume_removes_nothing_it_found(self, logdir):
        """A resumed run failing before its first step leaves every file it found byte-identical."""
        from towerkit.callbacks import JSONWriter, TFEventWriter

        class Boom(Callback):
            def _before_train(self):
                raise RuntimeError("boom")

        def run(max_epoch, callbacks=()):
            with tf.Graph().as_default():
                config = AutoResumeTrainConfig(
                    model=Blobs(),
                    data=data(),
                    callbacks=[*callbacks, ModelSaver()],
                    monitors=[TFEventWriter(), JSONWriter()],
                    extra_callbacks=[],
                    max_epoch=max_epoch,
                    logdir=logdir,
                )
                launch_train_with_config(config, SimpleTrainer())
            return config

        run(2)

        def files():
            return {p.name: p.read_bytes() for p in logdir.iterdir()}

        before = files()
        with pytest.raises(RuntimeError, match="boom"):
            run(4, [Boom()])
        assert files() == before
        config = run(4)
        plan = config.plan_resume(8)
        assert (plan.starting_epoch, plan.checkpoint_step) == (5, 32), "the rerun resumed and ran"
        with open(os.path.join(logdir, "stats.json")) as f:
            assert [r["epoch_num"] for r in json.load(f)] == [1, 2, 3, 4]
        assert os.path.isfile(os.path.join(logdir, "model-32.index"))

    def test_fail(self):
        """A logdir is required, and it is kept."""
        with pytest.raises(ValueError, match="AutoResumeTrainConfig needs 'logdir'"):
            AutoResumeTrainConfig(model=Blobs())
        with pytest.raises(ValueError, match="'logdir_action' must be 'keep'; got 'overwrite'"):
            AutoResumeTrainConfig(model=Blobs(), logdir="x", logdir_action="overwrite")


class TestDefaults:
    """DEFAULT_CALLBACKS and DEFAULT_MONITORS give new instances of the documented classes."""

    def test_callbacks(self):
        """The four default callbacks, in order, new each call."""
        cbs = DEFAULT_CALLBACKS()
        assert len(cbs) == 4
        assert isinstance(cbs[0], MovingAverageSummary)
        assert isinstance(cbs[1], ProgressBar)
        assert type(cbs[2]) is type(MergeAllSummaries()), "MergeAllSummaries() with its defaults"
        assert isinstance(cbs[3], RunUpdateOps)
        assert all(a is not b for a, b in zip(cbs, DEFAULT_CALLBACKS()))

    def test_monitors(self):
        """The three default monitors, in order."""
        from towerkit.callbacks import JSONWriter, ScalarPrinter, TFEventWriter
        from towerkit.trainers import DEFAULT_MONITORS

        assert [type(m) for m in DEFAULT_MONITORS()] == [TFEventWriter, JSONWriter, ScalarPrinter]
