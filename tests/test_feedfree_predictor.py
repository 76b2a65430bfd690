"""``FeedfreePredictor`` on the trainers' input sources: batches in order, nothing fed."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf

from towerkit.export import FeedfreePredictor, PredictConfig, UnknownTensorError
from towerkit.sessinit import SmartInit
from towerkit.towers import get_current_tower_context
from towerkit.towers.compat import tf1
from towerkit.trainers import FeedInput, IterableInput, NumpyInput, TensorInput, TFDatasetInput

SIGNATURE = [tf.TensorSpec([None, 1], tf.float32, "x")]


def tower(x):
    """y = 3 x + 1 with the weight loaded from a checkpoint; `training` says the tower's mode."""
    w = tf1.get_variable("w", [1, 1], initializer=tf1.zeros_initializer())
    tf.identity(tf.matmul(x, w) + 1.0, name="y")
    context = get_current_tower_context()
    tf.constant(context is not None and context.is_training, name="training")


def batches(n):
    return [[np.array([[i], [i + 0.5]], np.float32)] for i in range(n)]


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ckpt") / "model")
    with tf1.Graph().as_default():
        tower(tf1.placeholder(tf.float32, [None, 1]))
        with tf1.Session() as sess:
            sess.run(tf1.assign(tf1.global_variables()[0], [[3.0]]))
            tf1.train.Saver().save(sess, path)
    return PredictConfig(
        tower_func=tower,
        input_signature=SIGNATURE,
        session_init=SmartInit(path),
        output_names=["y", "training"],
    )


def dataset_of_batches():
    """The same five batches as a dataset (built in the predictor's graph: a function)."""
    rows = np.concatenate([b[0] for b in batches(5)])
    return tf.data.Dataset.from_tensor_slices((rows,)).batch(2)


def expected(i):
    return np.array([[3 * i + 1], [3 * (i + 0.5) + 1]], np.float32)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: IterableInput(batches(5)), id="IterableInput"),
        pytest.param(lambda: FeedInput(batches(5)), id="FeedInput"),
        pytest.param(lambda: TFDatasetInput(dataset_of_batches), id="TFDatasetInput"),
    ],
)
def test_each_call_takes_the_next_batch(config, make):
    """Five calls give the five batches' outputs in order, from the inference tower."""
    with FeedfreePredictor(config, make()) as predictor:
        for i in range(5):
            y, training = predictor()
            np.testing.assert_allclose(y, expected(i))
            assert training == False  # noqa: E712 (a numpy bool)


@pytest.mark.parametrize("kind", ["dataset", "iterable"])
def test_passes_continue_past_the_end(config, kind):
    """As in training, a source starts another pass after its last batch."""
    x = np.arange(6, dtype=np.float32).reshape(6, 1)
    source = (
        TFDatasetInput(lambda: tf.data.Dataset.from_tensor_slices((x,)).batch(3))
        if kind == "dataset"
        else IterableInput([[x[:3]], [x[3:]]])
    )
    with FeedfreePredictor(config, source) as predictor:
        got = [predictor()[0] for _ in range(3)]
    np.testing.assert_allclose(np.concatenate(got), 3 * np.concatenate([x, x[:3]]) + 1)


def test_numpy_input(config):
    """NumpyInput's batches, in order with shuffle=False."""
    x = np.arange(6, dtype=np.float32).reshape(6, 1)
    repeated = NumpyInput([x], batch_size=2, shuffle=False)
    with FeedfreePredictor(config, repeated) as predictor:
        got = np.concatenate([predictor()[0] for _ in range(3)])
        np.testing.assert_allclose(got, 3 * x + 1)


def test_tensor_input(config):
    """Tensors of the program's own: a constant batch, run each call."""
    source = TensorInput(lambda: [tf.constant([[2.0]])])
    with FeedfreePredictor(config, source) as predictor:
        np.testing.assert_allclose(predictor()[0], [[7.0]])
        np.testing.assert_allclose(predictor()[0], [[7.0]])


def test_close_stops_the_source(config):
    """The feeder thread of a Python source ends with close(); a closed predictor refuses calls."""
    before = set(threading.enumerate())
    predictor = FeedfreePredictor(config, IterableInput(batches(100)))
    predictor()
    assert set(threading.enumerate()) - before  # the source's feeder runs
    predictor.close()
    for thread in set(threading.enumerate()) - before:
        thread.join(10)
        assert not thread.is_alive(), f"{thread} outlived close()"
    with pytest.raises(RuntimeError, match="closed"):
        predictor()
    predictor.close()  # twice is fine


def test_bad_input(config):
    """Not a source, return_input, an unknown output: each named."""
    with pytest.raises(TypeError, match=r"'input_source' must be an input source.*got list"):
        FeedfreePredictor(config, batches(2))
    with pytest.raises(TypeError, match="'config' must be a PredictConfig; got dict"):
        FeedfreePredictor({}, IterableInput(batches(2)))
    with_inputs = PredictConfig(
        tower_func=tower,
        input_signature=SIGNATURE,
        output_names=["y"],
        return_input=True,
    )
    with pytest.raises(ValueError, match="cannot return its inputs"):
        FeedfreePredictor(with_inputs, IterableInput(batches(2)))
    unknown = PredictConfig(tower_func=tower, input_signature=SIGNATURE, output_names=["prob"])
    with pytest.raises(UnknownTensorError, match="prob"):
        FeedfreePredictor(unknown, IterableInput(batches(2)))


@pytest.mark.procs
def test_parallel_workers_keep_the_order(config):
    """IterableInput(workers=2): the batches of the source, in its order."""
    with FeedfreePredictor(config, IterableInput(batches(6), workers=2)) as predictor:
        for i in range(6):
            np.testing.assert_allclose(predictor()[0], expected(i))
