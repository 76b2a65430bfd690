"""BatchNorm and BatchRenorm: statistics, moving averages, towers, synchronized statistics."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from layers_session import initialize

from towerkit.layers import BatchNorm, BatchRenorm
from towerkit.layers._norm_rules import (
    EmaPlan,
    bn_axis,
    broadcast_shape,
    check_virtual_batch_size,
    ema_plan,
    reduction_axes,
    sync_key,
)
from towerkit.towers import TowerContext, argscope
from towerkit.towers.compat import tf1

UPDATE = tf1.GraphKeys.UPDATE_OPS
RNG = np.random.default_rng(0)


def _x(shape, loc=2.0, scale=3.0):
    return (RNG.normal(size=shape) * scale + loc).astype(np.float32)


def _names(key):
    return [v.op.name for v in tf1.get_collection(key)]


def _var(name):
    """The global variable named `name` (fetch it, not its name: it may be a resource)."""
    (var,) = [v for v in tf1.global_variables() if v.op.name == name]
    return var


def _bn_numpy(x, axes, eps=1e-5):
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


class TestBatchNormTraining:
    """BatchNorm in a training tower."""

    @pytest.mark.parametrize("fmt", ["NHWC", "NCHW", "channels_last", "channels_first"])
    def test_normalizes_with_batch_statistics(self, sess, fmt):
        """The output is the input normalized per channel over the batch and spatial axes."""
        shape = (4, 3, 5, 5) if fmt in ("NCHW", "channels_first") else (4, 5, 5, 3)
        axes = (0, 2, 3) if fmt in ("NCHW", "channels_first") else (0, 1, 2)
        x = tf1.placeholder(tf1.float32, shape)
        with TowerContext("", is_training=True):
            y = BatchNorm("bn", x, data_format=fmt)
        initialize(sess)
        value = _x(shape)
        np.testing.assert_allclose(sess.run(y, {x: value}), _bn_numpy(value, axes), atol=1e-4)
        assert y.name == "bn/output:0"

    def test_variables_and_collections(self, graph):
        """gamma, beta trainable; mean/EMA, variance/EMA model variables; two UPDATE_OPS."""
        x = tf1.placeholder(tf1.float32, (None, 4, 4, 3))
        with TowerContext("", is_training=True):
            y = BatchNorm("bn", x)
        assert _names(tf1.GraphKeys.GLOBAL_VARIABLES) == [
            "bn/gamma",
            "bn/beta",
            "bn/mean/EMA",
            "bn/variance/EMA",
        ]
        assert _names(tf1.GraphKeys.TRAINABLE_VARIABLES) == ["bn/gamma", "bn/beta"]
        assert _names(tf1.GraphKeys.MODEL_VARIABLES) == ["bn/mean/EMA", "bn/variance/EMA"]
        assert len(tf1.get_collection(UPDATE)) == 2
        assert y.variables.gamma.op.name == "bn/gamma"
        assert y.variables.moving_mean is y.variables.mean

    def test_update_ops_move_the_averages(self, sess):
        """Running UPDATE_OPS moves the averages by momentum toward the batch statistics."""
        x = tf1.placeholder(tf1.float32, (8, 3))
        with TowerContext("", is_training=True):
            BatchNorm("bn", x, momentum=0.8)
        initialize(sess)
        value = _x((8, 3))
        sess.run(tf1.get_collection(UPDATE), {x: value})
        mean, var = sess.run([_var("bn/mean/EMA"), _var("bn/variance/EMA")])
        np.testing.assert_allclose(mean, 0.2 * value.mean(0), rtol=1e-5)
        np.testing.assert_allclose(var, 0.8 + 0.2 * value.var(0), rtol=1e-5)

    def test_4d_average_follows_the_sample_variance(self, sess):
        """On 4-D inputs the variance average follows the Bessel-corrected variance (fused op)."""
        x = tf1.placeholder(tf1.float32, (2, 2, 2, 1))
        with TowerContext("", is_training=True):
            BatchNorm("bn", x, decay=0.0)
        initialize(sess)
        value = _x((2, 2, 2, 1))
        sess.run(tf1.get_collection(UPDATE), {x: value})
        np.testing.assert_allclose(
            sess.run(_var("bn/variance/EMA")), [value.var(ddof=1)], rtol=1e-4
        )

    def test_argscope_sets_defaults(self, sess):
        """An argscope's momentum is used; an explicit argument wins over it."""
        x = tf1.placeholder(tf1.float32, (4, 2))
        with TowerContext("", is_training=True), argscope(BatchNorm, momentum=0.0):
            BatchNorm("a", x)
            BatchNorm("b", x, momentum=1.0)
        initialize(sess)
        value = _x((4, 2))
        sess.run(tf1.get_collection(UPDATE), {x: value})
        np.testing.assert_allclose(sess.run(_var("a/mean/EMA")), value.mean(0), rtol=1e-5)
        np.testing.assert_allclose(sess.run(_var("b/mean/EMA")), [0.0, 0.0])

    def test_aliases(self, graph):
        """use_scale/use_bias/gamma_init/decay/use_local_stat are tensorpack's aliases."""
        x = tf1.placeholder(tf1.float32, (None, 3))
        with TowerContext("", is_training=True):
            y = BatchNorm("bn", x, use_scale=False, use_bias=False, use_local_stat=False)
        assert _names(tf1.GraphKeys.GLOBAL_VARIABLES) == ["bn/mean/EMA", "bn/variance/EMA"]
        assert tf1.get_collection(UPDATE) == []  # use_local_stat=False: no batch statistics
        assert not hasattr(y.variables, "gamma") or y.variables.all() != []

    def test_virtual_batch(self, sess):
        """virtual_batch_size normalizes each group of samples on its own."""
        x = tf1.placeholder(tf1.float32, (4, 3, 3, 2))
        with TowerContext("", is_training=True):
            y = BatchNorm("bn", x, virtual_batch_size=2)
        initialize(sess)
        value = _x((4, 3, 3, 2))
        want = np.concatenate([_bn_numpy(value[:2], (0, 1, 2)), _bn_numpy(value[2:], (0, 1, 2))])
        np.testing.assert_allclose(sess.run(y, {x: value}), want, atol=1e-4)
        assert tf1.get_collection(UPDATE) == []  # its update is internal, as in tensorpack


