"""Gradient processors: records, their pure helpers, and their ops in real sessions."""

import logging
import re

import attrs
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.towers import MOVING_SUMMARY_OPS_KEY, TowerContext
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    Chain,
    CheckGradient,
    FilterNoneGrad,
    GlobalNormClip,
    GradientProcessor,
    MapGradient,
    PrintGradient,
    ScaleGradient,
    SummaryGradient,
    chain,
)
from towerkit.trainers._gradproc import check_multipliers, first_multiplier, regex_matches

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,5}(/[a-z][a-z0-9_]{0,5}){0,2}", fullmatch=True)


def make_vars(graph, values):
    """Variables named by `values`' keys, initialized to the values; returns them in order."""
    out = []
    for name, value in values.items():
        scope, _, base = name.rpartition("/")
        with tf1.variable_scope(scope or tf1.get_variable_scope(), auxiliary_name_scope=False):
            out.append(tf1.get_variable(base, initializer=tf.constant(value, tf.float32)))
    return out


def run_grads(sess, pairs):
    """Evaluate the gradients of `pairs` as {var name: value}."""
    names = [v.op.name for _, v in pairs]
    values = sess.run([g for g, _ in pairs])
    return dict(zip(names, values))


@pytest.fixture
def two_vars(graph):
    """Variables fc/W (2x2) and fc/b (2,), with constant gradients 1..4 and [10, 20]."""
    w, b = make_vars(graph, {"fc/W": np.zeros([2, 2]), "fc/b": np.zeros([2])})
    gw = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    gb = tf.constant([10.0, 20.0])
    return [(gw, w), (gb, b)]


class TestPureHelpers:
    """regex_matches, first_multiplier and check_multipliers."""

    @given(NAMES)
    def test_regex_matches_itself(self, name):
        """A name escaped as a regex matches itself."""
        assert regex_matches(re.escape(name), name)

    @given(NAMES, NAMES)
    def test_regex_is_full_match(self, name, suffix):
        """A regex matching a name does not match a longer name it is a prefix of."""
        assert not regex_matches(re.escape(name), name + "/" + suffix)
        assert regex_matches(re.escape(name) + ".*", name + "/" + suffix)

    @given(st.lists(st.tuples(NAMES, st.floats(-4, 4)), min_size=1, max_size=5), NAMES)
    def test_first_multiplier_is_first_match(self, pairs, name):
        """The value of the earliest regex that matches wins; no match gives None."""
        mults = check_multipliers([(re.escape(n), v) for n, v in pairs])
        expected = next((v for n, v in pairs if n == name), None)
        assert first_multiplier(mults, name) == expected
        assert first_multiplier((*mults, (".*", 9.0)), name) == (
            expected if expected is not None else 9.0
        )

    @given(st.lists(st.tuples(NAMES, st.integers(-3, 3) | st.floats(-3, 3)), min_size=1))
    def test_check_multipliers_normalizes(self, pairs):
        """Lists of pairs become tuples of (str, float), order kept."""
        out = check_multipliers(pairs)
        assert out == tuple((n, float(v)) for n, v in pairs)
        assert all(type(v) is float for _, v in out)

    def test_check_multipliers_single_pair(self):
        """A lone pair is accepted as a list of one."""
        assert check_multipliers((".*/b", 2)) == ((".*/b", 2.0),)

    def test_check_multipliers_fail(self):
        """Every entry at fault is listed; wrong containers are TypeErrors."""
        with pytest.raises(ValueError, match=r"#0 \('a', 'x'\): multiplier is not a number; #2"):
            check_multipliers([("a", "x"), ("b", 1.0), (3, 1.0)])
        with pytest.raises(ValueError, match=r"#0 \('\(', 1\.0\): bad regex"):
            check_multipliers([("(", 1.0)])
        with pytest.raises(ValueError, match="'multipliers' is empty"):
            check_multipliers([])
        with pytest.raises(TypeError, match="'multipliers' must be a"):
            check_multipliers(".*")


