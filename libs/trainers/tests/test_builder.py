"""The data-parallel building blocks for custom trainers, on logical CPU devices."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.towers import get_current_tower_context, resolve_devices, session_config_for_devices
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    DataParallelBuilder,
    LeastLoadedDeviceSetter,
    TowerVariableMismatchError,
    aggregate_grads,
    allreduce_grads,
    make_replicas_local,
    sync_replicas_op,
)


def _session(graph, n=2):
    config = session_config_for_devices(resolve_devices(n, num_visible_gpus=0))
    return tf1.Session(graph=graph, config=config)


def _tower_grads(x_values):
    """A tower: w (shape [2]) and the gradient of sum(w * x) for this tower's x."""

    def tower():
        w = tf1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        k = get_current_tower_context().index
        cost = tf.reduce_sum(w * tf.constant(x_values[k], tf.float32))
        return [(tf1.gradients(cost, [w])[0], w)]

    return tower


class TestDataParallelBuilder:
    """DataParallelBuilder: one training tower per device from resolve_devices."""

    def test_repr(self):
        """The repr lists the devices."""
        devices = resolve_devices(2)
        assert repr(DataParallelBuilder(2)) == f"DataParallelBuilder(devices={list(devices)})"

    def test_towers(self, graph):
        """Each call runs in its own training tower context, on its device, in order."""
        seen = []

        def func():
            ctx = get_current_tower_context()
            seen.append((ctx.name, ctx.index, ctx.total, ctx.is_training, ctx.vs_name))
            return tf.constant(0.0, name="c").device

        devices = DataParallelBuilder.call_for_each_tower(2, func)
        assert seen == [("tower0", 0, 2, True, ""), ("tower1", 1, 2, True, "")]
        assert [tf.DeviceSpec.from_string(d).device_index for d in devices] == [0, 1]

    def test_shared_and_replicated_variables(self, graph):
        """Without use_vs the towers share one variable; with it each later tower has a copy."""
        DataParallelBuilder.build_on_towers(2, _tower_grads([[1.0, 1.0], [3.0, 3.0]]))
        assert [v.op.name for v in tf1.global_variables()] == ["w"]
        with tf.Graph().as_default():
            DataParallelBuilder.call_for_each_tower(
                2, _tower_grads([[1.0, 1.0], [3.0, 3.0]]), use_vs=[False, True]
            )
            assert [v.op.name for v in tf1.global_variables()] == ["w", "tower1/w"]

    def test_fail(self):
        """Not one device or flag per tower is refused, naming the argument."""
        with pytest.raises(ValueError, match=r"'devices' must hold one device per tower \(2\)"):
            DataParallelBuilder.call_for_each_tower(2, lambda: None, devices=["/cpu:0"])
        with pytest.raises(ValueError, match=r"'use_vs' must hold one bool per tower \(2\); got 3"):
            DataParallelBuilder.call_for_each_tower(2, lambda: None, use_vs=[True] * 3)
        with pytest.raises(TypeError, match=r"'use_vs' must hold bools; entries at fault: 1: 'x'"):
            DataParallelBuilder.call_for_each_tower(2, lambda: None, use_vs=[True, "x"])
        with pytest.raises(ValueError, match=r"'gpus' as a count must be >= 1"):
            DataParallelBuilder(0)


class TestLeastLoadedDeviceSetter:
    """LeastLoadedDeviceSetter: variables to the least loaded device, other ops to the worker."""

    def test_repr(self):
        """The repr shows the devices and the loads."""
        setter = LeastLoadedDeviceSetter("/cpu:0", ["/cpu:0", "/cpu:1"])
        assert repr(setter) == (
            "LeastLoadedDeviceSetter(worker_device='/cpu:0', ps_devices=['/cpu:0', '/cpu:1'], "
            "loads=[0, 0])"
        )

    def test_fail(self):
        """Empty ps devices, a bad worker device or loads of another length are refused."""
        with pytest.raises(ValueError, match=r"'ps_devices' must be a non-empty list"):
            LeastLoadedDeviceSetter("/cpu:0", [])
        with pytest.raises(TypeError, match=r"'worker_device' must be a device string; got int"):
            LeastLoadedDeviceSetter(0, ["/cpu:0"])
        with pytest.raises(ValueError, match=r"'loads' needs one entry per ps device \(2\)"):
            LeastLoadedDeviceSetter("/cpu:0", ["/cpu:0", "/cpu:1"], [0])

    @settings(max_examples=15, deadline=None)
    @given(st.lists(st.integers(1, 50), min_size=1, max_size=8))
    def test_balances(self, sizes):
        """Each variable goes where the fewest bytes are; the loads end within one variable."""
        setter = LeastLoadedDeviceSetter("/cpu:0", ["/cpu:0", "/cpu:1"])
        with tf.Graph().as_default(), tf1.device(setter):
            made = [tf1.get_variable(f"v{i}", [n]) for i, n in enumerate(sizes)]
            other = tf.identity(made[0])
        assert sum(setter.loads) == 4 * sum(sizes)
        assert abs(setter.loads[0] - setter.loads[1]) <= 4 * max(sizes)
        assert tf.DeviceSpec.from_string(other.device).device_index == 0
        assert tf.DeviceSpec.from_string(made[0].device).device_index == 0