class TestBatchNormDtypes:
    """Half-precision inputs."""

    @pytest.mark.parametrize("shape", [(4, 3, 3, 2), (4, 2)])
    def test_float16_input_float32_parameters(self, sess, shape):
        """float16 in and out; gamma, beta and the averages stay float32."""
        x = tf1.placeholder(tf1.float16, shape)
        with TowerContext("", is_training=True):
            y = BatchNorm("bn", x)
        assert y.dtype == tf1.float16
        assert {v.dtype.base_dtype for v in tf1.global_variables()} == {tf1.float32}
        initialize(sess)
        value = _x(shape)
        axes = tuple(range(len(shape) - 1))
        got = sess.run(y, {x: value.astype(np.float16)})
        np.testing.assert_allclose(got, _bn_numpy(value, axes), atol=2e-2)


class TestBatchNormEma:
    """The ema_update modes and the towers."""

    def test_internal_update_runs_with_the_output(self, sess):
        """ema_update='internal' moves the averages whenever the output is computed."""
        x = tf1.placeholder(tf1.float32, (4, 2))
        with TowerContext("", is_training=True):
            y = BatchNorm("bn", x, ema_update="internal", momentum=0.0)
        assert tf1.get_collection(UPDATE) == []
        initialize(sess)
        value = _x((4, 2))
        sess.run(y, {x: value})
        np.testing.assert_allclose(sess.run(_var("bn/mean/EMA")), value.mean(0), rtol=1e-5)

    def test_skip(self, sess):
        """ema_update='skip' never moves the averages."""
        x = tf1.placeholder(tf1.float32, (4, 2))
        with TowerContext("", is_training=True):
            y = BatchNorm("bn", x, ema_update="skip")
        assert tf1.get_collection(UPDATE) == []
        initialize(sess)
        sess.run(y, {x: _x((4, 2))})
        np.testing.assert_allclose(sess.run(_var("bn/mean/EMA")), [0.0, 0.0])

    def test_inference_tower_uses_the_averages(self, sess):
        """An inference tower normalizes with mean/EMA and variance/EMA and updates nothing."""
        x = tf1.placeholder(tf1.float32, (None, 2, 2, 3))
        with TowerContext("", is_training=False):
            y = BatchNorm("bn", x, epsilon=1e-3)
        assert tf1.get_collection(UPDATE) == []
        assert tf1.get_collection(tf1.GraphKeys.MODEL_VARIABLES) == []
        initialize(sess)
        mean, var = np.array([1.0, 2.0, 3.0]), np.array([4.0, 1.0, 0.25])
        tf1.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)[2].load(mean, sess)
        tf1.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)[3].load(var, sess)
        value = _x((2, 2, 2, 3))
        want = (value - mean) / np.sqrt(var + 1e-3)
        np.testing.assert_allclose(sess.run(y, {x: value}), want, rtol=1e-4, atol=1e-5)

    def test_second_training_tower_reuses_and_does_not_update(self, graph):
        """A later training tower shares the variables and adds nothing to UPDATE_OPS."""
        x = tf1.placeholder(tf1.float32, (None, 3))
        for i in range(2):
            with TowerContext(f"tower{i}", is_training=True, index=i, total=2):
                BatchNorm("bn", x)
        assert len(tf1.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)) == 4
        updates = tf1.get_collection(UPDATE)
        assert len(updates) == 2
        assert all(op.name.startswith("tower0/") for op in updates)

    def test_outside_a_tower_needs_training(self, graph):
        """Without a tower context, `training` must be given."""
        x = tf1.placeholder(tf1.float32, (None, 3))
        with pytest.raises(ValueError, match="no tower context tells training from inference"):
            BatchNorm("bn", x)
        BatchNorm("bn2", x, training=True)
        assert len(tf1.get_collection(UPDATE)) == 2


