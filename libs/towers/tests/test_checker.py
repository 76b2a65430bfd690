"""The tower-rule checker: one broken tower function per rule, and correct ones."""

from __future__ import annotations

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from towers_strategies import scope_name

from towerkit.towers import (
    TowerCheckError,
    TowerContext,
    TowerRuleError,
    Violation,
    add_moving_summary,
    argscope,
    auto_reuse_variable_scope,
    check_tower_function,
    enable_argscope_for_function,
    ensure_tower_rules,
    format_violations,
    freeze_variables,
    get_current_tower_context,
)
from towerkit.towers._violations import (
    RULE_NAMES,
    dedupe_violations,
    normalize_tower_name,
    outputs_signature,
    reserved_scopes,
)
from towerkit.towers.compat import tf1

SIG = [tf.TensorSpec([None, 4], tf.float32, "x")]


def rules(violations, severity=None):
    """The rule numbers found, optionally of one severity."""
    return sorted({v.rule for v in violations if severity in (None, v.severity)})


@enable_argscope_for_function
def dense(name, x, units=3, use_bias=True):
    """A dense layer in its own variable scope, as layer libraries write them."""
    with tf1.variable_scope(name):
        w = tf1.get_variable("W", [x.shape[-1], units])
        y = tf.matmul(x, w)
        if use_bias:
            y = y + tf1.get_variable("b", [units], initializer=tf1.zeros_initializer())
        return y


def batch_norm(name, x):
    """Batch normalization whose moving mean is model state (MODEL_VARIABLES), updated in training."""
    ctx = get_current_tower_context()
    with tf1.variable_scope(name):
        beta = tf1.get_variable("beta", [x.shape[-1]], initializer=tf1.zeros_initializer())
        mean = tf1.get_variable(
            "mean",
            [x.shape[-1]],
            initializer=tf1.zeros_initializer(),
            trainable=False,
            collections=[tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES],
        )
        if ctx.is_training:
            batch_mean = tf.reduce_mean(x, axis=0)
            if ctx.is_main_training_tower:
                update = mean.assign(0.9 * mean + 0.1 * batch_mean)
                tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, update)
            return x - batch_mean + beta
        return x - mean + beta


def good_model(x):
    """A correct tower function: layers, argscope, BN, frozen layer, summaries, global step."""
    tf1.train.get_or_create_global_step()
    with argscope(dense, units=5):
        h = tf.nn.relu(dense("fc1", x))
        h = batch_norm("bn", h)
        with freeze_variables(stop_gradient=False, skip_collection=True):
            h = dense("frozen", h)
        logits = dense("fc2", h, units=2)
    cost = tf.reduce_mean(tf.square(logits), name="cost")
    counter = tf1.Variable(0, trainable=False, name="calls")
    with tf1.control_dependencies([counter.assign_add(1)]):
        cost = tf.identity(cost, name="total_cost")
    add_moving_summary(cost)
    tf1.add_to_collection(tf1.GraphKeys.LOSSES, cost)
    return logits, cost


class TestViolation:
    """The record of one broken rule."""

    def test_repr(self):
        """The repr shows every field, the rule name derived from the number."""
        v = Violation(rule=4, subject="w", message="m", fix="f")
        assert repr(v) == (
            "Violation(rule=4, subject='w', message='m', fix='f', severity='error', "
            "rule_name='respects variable reuse')"
        )
        assert str(v) == "[rule 4: respects variable reuse] error: m. Fix: f"

    def test_fail(self):
        """Unknown rules and severities are rejected."""
        with pytest.raises(ValueError, match=r"'rule' must be one of \[1, 2, 3, 4, 5\]; got 6"):
            Violation(rule=6, subject="s", message="m", fix="f")
        with pytest.raises(ValueError, match="'severity' must be in"):
            Violation(rule=1, subject="s", message="m", fix="f", severity="info")

    @given(st.lists(st.tuples(st.sampled_from(sorted(RULE_NAMES)), st.sampled_from("abc"))))
    def test_dedupe_and_format(self, pairs):
        """Dedupe keeps one per (rule, subject), first first; the format has a line each."""
        vs = [
            Violation(rule=r, subject=s, message=f"{r}{s}{i}", fix="f")
            for i, (r, s) in enumerate(pairs)
        ]
        kept = dedupe_violations(vs)
        assert [(v.rule, v.subject) for v in kept] == list(dict.fromkeys(pairs))
        assert all(v in vs for v in kept)
        text = format_violations(kept)
        assert len(text.splitlines()) == len(kept)


