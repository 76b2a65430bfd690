"""The trainers' entry points take the numbers tensorpack converted with ``int()``."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import LoopBounds
from towerkit.towers.compat import tf1
from towerkit.trainers import AccumGradOptimizer, TensorInput, TrainConfig


class TestTrainConfigBounds:
    """TrainConfig's loop bounds as tensorpack's int(steps_per_epoch), int(max_epoch), ..."""

    @pytest.mark.parametrize(
        ("steps", "epochs", "start"),
        [("3", "2", "1"), (3.0, 2.0, 1.0), (np.int64(3), np.int32(2), np.int64(1))],
    )
    def test_spellings(self, steps, epochs, start):
        """A string from argparse, a float such as 1e3, a NumPy int: the same bounds."""
        config = TrainConfig(steps_per_epoch=steps, max_epoch=epochs, starting_epoch=start)
        bounds = config.spec.loop_bounds()
        assert bounds == LoopBounds(starting_epoch=1, max_epoch=2, steps_per_epoch=3)
        assert type(bounds.steps_per_epoch) is int

    def test_fraction_refused(self):
        """A fractional bound is refused (int() truncated it), naming it."""
        with pytest.raises(TypeError, match=r"'steps_per_epoch' must be an int >= 0 .*; got 2\.5"):
            TrainConfig(steps_per_epoch=2.5, max_epoch=1)


class TestAccumGradNiter:
    """AccumGradOptimizer(opt, niter) as tensorpack's int(niter)."""

    def test_spellings(self):
        """'4' and 4.0 are 4; 2.5 is refused."""
        with tf1.Graph().as_default():
            opt = tf1.train.GradientDescentOptimizer(0.1)
            assert AccumGradOptimizer(opt, "4").niter == 4
            assert AccumGradOptimizer(opt, 4.0).niter == 4
            with pytest.raises(TypeError, match=r"'niter' must be an int >= 1; got float 2\.5"):
                AccumGradOptimizer(opt, 2.5)


class TestTensorInputSize:
    """TensorInput(fn, size) as tensorpack's int(size)."""

    def test_spellings(self):
        """size=100.0 is 100 steps; 'many' is refused."""
        source = TensorInput(lambda: [tf.zeros([2])], size=100.0)
        assert source.size() == 100
        with pytest.raises(TypeError, match="'size' must be an int or None; got str 'many'"):
            TensorInput(lambda: [tf.zeros([2])], size="many")