class TestBatchNormFail:
    """Bad arguments get clear errors."""

    @pytest.mark.parametrize(
        ("kwargs", "shape", "match"),
        [
            ({"ema_update": "always"}, (None, 3), "'ema_update' must be one of"),
            ({"sync_statistics": "gloo"}, (None, 3), "'sync_statistics' must be None, 'nccl'"),
            ({"axis": 2}, (None, 2, 2, 3), "'axis' must be 1 or 3"),
            ({}, (None, 2, 3), "the input must be 2-D or 4-D; got shape"),
            ({"data_format": "HWC"}, (None, 3), "'data_format' must be one of"),
            ({"virtual_batch_size": 3}, (4, 3), r"'virtual_batch_size' \(3\) must divide"),
            ({"virtual_batch_size": 2, "sync_statistics": "nccl"}, (4, 3), "cannot be used"),
        ],
    )
    def test_fail(self, graph, kwargs, shape, match):
        """Each bad argument names itself and what was expected."""
        x = tf1.placeholder(tf1.float32, shape)
        with TowerContext("", is_training=True), pytest.raises(ValueError, match=match):
            BatchNorm("bn", x, **kwargs)

    def test_internal_update_is_not_an_argument(self, graph):
        """internal_update (older tensorpack) is refused with the replacement."""
        x = tf1.placeholder(tf1.float32, (None, 3))
        with TowerContext("", is_training=True), pytest.raises(TypeError, match="ema_update"):
            BatchNorm("bn", x, internal_update=True)

    def test_alias_clash(self, graph):
        """An alias and its target together are refused."""
        x = tf1.placeholder(tf1.float32, (None, 3))
        with TowerContext("", is_training=True), pytest.raises(TypeError, match="'decay'"):
            BatchNorm("bn", x, decay=0.9, momentum=0.9)

    @pytest.mark.skipif(
        importlib.util.find_spec("horovod") is not None, reason="horovod is installed here"
    )
    def test_horovod_missing(self, graph):
        """sync_statistics='horovod' without horovod says what is missing."""
        x = tf1.placeholder(tf1.float32, (None, 3))
        with TowerContext("", is_training=True), pytest.raises(ImportError, match="needs horovod"):
            BatchNorm("bn", x, sync_statistics="horovod")


