"""TensorFlow 1 calls that tf_upgrade_v2 rewrites by a function of its own: each rewrite, and the
rewritten call run in a TensorFlow 2.16+ graph."""

from __future__ import annotations

import textwrap

import libcst as cst
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.tools._migrate_cst import migrate_source
from towerkit.tools._migrate_old import line_origins
from towerkit.tools._migrate_tf1 import TF1_CALLS, upgrade_call

tf1 = tf.compat.v1


def converted(body: str) -> tuple[str, str]:
    """(the converted function body, the report) of `body` inside ``def f(x, ...)``."""
    source = "import tensorflow as tf\n\n\ndef f(x, labels, logits, ds, seq, img):\n" + (
        textwrap.indent(textwrap.dedent(body), "    ")
    )
    done = migrate_source(source, "prog")
    report = "\n".join(n.text for n in done.notes)
    return done.source, report


def run_converted(body: str, **feeds):
    """Convert `body` (which sets ``out``), run it in a fresh graph, return ``out``'s value."""
    source, _ = converted(body + "return out\n")
    scope: dict = {}
    exec(compile(source, "<converted>", "exec"), scope)
    with tf.Graph().as_default(), tf1.Session() as sess:
        args = {k: tf.constant(v) for k, v in feeds.items()}
        defaults = dict.fromkeys(["x", "labels", "logits", "ds", "seq", "img"])
        out = scope["f"](**{**defaults, **args})
        sess.run(tf1.global_variables_initializer())
        return sess.run(out)


X = np.arange(6, dtype=np.float32).reshape(2, 3)


