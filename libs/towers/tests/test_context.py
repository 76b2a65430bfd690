"""Tower contexts: scopes, reuse policy, current-context tracking, collections per tower."""

from __future__ import annotations

import attrs
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.towers import (
    PredictTowerContext,
    TowerContext,
    TowerContextError,
    TowerSpec,
    TrainTowerContext,
    get_current_tower_context,
    has_own_variables,
    is_main_training_tower,
    tower_reuse,
)
from towerkit.towers.compat import tf1

specs = st.integers(1, 8).flatmap(
    lambda total: st.builds(
        TowerSpec,
        ns_name=st.sampled_from(["", "tower0", "tower1", "InferenceTower"]),
        vs_name=st.sampled_from(["", "tower1"]),
        is_training=st.booleans(),
        index=st.integers(0, total - 1),
        total=st.just(total),
        reuse=st.sampled_from([None, True, False, "auto"]),
    )
)


class TestTowerSpec:
    """The record behind a tower context."""

    def test_repr(self):
        """The repr lists every field."""
        spec = TowerSpec(ns_name="tower1", vs_name="tower1", is_training=True, index=1, total=2)
        assert repr(spec) == (
            "TowerSpec(ns_name='tower1', vs_name='tower1', is_training=True, index=1, total=2, reuse=None)"
        )

    def test_fail(self):
        """Out-of-range index, total and reuse are rejected with the value."""
        with pytest.raises(
            ValueError, match=r"'index' must be in \[0, total=2\) \(0-based\); got 2"
        ):
            TowerSpec(ns_name="t", is_training=True, index=2, total=2)
        with pytest.raises(ValueError, match="'total' must be >= 1: 0"):
            TowerSpec(ns_name="t", is_training=True, total=0)
        with pytest.raises(
            ValueError, match="'reuse' must be None, False, True or 'auto'; got 'yes'"
        ):
            TowerSpec(ns_name="t", is_training=True, reuse="yes")
        with pytest.raises(TypeError, match="'ns_name' must be <class 'str'>"):
            TowerSpec(ns_name=3, is_training=True)

    @given(specs)
    def test_roles(self, spec):
        """The main training tower is training tower 0; only training towers own variables."""
        assert is_main_training_tower(spec) == (spec.is_training and spec.index == 0)
        if has_own_variables(spec):
            assert spec.is_training
        if is_main_training_tower(spec):
            assert has_own_variables(spec)
        assert attrs.evolve(spec) == spec

    @given(specs)
    def test_reuse_policy(self, spec):
        """Explicit reuse wins; by default inference is auto and later shared towers reuse."""
        mode = tower_reuse(spec)
        if spec.reuse is True:
            assert mode == "reuse"
        elif spec.reuse == "auto":
            assert mode == "auto"
        elif spec.reuse is False:
            assert mode == "inherit"
        elif not spec.is_training:
            assert mode == "auto"
        else:
            assert mode == ("reuse" if spec.index > 0 and not spec.vs_name else "inherit")


