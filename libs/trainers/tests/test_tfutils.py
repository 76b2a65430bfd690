"""The default session config, the global step and the TensorFlow version."""

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.towers.compat import tf1
from towerkit.trainers import (
    get_default_sess_config,
    get_global_step_value,
    get_global_step_var,
    get_tf_version_tuple,
)
from towerkit.trainers._tfutils import check_mem_fraction


class TestGetDefaultSessConfig:
    """`get_default_sess_config` gives a fresh, usable ConfigProto."""

    def test_fields(self):
        """Soft placement, memory growth and the memory cap are set; thread pools are left at 0."""
        config = get_default_sess_config(0.5)
        assert isinstance(config, tf1.ConfigProto)
        assert config.allow_soft_placement
        assert config.gpu_options.allow_growth
        assert config.gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.5)
        assert config.intra_op_parallelism_threads == 0
        assert config.inter_op_parallelism_threads == 0

    def test_default_fraction(self):
        """The default cap is 0.99."""
        config = get_default_sess_config()
        assert config.gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.99)

    def test_fresh_each_call(self):
        """Changing a returned config does not change the next one."""
        first = get_default_sess_config()
        first.allow_soft_placement = False
        assert get_default_sess_config().allow_soft_placement

    def test_session_runs(self, graph):
        """A session made with it runs ops."""
        x = tf.constant(3.0) * 2
        with tf1.Session(graph=graph, config=get_default_sess_config()) as s:
            assert s.run(x) == 6.0

    @pytest.mark.parametrize("bad", [0, -0.1, 1.5])
    def test_fail_value(self, bad):
        """A fraction outside (0, 1] is a ValueError naming the argument and the value."""
        with pytest.raises(ValueError, match=rf"'mem_fraction' must be in \(0, 1\]; got {bad}"):
            get_default_sess_config(bad)

    @pytest.mark.parametrize("bad", ["0.5", None, True])
    def test_fail_type(self, bad):
        """A non-number is a TypeError."""
        with pytest.raises(TypeError, match="'mem_fraction' must be a number"):
            get_default_sess_config(bad)

    @given(st.floats(min_value=0.0, max_value=1.0, exclude_min=True))
    def test_check_accepts_unit_interval(self, fraction):
        """Every fraction in (0, 1] is accepted unchanged."""
        assert check_mem_fraction(fraction) == fraction

    @given(st.floats(allow_nan=False).filter(lambda f: not 0.0 < f <= 1.0))
    def test_check_rejects_outside(self, fraction):
        """Every number outside (0, 1] is rejected."""
        with pytest.raises(ValueError, match="'mem_fraction' must be in"):
            check_mem_fraction(fraction)


class TestGetGlobalStepVar:
    """`get_global_step_var` returns the graph's one global step."""

    def test_properties(self, graph):
        """An int64 scalar, non-trainable, named global_step, in the global-step collection."""
        gs = get_global_step_var()
        assert gs.name == "global_step:0"
        assert gs.dtype.base_dtype == tf.int64
        assert gs.shape.rank == 0
        assert gs not in tf1.trainable_variables()
        assert tf1.get_collection(tf1.GraphKeys.GLOBAL_STEP) == [gs]
        assert gs in tf1.global_variables()

    def test_top_level_under_scopes(self, graph):
        """Created under a tower's variable and name scopes, it is still top-level."""
        with tf1.variable_scope("tower0"), tf1.name_scope("some/scope"):
            gs = get_global_step_var()
        assert gs.name == "global_step:0"

    def test_top_level_under_control_dependencies(self, graph):
        """Its initializer does not pick up the control dependencies open at the call."""
        marker = tf.constant(1.0, name="marker")
        with tf1.control_dependencies([marker]):
            gs = get_global_step_var()
        assert marker.op not in gs.initializer.control_inputs

    def test_same_variable(self, graph):
        """Later calls return the same variable, also one made by TensorFlow itself."""
        first = tf1.train.get_or_create_global_step()
        assert get_global_step_var() is first
        assert get_global_step_var() is first

    def test_per_graph(self):
        """Each graph has its own."""
        g1, g2 = tf.Graph(), tf.Graph()
        with g1.as_default():
            a = get_global_step_var()
        with g2.as_default():
            b = get_global_step_var()
        assert a.graph is g1
        assert b.graph is g2


class TestGetGlobalStepValue:
    """`get_global_step_value` reads the global step in the default session."""

    def test_value(self, graph, sess):
        """It returns the variable's current value as an int."""
        gs = get_global_step_var()
        inc = tf1.assign_add(gs, 5)
        sess.run(gs.initializer)
        sess.run(inc)
        with sess.as_default():
            value = get_global_step_value()
        assert value == 5
        assert isinstance(value, int)

    def test_fail_no_session(self, graph):
        """Without a default session it raises, saying what to do."""
        get_global_step_var()
        with pytest.raises(RuntimeError, match="needs a default session"):
            get_global_step_value()

    def test_fail_no_variable(self, graph, sess):
        """A session whose graph has no global step is an error, not a silent creation."""
        tf.constant(1.0)
        with sess.as_default(), pytest.raises(RuntimeError, match="no global-step variable"):
            get_global_step_value()
        assert tf1.train.get_global_step(graph) is None


class TestGetTfVersionTuple:
    """`get_tf_version_tuple` is (major, minor) of the TensorFlow in use."""

    def test_matches(self):
        """It agrees with tf.__version__."""
        major, minor = tf.__version__.split(".")[:2]
        assert get_tf_version_tuple() == (int(major), int(minor))

    def test_comparable(self):
        """It compares with plain tuples."""
        assert (2, 0) <= get_tf_version_tuple() < (3, 0)