class TestRecords:
    """The processors are frozen, validated, comparable records."""

    def test_repr(self):
        """Reprs show the fields."""
        assert (
            repr(GlobalNormClip(5))
            == "GlobalNormClip(global_norm=5.0, name_scope='GlobalNormClip')"
        )
        assert repr(ScaleGradient([(".*/b", 2)], verbose=False)) == (
            "ScaleGradient(multipliers=(('.*/b', 2.0),), verbose=False, name_scope='ScaleGradient')"
        )
        assert repr(FilterNoneGrad()) == "FilterNoneGrad(verbose=True, name_scope='FilterNoneGrad')"
        assert repr(CheckGradient()) == "CheckGradient(name_scope='CheckGradient')"

    def test_frozen_and_evolve(self):
        """Fields cannot be set; attrs.evolve re-validates."""
        clip = GlobalNormClip(5)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            clip.global_norm = 1.0
        assert attrs.evolve(clip, global_norm=2).global_norm == 2.0
        with pytest.raises(ValueError, match=r"'global_norm' must be > 0; got 0\.0"):
            attrs.evolve(clip, global_norm=0)

    def test_equality(self):
        """Equal fields make equal, hashable records."""
        assert ScaleGradient((".*", 2.0)) == ScaleGradient([(".*", 2)])
        assert len({GlobalNormClip(1), GlobalNormClip(1.0), GlobalNormClip(2)}) == 2

    def test_fail(self):
        """Bad arguments fail at construction with the argument named."""
        with pytest.raises(ValueError, match=r"'global_norm' must be > 0; got -1\.0"):
            GlobalNormClip(-1)
        with pytest.raises(TypeError, match="'func' must be callable"):
            MapGradient(3)
        with pytest.raises(TypeError, match="'func' must take 1 argument"):
            MapGradient(lambda: None)
        with pytest.raises(ValueError, match=r"'regex' '\[' is not a valid regular expression"):
            MapGradient(tf.identity, regex="[")
        with pytest.raises(TypeError, match="'regex' must be a regular expression string"):
            SummaryGradient(regex=3)
        with pytest.raises(
            TypeError,
            match=r"'collections' must hold collection names \(str\); entries at fault: 3",
        ):
            SummaryGradient(collections=["a", 3])
        with pytest.raises(ValueError, match="'output_stream' must be 'stderr', 'stdout' or"):
            PrintGradient(output_stream="/tmp/x")
        with pytest.raises(TypeError, match="'name_scope' must be a non-empty str"):
            CheckGradient(name_scope="")
        with pytest.raises(TypeError, match="entries at fault: #1: str"):
            chain(FilterNoneGrad(), "clip")

    def test_process_fail(self, graph):
        """process takes a list of pairs and says which entries are not pairs."""
        with pytest.raises(TypeError, match="entries at fault: #1: int"):
            FilterNoneGrad().process([(None, None), 3])
        with pytest.raises(TypeError, match="got str"):
            FilterNoneGrad().process("grads")

    def test_abstract(self):
        """The base class cannot be instantiated."""
        with pytest.raises(TypeError):
            GradientProcessor()


class TestFilterNoneGrad:
    """`FilterNoneGrad` drops pairs without gradient."""

    def test_drops(self, graph, two_vars, caplog):
        """None gradients are dropped with a warning naming the variables."""
        (gw, w), (_, b) = two_vars
        with caplog.at_level(logging.WARNING, logger="towerkit.trainers"):
            out = FilterNoneGrad().process([(gw, w), (None, b)])
        assert out == [(gw, w)]
        assert "fc/b" in caplog.text

    def test_quiet(self, graph, two_vars, caplog):
        """verbose=False drops silently."""
        (gw, w), (_, b) = two_vars
        with caplog.at_level(logging.WARNING, logger="towerkit.trainers"):
            assert FilterNoneGrad(verbose=False).process([(None, b), (gw, w)]) == [(gw, w)]
        assert caplog.text == ""


class TestGlobalNormClip:
    """`GlobalNormClip` clips by the global norm."""

    def test_clips(self, graph, sess, two_vars):
        """Above the threshold all gradients scale by threshold / norm; under it, unchanged."""
        norm = np.sqrt(1 + 4 + 9 + 16 + 100 + 400)
        clipped = run_grads(sess, GlobalNormClip(2.0).process(two_vars))
        np.testing.assert_allclose(
            clipped["fc/W"], np.array([[1, 2], [3, 4]]) * 2 / norm, rtol=1e-5
        )
        np.testing.assert_allclose(clipped["fc/b"], np.array([10, 20]) * 2 / norm, rtol=1e-5)
        same = run_grads(sess, GlobalNormClip(100.0).process(two_vars))
        np.testing.assert_allclose(same["fc/b"], [10, 20], rtol=1e-6)

    def test_none_kept(self, graph, sess, two_vars):
        """None gradients stay None and do not count."""
        (gw, w), (_, b) = two_vars
        out = GlobalNormClip(1.0).process([(gw, w), (None, b)])
        assert out[1] == (None, b)
        np.testing.assert_allclose(np.linalg.norm(sess.run(out[0][0])), 1.0, rtol=1e-5)

    def test_name_scope(self, graph, two_vars):
        """Its ops are under its name scope."""
        out = GlobalNormClip(1.0, name_scope="myclip").process(two_vars)
        assert out[0][0].name.startswith("myclip/")

    @settings(max_examples=10, deadline=None)
    @given(
        st.lists(st.floats(-100, 100), min_size=1, max_size=6),
        st.floats(0.01, 50),
    )
    def test_norm_property(self, values, threshold):
        """The clipped global norm is min(norm, threshold)."""
        g = tf.Graph()
        with g.as_default():
            (v,) = make_vars(g, {"v": np.zeros(len(values))})
            out = GlobalNormClip(threshold).process([(tf.constant(values, tf.float32), v)])
            with tf1.Session(graph=g) as s:
                got = s.run(out[0][0])
        norm = np.linalg.norm(np.asarray(values, np.float32))
        np.testing.assert_allclose(np.linalg.norm(got), min(norm, threshold), rtol=1e-4, atol=1e-6)


