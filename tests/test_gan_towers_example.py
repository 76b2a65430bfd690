"""The multi-device custom-trainer example: a two-cost GAN trainer on 2 towers (logical CPUs here)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from example_modules import load_example

from towerkit.callbacks import Callback

pytestmark = [pytest.mark.procs, pytest.mark.xdist_group("test_gan_towers_example")]

EPOCHS, STEPS = 2, 40


class TraceOneStep(Callback):
    """After the first epoch, run one traced discriminator step: which devices ran which ops."""

    def __init__(self) -> None:
        self.ran: dict[str, list[str]] = {}

    def _trigger(self) -> None:
        if self.ran:
            return
        import tensorflow as tf

        tf1 = tf.compat.v1
        meta = tf1.RunMetadata()
        opts = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        self.trainer.sess.run(self.trainer.d_min, options=opts, run_metadata=meta)
        for dev in meta.step_stats.dev_stats:
            self.ran.setdefault(dev.device, []).extend(n.node_name for n in dev.node_stats)


def _run(tmp_path_factory, mode: str, epochs: int, steps: int):
    gan = load_example("gan_towers")
    logdir = str(tmp_path_factory.mktemp(f"gan_towers_{mode}") / "log")
    n = gan.BATCH_SIZE * steps
    source = gan.NumpyInput(
        [gan.real_points(n), gan.noise(n)], batch_size=gan.BATCH_SIZE, seed=gan.SEED
    )
    import tensorflow as tf

    with tf.Graph().as_default():  # each trainer on a graph of its own
        trainer = gan.MultiTowerGANTrainer(source, gan.GANModel(), towers=2, mode=mode)
        trace = TraceOneStep()
        trainer.train_with_defaults(
            callbacks=[
                gan.ModelSaver(max_to_keep=1),
                gan.ReplicaGap(),
                gan.DistributionGap(),
                trace,
            ],
            steps_per_epoch=steps,
            max_epoch=epochs,
            logdir=logdir,
        )
    return gan, trainer, logdir, trace


@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    """A replicated run: 2 epochs of 40 steps on 2 towers."""
    return _run(tmp_path_factory, "replicated", EPOCHS, STEPS)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A parameter-server run: 1 epoch of 20 steps on 2 towers."""
    return _run(tmp_path_factory, "ps", 1, 20)


def _tower_ops_by_device(ran: dict[str, list[str]]) -> dict[str, set[str]]:
    """Per device kind:index (``CPU:0``), the tower name scopes of the ops it ran."""
    out: dict[str, set[str]] = {}
    for device, nodes in ran.items():
        key = device.rsplit("device:", 1)[-1]
        out.setdefault(key, set()).update(n.split("/")[0] for n in nodes if n.startswith("tower"))
    return out


@pytest.mark.slow
class TestReplicatedGANExample:
    """Each tower trains its own copy with all-reduced gradients; the copies stay equal."""

    def test_towers_on_logical_cpus(self, replicated):
        """Without GPUs the 2 towers go to /cpu:0 and /cpu:1 (from resolve_devices)."""
        _, trainer, _, _ = replicated
        import tensorflow as tf

        if tf.config.list_physical_devices("GPU"):
            assert trainer.builder.devices == ("/gpu:0", "/gpu:1")
        else:
            assert trainer.builder.devices == ("/cpu:0", "/cpu:1")

    def test_both_towers_ran(self, replicated):
        """A traced step ran tower 0's ops on the first device and tower 1's on the second."""
        _, trainer, _, trace = replicated
        by_device = _tower_ops_by_device(trace.ran)
        kind = trainer.builder.devices[0].split(":", 1)[0].strip("/").upper()
        assert "tower0" in by_device[f"{kind}:0"]
        assert "tower1" in by_device[f"{kind}:1"]

    def test_two_hooked_runs_per_step(self, replicated):
        """Each step is a discriminator run and a generator run (the traced run is unhooked)."""
        _, trainer, _, _ = replicated
        assert trainer.global_step == 2 * EPOCHS * STEPS

    def test_copies_stayed_in_sync(self, replicated):
        """After every epoch tower 1's copy equals tower 0's variables (synced only at the start)."""
        _, trainer, logdir, _ = replicated
        with open(os.path.join(logdir, "stats.json")) as f:
            records = json.load(f)
        assert [r["epoch_num"] for r in records] == [1, 2]
        assert [r["replica_gap"] for r in records] == [0.0, 0.0]
        assert len(trainer.replicas) > 12  # tower 1's 12 variables and their Adam slots

    def test_checkpoint_is_one_copy(self, replicated):
        """The checkpoint holds tower 0's variables under plain names, each trained."""
        import tensorflow as tf

        _, _, logdir, _ = replicated
        reader = tf.train.load_checkpoint(os.path.join(logdir, f"model-{2 * EPOCHS * STEPS}"))
        names = set(reader.get_variable_to_shape_map())
        assert not [n for n in names if n.startswith("tower")]
        weights = sorted(n for n in names if n.endswith("/W") and "Adam" not in n)
        assert {n.split("/")[0] for n in weights} == {"gen", "discrim"}
        assert len(weights) == 6

    def test_generator_moves_to_the_data(self, replicated):
        """The generated mean ends far closer to the real mean than where it started."""
        gan, trainer, _, _ = replicated
        assert trainer.monitors.get_latest("mean_gap") < 0.5 * float(np.linalg.norm(gan.REAL_MEAN))


@pytest.mark.slow
class TestSharedGANExample:
    """The towers share one copy, spread over the devices by LeastLoadedDeviceSetter."""

    def test_one_copy_spread_over_devices(self, shared):
        """12 trainable variables, no tower copies, placed on both devices."""
        _, trainer, _, _ = shared
        import tensorflow as tf

        with trainer.graph.as_default():
            variables = tf.compat.v1.trainable_variables()
        assert len(variables) == 12
        assert not trainer.replicas
        devices = {v.device.rsplit(":", 1)[-1] for v in variables}
        assert devices == {"0", "1"}

    def test_both_towers_ran(self, shared):
        """A traced step ran ops of both towers, on both devices."""
        _, trainer, _, trace = shared
        by_device = _tower_ops_by_device(trace.ran)
        kind = trainer.builder.devices[0].split(":", 1)[0].strip("/").upper()
        assert "tower0" in by_device[f"{kind}:0"]
        assert "tower1" in by_device[f"{kind}:1"]
