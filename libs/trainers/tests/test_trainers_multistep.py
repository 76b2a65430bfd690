"""Several training steps per session call (``steps_per_execution``): real sessions, real files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from helpers import Probe, as_tuples, blobs, creator

from towerkit.callbacks import (
    Callback,
    JSONWriter,
    MergeAllSummaries,
    ModelSaver,
    PeriodicTrigger,
    ProgressBar,
    SimpleMovingAverage,
    loop_events,
)
from towerkit.towers import add_moving_summary
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    DEFAULT_CALLBACKS,
    AsyncMultiGPUTrainer,
    FeedInput,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    StagingInput,
    SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated,
    TFDatasetInput,
    TrainConfig,
    launch_train_with_config,
)

SPE = 64


def seeded_dense(x, units, name, seed, activation=None):
    """A layer whose initializer has its own op seed: the same values for every K."""
    with tf1.variable_scope(name):
        w = tf1.get_variable(
            "W", [x.shape[-1], units], initializer=tf1.glorot_uniform_initializer(seed=seed)
        )
        b = tf1.get_variable("b", [units], initializer=tf1.zeros_initializer())
        out = tf.matmul(x, w) + b
        return activation(out) if activation is not None else out


class Mlp(ModelDesc):
    """An MLP with a moving average of its cost and a batch-norm-like update op."""

    def inputs(self):
        return [tf.TensorSpec([None, 32], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]

    def build_graph(self, x, y):
        h = seeded_dense(x, 64, "fc0", 1, tf.nn.relu)
        logits = seeded_dense(h, 10, "fc1", 2)
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        )
        cost = tf.identity(cost, name="cost")
        # a per-step update op outside the gradient (as batch norm's moving mean is)
        seen = tf1.get_variable(
            "seen", [], tf.float32, initializer=tf1.zeros_initializer(), trainable=False
        )
        tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, tf1.assign_add(seen, 1.0).op)
        add_moving_summary(cost, decay=0.9)
        return cost

    def optimizer(self):
        return tf1.train.MomentumOptimizer(0.05, 0.9)


def data():
    x, y = blobs(n=SPE * 16)
    return NumpyInput([x, y], batch_size=16, shuffle=False)


def train(logdir, k, *, max_epoch=3, callbacks=(), trainer=None, data_=None):
    """Train `Mlp` for `max_epoch` epochs with K steps per call; return the trainer."""
    with tf.Graph().as_default():
        tf1.set_random_seed(0)
        trainer = trainer() if trainer is not None else SimpleTrainer()
        config = TrainConfig(
            model=Mlp(),
            data=data_() if data_ is not None else data(),
            callbacks=list(callbacks),
            monitors=[JSONWriter()],
            steps_per_epoch=SPE,
            max_epoch=max_epoch,
            logdir=logdir,
            steps_per_execution=k,
        )
        launch_train_with_config(config, trainer)
        return trainer


def stats(logdir):
    return json.loads((logdir / "stats.json").read_text())


class TestSameRunAsOneStep:
    """K steps per call train what K=1 trains: same steps, same statistics."""

    @pytest.mark.parametrize("k", [32, 8])
    def test_stats_and_steps(self, tmp_path, k):
        """stats.json epochs, global steps and costs equal K=1's within 1e-4."""
        one = train(tmp_path / "k1", 1)
        many = train(tmp_path / f"k{k}", k)
        assert one.global_step == many.global_step == 3 * SPE
        a, b = stats(tmp_path / "k1"), stats(tmp_path / f"k{k}")
        assert [r["epoch_num"] for r in a] == [r["epoch_num"] for r in b] == [1, 2, 3]
        assert [r["global_step"] for r in a] == [r["global_step"] for r in b]
        assert [abs(r["cost"] - s["cost"]) < 1e-4 for r, s in zip(a, b)] == [True] * 3
        assert a[0]["cost"] != a[-1]["cost"]  # it trains

    def test_checkpoint_same_values(self, tmp_path):
        """The last checkpoints hold the same global step and variables (update ops ran K times)."""
        for k in (1, 16):
            train(tmp_path / f"k{k}", k, callbacks=[ModelSaver()])
        r1 = tf.train.load_checkpoint(str(tmp_path / "k1"))
        r16 = tf.train.load_checkpoint(str(tmp_path / "k16"))
        assert r1.get_tensor("global_step") == r16.get_tensor("global_step") == 3 * SPE
        assert r1.get_tensor("seen") == r16.get_tensor("seen") == 3 * SPE
        np.testing.assert_allclose(r1.get_tensor("fc0/W"), r16.get_tensor("fc0/W"), atol=1e-4)

    def test_defaults_and_summaries(self, tmp_path):
        """DEFAULT_CALLBACKS (progress bar, summaries, update ops) run with K > 1."""
        with tf.Graph().as_default():
            trainer = SimpleTrainer()
            trainer.setup_graph(
                Mlp().get_input_signature(),
                data(),
                Mlp().build_graph,
                Mlp().get_optimizer,
                steps_per_execution=16,
            )
            rec = CoarseProbe()
            trainer.train_with_defaults(
                callbacks=[rec],
                steps_per_epoch=SPE,
                max_epoch=2,
                logdir=tmp_path / "log",
                steps_per_execution=16,
            )
        assert rec.events == as_tuples(loop_events(1, 2, SPE, steps_per_execution=16))
        records = stats(tmp_path / "log")
        assert [r["global_step"] for r in records] == [SPE, 2 * SPE]
        assert all("cost" in r for r in records)  # the moving average, through the summaries


