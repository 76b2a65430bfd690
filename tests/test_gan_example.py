"""The custom-trainer example: a two-cost GAN trainer composed from towerkit's primitives."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from example_modules import load_example

pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("test_gan_example")]

EPOCHS, STEPS = 2, 40


@pytest.fixture(scope="module")
def gan_run(tmp_path_factory):
    """A short run of the GAN example: 2 epochs of 40 steps."""
    gan = load_example("gan")
    logdir = str(tmp_path_factory.mktemp("gan") / "log")
    trainer = gan.train(logdir, EPOCHS, STEPS)
    return gan, trainer, logdir


def _initial_values(gan) -> dict[str, np.ndarray]:
    """The variables of a freshly initialized GAN model (same seeds as the example)."""
    import tensorflow as tf

    from towerkit.towers import TowerContext, TowerFunc, build_placeholders

    tf1 = tf.compat.v1
    model = gan.GANModel()
    graph = tf.Graph()
    with graph.as_default():
        func = TowerFunc(model.build_graph, model.inputs())
        with TowerContext("", is_training=True):
            func(*build_placeholders(func.input_signature))
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            return {v.op.name: sess.run(v) for v in tf1.trainable_variables()}


@pytest.mark.slow
class TestGANExample:
    """What the custom trainer does in a real run."""

    def test_two_hooked_runs_per_step(self, gan_run):
        """Each step is a discriminator run and a generator run: the global step counts both."""
        _, trainer, _ = gan_run
        assert trainer.global_step == 2 * EPOCHS * STEPS

    def test_statistics_each_epoch(self, gan_run):
        """Both costs and the distribution gaps reach stats.json once per epoch."""
        _, _, logdir = gan_run
        with open(os.path.join(logdir, "stats.json")) as f:
            records = json.load(f)
        assert [(r["epoch_num"], r["global_step"]) for r in records] == [(1, 80), (2, 160)]
        for r in records:
            assert {"d_loss", "g_loss", "mean_gap", "std_gap"} <= set(r)
            assert all(np.isfinite(r[k]) for k in ("d_loss", "g_loss", "mean_gap", "std_gap"))

    def test_generator_moves_to_the_data(self, gan_run):
        """The generated mean ends far closer to the real mean than where it started."""
        gan, trainer, _ = gan_run
        start_gap = float(np.linalg.norm(gan.REAL_MEAN))
        assert trainer.monitors.get_latest("mean_gap") < 0.5 * start_gap

    def test_both_players_trained(self, gan_run):
        """The last checkpoint holds both players' variables, each changed from its start."""
        import tensorflow as tf

        gan, _, logdir = gan_run
        reader = tf.train.load_checkpoint(os.path.join(logdir, f"model-{2 * EPOCHS * STEPS}"))
        initial = _initial_values(gan)
        assert {n.split("/")[0] for n in initial} == {"gen", "discrim"}
        for name, value in initial.items():
            assert not np.allclose(reader.get_tensor(name), value), name

    def test_sampler_tower_shares_variables(self, gan_run):
        """The sampler tower reuses the generator's variables: no new trainable variables."""
        _, trainer, _ = gan_run
        import tensorflow as tf

        with trainer.graph.as_default():
            names = [v.op.name for v in tf.compat.v1.trainable_variables()]
        assert len(names) == 12
        assert all(n.startswith(("gen/", "discrim/")) for n in names)