def _two_towers(build, devices=("/cpu:0", "/cpu:1")):
    outs = []
    for i, dev in enumerate(devices):
        with (
            tf1.device(dev),
            TowerContext(f"tower{i}", is_training=True, vs_name=f"tower{i}", index=i, total=2),
        ):
            outs.append(build(i))
    return outs


class TestSyncStatistics:
    """sync_statistics='nccl': statistics averaged over the towers (logical CPUs here)."""

    def test_towers_normalize_with_the_global_batch(self):
        """Each tower's output and gradient equal those of BatchNorm on the whole batch."""
        value = _x((8, 3, 3, 2))
        graph = tf1.Graph()
        with graph.as_default():
            xs = [tf1.placeholder(tf1.float32, (4, 3, 3, 2), name=f"x{i}") for i in range(2)]

            def build(i):
                y = BatchNorm("bn", xs[i], sync_statistics="nccl", momentum=0.0)
                loss = tf1.reduce_sum(tf1.sin(y) * y)
                return y, tf1.gradients(loss, xs[i])[0]

            outs = _two_towers(build)
            assert tf1.get_collection(UPDATE) == []  # synced statistics update internally
            config = tf1.ConfigProto(device_count={"CPU": 2})
            with tf1.Session(graph=graph, config=config) as sess:
                sess.run(tf1.global_variables_initializer())
                feed = {xs[0]: value[:4], xs[1]: value[4:]}
                (y0, g0), (y1, g1) = sess.run(outs, feed)
                ema = sess.run([_var("tower0/bn/mean/EMA"), _var("tower1/bn/mean/EMA")])
        ref_graph = tf1.Graph()
        with ref_graph.as_default():
            x = tf1.placeholder(tf1.float32, (8, 3, 3, 2))
            with TowerContext("", is_training=True):
                y = BatchNorm("bn", x)
            g = tf1.gradients(tf1.reduce_sum(tf1.sin(y) * y), x)[0]
            with tf1.Session(graph=ref_graph) as sess:
                sess.run(tf1.global_variables_initializer())
                want_y, want_g = sess.run([y, g], {x: value})
        np.testing.assert_allclose(np.concatenate([y0, y1]), want_y, atol=1e-4)
        np.testing.assert_allclose(np.concatenate([g0, g1]), want_g, atol=1e-4)
        # the main training tower's averages follow the global batch; the others stay
        np.testing.assert_allclose(ema[0], value.mean((0, 1, 2)), rtol=1e-4)
        np.testing.assert_allclose(ema[1], [0.0, 0.0])

    def test_one_tower_uses_its_own_batch(self, sess):
        """With one tower there is nothing to synchronize: a warning, local statistics."""
        x = tf1.placeholder(tf1.float32, (4, 3))
        with TowerContext("", is_training=True):
            y = BatchNorm("bn1", x, sync_statistics="NCCL")
        assert tf1.get_collection(UPDATE) == []  # the update is internal, as in tensorpack
        initialize(sess)
        value = _x((4, 3))
        np.testing.assert_allclose(sess.run(y, {x: value}), _bn_numpy(value, (0,)), atol=1e-4)
        np.testing.assert_allclose(sess.run(_var("bn1/mean/EMA")), 0.1 * value.mean(0), rtol=1e-4)

    def test_two_towers_on_one_device_is_refused(self, graph):
        """Towers sharing a device would hang the session: refused when building."""
        x = tf1.placeholder(tf1.float32, (4, 3))
        with pytest.raises(ValueError, match="are both on device"):
            _two_towers(lambda i: BatchNorm("bn", x, sync_statistics="nccl"), ("/cpu:0", "/cpu:0"))

    def test_layer_twice_in_a_tower_is_refused(self, graph):
        """One synced layer called twice in a tower is refused."""
        x = tf1.placeholder(tf1.float32, (4, 3))

        def build(i):
            del i
            y = BatchNorm("bn", x, sync_statistics="nccl")
            with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
                return BatchNorm("bn", y, sync_statistics="nccl")

        with pytest.raises(ValueError, match="is called twice in tower 0"):
            _two_towers(build)