class CoarseProbe(Probe):
    """A `Probe` that accepts one step event per call of K steps."""

    accepts_coarse_steps = True


class TestInputs:
    """Every input that dequeues in the graph runs K steps per call."""

    def test_tf_dataset(self, tmp_path):
        """A user tf.data pipeline gives each step of the loop its own batch."""
        x, y = blobs(n=SPE * 16)

        def make():
            return TFDatasetInput(tf.data.Dataset.from_tensor_slices((x, y)).batch(16))

        one = train(tmp_path / "a", 1, max_epoch=1, data_=make)
        many = train(tmp_path / "b", 16, max_epoch=1, data_=make)
        assert one.global_step == many.global_step == SPE
        assert abs(stats(tmp_path / "a")[0]["cost"] - stats(tmp_path / "b")[0]["cost"]) < 1e-4

    def test_python_fed_queue(self, tmp_path):
        """A dataflow (IterableInput: a thread fills a queue in the graph) gives K batches a call."""
        x, y = blobs(n=SPE * 16)
        batches = [[x[i : i + 16], y[i : i + 16]] for i in range(0, len(x), 16)]
        with tf.Graph().as_default():
            trainer = SimpleTrainer()
            config = TrainConfig(
                model=Mlp(),
                dataflow=batches,
                monitors=[JSONWriter()],
                steps_per_epoch=SPE,
                max_epoch=2,
                logdir=tmp_path / "q",
                steps_per_execution=32,
            )
            launch_train_with_config(config, trainer)
        assert trainer.global_step == 2 * SPE
        assert [r["global_step"] for r in stats(tmp_path / "q")] == [SPE, 2 * SPE]

    def test_feed_input_refused(self):
        """FeedInput feeds placeholders before each step: refused at setup, saying why."""
        x, y = blobs(n=32)
        with tf.Graph().as_default():
            trainer = SimpleTrainer()
            with pytest.raises(
                ValueError, match="feeds its placeholders from Python before every step"
            ):
                trainer.setup_graph(
                    Mlp().get_input_signature(),
                    FeedInput([[x[:16], y[:16]]]),
                    Mlp().build_graph,
                    Mlp().get_optimizer,
                    steps_per_execution=4,
                )

    @pytest.mark.parametrize("nr_stage", [1, 3])
    def test_staging(self, tmp_path, nr_stage):
        """StagingInput runs inside the loop: each step takes its staged batch and stages
        the next, so K=16 trains on the batches K=1 trains on, in the same order."""

        def staged():
            return StagingInput(data(), nr_stage=nr_stage)

        one = train(tmp_path / "a", 1, callbacks=[ModelSaver()], data_=staged)
        many = train(tmp_path / "b", 16, callbacks=[ModelSaver()], data_=staged)
        assert one.global_step == many.global_step == 3 * SPE
        a, b = stats(tmp_path / "a"), stats(tmp_path / "b")
        assert [abs(r["cost"] - s["cost"]) < 1e-4 for r, s in zip(a, b)] == [True] * 3
        ra = tf.train.load_checkpoint(str(tmp_path / "a"))
        rb = tf.train.load_checkpoint(str(tmp_path / "b"))
        np.testing.assert_allclose(ra.get_tensor("fc0/W"), rb.get_tensor("fc0/W"), atol=1e-4)
        # and the staged run trains what the unstaged one does
        train(tmp_path / "c", 16, callbacks=[ModelSaver()])
        rc = tf.train.load_checkpoint(str(tmp_path / "c"))
        np.testing.assert_allclose(rc.get_tensor("fc0/W"), rb.get_tensor("fc0/W"), atol=1e-4)

    def test_staging_callback_only_warms_up(self):
        """Inside the loop the staging callback has no per-step hook (the steps put their
        own batches), so it passes the K check; outside a loop it puts with every run."""
        for k in (4, 1):
            with tf.Graph().as_default():
                source = StagingInput(data())
                SimpleTrainer().setup_graph(
                    Mlp().get_input_signature(),
                    source,
                    Mlp().build_graph,
                    Mlp().get_optimizer,
                    steps_per_execution=k,
                )
                (cb,) = [c for c in source.get_callbacks() if "StageInputCallback" in str(c)]
                assert cb.has_hook("_before_run") is (k == 1)
                faults = cb.coarse_steps_faults(4)
                if k == 1:
                    assert faults
                    assert "before_run" in faults[0]
                else:
                    assert faults == []


