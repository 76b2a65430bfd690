"""towerkit.layers.rnn against TensorFlow's tf-keras-backed ``tf.compat.v1.nn.rnn_cell``.

Each case builds one cell and one loop twice, in two graphs: with TensorFlow's own
cells and loops (``tf.compat.v1.nn``, which need tf-keras) and with
``towerkit.layers.rnn`` inside a towerkit tower context. Both graphs must hold the
same variables (names, shapes, dtypes); then every variable gets a random value
loaded by name into both, and the outputs, the final states and the gradients (of
the input and of every variable) are compared, for both values of ``time_major``,
with and without ``sequence_length``, in training and inference towers. A checkpoint
written by tensorpack 0.11's trainer for a 2-layer LSTM language model restores into
the same model built with towerkit. Run by ``nox -s layers_parity``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_v2_behavior()

from towerkit.layers import rnn as tk  # noqa: E402
from towerkit.towers import TowerContext  # noqa: E402

ORACLE = tf1.nn.rnn_cell
BATCH, TIME, DEPTH = 3, 5, 4


@attrs.frozen(kw_only=True)
class Cell:
    """A cell built from either library: ``make(lib, keep)`` (`keep`: a dropout keep prob)."""

    id: str
    make: Callable[[Any, float], Any]


CELLS = [
    Cell(id="BasicRNNCell", make=lambda lib, keep: lib.BasicRNNCell(6)),
    Cell(id="GRUCell", make=lambda lib, keep: lib.GRUCell(6)),
    Cell(id="BasicLSTMCell", make=lambda lib, keep: lib.BasicLSTMCell(6, forget_bias=0.5)),
    Cell(
        id="LSTMCell-peep-proj-clip",
        make=lambda lib, keep: lib.LSTMCell(
            6, use_peepholes=True, num_proj=3, cell_clip=0.5, proj_clip=0.4, forget_bias=0.3
        ),
    ),
    Cell(id="LSTMCell-concat", make=lambda lib, keep: lib.LSTMCell(5, state_is_tuple=False)),
    Cell(
        id="MultiRNNCell-2-LSTM",
        make=lambda lib, keep: lib.MultiRNNCell([lib.LSTMCell(6), lib.LSTMCell(6)]),
    ),
    Cell(
        id="MultiRNNCell-concat",
        make=lambda lib, keep: lib.MultiRNNCell(
            [lib.GRUCell(3), lib.BasicLSTMCell(2, state_is_tuple=False)], state_is_tuple=False
        ),
    ),
    Cell(
        id="Dropout-Residual",
        make=lambda lib, keep: lib.MultiRNNCell(
            [
                lib.DropoutWrapper(lib.LSTMCell(4), keep, keep, keep),
                lib.ResidualWrapper(lib.GRUCell(4)),
            ]
        ),
    ),
]

LOOPS = ["dynamic_rnn", "static_rnn", "bidirectional_dynamic_rnn"]


def build(lib: Any, cell: Cell, loop: str, time_major: bool, lengths: bool, keep: float):
    """One graph: the loop over the cell, a loss, and its gradients."""
    nn = tf1.nn if lib is ORACLE else tk
    g = tf1.Graph()
    with g.as_default():
        shape = [TIME, BATCH, DEPTH] if time_major else [BATCH, TIME, DEPTH]
        x = tf1.placeholder(tf.float32, shape, name="x")
        seq = tf1.constant([TIME, 2, 0]) if lengths else None
        if loop == "dynamic_rnn":
            out, state = nn.dynamic_rnn(
                cell.make(lib, keep), x, seq, dtype=tf.float32, time_major=time_major
            )
        elif loop == "static_rnn":
            steps = tf1.unstack(x, axis=0 if time_major else 1)
            out, state = nn.static_rnn(
                cell.make(lib, keep), steps, dtype=tf.float32, sequence_length=seq
            )
        else:
            out, state = nn.bidirectional_dynamic_rnn(
                cell.make(lib, keep),
                cell.make(lib, keep),
                x,
                seq,
                dtype=tf.float32,
                time_major=time_major,
            )
        flat = tf.nest.flatten((out, state))
        weights = tf1.constant(np.linspace(-1, 1, 7), tf.float32)
        loss = tf1.add_n([tf1.reduce_sum(t * weights[k % 7]) for k, t in enumerate(flat)])
        variables = tf1.global_variables()
        grads = tf1.gradients(loss, [x, *variables])
    return g, x, flat, variables, grads


def towerkit_build(cell: Cell, loop: str, time_major: bool, lengths: bool, training: bool):
    """The towerkit graph in a tower context: an inference tower keeps probability 0.6."""
    keep = 1.0 if training else 0.6
    with TowerContext("", is_training=training):
        return build(tk, cell, loop, time_major, lengths, keep)


def run(built, values: dict[str, np.ndarray], x: np.ndarray):
    g, xt, flat, variables, grads = built
    with tf1.Session(graph=g) as sess:
        for v in variables:
            v.load(values[v.op.name], sess)
        return sess.run([flat, grads], {xt: x})


def _combos() -> list[Any]:
    """(cell, loop, time_major, lengths, training): each cell under each option, not all products."""
    by_id = {c.id: c for c in CELLS}
    rows = []
    for c in CELLS:
        rows += [
            (c, "dynamic_rnn", False, True, True),
            (c, "dynamic_rnn", True, False, True),
        ]
    for cid in ("GRUCell", "LSTMCell-peep-proj-clip", "MultiRNNCell-concat", "Dropout-Residual"):
        rows.append((by_id[cid], "static_rnn", False, True, True))
    for cid in ("LSTMCell-peep-proj-clip", "MultiRNNCell-2-LSTM"):
        rows += [
            (by_id[cid], "bidirectional_dynamic_rnn", True, True, True),
            (by_id[cid], "bidirectional_dynamic_rnn", False, False, True),
        ]
    drop = by_id["Dropout-Residual"]
    rows += [
        (drop, "dynamic_rnn", False, True, False),
        (drop, "dynamic_rnn", True, False, False),
        (drop, "static_rnn", False, False, False),
        (drop, "bidirectional_dynamic_rnn", False, True, False),
        (by_id["MultiRNNCell-2-LSTM"], "dynamic_rnn", True, True, False),
        (by_id["MultiRNNCell-2-LSTM"], "dynamic_rnn", False, False, True),  # fused loop
    ]
    return [
        pytest.param(
            *row,
            id=f"{row[0].id}-{row[1]}-{'time' if row[2] else 'batch'}_major-"
            f"{'lengths' if row[3] else 'full'}-{'train' if row[4] else 'infer'}",
        )
        for row in rows
    ]


@pytest.mark.parametrize(("cell", "loop", "time_major", "lengths", "training"), _combos())
def test_parity(cell: Cell, loop: str, time_major: bool, lengths: bool, training: bool):
    """Same variables; same outputs, final states and gradients for the same values."""
    ref = build(ORACLE, cell, loop, time_major, lengths, keep=1.0)
    got = towerkit_build(cell, loop, time_major, lengths, training)
    ref_vars = [(v.op.name, v.shape.as_list(), v.dtype.base_dtype) for v in ref[3]]
    got_vars = [(v.op.name, v.shape.as_list(), v.dtype.base_dtype) for v in got[3]]
    assert got_vars == ref_vars
    rng = np.random.default_rng(0)
    values = {
        name: (rng.standard_normal(shape) * 0.5).astype(np.float32) for name, shape, _ in ref_vars
    }
    x = rng.standard_normal(ref[1].shape.as_list()).astype(np.float32)
    (ref_out, ref_grads), (got_out, got_grads) = run(ref, values, x), run(got, values, x)
    assert [a.shape for a in got_out] == [a.shape for a in ref_out]
    for a, b in zip(got_out + got_grads, ref_out + ref_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)


def test_initial_values_match():
    """The initializers agree: biases (GRU gate bias ones, the rest zeros) and Glorot limits."""

    def initial(lib):
        g = tf1.Graph()
        g.seed = 7  # the draws fixed: a check of their spread cannot fail by chance
        with g.as_default():
            x = tf1.placeholder(tf.float32, [BATCH, TIME, DEPTH])
            nn = tf1.nn if lib is ORACLE else tk
            cell = lib.MultiRNNCell(
                [lib.GRUCell(5), lib.LSTMCell(4, use_peepholes=True, num_proj=3)]
            )
            nn.dynamic_rnn(cell, x, dtype=tf.float32)
            with tf1.Session(graph=g) as sess:
                sess.run(tf1.global_variables_initializer())
                return {v.op.name: sess.run(v) for v in tf1.global_variables()}

    ref, got = initial(ORACLE), initial(tk)
    assert list(got) == list(ref)
    for name, value in ref.items():
        if name.endswith("bias"):
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            bound = np.sqrt(6 / sum(value.shape)) if value.ndim == 2 else np.sqrt(6 / value.size)
            assert np.abs(got[name]).max() <= bound, name
            assert np.abs(value).max() <= bound, name
            assert np.abs(got[name]).max() > bound / 4, name


VOCAB, SEQ, HIDDEN = 11, 6, 8


def language_model(lib: Any, tokens: Any, training: bool) -> Any:
    """A 2-layer LSTM language model (embedding, dynamic_rnn, softmax), for both libraries."""
    nn = tf1.nn if lib is ORACLE else tk
    embedding = tf1.get_variable("embedding", [VOCAB, HIDDEN])
    x = tf1.nn.embedding_lookup(embedding, tokens)
    keep = 0.8 if training else 1.0
    cell = lib.MultiRNNCell(
        [lib.DropoutWrapper(lib.LSTMCell(HIDDEN), output_keep_prob=keep) for _ in range(2)]
    )
    out, _ = nn.dynamic_rnn(cell, x, dtype=tf.float32)
    w = tf1.get_variable("softmax_w", [HIDDEN, VOCAB])
    b = tf1.get_variable("softmax_b", [VOCAB], initializer=tf1.zeros_initializer())
    logits = tf1.matmul(tf1.reshape(out, [-1, HIDDEN]), w) + b
    return tf1.reshape(logits, [-1, SEQ, VOCAB], name="logits")


def test_tensorpack_lstm_checkpoint_restores(tmp_path):
    """A 2-layer LSTM LM trained by tensorpack 0.11 restores into towerkit: same outputs."""
    from tensorpack import (
        DataFromList,
        ModelDesc,
        ModelSaver,
        OfflinePredictor,
        PredictConfig,
        SimpleTrainer,
        TrainConfig,
        launch_train_with_config,
        logger,
    )
    from tensorpack.tfutils.sessinit import SmartInit as TPSmartInit

    from towerkit.sessinit import SmartInit

    rng = np.random.default_rng(0)
    data = rng.integers(0, VOCAB, size=(32, SEQ + 1)).astype(np.int32)

    class Model(ModelDesc):
        def inputs(self):
            return [
                tf.TensorSpec((None, SEQ), tf.int32, "tokens"),
                tf.TensorSpec((None, SEQ), tf.int32, "next"),
            ]

        def build_graph(self, tokens, nxt):
            from tensorpack.tfutils.tower import get_current_tower_context

            training = get_current_tower_context().is_training
            logits = language_model(ORACLE, tokens, training)
            return tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nxt, logits=logits),
                name="cost",
            )

        def optimizer(self):
            return tf1.train.AdamOptimizer(0.01)

    logger.set_logger_dir(str(tmp_path / "log"), action="d")
    flow = DataFromList(
        [[data[i : i + 8, :-1], data[i : i + 8, 1:]] for i in range(0, 32, 8)], shuffle=False
    )
    ckpt_dir = str(tmp_path / "ckpt")
    with tf.Graph().as_default():
        config = TrainConfig(
            model=Model(),
            dataflow=flow,
            callbacks=[ModelSaver(checkpoint_dir=ckpt_dir)],
            steps_per_epoch=8,
            max_epoch=1,
        )
        launch_train_with_config(config, SimpleTrainer())
    ckpt = tf1.train.latest_checkpoint(ckpt_dir)
    assert ckpt is not None
    names = {name for name, _ in tf1.train.list_variables(ckpt)}
    assert "rnn/multi_rnn_cell/cell_1/lstm_cell/kernel" in names

    test_tokens = data[:5, :-1]
    with tf.Graph().as_default():
        predictor = OfflinePredictor(
            PredictConfig(
                model=Model(),
                session_init=TPSmartInit(ckpt),
                input_names=["tokens"],
                output_names=["logits"],
            )
        )
        want = predictor(test_tokens)[0]

    with tf.Graph().as_default():
        tokens = tf1.placeholder(tf.int32, [None, SEQ])
        with TowerContext("", is_training=False):
            logits = language_model(tk, tokens, training=False)
        ours = {v.op.name for v in tf1.global_variables()}
        assert ours <= names
        with tf1.Session() as sess:
            SmartInit(ckpt).init(sess)
            got = sess.run(logits, {tokens: test_tokens})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