class TestBatchRenorm:
    """BatchRenorm's variables and modes."""

    def test_variables_and_updates(self, graph):
        """tf.layers' renorm variable names; two update ops in the main training tower."""
        x = tf1.placeholder(tf1.float32, (None, 2, 2, 3))
        with TowerContext("", is_training=True):
            BatchRenorm("rn", x, rmax=3.0, dmax=5.0)
        assert _names(tf1.GraphKeys.GLOBAL_VARIABLES) == [
            "rn/gamma",
            "rn/beta",
            "rn/moving_mean",
            "rn/moving_variance",
            "rn/moving_stddev",
            "rn/renorm_mean",
            "rn/renorm_stddev",
        ]
        assert len(tf1.get_collection(UPDATE)) == 2

    def test_no_correction_is_batchnorm(self, sess):
        """With r and d clipped to 1 and 0 it normalizes like BatchNorm on the batch."""
        x = tf1.placeholder(tf1.float32, (6, 4))
        with TowerContext("", is_training=True):
            y = BatchRenorm("rn", x, rmax=1.0, dmax=0.0, gamma_initializer=tf1.ones_initializer())
        initialize(sess)
        value = _x((6, 4))
        np.testing.assert_allclose(sess.run(y, {x: value}), _bn_numpy(value, (0,)), atol=1e-4)

    def test_inference_uses_moving_averages(self, sess):
        """An inference tower normalizes with the moving mean and variance."""
        x = tf1.placeholder(tf1.float32, (None, 2, 2, 3))
        with TowerContext("", is_training=False):
            y = BatchRenorm("rn", x, rmax=3.0, dmax=5.0, use_scale=False)
        assert tf1.get_collection(UPDATE) == []
        initialize(sess)
        value = _x((2, 2, 2, 3))
        np.testing.assert_allclose(sess.run(y, {x: value}), value / np.sqrt(1 + 1e-5), rtol=1e-5)


class TestRules:
    """The pure rules behind the layers."""

    @given(st.sampled_from([2, 4]), st.sampled_from(["NHWC", "NCHW"]))
    def test_axis_and_reduction(self, ndims, fmt):
        """The reduction axes are every axis but the channel axis."""
        axis = bn_axis(ndims, fmt, None)
        red = reduction_axes(ndims, axis)
        assert sorted([*red, axis]) == list(range(ndims))
        shape = broadcast_shape(ndims, axis, 7)
        assert shape[axis] == 7
        assert sum(shape) == 7 + ndims - 1

    @given(
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.sampled_from(["default", "collection", "internal", "skip"]),
    )
    def test_ema_plan(self, training, in_tower, tower_training, main, own, mode):
        """No update without batch statistics or with skip; own statistics update internally."""
        plan = ema_plan(
            training=training,
            in_tower=in_tower,
            tower_training=tower_training,
            main_training_tower=main,
            ema_update=mode,
            own_statistics=own,
        )
        assert isinstance(plan, EmaPlan)
        if not training or mode == "skip":
            assert not plan.update
        if plan.update and own:
            assert plan.internal
        if plan.internal:
            assert plan.update
        assert plan.model_variables == (main or not in_tower)

    @given(st.lists(st.sampled_from(["tower0/", "tower12/", "a/", "bn/"]), max_size=5))
    def test_sync_key(self, parts):
        """Tower prefixes never survive in the key, and the key is idempotent."""
        key = sync_key("".join(parts) + "bn")
        assert "tower0/" not in key
        assert "tower12/" not in key
        assert sync_key(key) == key

    @given(st.integers(1, 16), st.integers(1, 64))
    def test_virtual_batch_size(self, v, batch):
        """A virtual batch size is accepted exactly when it divides the batch."""
        if batch % v == 0:
            assert check_virtual_batch_size(v, batch) == v
        else:
            with pytest.raises(ValueError, match="must divide the batch size"):
                check_virtual_batch_size(v, batch)
