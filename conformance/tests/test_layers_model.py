"""The layers model's NumPy reference against TensorFlow running towerkit.layers."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.conformance._layers_model import (
    LAYER_SHAPES,
    STATISTICS,
    TRAINABLE,
    build_layers_cost,
    layers_gradients,
    layers_sgd_step,
    moving_sequences,
    moving_update,
)
from towerkit.conformance._model import first_batches
from towerkit.conformance._sizes import INPUT_DIM
from towerkit.towers import TowerContext
from towerkit.towers.compat import tf1


def _params(seed):
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=LAYER_SHAPES[n]) for n in TRAINABLE}


def _tf_step(params, batch, stats):
    """Gradients and updated moving averages of the real layers on `batch`."""
    with tf.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, INPUT_DIM], "x")
        y = tf1.placeholder(tf.float32, [None, 1], "y")
        with TowerContext("", is_training=True):
            cost = build_layers_cost(x, y)
        by_name = {v.op.name: v for v in tf1.global_variables()}
        grads = dict(zip(TRAINABLE, tf.gradients(cost, [by_name[n] for n in TRAINABLE])))
        updates = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)
        with tf1.Session() as sess:
            for n, v in {**params, **stats}.items():
                by_name[n].load(np.asarray(v, np.float32), sess)
            feed = {x: batch[0], y: batch[1]}
            got = sess.run(grads, feed)
            sess.run(updates, feed)
            new = sess.run({n: by_name[n] for n in STATISTICS})
    return got, new


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 50), st.integers(0, 3))
def test_reference_matches_tensorflow(seed, shard):
    """The reference's gradients and moving averages are what the real layers compute."""
    params = _params(seed)
    stats = {"bn/mean/EMA": np.full(3, 0.5), "bn/variance/EMA": np.full(3, 2.0)}
    batch = first_batches(shard, 1)[0]
    got, new = _tf_step(params, batch, stats)
    want = layers_gradients(params, batch)
    for n in TRAINABLE:
        np.testing.assert_allclose(got[n].ravel(), want[n].ravel(), rtol=1e-3, atol=1e-5)
    ref = moving_update(stats, batch[0])
    for n in STATISTICS:
        np.testing.assert_allclose(new[n], ref[n], rtol=1e-4, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 100), st.floats(0.0, 1.0))
def test_moving_update_lies_between_old_and_batch(seed, momentum):
    """Each moving average moves from its value toward the batch's, never past it."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4, 3))
    old = {"bn/mean/EMA": rng.normal(size=3), "bn/variance/EMA": rng.uniform(0.1, 2, size=3)}
    new = moving_update(old, x, momentum)
    for n, batch in (("bn/mean/EMA", x.mean(0)), ("bn/variance/EMA", x.var(0))):
        lo, hi = np.minimum(old[n], batch), np.maximum(old[n], batch)
        assert np.all(new[n] >= lo - 1e-12)
        assert np.all(new[n] <= hi + 1e-12)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 100))
def test_sum_is_twice_the_average_of_equal_batches(seed):
    """Two towers on one batch: summed gradients step twice as far as averaged ones."""
    params = _params(seed)
    batch = first_batches(seed % 4, 1)[0]
    avg = layers_sgd_step(params, [batch, batch], combine="average", learning_rate=1.0)
    tot = layers_sgd_step(params, [batch, batch], combine="sum", learning_rate=1.0)
    for n in TRAINABLE:
        np.testing.assert_allclose(tot[n] - params[n], 2 * (avg[n] - params[n]), rtol=1e-9)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2))
def test_moving_sequences_counts_every_order(steps, options, others):
    """One queue: options**steps results; with a second queue, every interleaving of
    its prefixes too (a worker reading before the others are done)."""
    from math import comb

    rng = np.random.default_rng(steps * 10 + options)
    start = {"bn/mean/EMA": np.zeros(3), "bn/variance/EMA": np.ones(3)}

    def queue(k):
        return [[rng.normal(size=(2, 3)) for _ in range(options)] for _ in range(k)]

    alone = list(moving_sequences(start, [queue(steps)], 0))
    assert len(alone) == options**steps
    both = list(moving_sequences(start, [queue(steps), queue(others)], 0))
    want = sum(comb(steps + j, j) * options ** (steps + j) for j in range(others + 1))
    assert len(both) == want


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(1, 2), st.integers(0, 2), st.booleans())
def test_stale_reads_only_add_values(steps, options, others, own_is_none):
    """Stale reads change nothing for a single queue and keep every value of the
    ordered interleavings, adding those where an update lands on a value it did not read."""
    rng = np.random.default_rng(steps * 100 + options * 10 + others)
    start = {"bn/mean/EMA": np.zeros(3), "bn/variance/EMA": np.ones(3)}

    def queue(k):
        return [[rng.normal(size=(2, 3)) for _ in range(options)] for _ in range(k)]

    def means(results):
        return {tuple(np.round(r["bn/mean/EMA"], 9)) for r in results}

    one = [queue(steps)]
    assert means(moving_sequences(start, one, 0, stale_reads=True)) == means(
        moving_sequences(start, one, 0)
    )
    queues = [queue(steps), queue(others)]
    own = None if own_is_none else 0
    ordered = means(moving_sequences(start, queues, own))
    stale = means(moving_sequences(start, queues, own, stale_reads=True))
    assert ordered <= stale
    assert (len(stale) > len(ordered)) == (others > 0)


def test_two_workers_reading_the_start_both_land():
    """Two cluster workers whose first updates both read the initial averages leave
    the sum of their decrements on the parameter server (seen in a real run of the
    parameter-server trainer: shard 1's first batch and shard 0's second)."""
    start = {"bn/mean/EMA": np.zeros(3), "bn/variance/EMA": np.ones(3)}
    queues = [[[b[0] for b in first_batches(shard, 2)]] for shard in (0, 1)]
    seen = np.array([0.193563, -0.030866, -0.187547])
    ordered = list(moving_sequences(start, queues, None))
    assert not any(np.allclose(r["bn/mean/EMA"], seen, atol=1e-5) for r in ordered)
    stale = list(moving_sequences(start, queues, None, stale_reads=True))
    assert any(np.allclose(r["bn/mean/EMA"], seen, atol=1e-5) for r in stale)