class TestMultiTower:
    """The multi-tower trainers build their K-step loop over all towers."""

    @pytest.mark.parametrize(
        "make",
        [
            lambda: SyncMultiGPUTrainerReplicated(2),
            lambda: SyncMultiGPUTrainerParameterServer(2),
            lambda: AsyncMultiGPUTrainer(2),
        ],
        ids=["replicated", "ps", "async"],
    )
    def test_same_as_one_step(self, tmp_path, make):
        """Two towers, K=16: the same global steps and trained variables as K=1.

        Which tower takes which batch is a race between the towers' reads (so is the
        cost tower 0 reports); the summed gradients do not depend on it.
        """
        one = train(tmp_path / "a", 1, max_epoch=1, trainer=make, callbacks=[ModelSaver()])
        many = train(tmp_path / "b", 16, max_epoch=1, trainer=make, callbacks=[ModelSaver()])
        assert one.global_step == many.global_step == SPE
        a = tf.train.load_checkpoint(str(tmp_path / "a"))
        b = tf.train.load_checkpoint(str(tmp_path / "b"))
        assert a.get_tensor("global_step") == b.get_tensor("global_step") == SPE
        assert a.get_tensor("seen") == b.get_tensor("seen")
        if not isinstance(one, AsyncMultiGPUTrainer):  # async: the order of updates races
            np.testing.assert_allclose(a.get_tensor("fc0/W"), b.get_tensor("fc0/W"), atol=1e-4)

    def test_staged_towers(self, tmp_path):
        """Two towers staging their batches on their devices, K=16: as K=1."""

        def staged():
            return StagingInput(data(), devices=["/cpu:0", "/cpu:0"])

        make = lambda: SyncMultiGPUTrainerReplicated(2)  # noqa: E731
        one = train(
            tmp_path / "a", 1, max_epoch=1, trainer=make, data_=staged, callbacks=[ModelSaver()]
        )
        many = train(
            tmp_path / "b", 16, max_epoch=1, trainer=make, data_=staged, callbacks=[ModelSaver()]
        )
        assert one.global_step == many.global_step == SPE
        a = tf.train.load_checkpoint(str(tmp_path / "a"))
        b = tf.train.load_checkpoint(str(tmp_path / "b"))
        np.testing.assert_allclose(a.get_tensor("fc0/W"), b.get_tensor("fc0/W"), atol=1e-4)


class _EveryStep(Callback):
    def _trigger_step(self):
        pass

    def __str__(self):
        return "EveryStep"


class _Coarse(_EveryStep):
    accepts_coarse_steps = True