class TestRewrites:
    """One test per call: what the command writes, and that it runs as TensorFlow 1's did."""

    def test_three_argument_name_scope(self):
        """tf.name_scope(name, default_name, values) -> tf.compat.v1.name_scope, scope kept."""
        source, report = converted(
            """
            with tf.name_scope(None, "PTBProducer", [x]) as scope:
                out = tf.identity(x, name="y")
            """
        )
        assert 'tf.compat.v1.name_scope(None, "PTBProducer", [x])' in source
        assert "TensorFlow 1's (name, default_name, values) form" in report
        source, _ = converted(
            'with tf.name_scope(None, "P", [x]):\n    out = tf.identity(x, name="y")\nreturn out\n'
        )
        scope: dict = {}
        exec(compile(source, "<c>", "exec"), scope)
        with tf.Graph().as_default():
            assert scope["f"](tf.constant(X), *[None] * 5).name == "P/y:0"

    def test_one_argument_name_scope_unchanged(self):
        """tf.name_scope("a") is TensorFlow 2's too: left as it is."""
        source, report = converted('with tf.name_scope("a"):\n    pass\n')
        assert 'with tf.name_scope("a"):' in source
        assert "name_scope" not in report

    def test_device_function(self):
        """tf.device(<a function>) -> tf.compat.v1.device; a string stays."""
        source, _ = converted(
            'with tf.device(lambda op: "/cpu:0"):\n    out = tf.identity(x)\nwith tf.device("/cpu:0"):\n    pass\n'
        )
        assert "tf.compat.v1.device(lambda op:" in source
        assert 'with tf.device("/cpu:0"):' in source
        assert (
            run_converted('with tf.device(lambda op: "/cpu:0"):\n    out = x * 2\n', x=X).sum()
            == 30
        )

    def test_zeros_like_optimize(self):
        """optimize=True is dropped; optimize=False keeps tf.compat.v1's."""
        source, _ = converted(
            "a = tf.zeros_like(x, optimize=True)\nb = tf.zeros_like(x, tf.int32, 'b', False)\n"
        )
        assert "a = tf.zeros_like(x)" in source
        assert "tf.compat.v1.zeros_like(x, tf.int32, 'b', False)" in source
        assert (
            run_converted("out = tf.zeros_like(x, tf.int32, 'b', False)\n", x=X).dtype == np.int32
        )

    def test_ones_like_optimize(self):
        """tf.ones_like(x, optimize=False) -> tf.compat.v1.ones_like."""
        source, _ = converted("out = tf.ones_like(x, optimize=False)\n")
        assert "tf.compat.v1.ones_like(x, optimize=False)" in source
        assert run_converted("out = tf.ones_like(x, optimize=False)\n", x=X).sum() == 6

    def test_while_loop_return_same_structure(self):
        """return_same_structure=False keeps tf.compat.v1.while_loop (a one-element loop var)."""
        body = "out = tf.while_loop(lambda i: i < 5, lambda i: [i + 1], [tf.constant(0)], return_same_structure=False)\n"
        source, _ = converted(body)
        assert "tf.compat.v1.while_loop(" in source
        assert run_converted(body) == 5

    def test_softmax_cross_entropy_with_logits(self):
        """The labels go under tf.stop_gradient: no gradient into them, as in TensorFlow 1."""
        source, _ = converted(
            "out = tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)\n"
        )
        assert "labels=tf.stop_gradient(labels)" in source
        scope: dict = {}
        exec(compile(source + "    return out\n", "<c>", "exec"), scope)
        with tf.Graph().as_default(), tf1.Session() as sess:
            labels = tf.nn.softmax(tf.constant(X))
            out = scope["f"](None, labels, tf.constant(X[::-1].copy()), None, None, None)
            assert tf.gradients(out, labels) == [None]
            assert sess.run(out).shape == (2,)

    def test_fractional_max_pool_seed2(self):
        """deterministic= and seed2= keep tf.compat.v1.nn.fractional_max_pool."""
        body = "out = tf.nn.fractional_max_pool(img, [1.0, 1.5, 1.5, 1.0], deterministic=True, seed=1, seed2=2)[0]\n"
        source, _ = converted(body)
        assert "tf.compat.v1.nn.fractional_max_pool(" in source
        img = np.random.RandomState(0).rand(1, 6, 6, 1).astype(np.float32)
        assert run_converted(body, img=img).shape == (1, 4, 4, 1)

    def test_fractional_avg_pool_seed2(self):
        """As fractional_max_pool."""
        body = "out = tf.nn.fractional_avg_pool(img, [1.0, 1.5, 1.5, 1.0], deterministic=True, seed=1, seed2=2)[0]\n"
        source, _ = converted(body)
        assert "tf.compat.v1.nn.fractional_avg_pool(" in source
        img = np.ones((1, 6, 6, 1), np.float32)
        assert run_converted(body, img=img).shape == (1, 4, 4, 1)

    def test_extract_glimpse_uniform_noise(self):
        """uniform_noise= is TensorFlow 1's: tf.compat.v1.image.extract_glimpse."""
        body = "out = tf.image.extract_glimpse(img, [2, 2], [[0.0, 0.0]], uniform_noise=False)\n"
        source, _ = converted(body)
        assert "tf.compat.v1.image.extract_glimpse(" in source
        img = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
        assert run_converted(body, img=img).shape == (1, 2, 2, 1)

    def test_ctc_beam_search_decoder(self):
        """TensorFlow 1's merge_repeated=True default is kept by tf.compat.v1."""
        body = "out = tf.nn.ctc_beam_search_decoder(logits, [2], beam_width=2)[0][0].values\n"
        source, _ = converted(body)
        assert "tf.compat.v1.nn.ctc_beam_search_decoder(" in source
        logits = np.log(np.array([[[0.1, 0.8, 0.1]], [[0.1, 0.8, 0.1]]], np.float32))
        # label 1 twice in a row: merged by TensorFlow 1's default
        assert list(run_converted(body, logits=logits)) == [1]

    def test_dilation2d(self):
        """tf.nn.dilation2d(input, filter, strides, rates, padding) -> tf.compat.v1's."""
        body = "out = tf.nn.dilation2d(img, tf.zeros([2, 2, 1]), [1, 1, 1, 1], [1, 1, 1, 1], 'VALID')\n"
        source, _ = converted(body)
        assert "tf.compat.v1.nn.dilation2d(img," in source
        img = np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)
        assert run_converted(body, img=img)[0, :, :, 0].tolist() == [[4.0, 5.0], [7.0, 8.0]]

    def test_erosion2d(self):
        """tf.nn.erosion2d(value, kernel, strides, rates, padding) -> tf.compat.v1's."""
        body = (
            "out = tf.nn.erosion2d(img, tf.zeros([2, 2, 1]), [1, 1, 1, 1], [1, 1, 1, 1], 'VALID')\n"
        )
        source, _ = converted(body)
        assert "tf.compat.v1.nn.erosion2d(img," in source
        img = np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)
        assert run_converted(body, img=img)[0, :, :, 0].tolist() == [[0.0, 1.0], [3.0, 4.0]]

    def test_strings_split(self):
        """tf.strings.split gave a SparseTensor in TensorFlow 1: tf.compat.v1's does."""
        body = "out = tf.strings.split(seq, sep=' ').values\n"
        source, _ = converted(body)
        assert "tf.compat.v1.strings.split(seq, sep=' ')" in source
        assert run_converted(body, seq=np.array(["a b", "c"])).tolist() == [b"a", b"b", b"c"]

    def test_make_one_shot_iterator(self):
        """ds.make_one_shot_iterator() -> tf.compat.v1.data.make_one_shot_iterator(ds)."""
        body = "out = tf.data.Dataset.range(3).make_one_shot_iterator().get_next()\n"
        source, report = converted(body)
        assert (
            "tf.compat.v1.data.make_one_shot_iterator(tf.data.Dataset.range(3)).get_next()"
            in source
        )
        assert "gone from TensorFlow 2's Dataset" in report
        assert run_converted(body) == 0

    def test_make_initializable_iterator(self):
        """ds.make_initializable_iterator() -> tf.compat.v1.data.make_initializable_iterator(ds)."""
        source, _ = converted("it = ds.make_initializable_iterator()\n")
        assert "it = tf.compat.v1.data.make_initializable_iterator(ds)" in source

    def test_every_rule_is_tested(self):
        """Each call of the table has its test in this class."""
        names = " ".join(n for n in dir(self) if n.startswith("test_"))
        stems = {name.split(".")[-1] for name in TF1_CALLS}
        missing = [s for s in stems if s not in names]
        assert not missing, missing