class TestAggregateGrads:
    """aggregate_grads: shared variables' gradients summed or averaged over the towers."""

    def test_average_and_sum(self, graph):
        """The mean (or sum) of the towers' gradients, next to the variable."""
        grads = DataParallelBuilder.call_for_each_tower(2, _tower_grads([[1, 2], [3, 6]]))
        (avg, var) = aggregate_grads(grads)[0]
        (total, _) = aggregate_grads(grads, colocation=False, average=False)[0]
        (spread, _) = aggregate_grads(grads, colocation=False, devices=["/cpu:1"])[0]
        assert var.op.name == "w"
        assert tf.DeviceSpec.from_string(spread.device).device_index == 1
        with _session(graph) as sess:
            sess.run(tf1.global_variables_initializer())
            np.testing.assert_allclose(sess.run(avg), [2.0, 4.0])
            np.testing.assert_allclose(sess.run(total), [4.0, 8.0])

    def test_fail(self, graph):
        """Both colocation and devices, or towers with different variables, are refused."""
        grads = DataParallelBuilder.call_for_each_tower(2, _tower_grads([[1, 2], [3, 6]]))
        with pytest.raises(ValueError, match=r"give 'colocation=True' or 'devices', not both"):
            aggregate_grads(grads, colocation=True, devices=["/cpu:0"])
        with pytest.raises(TowerVariableMismatchError, match=r"'w' in towers \[0\] only"):
            aggregate_grads([grads[0], []])
        with pytest.raises(TypeError, match=r"'all_grads' must be a non-empty list"):
            aggregate_grads([])


class TestReplicated:
    """allreduce_grads, make_replicas_local and sync_replicas_op: a replicated trainer's steps."""

    def _build(self):
        per_tower = DataParallelBuilder.call_for_each_tower(
            2, _tower_grads([[1, 2], [3, 6]]), use_vs=[False, True]
        )
        reduced = allreduce_grads(per_tower, resolve_devices(2), average=True, mode="cpu")
        opt = tf1.train.GradientDescentOptimizer(0.5)
        train_op = opt.apply_gradients([p for tower in reduced for p in tower])
        return reduced, train_op

    def test_allreduce(self, graph):
        """Every tower gets the mean gradient, paired with its own copy, on its own device."""
        reduced, _ = self._build()
        assert [[v.op.name for _, v in tower] for tower in reduced] == [["w"], ["tower1/w"]]
        assert [tf.DeviceSpec.from_string(g.device).device_index for ((g, _),) in reduced] == [0, 1]
        with _session(graph) as sess:
            sess.run(tf1.global_variables_initializer())
            for ((g, _),) in reduced:
                np.testing.assert_allclose(sess.run(g), [2.0, 4.0])

    def test_copies_stay_local_and_in_sync(self, graph):
        """Replicas leave the global collections; the sync op and the all-reduced steps keep them equal."""
        _, train_op = self._build()
        moved = make_replicas_local(graph, 2)
        assert [v.op.name for v in moved] == ["tower1/w"]
        assert [v.op.name for v in tf1.global_variables()] == ["w"]
        assert [v.op.name for v in tf1.local_variables()] == ["tower1/w"]
        sync = sync_replicas_op()
        with _session(graph) as sess:
            sess.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
            sess.run(tf1.assign(moved[0], [9.0, 9.0]))
            sess.run(sync)
            sess.run(train_op)
            w, w1 = sess.run([tf1.global_variables()[0], moved[0]])
        np.testing.assert_allclose(w, [0.0, 0.0])
        np.testing.assert_array_equal(w, w1)

    def test_fail(self, graph):
        """Not one device per tower is refused."""
        per_tower = DataParallelBuilder.call_for_each_tower(
            2, _tower_grads([[1, 2], [3, 6]]), use_vs=[False, True]
        )
        with pytest.raises(ValueError, match=r"'devices' must hold one device per tower \(2\)"):
            allreduce_grads(per_tower, ["/cpu:0"])
        with pytest.raises(ValueError, match=r"'mode' must be None \(automatic\) or one of"):
            allreduce_grads(per_tower, resolve_devices(2), mode="ring")
