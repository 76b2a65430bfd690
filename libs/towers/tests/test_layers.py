"""Graph-mode layers from tf-keras: enabling them, argscope on them, and the tower rules they follow."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.towers import (
    LayersUnavailableError,
    TowerContext,
    argscope,
    check_tf_keras_version,
    custom_getter_scope,
    enable_argscope_for_module,
    enable_tf_layers,
    freeze_variables,
    remap_variables,
)
from towerkit.towers.compat import tf1

tf_keras = pytest.importorskip("tf_keras", reason="the layers tests need towerkit-towers[layers]")


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh Python process (TensorFlow's Keras routing is per process)."""
    full_env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    full_env.update({"TF_CPP_MIN_LOG_LEVEL": "3", **env})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def layers():
    """``tf.compat.v1.layers`` from tf-keras, argscope-enabled."""
    module = enable_tf_layers()
    enable_argscope_for_module(tf1.layers)
    return module


class TestCheckTfKerasVersion:
    """check_tf_keras_version: tf-keras goes with the TensorFlow of the same major.minor."""

    def test_fail(self):
        """Another minor version names both versions and the fix."""
        with pytest.raises(
            LayersUnavailableError,
            match=r"tf-keras 2\.20\.1 does not match TensorFlow 2\.21\.0: expected tf-keras "
            r"2\.21\.x \(pip install 'tf-keras~=2\.21\.0'\)",
        ):
            check_tf_keras_version("2.21.0", "2.20.1")

    @given(
        st.tuples(st.integers(2, 3), st.integers(0, 40), st.integers(0, 9)),
        st.tuples(st.integers(2, 3), st.integers(0, 40), st.integers(0, 9)),
    )
    def test_matches_on_major_minor(self, tf_v, keras_v):
        """It passes exactly when major and minor agree, whatever the patch versions."""
        tf_s, keras_s = ".".join(map(str, tf_v)), ".".join(map(str, keras_v))
        if tf_v[:2] == keras_v[:2]:
            check_tf_keras_version(tf_s, keras_s)
        else:
            with pytest.raises(LayersUnavailableError):
                check_tf_keras_version(tf_s, keras_s)