class TestContribCalls:
    """tf.contrib.layers regularizers and initializers, converted and run."""

    def test_l2_regularizer(self):
        """tf.contrib.layers.l2_regularizer(scale, scope) -> towerkit's: scale * sum(w**2) / 2."""
        body = "out = tf.contrib.layers.l2_regularizer(0.1, scope='r')(x)\n"
        source, report = converted(body)
        assert "scope= dropped" in report
        assert "l2_regularizer(0.1)(x)" in source
        assert "from towerkit.layers import l2_regularizer" in source
        assert run_converted(body, x=X) == pytest.approx(0.1 * (X**2).sum() / 2)

    def test_l1_regularizer(self):
        """tf.contrib.layers.l1_regularizer(scale) -> towerkit's: scale * sum(|w|)."""
        body = "out = tf.contrib.layers.l1_regularizer(0.1)(x)\n"
        assert run_converted(body, x=-X) == pytest.approx(0.1 * X.sum())

    def test_apply_regularization(self):
        """apply_regularization(reg, weights) -> the sum of reg(w) over the weights."""
        body = (
            "reg = tf.contrib.layers.l2_regularizer(1.0)\n"
            "out = tf.contrib.layers.apply_regularization(reg, [x, 2 * x])\n"
        )
        source, _ = converted(body)
        assert "tf.add_n([reg(_w) for _w in [x, 2 * x]])" in source
        assert run_converted(body, x=X) == pytest.approx(5 * (X**2).sum() / 2)

    @pytest.mark.parametrize(
        ("call", "expected"),
        [
            (
                "variance_scaling_initializer(factor=1.0, mode='FAN_AVG', uniform=True)",
                "variance_scaling_initializer(scale=1.0, mode='fan_avg', distribution=\"uniform\")",
            ),
            (
                "variance_scaling_initializer()",
                'variance_scaling_initializer(scale=2.0, mode="fan_in", distribution="truncated_normal")',
            ),
            (
                "xavier_initializer(seed=3)",
                'variance_scaling_initializer(scale=1.0, mode="fan_avg", distribution="uniform", seed=3)',
            ),
        ],
    )
    def test_initializers(self, call, expected):
        """contrib's variance scaling initializers as tf.compat.v1's, TensorFlow 1's limits kept."""
        body = f"init = tf.contrib.layers.{call}\nout = tf.compat.v1.get_variable('w', [400, 300], initializer=init)\n"
        source, _ = converted(body)
        assert "tf.compat.v1." + expected in source
        w = run_converted(body)
        if "uniform" in expected:
            scale = 1.0
            limit = np.sqrt(3 * scale / ((400 + 300) / 2))
            assert np.abs(w).max() <= limit
            assert np.abs(w).max() > 0.95 * limit


class TestLineOrigins:
    """line_origins: where each line of a text with lines inserted or removed comes from."""

    @given(
        st.lists(st.integers(0, 99).map(lambda i: f"x{i} = {i}"), unique=True, max_size=12),
        st.data(),
    )
    def test_inserted_and_removed(self, lines, data):
        """Lines kept (distinct, as code lines are) map to themselves; an added one to its neighbour."""
        keep = [line for line in lines if data.draw(st.booleans())]
        after = [*keep, "return self.cost"]
        origin = line_origins("\n".join(lines) + "\n", "\n".join(after) + "\n")
        assert len(origin) == len(after)
        assert all(1 <= o <= max(len(lines), 1) for o in origin)
        assert list(origin) == sorted(origin)
        for line, o in zip(after[:-1], origin, strict=False):
            assert lines[o - 1] == line


def test_rewrite_of_no_call():
    """A call none of the rules knows gives None."""
    assert upgrade_call("tf.nn.relu", cst.parse_expression("tf.nn.relu(x)")) is None
