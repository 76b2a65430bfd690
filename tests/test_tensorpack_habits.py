"""What tensorpack programs do that once stopped them on towerkit, each written as they write it.

Every program builds its trainer at the top level of the test (eager mode, no graph
entered), as a script does; the data are tiny and synthetic.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import (
    Callback,
    ClassificationError,
    InferenceRunner,
    ModelSaver,
    ScalarStats,
)
from towerkit.export import PredictConfig, SimpleDatasetPredictor
from towerkit.sessinit import SmartInit
from towerkit.towers import TowerContext, TowerFunc
from towerkit.trainers import (
    IterableInput,
    ModelDesc,
    SimpleTrainer,
    StopTraining,
    TowerTrainer,
    TrainConfig,
    launch_train_with_config,
)

pytestmark = pytest.mark.procs

tf1 = tf.compat.v1

W_TRUE = np.array([[1.0, -1.0], [-2.0, 0.5], [0.3, 0.3]], np.float32)


class ShuffledBatches:
    """A DataFlow of ``[x, label]`` batches, reshuffled each pass: no order before reset_state()."""

    def __init__(self, n, batch, seed):
        rng = np.random.RandomState(seed)
        self.x = rng.randn(n, 3).astype(np.float32)
        self.y = np.argmax(self.x @ W_TRUE, axis=1).astype(np.int32)
        self.batch = batch
        self.rng = None
        self.resets = 0

    def reset_state(self):
        self.resets += 1
        self.rng = np.random.RandomState(self.resets)

    def __len__(self):
        return len(self.x) // self.batch

    def __iter__(self):
        order = self.rng.permutation(len(self.x))
        for k in range(len(self)):
            idx = order[k * self.batch : (k + 1) * self.batch]
            yield [self.x[idx], self.y[idx]]


class Classifier(ModelDesc):
    """Reads ``self.training`` (dropout) and writes a plain ``tf.summary`` in build_graph."""

    def __init__(self):
        self.modes = []

    def inputs(self):
        return [
            tf.TensorSpec((None, 3), tf.float32, "x"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, x, label):
        self.modes.append(self.training)
        w = tf1.get_variable("W", [3, 2], initializer=tf1.zeros_initializer())
        h = tf.matmul(x, w)
        if self.training:
            h = tf1.nn.dropout(h, rate=0.1)
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=h), name="cost"
        )
        pred = tf.argmax(h, axis=1, output_type=tf.int32)
        tf.cast(tf.not_equal(pred, label), tf.float32, name="wrong")
        tf1.summary.scalar("cost_summary", cost)
        tf1.summary.histogram("logits", h)
        return cost

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.5)


class TestConvnetHabits:
    """``self.training``, a shuffling validation DataFlow and tf.summary in build_graph."""

    def test_trains_with_validation(self, tmp_path):
        model = Classifier()
        train_df = ShuffledBatches(256, 32, seed=0)
        val_df = ShuffledBatches(96, 32, seed=1)
        config = TrainConfig(
            model=model,
            dataflow=train_df,
            callbacks=[
                InferenceRunner(val_df, [ScalarStats("cost"), ClassificationError("wrong")])
            ],
            steps_per_epoch=8,
            max_epoch=2,
            logdir=str(tmp_path / "log"),
        )
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
        # Training tower first, then the inference tower of the runner.
        assert model.modes == [True, False]
        assert val_df.resets == 1
        errors = trainer.monitors.get_history("validation_error")
        assert len(errors) == 2
        assert errors[-1][1] < 0.3
        summaries = trainer.graph.get_collection(tf1.GraphKeys.SUMMARIES)
        assert not any(op.name.startswith("InferenceTower/") for op in summaries)
        assert any("cost_summary" in op.name for op in summaries)

    def test_training_outside_a_tower(self):
        with pytest.raises(RuntimeError, match="outside a tower context"):
            _ = Classifier().training


class TwoStepTrainer(TowerTrainer):
    """A trainer of its own, built at the top level as tensorpack programs build theirs."""

    def __init__(self, input, model):
        super().__init__()
        self.tower_func = TowerFunc(model.build_graph, model.get_input_signature())
        self.register_callback(input.setup(self.tower_func.input_signature))
        with TowerContext("", is_training=True):
            cost = self.tower_func(*input.get_input_tensors())
        self.train_op = model.get_optimizer().minimize(cost, name="min_op")


class StopAfter(Callback):
    """Ends training with the ``StopTraining`` of tensorpack.train after `steps` steps."""

    def __init__(self, steps):
        self.steps = steps

    def _trigger_step(self):
        if self.trainer.global_step >= self.steps:
            raise StopTraining()


class TestTopLevelTrainer:
    """A custom TowerTrainer made outside every graph builds its model in a graph of its own."""

    def test_builds_and_trains(self, tmp_path):
        assert tf.executing_eagerly()
        df = ShuffledBatches(128, 16, seed=2)
        trainer = TwoStepTrainer(IterableInput(df), Classifier())
        assert tf.executing_eagerly()
        assert trainer.graph is not tf1.get_default_graph()
        assert trainer.graph.get_operation_by_name("min_op") is not None
        trainer.train_with_defaults(
            callbacks=[ModelSaver(), StopAfter(12)],
            steps_per_epoch=8,
            max_epoch=5,
            logdir=str(tmp_path / "log"),
        )
        assert trainer.global_step == 12
        assert df.resets == 1
        # The model is predicted over a DataFlow from the checkpoint ModelSaver wrote.
        val_df = ShuffledBatches(32, 8, seed=3)
        config = PredictConfig(
            model=Classifier(),
            input_names=["x", "label"],
            output_names=["wrong"],
            session_init=SmartInit(str(tmp_path / "log")),
        )
        outputs = SimpleDatasetPredictor(config, val_df).get_all_result()
        assert len(outputs) == len(val_df) == 4
        assert val_df.resets == 1

    def test_in_a_graph_keeps_that_graph(self):
        graph = tf.Graph()
        with graph.as_default():
            trainer = TwoStepTrainer(IterableInput(ShuffledBatches(32, 16, 0)), Classifier())
        assert trainer.graph is graph