class TestRefusals:
    """What cannot run at K steps per call is refused at setup, named."""

    def test_k_must_divide_steps_per_epoch(self):
        """TrainConfig names both numbers."""
        with pytest.raises(
            ValueError, match="'steps_per_execution' 48 must divide 'steps_per_epoch' 64"
        ):
            TrainConfig(model=Mlp(), data=data(), steps_per_epoch=64, steps_per_execution=48)

    def test_k_must_divide_input_size(self, tmp_path):
        """With steps_per_epoch from the input's size, main_loop names both."""
        x, y = blobs(n=48)
        with tf.Graph().as_default():
            config = TrainConfig(
                model=Mlp(),
                data=NumpyInput([x, y], batch_size=16),  # 3 batches
                monitors=[],
                steps_per_execution=2,
            )
            with pytest.raises(
                ValueError, match="'steps_per_execution' 2 must divide 'steps_per_epoch' 3"
            ):
                launch_train_with_config(config, SimpleTrainer())

    def test_bad_k(self):
        """K is an int >= 1."""
        with pytest.raises(ValueError, match="'steps_per_execution' must be an int >= 1; got 0"):
            TrainConfig(steps_per_execution=0)
        with pytest.raises(TypeError, match="'steps_per_execution' must be an int >= 1; got float"):
            TrainConfig(steps_per_execution=2.0)

    @pytest.mark.parametrize(
        ("cb", "named"),
        [
            (lambda: PeriodicTrigger(ModelSaver(), every_k_steps=10), "period of 10 global steps"),
            (lambda: ProgressBar(["cost"]), r"ProgressBar fetches tower0/cost|fetches .*cost"),
            (lambda: SimpleMovingAverage("cost", 5), "per-step hooks"),
            (lambda: _EveryStep(), "EveryStep has per-step hooks"),
            (lambda: MergeAllSummaries(run_alone=True), "run_alone=True"),
            (lambda: MergeAllSummaries(period=20), "MergeAllSummaries.period=20"),
        ],
        ids=["periodic", "progressbar-names", "scalarstats", "plain", "run-alone", "period"],
    )
    def test_callback_needing_inner_step(self, tmp_path, cb, named):
        """A callback that needs a step inside a call is refused, named, before training."""
        with pytest.raises(ValueError, match=named):
            train(tmp_path / "log", 16, max_epoch=1, callbacks=[cb()])
        assert not (tmp_path / "log" / "stats.json").exists()

    def test_coarse_callbacks_accepted(self, tmp_path):
        """A declared coarse callback and a period that is a multiple of K run."""
        t = train(
            tmp_path / "log",
            16,
            max_epoch=1,
            callbacks=[_Coarse(), PeriodicTrigger(ModelSaver(), every_k_steps=32)],
        )
        assert t.global_step == SPE
        assert (tmp_path / "log" / "model-32.index").exists()

    def test_train_k_mismatch(self):
        """train(steps_per_execution=K) must name the K the graph was built for."""
        with tf.Graph().as_default():
            trainer = SimpleTrainer()
            trainer.setup_graph(
                Mlp().get_input_signature(), data(), Mlp().build_graph, Mlp().get_optimizer
            )
            with pytest.raises(ValueError, match="was built for 1 step"):
                trainer.train([], [], creator(), None, SPE, 1, 1, steps_per_execution=8)

    def test_default_callbacks_are_coarse(self):
        """DEFAULT_CALLBACKS raise nothing at K > 1 (checked on the real run above)."""
        assert [type(c).__name__ for c in DEFAULT_CALLBACKS()]


class TestDistributedHorovod:
    """The trainers that refuse K > 1 say why."""

    def test_horovod_refuses(self):
        """HorovodTrainer: the all-reduce inside a loop would block the other ranks."""
        from towerkit.trainers import HorovodTrainer

        assert HorovodTrainer.SUPPORTS_STEPS_PER_EXECUTION is False
        assert "all-reduce" in HorovodTrainer._k_refusal(object.__new__(HorovodTrainer))

    def test_noop_refuses(self):
        """NoOpTrainer has no training op to loop."""
        from towerkit.trainers import NoOpTrainer

        with tf.Graph().as_default(), pytest.raises(ValueError, match="no training op to run K"):
            NoOpTrainer().setup_graph(
                Mlp().get_input_signature(),
                data(),
                Mlp().build_graph,
                Mlp().get_optimizer,
                steps_per_execution=2,
            )

    def test_distributed_refuses(self):
        """The distributed trainers: the workers share variables step by step."""
        from towerkit.trainers import DistributedTrainerReplicated

        assert DistributedTrainerReplicated.SUPPORTS_STEPS_PER_EXECUTION is False
        with pytest.raises(ValueError, match="steps_per_execution=4 is not supported"):
            DistributedTrainerReplicated._set_steps_per_execution(
                object.__new__(DistributedTrainerReplicated), 4
            )