@pytest.mark.procs
@pytest.mark.slow
class TestEnableTfLayers:
    """enable_tf_layers: tf.compat.v1.layers routed to tf-keras, the rest of Keras left alone."""

    def test_routes_to_tf_keras(self, layers):
        """The module and tf.compat.v1.layers.conv2d come from tf-keras."""
        assert layers.__name__.startswith("tf_keras")
        assert tf1.layers.conv2d.__module__.startswith("tf_keras")

    def test_environment_unchanged(self, layers):
        """TF_USE_LEGACY_KERAS is as before (unset in this test process), and a second call is fine."""
        del layers
        before = os.environ.get("TF_USE_LEGACY_KERAS")
        again = enable_tf_layers()
        assert again.conv2d is tf1.layers.conv2d
        assert os.environ.get("TF_USE_LEGACY_KERAS") == before

    def test_keras_3_stays_for_tf_keras(self):
        """In a fresh process, tf.keras is still Keras 3 after enable_tf_layers()."""
        proc = _run_python(
            """
            from towerkit.towers import enable_tf_layers
            import tensorflow as tf
            enable_tf_layers()
            print(tf.compat.v1.layers.dense.__module__.split(".")[0], tf.keras.__version__[0])
            """
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["tf_keras", "3"]

    def test_legacy_keras_variable_routes_everything(self):
        """With TF_USE_LEGACY_KERAS=1 set, argscope works without the call, and tf.keras is tf-keras too."""
        proc = _run_python(
            """
            import tensorflow as tf
            from towerkit.towers import argscope, enable_argscope_for_module
            tf1 = tf.compat.v1
            tf1.disable_eager_execution()
            enable_argscope_for_module(tf1.layers)
            x = tf1.placeholder(tf.float32, [None, 6, 6, 2])
            with argscope([tf1.layers.conv2d], filters=3, kernel_size=2):
                y = tf1.layers.conv2d(x)
            print(y.shape[-1], tf.keras.__name__.split(".")[0])
            """,
            TF_USE_LEGACY_KERAS="1",
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["3", "tf_keras"]

    def test_fail_without_tf_keras(self):
        """Without tf-keras the error names the missing package and the extra."""
        proc = _run_python(
            """
            import sys
            sys.modules["tf_keras"] = None  # as if tf-keras were not installed
            from towerkit.towers import LayersUnavailableError, enable_tf_layers
            try:
                enable_tf_layers()
            except LayersUnavailableError as err:
                print(err)
            """
        )
        assert proc.returncode == 0, proc.stderr
        assert "needs the tf-keras package (Keras 2), which is not installed" in proc.stdout
        assert "towerkit-towers[layers]" in proc.stdout

    def test_fail_after_keras_3_resolution(self):
        """Layers first touched under Keras 3: the error says to enable them first."""
        proc = _run_python(
            """
            import tensorflow as tf
            from towerkit.towers import LayersUnavailableError, enable_tf_layers
            try:
                tf.compat.v1.layers.conv2d
            except AttributeError:
                pass
            try:
                enable_tf_layers()
            except LayersUnavailableError as err:
                print(err)
            """
        )
        assert proc.returncode == 0, proc.stderr
        assert "already resolved to keras_3" in proc.stdout
        assert "call enable_tf_layers() before any use" in proc.stdout

    def test_fail_argscope_without_tf_keras_routing(self):
        """enable_argscope_for_module on Keras 3's tf.compat.v1.layers says how to fix it."""
        proc = _run_python(
            """
            import tensorflow as tf
            from towerkit.towers import LayersUnavailableError, enable_argscope_for_module
            try:
                enable_argscope_for_module(tf.compat.v1.layers)
            except LayersUnavailableError as err:
                print(err)
            """
        )
        assert proc.returncode == 0, proc.stderr
        assert "cannot enable argscope for" in proc.stdout
        assert "install 'towerkit-towers[layers]'" in proc.stdout
        assert "enable_tf_layers()" in proc.stdout


class TestArgscopeOnLayers:
    """argscope defaults reach tf.compat.v1.layers functions."""

    def test_conv2d_gets_required_arguments(self, layers, graph):
        """filters and kernel_size come from the scope; a call's own argument wins."""
        del layers
        x = tf1.placeholder(tf1.float32, [None, 8, 8, 1])
        with argscope([tf1.layers.conv2d], filters=4, kernel_size=3, padding="same"):
            y = tf1.layers.conv2d(x, name="c1")
            z = tf1.layers.conv2d(y, filters=2, name="c2")
        assert y.shape.as_list() == [None, 8, 8, 4]
        assert z.shape.as_list() == [None, 8, 8, 2]
        shapes = {v.op.name: v.shape.as_list() for v in tf1.global_variables()}
        assert shapes["c1/kernel"] == [3, 3, 1, 4]
        assert shapes["c2/kernel"] == [3, 3, 4, 2]

    def test_nested_scopes_and_names(self, layers, graph):
        """Inner scopes win; a layer may be named by string."""
        del layers
        x = tf1.placeholder(tf1.float32, [None, 5])
        with argscope("dense", units=3, use_bias=False), argscope([tf1.layers.dense], units=7):
            y = tf1.layers.dense(x, name="fc")
        assert y.shape.as_list() == [None, 7]
        assert [v.op.name for v in tf1.global_variables()] == ["fc/kernel"]

    def test_unknown_argument(self, layers):
        """An argument conv2d does not take is refused when the scope opens."""
        del layers
        with (
            pytest.raises(TypeError, match=r"'conv2d' takes no arguments \['kernel'\]"),
            argscope([tf1.layers.conv2d], kernel=3),
        ):
            pass


def _model(x, training: bool):
    """A small conv net with batch norm, in tf.compat.v1.layers."""
    with argscope([tf1.layers.conv2d], filters=4, kernel_size=3, padding="same"):
        h = tf1.layers.conv2d(x, name="conv")
        h = tf1.layers.batch_normalization(h, training=training, name="bn")
    return tf1.layers.dense(tf1.layers.flatten(tf1.nn.relu(h)), 3, name="fc")


class TestTowerRules:
    """tf.compat.v1.layers variables and update ops follow the towers."""

    def _towers(self, vs_names):
        x = tf1.placeholder(tf1.float32, [None, 4, 4, 1])
        n = len(vs_names)
        ctxs = []
        for k, vs in enumerate(vs_names):
            ctx = TowerContext(f"tower{k}", is_training=True, vs_name=vs, index=k, total=n)
            with ctx:
                _model(x, training=True)
            ctxs.append(ctx)
        return ctxs

    def test_shared_variables(self, layers, graph):
        """A second tower without its own scope reuses the first tower's variables."""
        del layers
        self._towers(["", ""])
        names = sorted(v.op.name for v in tf1.global_variables())
        assert names == sorted(
            [
                "conv/kernel",
                "conv/bias",
                "bn/gamma",
                "bn/beta",
                "bn/moving_mean",
                "bn/moving_variance",
                "fc/kernel",
                "fc/bias",
            ]
        )

    def test_update_ops_of_first_tower_only(self, layers, graph):
        """Both towers make batch-norm updates; UPDATE_OPS keeps tower 0's (replicated copies)."""
        del layers
        ctxs = self._towers(["", "tower1"])
        assert any(v.op.name == "tower1/bn/moving_mean" for v in tf1.global_variables())
        update = tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)
        assert len(update) == 2
        assert all(op.name.startswith("tower0/") for op in update)
        assert len(ctxs[1].get_collection_in_tower(tf1.GraphKeys.UPDATE_OPS)) == 2

    def test_inference_tower_reuses(self, layers, graph):
        """An inference tower after training creates no variable and no update op."""
        del layers
        self._towers([""])
        before = len(tf1.global_variables())
        with TowerContext("infer", is_training=False):
            _model(tf1.placeholder(tf1.float32, [None, 4, 4, 1]), training=False)
        assert len(tf1.global_variables()) == before
        assert len(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)) == 2

    def test_freeze_variables(self, layers, graph):
        """Layers built under freeze_variables are not trainable and get no gradient."""
        del layers
        x = tf1.placeholder(tf1.float32, [None, 4])
        with freeze_variables(stop_gradient=True, skip_collection=True):
            h = tf1.layers.dense(x, 3, name="frozen")
        y = tf1.layers.dense(h, 1, name="head")
        assert sorted(v.op.name for v in tf1.trainable_variables()) == ["head/bias", "head/kernel"]
        frozen = [v for v in tf1.global_variables() if v.op.name.startswith("frozen/")]
        assert len(frozen) == 2
        assert tf1.gradients(tf1.reduce_sum(y), frozen) == [None, None]

    def test_remap_variables(self, layers, graph, sess):
        """remap_variables changes what the layer computes with."""
        del layers
        x = tf1.placeholder(tf1.float32, [None, 4])
        with remap_variables(lambda v: v * 0.0 + 1.0):
            y = tf1.layers.dense(x, 2, name="ones")
        sess.run(tf1.global_variables_initializer())
        out = sess.run(y, {x: np.arange(8, dtype=np.float32).reshape(2, 4)})
        np.testing.assert_allclose(out, [[7.0, 7.0], [23.0, 23.0]])

    def test_custom_getter_scope(self, layers, graph):
        """A custom getter sees every variable a layer creates."""
        del layers
        seen = []

        def getter(getter, name, *args, **kwargs):
            seen.append(name)
            return getter(name, *args, **kwargs)

        x = tf1.placeholder(tf1.float32, [None, 4, 4, 1])
        with custom_getter_scope(getter):
            _model(x, training=True)
        assert seen[:2] == ["conv/kernel", "conv/bias"]
        assert {"bn/gamma", "bn/moving_mean", "fc/kernel"} <= set(seen)