class TestMapGradient:
    """`MapGradient` maps the gradients of matching variables."""

    def test_one_and_two_args(self, graph, sess, two_vars):
        """func may take the gradient, or the gradient and the variable."""
        one = run_grads(sess, MapGradient(lambda g: g * 2).process(two_vars))
        np.testing.assert_allclose(one["fc/b"], [20, 40])
        seen = []
        two = MapGradient(lambda g, v: seen.append(v.op.name) or g + 1).process(two_vars)
        assert seen == ["fc/W", "fc/b"]
        np.testing.assert_allclose(run_grads(sess, two)["fc/W"], [[2, 3], [4, 5]])

    def test_regex_full_match(self, graph, sess, two_vars):
        """Only variables whose whole name matches are mapped."""
        out = run_grads(sess, MapGradient(lambda g: g * 0 - 1, regex=".*/b").process(two_vars))
        np.testing.assert_allclose(out["fc/b"], [-1, -1])
        np.testing.assert_allclose(out["fc/W"], [[1, 2], [3, 4]])
        untouched = MapGradient(lambda g: g * 0, regex="fc").process(two_vars)
        assert [g for g, _ in untouched] == [g for g, _ in two_vars]

    def test_none_result_drops(self, graph, two_vars):
        """A None result drops the pair."""
        out = MapGradient(lambda g, v: None if v.op.name == "fc/W" else g).process(two_vars)
        assert [v.op.name for _, v in out] == ["fc/b"]

    def test_none_gradient_untouched(self, graph, two_vars):
        """None gradients are not passed to func."""
        (_, w), (gb, b) = two_vars
        calls = []
        out = MapGradient(lambda g: calls.append(g) or g).process([(None, w), (gb, b)])
        assert out[0] == (None, w)
        assert calls == [gb]

    @settings(max_examples=15, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["add", "mul"]), st.integers(-3, 3)), max_size=4))
    def test_chain_order(self, steps):
        """chain(a, b, ...) applies a first: the same as folding the maps left to right."""
        g = tf.Graph()
        with g.as_default():
            (v,) = make_vars(g, {"v": np.zeros(2)})
            procs = [
                MapGradient(lambda x, k=k: x + k)
                if op == "add"
                else MapGradient(lambda x, k=k: x * k)
                for op, k in steps
            ]
            out = chain(*procs).process([(tf.constant([1.0, -2.0]), v)])
            with tf1.Session(graph=g) as s:
                got = s.run(out[0][0])
        expected = np.array([1.0, -2.0])
        for op, k in steps:
            expected = expected + k if op == "add" else expected * k
        np.testing.assert_allclose(got, expected)


class TestScaleGradient:
    """`ScaleGradient` multiplies by the first matching multiplier; 0 drops."""

    def test_scales_and_freezes(self, graph, sess, caplog):
        """The documented example: biases doubled, layer0 frozen."""
        vs = make_vars(
            graph,
            {
                "layer0/W": np.zeros(1),
                "layer0/b": np.zeros(1),
                "layer1/W": np.zeros(1),
                "layer1/b": np.zeros(1),
            },
        )
        pairs = [(tf.constant([1.0]), v) for v in vs]
        proc = ScaleGradient([(".*/b", 2.0), ("layer0/.*", 0.0)])
        with caplog.at_level(logging.INFO, logger="towerkit.trainers"):
            out = proc.process(pairs)
        got = run_grads(sess, out)
        assert got == {"layer0/b": [2.0], "layer1/W": [1.0], "layer1/b": [2.0]}
        assert "layer0/W dropped" in caplog.text
        assert "layer1/b scaled by 2" in caplog.text

    def test_sparse(self, graph, sess):
        """IndexedSlices gradients stay sparse and scale their values."""
        (emb,) = make_vars(graph, {"emb": np.ones([4, 2])})
        loss = tf.reduce_sum(tf.gather(emb, [1, 3]))
        (grad,) = tf1.gradients(loss, [emb])
        assert isinstance(grad, tf.IndexedSlices)
        ((scaled, _),) = ScaleGradient(("emb", 3.0), verbose=False).process([(grad, emb)])
        assert isinstance(scaled, tf.IndexedSlices)
        sess.run(emb.initializer)
        dense = sess.run(tf.convert_to_tensor(scaled))
        np.testing.assert_allclose(dense, [[0, 0], [3, 3], [0, 0], [3, 3]])

    @settings(max_examples=10, deadline=None)
    @given(st.lists(st.floats(0.01, 3) | st.floats(-3, -0.01), min_size=1, max_size=3))
    def test_values(self, mults):
        """Each variable's gradient is multiplied by its own multiplier."""
        g = tf.Graph()
        with g.as_default():
            vs = make_vars(g, {f"v{i}": np.zeros(1) for i in range(len(mults))})
            proc = ScaleGradient([(f"v{i}", m) for i, m in enumerate(mults)], verbose=False)
            out = proc.process([(tf.constant([1.5]), v) for v in vs])
            with tf1.Session(graph=g) as s:
                got = s.run([x for x, _ in out])
        np.testing.assert_allclose(np.concatenate(got), [1.5 * m for m in mults], rtol=1e-6)


