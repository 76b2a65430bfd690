"""Device resolution and sessions with logical CPU devices."""

from __future__ import annotations

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from towers_strategies import gpu_ids

from towerkit.towers import (
    TowerContext,
    TowerFunc,
    build_placeholders,
    resolve_devices,
    session_config_for_devices,
    visible_gpu_count,
)
from towerkit.towers._devices import cpu_devices_needed
from towerkit.towers.compat import tf1


class TestResolveDevices:
    """`resolve_devices` maps the documented `gpus` argument to devices."""

    @given(st.integers(1, 8), st.integers(1, 8))
    def test_count(self, n, visible):
        """A count n gives GPUs 0..n-1 when they are visible."""
        if n <= visible:
            assert resolve_devices(n, num_visible_gpus=visible) == tuple(
                f"/gpu:{i}" for i in range(n)
            )
        else:
            with pytest.raises(ValueError, match="are not visible"):
                resolve_devices(n, num_visible_gpus=visible)

    @given(gpu_ids)
    def test_ids(self, ids):
        """Listed ids are kept in order on GPUs, and become /cpu:0..k-1 without GPUs."""
        assert resolve_devices(ids, num_visible_gpus=16) == tuple(f"/gpu:{i}" for i in ids)
        assert resolve_devices(ids, num_visible_gpus=0) == tuple(
            f"/cpu:{k}" for k in range(len(ids))
        )

    @given(st.integers(1, 8) | gpu_ids)
    def test_cpu_fallback_fits_config(self, gpus):
        """The config made for the CPU fallback has a CPU device for every tower."""
        devices = resolve_devices(gpus, num_visible_gpus=0)
        assert cpu_devices_needed(devices) == len(devices)

    def test_fail(self):
        """Bad counts, ids and kinds list what is at fault."""
        with pytest.raises(ValueError, match="as a count must be >= 1; got 0"):
            resolve_devices(0, num_visible_gpus=0)
        with pytest.raises(ValueError, match="'gpus' is empty"):
            resolve_devices([], num_visible_gpus=0)
        with pytest.raises(ValueError, match="must be >= 0; got -1"):
            resolve_devices([0, -1], num_visible_gpus=0)
        with pytest.raises(ValueError, match="repeated: 1"):
            resolve_devices([1, 1], num_visible_gpus=2)
        with pytest.raises(TypeError, match=r"entries at fault: .a., 1\.0"):
            resolve_devices(["a", 1.0], num_visible_gpus=0)
        with pytest.raises(TypeError, match="got True"):
            resolve_devices(True, num_visible_gpus=0)
        with pytest.raises(ValueError, match="GPU ids 2 are not visible: only 2 GPU"):
            resolve_devices([0, 2], num_visible_gpus=2)

    def test_visible_count(self):
        """Without arguments it follows the GPUs TensorFlow sees."""
        n = visible_gpu_count()
        assert n == len(tf.config.list_physical_devices("GPU"))
        assert len(resolve_devices(1)) == 1
        assert resolve_devices(1)[0] == ("/gpu:0" if n else "/cpu:0")


class TestSessionConfig:
    """`session_config_for_devices` makes sessions where the towers' devices exist."""

    def test_runs_on_logical_cpus(self, graph):
        """Ops pinned to /cpu:1 and /cpu:2 run, and those devices exist in the session."""
        devices = resolve_devices(3, num_visible_gpus=0)
        outs = []
        for i, device in enumerate(devices):
            with tf1.device(device):
                outs.append(tf.constant(float(i)) * 2.0)
        config = session_config_for_devices(devices)
        config.allow_soft_placement = False
        with tf1.Session(config=config) as sess:
            names = [d.name for d in sess.list_devices()]
            assert sum(n.endswith(("CPU:0", "CPU:1", "CPU:2")) for n in names) == 3
            assert sess.run(outs) == [0.0, 2.0, 4.0]

    def test_copies_base(self):
        """The base config is kept, copied, and never changed."""
        base = tf1.ConfigProto(intra_op_parallelism_threads=2)
        base.device_count["CPU"] = 5
        config = session_config_for_devices(["/cpu:0", "/cpu:1"], base)
        assert config.intra_op_parallelism_threads == 2
        assert config.device_count["CPU"] == 5
        assert config.allow_soft_placement
        assert not base.allow_soft_placement

    @given(st.lists(st.integers(0, 20), max_size=6))
    def test_cpu_devices_needed(self, indices):
        """The count is one more than the highest CPU index, at least 1; GPUs do not count."""
        devices = [f"/cpu:{i}" for i in indices] + [
            "/gpu:7",
            "/job:w/replica:0/task:1/device:CPU:0",
        ]
        assert cpu_devices_needed(devices) == max([0, *indices]) + 1


class TestMultiTowerEverywhere:
    """Towers placed by `resolve_devices` run in a session from `session_config_for_devices`."""

    def test_two_towers(self, graph):
        """Two shared-variable towers on the resolved devices compute the same values."""
        sig = [tf.TensorSpec([None, 2], tf.float32, "x")]

        def tower(x):
            w = tf1.get_variable("w", [2, 1], initializer=tf1.ones_initializer())
            return tf.reduce_sum(tf.matmul(x, w), name="total")

        func = TowerFunc(tower, sig)
        [x] = build_placeholders(sig)
        devices = resolve_devices(2)
        for i, device in enumerate(devices):
            with tf1.device(device), TowerContext(f"tower{i}", True, index=i, total=2):
                func(x)
        outs = [h.get_tensor("total") for h in func.towers]
        assert [o.device.lower().endswith(d[1:]) for o, d in zip(outs, devices)] == [True, True]
        with tf1.Session(config=session_config_for_devices(devices)) as sess:
            sess.run(tf1.global_variables_initializer())
            assert sess.run(outs, {x: [[1.0, 2.0]]}) == [3.0, 3.0]
