"""Tower functions and their handles."""

from __future__ import annotations

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from towers_strategies import scope_segment

from towerkit.towers import (
    TowerContext,
    TowerContextError,
    TowerFunc,
    TowerTensorHandles,
    build_placeholders,
    validate_input_signature,
)
from towerkit.towers.compat import tf1

SIG = [tf.TensorSpec([None, 3], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "label")]


def model(x, label):
    """A tiny tower: one dense layer and a cost, with a collection entry."""
    w = tf1.get_variable("fc/W", [3, 2])
    logits = tf.identity(tf.matmul(x, w), name="logits")
    cost = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits), name="cost"
    )
    tf1.add_to_collection("costs", cost)
    return logits, cost


def build_towers(ntrain=2, own_vs=False):
    """Build `ntrain` training towers and one inference tower; return the TowerFunc."""
    func = TowerFunc(model, SIG)
    inputs = build_placeholders(SIG)
    for i in range(ntrain):
        vs = f"tower{i}" if own_vs else ""
        with TowerContext(f"tower{i}", True, vs, index=i, total=ntrain):
            func(*inputs)
    with TowerContext("InferenceTower", is_training=False):
        func(*inputs)
    return func


class TestValidateInputSignature:
    """Input signatures are named, unique TensorSpecs."""

    def test_fail(self):
        """Each kind of bad signature names the entries at fault."""
        with pytest.raises(TypeError, match=r"must be a sequence of tf\.TensorSpec; got str"):
            validate_input_signature("x")
        with pytest.raises(TypeError, match="entries at fault: 1: int"):
            validate_input_signature([SIG[0], 3])
        with pytest.raises(ValueError, match="unnamed entries: 0"):
            validate_input_signature([tf.TensorSpec([1], tf.float32)])
        with pytest.raises(ValueError, match="repeated: 'x'"):
            validate_input_signature([SIG[0], SIG[0]])

    @given(st.lists(scope_segment, min_size=1, max_size=5, unique=True))
    def test_unique_names_accepted(self, names):
        """Any set of distinct names is a valid signature, order kept."""
        sig = [tf.TensorSpec([None], tf.float32, n) for n in names]
        assert [s.name for s in validate_input_signature(sig)] == names


class TestBuildPlaceholders:
    """`build_placeholders` makes one placeholder per spec."""

    def test_names_shapes_dtypes(self, graph):
        """Names carry the prefix; shapes and dtypes follow the specs."""
        x, label = build_placeholders(SIG, prefix="p_")
        assert (x.name, label.name) == ("p_x:0", "p_label:0")
        assert x.shape.as_list() == [None, 3]
        assert label.dtype == tf.int32
        assert x.op.type == "Placeholder"


class TestTowerFunc:
    """`TowerFunc` calls the function and records a handle per call."""

    def test_records_towers(self, graph):
        """Every call in a tower context becomes a handle, in order."""
        func = build_towers()
        assert [h.ns_name for h in func.towers] == ["tower0", "tower1", "InferenceTower"]
        assert func.input_signature == tuple(SIG)
        assert "towers=3" in repr(func)

    def test_outside_context(self, graph):
        """Calling outside any tower context is an error that tells the fix."""
        func = TowerFunc(model, SIG)
        with pytest.raises(TowerContextError, match="inside a tower context"):
            func(*build_placeholders(SIG))
        assert len(func.towers) == 0

    def test_fail(self, graph):
        """A wrong number of inputs and a non-callable are rejected."""
        with pytest.raises(TypeError, match="'tower_fn' must be callable; got int"):
            TowerFunc(3, SIG)
        func = TowerFunc(model, SIG)
        with (
            TowerContext("", True),
            pytest.raises(TypeError, match=r"takes 2 inputs \(\['x', 'label'\]\); got 1"),
        ):
            func(build_placeholders(SIG)[0])


class TestTowerTensorHandle:
    """Handles find tensors, variables and collections of their tower."""

    def test_tensors(self, graph):
        """Tensors are found without the tower prefix, inputs by signature name."""
        towers = build_towers().towers
        t1 = towers["tower1"]
        assert t1.get_tensor("logits").name == "tower1/logits:0"
        assert t1["cost:0"].name == "tower1/cost:0"
        assert t1.get_tensor("x").name == "x:0"
        assert [t.name for t in t1.get_tensors(["logits", "label"])] == [
            "tower1/logits:0",
            "label:0",
        ]
        assert t1.inputs[0].name == "x:0"
        assert t1.outputs[0].name == "tower1/logits:0"
        assert t1.is_training
        assert not towers["InferenceTower"].is_training

    def test_shared_variables(self, graph):
        """Towers sharing variables all find the one variable."""
        towers = build_towers().towers
        variables = {id(h.get_variable("fc/W")) for h in towers}
        assert len(variables) == 1
        assert towers[1].get_tensor("fc/W").name == "fc/W:0"

    def test_own_variables(self, graph):
        """With a variable scope per tower, each finds its own copy."""
        towers = build_towers(own_vs=True).towers
        assert towers[0].get_variable("fc/W").name == "tower0/fc/W:0"
        assert [v.name for v in towers.training()[1].get_variables(["fc/W"])] == ["tower1/fc/W:0"]
        assert towers[1].vs_name == "tower1"

    def test_collection(self, graph):
        """A tower's collection holds only what it added."""
        towers = build_towers().towers
        assert [c.name for c in towers[1].get_collection("costs")] == ["tower1/cost:0"]
        with pytest.warns(DeprecationWarning, match=r"name=\.\.\.\) is deprecated"):
            assert len(towers[2].get_collection(name="costs")) == 1

    def test_missing(self, graph):
        """Unknown names raise KeyError naming what was tried."""
        towers = build_towers().towers
        with pytest.raises(KeyError, match=r"no tensor .nope.*.tower0/nope:0."):
            towers[0].get_tensor("nope")
        with pytest.raises(KeyError, match="no variable 'fc/b'"):
            towers[0].get_variable("fc/b")


class TestTowerTensorHandles:
    """Handles are indexed by position or name and filtered by mode."""

    def test_index_and_filter(self, graph):
        """Position, name, training() and inference() agree."""
        towers = build_towers(ntrain=3).towers
        assert isinstance(towers, TowerTensorHandles)
        assert towers[0] is towers["tower0"]
        assert towers[-1] is towers["InferenceTower"]
        assert [h.ns_name for h in towers.training()] == ["tower0", "tower1", "tower2"]
        assert [h.ns_name for h in towers.inference()] == ["InferenceTower"]
        assert repr(towers.inference()) == "TowerTensorHandles(['InferenceTower'])"

    def test_fail(self, graph):
        """Unknown names, bad positions and bad kinds are errors."""
        towers = build_towers(ntrain=1).towers
        with pytest.raises(
            KeyError, match=r"no tower named 'tower5'; towers: \['tower0', 'InferenceTower'\]"
        ):
            towers["tower5"]
        with pytest.raises(IndexError):
            towers[5]
        with pytest.raises(TypeError, match="got float"):
            towers[1.0]