class TestPureHelpers:
    """Name normalization, reserved-scope search, output signatures."""

    @given(scope_name, st.sampled_from(["tower0", "tower1", "tower2", "InferenceTower"]))
    def test_normalize(self, name, tower):
        """Names differing only by the tower's name become equal."""
        assert normalize_tower_name(f"{tower}/{name}") == normalize_tower_name(f"tower0/{name}")
        assert normalize_tower_name(name) == name

    @given(st.lists(scope_name, max_size=5))
    def test_reserved_scopes_absent(self, names):
        """Names without 'tower' have no reserved scopes."""
        assert reserved_scopes(names) == []

    @given(scope_name, scope_name)
    def test_reserved_scopes_found(self, before, after):
        """The path up to the first segment holding 'tower' is reported once."""
        name = f"{before}/my_tower/{after}"
        assert reserved_scopes([name, name]) == [f"{before}/my_tower"]

    def test_outputs_signature(self, graph):
        """Structure, dtype and static shape are compared."""
        x = tf1.placeholder(tf.float32, [None, 2])
        assert outputs_signature({"a": x, "b": [1]}) == {
            "a": "Tensor(float32, [None, 2])",
            "b": ["int"],
        }


class TestCorrectFunctions:
    """No false positives on functions that follow the rules."""

    def test_good_model(self):
        """A realistic model yields no violation."""
        assert check_tower_function(good_model, SIG) == []

    def test_auto_reuse_and_plain(self):
        """auto_reuse_variable_scope shared modules and bare get_variable are fine."""

        @auto_reuse_variable_scope
        def shared(x):
            return dense("shared", x, units=4)

        def fn(x):
            y = shared(shared(x))
            with tf1.variable_scope("head", reuse=tf1.AUTO_REUSE):
                w = tf1.get_variable("w", [4, 1])
            return tf.matmul(y, w)

        assert check_tower_function(fn, SIG) == []

    def test_does_not_touch_caller(self, graph):
        """The check runs in its own graph, even when called inside a tower context."""
        with TowerContext("tower0", True):
            assert check_tower_function(good_model, SIG) == []
            assert get_current_tower_context().ns_name == "tower0"
        assert graph.get_operations() == []

    def test_ensure_passes(self):
        """ensure_tower_rules returns (no error) for a correct function."""
        assert ensure_tower_rules(good_model, SIG) == []


class TestRule1:
    """Rule 1: may be called several times."""

    def test_fails_second_time(self):
        """A function that can only run once is reported."""
        state = {"calls": 0}

        def once(x):
            state["calls"] += 1
            if state["calls"] > 1:
                msg = "model already built"
                raise RuntimeError(msg)
            return dense("fc", x)

        found = check_tower_function(once, SIG)
        assert rules(found) == [1]
        assert "RuntimeError: model already built" in found[0].message

    def test_changes_when_called_again(self):
        """A function that keeps state from its first call builds something else next."""

        class Model:
            built = False

            def __call__(self, x):
                if not self.built:
                    self.built = True
                    return dense("fc", x), dense("aux", x)
                return (dense("fc", x),)

        found = check_tower_function(Model(), SIG)
        assert rules(found) == [1]
        assert any("builds something else" in v.message for v in found)
        assert [v.subject for v in found if v.severity == "warning"] == ["aux/W", "aux/b"]

    def test_clears_collection(self):
        """Removing items other towers added to a collection is reported with its key."""

        def fn(x):
            y = dense("fc", x)
            losses = tf1.get_collection_ref(tf1.GraphKeys.LOSSES)
            losses[:] = [tf.reduce_sum(y)]
            return y

        found = check_tower_function(fn, SIG)
        assert [(v.rule, v.subject) for v in found] == [(1, "losses")]

    def test_first_build_fails(self):
        """A function that never builds cannot be checked."""

        def broken(x):
            return x + "a"

        with pytest.raises(
            TowerCheckError, match="fails when built once as the main training tower"
        ):
            check_tower_function(broken, SIG)


