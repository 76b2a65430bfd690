"""``TrainConfig(seed=..., deterministic=...)``: the same seed twice, the same weights bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers import TrainConfig

PROGRAM = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    from towerkit.trainers import (IterableInput, ModelDesc, NumpyInput,
                                   SimpleTrainer, SyncMultiGPUTrainerParameterServer,
                                   SyncMultiGPUTrainerReplicated, TrainConfig,
                                   launch_train_with_config)

    from towerkit.callbacks import Callback

    tf1 = tf.compat.v1


    class Keep(Callback):
        # the variables at the end of training, before the session closes
        def __init__(self, prefix, into):
            self.prefix, self.into = prefix, into

        def _after_train(self):
            for v in tf1.global_variables():
                self.into[f"{self.prefix}/{v.op.name}"] = self.trainer.sess.run(v)


    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 8, 8, 1), tf.float32, "x"),
                    tf.TensorSpec((None,), tf.int32, "y")]

        def build_graph(self, x, y):
            w = tf1.get_variable("conv/kernel", [3, 3, 1, 4])  # random initial values
            h = tf.nn.relu(tf.nn.conv2d(x, w, 1, "VALID"))
            h = tf.reshape(h, [-1, 6 * 6 * 4])
            h = tf1.nn.dropout(h, rate=0.3)  # seeded from the graph's seed
            logits = tf.matmul(h, tf1.get_variable("fc/kernel", [6 * 6 * 4, 3]))
            return tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                name="cost")

        def optimizer(self):
            return tf1.train.MomentumOptimizer(0.05, 0.9)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 8, 8, 1)).astype(np.float32)
    y = (x.mean(axis=(1, 2, 3)) > 0).astype(np.int32) + (x[:, 0, 0, 0] > 1)

    class Noisy:
        # batches augmented in the input's workers with NumPy's global generator
        def __len__(self):
            return len(x) // 8

        def __getitem__(self, k):
            xs = x[8 * k:8 * k + 8]
            return [xs + np.random.normal(0, 0.1, xs.shape).astype(np.float32), y[8 * k:8 * k + 8]]

    def main():
        out, seed, deterministic = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
        seed = None if seed == "none" else int(seed)
        trainers = {
            "SimpleTrainer": lambda: SimpleTrainer(),
            "SyncMultiGPUTrainerReplicated": lambda: SyncMultiGPUTrainerReplicated(2, mode="cpu"),
            "SyncMultiGPUTrainerParameterServer": lambda: SyncMultiGPUTrainerParameterServer(2),
        }
        weights = {}
        for name, make in trainers.items():
            with tf.Graph().as_default():
                trainer = make()
                data = (IterableInput(Noisy(), workers=2) if name == "SimpleTrainer"
                        else NumpyInput([x, y], batch_size=8, shuffle=True))
                config = TrainConfig(
                    model=Model(), data=data, steps_per_epoch=12, max_epoch=2, logdir=None,
                    callbacks=[Keep(name, weights)], monitors=[], extra_callbacks=[],
                    seed=seed, deterministic=deterministic)
                launch_train_with_config(config, trainer)
        np.savez(out, **weights)

    if __name__ == "__main__":
        main()
    """
)


def run_twice(tmp_path, seeds, deterministic="1"):
    """Train every trainer in one process per seed; the weights each run ended with."""
    (tmp_path / "program.py").write_text(PROGRAM)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    found = []
    for k, seed in enumerate(seeds):
        out = tmp_path / f"run{k}.npz"
        done = subprocess.run(
            [sys.executable, "program.py", str(out), str(seed), deterministic],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        with np.load(out) as got:
            found.append(dict(got))
    return found


@pytest.mark.procs
@pytest.mark.xdist_group("test_seeding")
@pytest.mark.timeout(900)  # three processes, each training three trainers, input workers
def test_the_same_seed_gives_the_same_weights(tmp_path):
    """Two runs with seed=3 and deterministic ops end with the same weights bit for bit on
    every one-process synchronous trainer (random initial values, dropout, a shuffled NumpyInput, an
    IterableInput whose two workers augment with NumPy's generator); seed=4 gives other
    weights on every trainer (the comparison can fail)."""
    first, second, other = run_twice(tmp_path, [3, 3, 4])
    assert sorted(first) == sorted(second)
    trainers = {name.split("/")[0] for name in first}
    assert len(trainers) == 3, trainers
    differ = [n for n in first if not np.array_equal(first[n], second[n])]
    assert not differ, differ
    for trainer in trainers:
        kernel = f"{trainer}/fc/kernel"
        assert not np.array_equal(first[kernel], other[kernel]), trainer


def test_seed_and_deterministic_are_checked():
    """A seed outside NumPy's range, of another type, or determinism without a seed is
    refused when the config is made, naming the option."""
    with pytest.raises(ValueError, match=r"'seed' must be an int in \[0, 2\*\*32\)"):
        TrainConfig(seed=-1)
    with pytest.raises(TypeError, match="'seed' must be an int"):
        TrainConfig(seed=1.5)
    with pytest.raises(TypeError, match="'seed' must be an int"):
        TrainConfig(seed=True)
    with pytest.raises(TypeError, match="'deterministic' must be True or False"):
        TrainConfig(seed=1, deterministic="yes")
    with pytest.raises(ValueError, match="deterministic=True needs a seed"):
        TrainConfig(deterministic=True)


@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_seed_range(seed):
    """Every int in [0, 2**32) is a seed (config.seed keeps it); every other int is refused."""
    if 0 <= seed < 2**32:
        assert TrainConfig(seed=seed, deterministic=True).seed == seed
    else:
        with pytest.raises(ValueError, match="'seed'"):
            TrainConfig(seed=seed)
