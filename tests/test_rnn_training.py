"""A 2-layer LSTM language model of towerkit.layers.rnn trains, saves and predicts offline."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import Callback, ModelSaver
from towerkit.export import ModelExporter, OfflinePredictor, PredictConfig
from towerkit.layers import rnn
from towerkit.sessinit import SmartInit
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AsyncMultiGPUTrainer,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated,
)

VOCAB, SEQ, HIDDEN = 7, 8, 16


def sequences(n: int = 64, seed: int = 0) -> list[np.ndarray]:
    """Counting sequences modulo VOCAB from random starts: the next token is predictable."""
    start = np.random.default_rng(seed).integers(0, VOCAB, size=(n, 1))
    seq = (start + np.arange(SEQ + 1)) % VOCAB
    return [seq[:, :-1].astype(np.int32), seq[:, 1:].astype(np.int32)]


class CharModel(ModelDesc):
    """Embedding, two LSTM layers with dropout between them (training only), softmax."""

    def inputs(self):
        return [
            tf.TensorSpec([None, SEQ], tf.int32, "tokens"),
            tf.TensorSpec([None, SEQ], tf.int32, "next"),
        ]

    def build_graph(self, tokens, nxt):
        embedding = tf1.get_variable("embedding", [VOCAB, HIDDEN])
        x = tf1.nn.embedding_lookup(embedding, tokens)
        cell = rnn.MultiRNNCell(
            [
                rnn.DropoutWrapper(rnn.LSTMCell(HIDDEN), output_keep_prob=0.9),
                rnn.LSTMCell(HIDDEN),
            ]
        )
        out, _ = rnn.dynamic_rnn(cell, x, dtype=tf.float32)
        w = tf1.get_variable("softmax/W", [HIDDEN, VOCAB])
        logits = tf1.reshape(tf1.matmul(tf1.reshape(out, [-1, HIDDEN]), w), [-1, SEQ, VOCAB])
        tf1.nn.softmax(logits, name="prob")
        return tf1.reduce_mean(
            tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=nxt, logits=logits),
            name="cost",
        )

    def optimizer(self):
        return tf1.train.AdamOptimizer(0.05)


class Costs(Callback):
    """Records the cost after every step."""

    def __init__(self):
        self.values = []

    def _setup_graph(self):
        graph = self.trainer.graph
        names = {op.name for op in graph.get_operations()}
        name = "cost" if "cost" in names else "tower0/cost"
        self._cost = graph.get_tensor_by_name(f"{name}:0")

    def _before_run(self, _):
        return tf1.train.SessionRunArgs(fetches=self._cost)

    def _after_run(self, _, values):
        self.values.append(float(values.results))


TRAINERS = {
    "simple": SimpleTrainer,
    "async": lambda: AsyncMultiGPUTrainer(2),
    "ps": lambda: SyncMultiGPUTrainerParameterServer(2),
    "replicated": lambda: SyncMultiGPUTrainerReplicated(2),
}


def train(kind: str, directory, epochs: int = 2) -> list[float]:
    """Train CharModel with trainer `kind`, checkpoints in `directory`; the costs per step."""
    costs = Costs()
    model = CharModel()
    with tf.Graph().as_default():
        trainer = TRAINERS[kind]()
        trainer.setup_graph(
            model.get_input_signature(),
            NumpyInput(sequences(), batch_size=16, shuffle=True, seed=1),
            model.build_graph,
            model.get_optimizer,
        )
        trainer.train_with_defaults(
            callbacks=[costs, ModelSaver(checkpoint_dir=str(directory))],
            monitors=[],
            extra_callbacks=[],
            steps_per_epoch=15,
            max_epoch=epochs,
            logdir=str(directory / "log"),
        )
    return costs.values


def predictor(ckpt: str) -> PredictConfig:
    return PredictConfig(
        model=CharModel(),
        session_init=SmartInit(ckpt),
        input_names=["tokens"],
        output_names=["prob"],
    )


@pytest.mark.timeout(300)  # two towers of a while-loop LSTM build slowly on a shared CPU
@pytest.mark.parametrize("kind", sorted(TRAINERS))
def test_trains_saves_predicts(tmp_path, kind):
    """The cost falls under each trainer; the checkpoint holds TF 1's names; the predictor agrees."""
    values = train(kind, tmp_path)
    assert len(values) == 30
    assert np.mean(values[-5:]) < 0.6 * np.mean(values[:5])
    ckpt = tf1.train.latest_checkpoint(str(tmp_path))
    names = {n for n, _ in tf1.train.list_variables(ckpt)}
    assert {
        "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel",
        "rnn/multi_rnn_cell/cell_1/lstm_cell/bias",
    } <= names

    tokens = sequences(4, seed=5)[0]
    with tf.Graph().as_default():
        offline = OfflinePredictor(predictor(ckpt))
        first = offline(tokens)[0]
        again = offline(tokens)[0]
    np.testing.assert_array_equal(first, again)  # no dropout in the inference tower
    np.testing.assert_allclose(first.sum(-1), 1.0, rtol=1e-5)


def test_exports_predict_as_the_predictor(tmp_path):
    """The compact frozen graph (the while loop's variables folded into constants) and the
    SavedModel give the one-tower predictor's probabilities."""
    train("simple", tmp_path, epochs=1)
    ckpt = tf1.train.latest_checkpoint(str(tmp_path))
    tokens = sequences(4, seed=5)[0]
    with tf.Graph().as_default():
        expected = OfflinePredictor(predictor(ckpt))(tokens)[0]
    with tf.Graph().as_default():
        exporter = ModelExporter(predictor(ckpt))
        compact = exporter.export_compact(str(tmp_path / "lm.pb"))
        serving = exporter.export_serving(str(tmp_path / "saved"))
    graph_def = tf1.GraphDef()
    with open(compact, "rb") as f:
        graph_def.ParseFromString(f.read())
    assert not [n.name for n in graph_def.node if n.op in ("VarHandleOp", "VariableV2")]
    with tf.Graph().as_default() as graph:
        tf1.import_graph_def(graph_def, name="")
        with tf1.Session(graph=graph) as sess:
            frozen = sess.run("prob:0", {"tokens:0": tokens})
    np.testing.assert_allclose(frozen, expected, atol=1e-5)
    loaded = tf.saved_model.load(serving)
    served = loaded.signatures["prediction_pipeline"](tokens=tf.constant(tokens))["prob"]
    np.testing.assert_allclose(served.numpy(), expected, atol=1e-5)