class TestSummaryGradient:
    """`SummaryGradient` adds histograms and moving RMS summaries."""

    def test_summaries(self, graph, sess, two_vars):
        """A histogram per matching gradient and a moving-average update of its RMS."""
        out = SummaryGradient(regex=".*/W").process(two_vars)
        assert out == two_vars
        summaries = tf1.get_collection(tf1.GraphKeys.SUMMARIES)
        updates = tf1.get_collection(MOVING_SUMMARY_OPS_KEY)
        assert len(updates) == 1
        sess.run(tf1.global_variables_initializer())
        rms = sess.run(updates[0])
        np.testing.assert_allclose(rms, np.sqrt(np.mean([1, 4, 9, 16])), rtol=1e-6)
        tags = []
        for blob in sess.run(summaries):
            tags += [v.tag for v in tf1.Summary.FromString(blob).value]
        assert "fc/W-grad" in tags
        assert "fc/W-grad-rms" in tags
        assert not any(t.startswith("fc/b") for t in tags)

    def test_collections(self, graph, two_vars):
        """Histograms go to the given collections."""
        SummaryGradient(collections=["mine"]).process(two_vars)
        assert len(tf1.get_collection("mine")) == 2

    def test_other_tower_noop(self, graph, two_vars):
        """In a training tower that is not the main one it adds nothing."""
        with TowerContext("tower1", is_training=True, index=1, total=2):
            out = SummaryGradient().process(two_vars)
        assert out == two_vars
        assert tf1.get_collection(tf1.GraphKeys.SUMMARIES) == []


class TestPrintGradient:
    """`PrintGradient` prints statistics each time the gradients run."""

    def test_prints(self, graph, sess, two_vars, tmp_path):
        """Each run prints a line per matching variable, with its statistics."""
        path = tmp_path / "grads.txt"
        out = PrintGradient(regex=".*/b", output_stream=f"file://{path}").process(two_vars)
        got = run_grads(sess, out)
        np.testing.assert_allclose(got["fc/b"], [10, 20])
        sess.run([g for g, _ in out])
        lines = path.read_text().strip().splitlines()
        assert len(lines) == 2
        assert lines[0].startswith("fc/b-grad mean 15 rms")
        assert "max_abs 20" in lines[0]


class TestCheckGradient:
    """`CheckGradient` fails a step whose gradients are not finite."""

    def test_finite_passes(self, graph, sess, two_vars):
        """Finite gradients go through unchanged."""
        got = run_grads(sess, CheckGradient().process(two_vars))
        np.testing.assert_allclose(got["fc/b"], [10, 20])

    def test_nan_fails(self, graph, sess, two_vars):
        """A NaN raises an error naming the variable."""
        (_, w), (gb, b) = two_vars
        bad = [(tf.constant([[1.0, np.nan], [0.0, 0.0]]), w), (gb, b)]
        out = CheckGradient().process(bad)
        with pytest.raises(tf.errors.InvalidArgumentError, match="gradient of fc/W"):
            sess.run(out[0][0])


class TestChain:
    """`chain` composes processors into one record."""

    def test_record(self):
        """chain(...) is a Chain holding the processors as a tuple."""
        c = chain(FilterNoneGrad(), GlobalNormClip(1))
        assert isinstance(c, Chain)
        assert c.procs == (FilterNoneGrad(), GlobalNormClip(1.0))
        assert c == Chain([FilterNoneGrad(), GlobalNormClip(1)])

    def test_empty_is_identity(self, graph, two_vars):
        """An empty chain returns the pairs as they are."""
        assert chain().process(two_vars) == two_vars
