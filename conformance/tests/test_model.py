"""The suite's model: data, the NumPy reference step, the real tower function."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.conformance import SuiteModel, sgd_step
from towerkit.conformance._model import (
    VARIABLES,
    first_batches,
    gradient_magnitudes,
    gradients,
    shard_data,
)
from towerkit.towers import check_tower_function
from towerkit.towers.compat import tf1


class TestReference:
    """The NumPy reference of one SGD step."""

    @settings(max_examples=20, deadline=None)
    @given(st.integers(0, 3), st.sampled_from(["quadratic", "linear"]))
    def test_average_of_two_is_one_concatenated(self, shard, kind):
        """Averaging two batches' gradients equals one step on their concatenation."""
        rng = np.random.default_rng(shard)
        params = {"linear/w": rng.normal(size=(3, 1)), "linear/b": rng.normal(size=(1,))}
        b1, b2 = first_batches(shard, 2)
        joined = (np.concatenate([b1[0], b2[0]]), np.concatenate([b1[1], b2[1]]))
        two = sgd_step(params, [b1, b2], kind=kind, combine="average")
        one = sgd_step(params, [joined], kind=kind, combine="average")
        for n in VARIABLES:
            np.testing.assert_allclose(two[n], one[n], rtol=1e-12)

    @settings(max_examples=40, deadline=None)
    @given(
        st.integers(0, 3),
        st.sampled_from(["quadratic", "linear"]),
        st.floats(-4, 4),
        st.floats(-4, 4),
    )
    def test_magnitudes_bound_the_gradient_and_its_rounding(self, shard, kind, w0, b0):
        """The gradient with every term by its absolute value bounds the gradient, and the
        gradient on inputs rounded to bfloat16 (relative 2^-8) is within a few units of
        2^-8 times it."""
        params = {"linear/w": np.array([[w0], [-w0], [0.5]]), "linear/b": np.array([b0])}
        batch = first_batches(shard, 1)[0]
        exact = gradients(params, batch, kind)
        mags = gradient_magnitudes(params, batch, kind)
        rng = np.random.default_rng(shard)
        rounded = tuple(a * (1 + rng.uniform(-(2.0**-8), 2.0**-8, a.shape)) for a in batch)
        off = gradients(params, rounded, kind)
        for n in VARIABLES:
            assert (np.abs(exact[n]) <= mags[n] + 1e-12).all(), n
            assert (np.abs(off[n] - exact[n]) <= 4 * 2.0**-8 * mags[n] + 1e-12).all(), n

    def test_magnitudes_kind_fail(self):
        """An unknown cost is named by the magnitudes too."""
        with pytest.raises(ValueError, match="'kind' must be 'quadratic' or 'linear'; got 'cubic'"):
            gradient_magnitudes({}, first_batches(0, 1)[0], "cubic")

    def test_shards_differ(self):
        """Each process reads other data."""
        assert not np.allclose(shard_data(0)[0], shard_data(1)[0])

    def test_kind_fail(self):
        """An unknown cost is named."""
        with pytest.raises(
            ValueError, match="'kind' must be one of 'quadratic', 'linear', 'layers'; got 'cubic'"
        ):
            SuiteModel(kind="cubic")


class TestTowerFunction:
    """The tower function in a real TensorFlow graph."""

    @pytest.mark.parametrize("kind", ["quadratic", "linear"])
    def test_gradients_match_tensorflow(self, graph, sess, kind):
        """The NumPy gradient equals TensorFlow's on a real graph."""
        model = SuiteModel(kind=kind)
        x = tf1.placeholder(tf1.float32, [None, 3])
        y = tf1.placeholder(tf1.float32, [None, 1])
        cost = model.build_cost(x, y)
        variables = [v for v in tf1.global_variables() if v.op.name in VARIABLES]
        grads = tf1.gradients(cost, variables)
        sess.run(tf1.global_variables_initializer())
        batch = first_batches(0, 1)[0]
        got = sess.run(grads, {x: batch[0], y: batch[1]})
        params = dict(zip([v.op.name for v in variables], sess.run(variables)))
        want = gradients(params, batch, kind)
        for v, g in zip(variables, got):
            np.testing.assert_allclose(g, want[v.op.name], rtol=1e-5, atol=1e-6)
        assert model.tower_calls == 1

    def test_follows_the_tower_rules(self):
        """The checker finds nothing wrong with the tower function."""
        model = SuiteModel()
        assert [
            v
            for v in check_tower_function(model.build_cost, model.input_signature)
            if v.severity == "error"
        ] == []