class TestRule2:
    """Rule 2: respect variable collections."""

    def test_integer_trainable(self):
        """An integer variable in TRAINABLE_VARIABLES is reported."""

        def fn(x):
            tf1.get_variable(
                "step", [], tf.int64, initializer=tf1.zeros_initializer(), trainable=True
            )
            return dense("fc", x)

        found = check_tower_function(fn, SIG)
        assert [(v.rule, v.subject, v.severity) for v in found] == [(2, "step", "error")]
        assert "int64" in found[0].message

    def test_counter_trainable(self):
        """A trainable float variable updated by assignment is state, and reported."""

        def fn(x):
            seen = tf1.get_variable("seen", [], initializer=tf1.zeros_initializer())
            with tf1.control_dependencies([seen.assign_add(1.0)]):
                return tf.identity(dense("fc", x))

        found = check_tower_function(fn, SIG)
        assert [(v.rule, v.subject) for v in found] == [(2, "seen")]
        assert "updated by assignment" in found[0].message

    def test_model_variable_missing(self):
        """Non-trainable state used in inference but not in MODEL_VARIABLES is a warning."""

        def fn(x):
            mean = tf1.get_variable(
                "bn/mean", [4], initializer=tf1.zeros_initializer(), trainable=False
            )
            return dense("fc", x - mean)

        found = check_tower_function(fn, SIG)
        assert [(v.rule, v.subject, v.severity) for v in found] == [(2, "bn/mean", "warning")]
        assert ensure_tower_rules(fn, SIG) == found
        with pytest.raises(TowerRuleError, match=r"breaks 1 tower-function rule\(s\)"):
            ensure_tower_rules(fn, SIG, warnings_as_errors=True)


class TestRule3:
    """Rule 3: variable names follow the variable scope, never the name scope."""

    def test_name_scope_in_name(self):
        """A variable named after the current name scope is reported once."""

        def fn(x):
            scope = tf1.get_default_graph().get_name_scope()
            with tf1.variable_scope(scope.replace("/", "_")):
                return dense("fc", x)

        found = check_tower_function(fn, SIG)
        assert rules(found) == [3]
        assert found[0].subject == "<tower>/fc/W"

    def test_tensor_name_in_name(self):
        """A variable scope named after a tensor (whose name has the tower's scope) is reported."""

        def fn(x):
            h = tf.nn.relu(x)
            with tf1.variable_scope(h.op.name.replace("/", "_")):
                return dense("fc", h)

        found = check_tower_function(fn, SIG)
        assert rules(found) == [3]
        assert "<tower>_Relu" in found[0].subject

    def test_repeats_variable_scope(self):
        """Re-opening the enclosing variable scope by its name repeats it."""

        def fn(x):
            current = tf1.get_variable_scope().name
            with tf1.variable_scope(current or "net"):
                return dense("fc", x)

        found = check_tower_function(fn, SIG)
        assert rules(found) == [3]
        assert any("uses the variable scope's name 'tower2' twice" in v.message for v in found)

    def test_leaves_variable_scope(self):
        """Opening an absolute variable scope leaves the tower's scope."""

        def fn(x):
            with tf1.variable_scope(tf1.VariableScope(tf1.AUTO_REUSE, name="abs")):
                return dense("fc", x)

        found = check_tower_function(fn, SIG)
        assert [(v.rule, v.subject) for v in found] == [(3, "abs/fc/W"), (3, "abs/fc/b")]
        assert "not created under the enclosing variable scope" in found[0].message


class TestRule4:
    """Rule 4: respect variable reuse."""

    def test_tf_variable(self):
        """Trainable variables from tf.Variable are reported, named without the tower."""

        def fn(x):
            w = tf1.Variable(tf.ones([4, 2]), name="w")
            return tf.matmul(x, w)

        found = check_tower_function(fn, SIG)
        assert [(v.rule, v.subject) for v in found] == [(4, "w")]
        with pytest.raises(TowerRuleError, match=r"rule 4: respects variable reuse\] error"):
            ensure_tower_rules(fn, SIG)

    def test_reuse_variables_on_caller_scope(self):
        """Calling reuse_variables() on the enclosing scope is reported."""

        def fn(x):
            y = dense("fc", x)
            tf1.get_variable_scope().reuse_variables()
            return y

        found = check_tower_function(fn, SIG)
        assert rules(found) == [4]
        assert "turned on reuse of variable scope" in found[0].message


class TestRule5:
    """Rule 5: no 'tower' in scopes or variables."""

    def test_tower_scope(self):
        """A variable scope and an op name holding 'tower' are reported by scope."""

        def fn(x):
            y = dense("my_tower", x)
            return tf.identity(y, name="towering")

        found = check_tower_function(fn, SIG)
        assert [(v.rule, v.subject) for v in found] == [(5, "my_tower"), (5, "towering")]