class TestTowerContext:
    """`TowerContext` opens scopes and sets the current context."""

    def test_kinds_and_properties(self):
        """Training and inference contexts expose the documented properties."""
        train = TowerContext("tower1", True, "tower1", index=1, total=2)
        assert isinstance(train, TrainTowerContext)
        assert (train.name, train.ns_name, train.vs_name) == ("tower1", "tower1", "tower1")
        assert train.is_training
        assert not train.is_main_training_tower
        assert train.has_own_variables
        assert (train.index, train.total) == (1, 2)
        infer = TowerContext("InferenceTower", is_training=False)
        assert isinstance(infer, PredictTowerContext)
        assert not infer.is_training
        assert not infer.is_main_training_tower
        assert not infer.has_own_variables
        assert repr(infer).startswith("PredictTowerContext(TowerSpec(ns_name='InferenceTower'")

    def test_current_context(self, graph):
        """`get_current_tower_context` is the entered context, and None outside."""
        assert get_current_tower_context() is None
        with TowerContext("", is_training=True) as ctx:
            assert get_current_tower_context() is ctx
        assert get_current_tower_context() is None

    def test_no_nesting(self, graph):
        """Entering a tower context inside another raises and keeps the outer one."""
        with TowerContext("tower0", True) as outer:
            with (
                pytest.raises(TowerContextError, match="'tower1' inside tower context 'tower0'"),
                TowerContext("tower1", True, index=1, total=2),
            ):
                pass
            assert get_current_tower_context() is outer

    def test_enter_once(self, graph):
        """A context object is entered once."""
        ctx = TowerContext("tower0", True)
        with ctx:
            pass
        with pytest.raises(TowerContextError, match="already entered once"), ctx:
            pass

    def test_scopes_shared_variables(self, graph):
        """Towers open top-level name scopes; later towers share the first tower's variables."""
        with tf1.name_scope("outer"):
            for i in range(2):
                with TowerContext(f"tower{i}", True, index=i, total=2):
                    w = tf1.get_variable("fc/W", [2])
                    y = tf.identity(w, name="y")
                    assert y.name == f"tower{i}/y:0"
        assert [v.name for v in tf1.global_variables()] == ["fc/W:0"]

    def test_scopes_own_variables(self, graph):
        """Towers with a `vs_name` each create their own variables under it."""
        for i in range(2):
            with TowerContext(f"tower{i}", True, f"tower{i}", index=i, total=2):
                tf1.get_variable("fc/W", [2])
                assert tf.constant(0.0, name="c").name == f"tower{i}/c:0"
        assert [v.name for v in tf1.global_variables()] == ["tower0/fc/W:0", "tower1/fc/W:0"]

    def test_shared_tower_cannot_create(self, graph):
        """A later shared-variable tower reuses, so a new variable name is an error."""
        with TowerContext("tower0", True, index=0, total=2):
            tf1.get_variable("a", [1])
        with (
            pytest.raises(ValueError, match="does not exist"),
            TowerContext("tower1", True, index=1, total=2),
        ):
            tf1.get_variable("b", [1])

    def test_inference_reuses_or_creates(self, graph):
        """Inference towers reuse training variables and create them in a graph of their own."""
        with TowerContext("", True):
            w = tf1.get_variable("w", [1])
        with TowerContext("InferenceTower", False):
            assert tf1.get_variable("w", [1]) is w
        other = tf1.Graph()
        with other.as_default(), TowerContext("", False):
            created = tf1.get_variable("w", [1])
        assert created.graph is other

    def test_reuse_does_not_leak(self, graph):
        """Calling reuse_variables() inside a tower does not change the enclosing scope."""
        with TowerContext("tower0", True):
            tf1.get_variable_scope().reuse_variables()
        assert not tf1.get_variable_scope().reuse
        tf1.get_variable("fresh", [1])

    def test_collection_in_tower(self, graph):
        """Only items added during the tower count, during and after it."""
        tf1.add_to_collection("things", "before")
        with TowerContext("tower0", True) as ctx:
            tf1.add_to_collection("things", "inside")
            tf1.add_to_collection("new", 1)
            assert ctx.get_collection_in_tower("things") == ["inside"]
        tf1.add_to_collection("things", "after")
        assert ctx.get_collection_in_tower("things") == ["inside"]
        assert ctx.get_collection_in_tower("new") == [1]
        assert ctx.get_collection_in_tower("absent") == []

    def test_summaries_main_training_tower_only(self, graph):
        """tf.summary ops of inference towers and later training towers leave SUMMARIES."""

        def tower(x):
            y = tf.reduce_mean(x * 2.0, name="y")
            tf1.summary.scalar("y", y)
            tf1.summary.histogram("x", x)
            return y

        built = {}
        for name, training, index in [
            ("tower0", True, 0),
            ("tower1", True, 1),
            ("InferenceTower", False, 0),
        ]:
            with TowerContext(name, training, index=index, total=2) as ctx:
                tower(tf1.placeholder(tf.float32, [None], "x"))
            built[name] = ctx
        kept = tf1.get_collection(tf1.GraphKeys.SUMMARIES)
        assert [op.name.split("/")[0] for op in kept] == ["tower0", "tower0"]
        summaries = tf1.GraphKeys.SUMMARIES
        assert len(built["InferenceTower"].get_collection_in_tower(summaries)) == 2
        # The merged summary of the graph runs on the training tower's feed alone.
        with tf1.Session() as sess:
            out = sess.run(
                tf1.summary.merge_all(),
                {graph.get_tensor_by_name("tower0/x:0"): [1.0, 2.0]},
            )
        assert isinstance(out, bytes)

    def test_collection_never_entered(self):
        """A context never entered has no collections."""
        with pytest.raises(TowerContextError, match="'t' was never entered"):
            TowerContext("t", True).get_collection_in_tower("x")
