"""tensorpack 0.8-0.10's ModelDesc brought to tensorpack 0.11's before the migration, and
tf.layers under tensorpack's ``tfv1 as tf`` (mnist-tflayers)."""

from __future__ import annotations

import textwrap

from towerkit.tools._migrate_cst import migrate_source
from towerkit.tools._migrate_old import TRAINING_RENAMED, modernize

OLD = textwrap.dedent(
    """\
    from tensorpack import *


    class Model(ModelDesc):
        def __init__(self, training=True):
            self.training = training

        def _get_inputs(self):
            return [InputDesc(tf.float32, (None, 4), 'x')]

        def _build_graph(self, inputs):
            x, = inputs
            if self.training:
                x = x * 2
            self.cost = tf.reduce_sum(x, name='cost')

        def _get_optimizer(self):
            return tf.train.GradientDescentOptimizer(0.1)


    names = [s.name for s in Model().get_inputs_desc()]
    """
)


class TestModernize:
    """modernize: tensorpack 0.11's method names, the cost returned, training renamed."""

    def test_methods(self):
        """_get_inputs, _build_graph(self, inputs), _get_optimizer renamed; return self.cost added."""
        done = modernize(OLD)
        assert "    def inputs(self):" in done.source
        assert "    def build_graph(self, *inputs):" in done.source
        assert "    def optimizer(self):" in done.source
        assert done.source.count("return self.cost") == 1
        assert "Model().get_input_signature()" in done.source

    def test_assigned_training_renamed(self):
        """An assigned self.training (a constructor flag) becomes self.training_mode everywhere."""
        done = modernize(OLD)
        assert f"self.{TRAINING_RENAMED} = training" in done.source
        assert f"if self.{TRAINING_RENAMED}:" in done.source
        assert "self.training " not in done.source

    def test_lines_of_the_original(self):
        """Notes are at the original's lines; lines after the added return map back."""
        done = modernize(OLD)
        lines = {n.text.split(" (")[0]: n.line for n in done.notes}
        assert lines["tensorpack 0.8-0.10's ModelDesc._get_optimizer -> optimizer"] == 17
        new_line = done.source.splitlines().index(
            "names = [s.name for s in Model().get_input_signature()]"
        )
        assert done.original_line(new_line + 1) == 21

    def test_new_programs_unchanged(self):
        """A tensorpack 0.11 program (no old method) is returned as it is."""
        source = "class M(ModelDesc):\n    def build_graph(self, x):\n        return x\n"
        assert modernize(source).source == source
        assert modernize(source).notes == ()

    def test_whole_migration(self):
        """Through the command's conversion: InputDesc to tf.TensorSpec in the renamed inputs()."""
        done = migrate_source("import tensorflow as tf\n" + OLD, "prog")
        assert "return [tf.TensorSpec((None, 4), tf.float32, 'x')]" in done.source
        assert not [n for n in done.notes if n.manual and "InputDesc" in n.text]


class TestTfLayersUnderTfv1:
    """``from tensorpack import tfv1 as tf``: tf.layers still goes to towerkit's tf_layers."""

    def test_mnist_tflayers(self):
        """enable_argscope_for_module(tf.layers) and argscope([tf.layers.conv2d]) (mnist-tflayers)."""
        source = textwrap.dedent(
            """\
            from tensorpack import tfv1 as tf
            from tensorpack import *

            enable_argscope_for_module(tf.layers)


            def build(image):
                with argscope([tf.layers.conv2d], padding='same'):
                    return tf.layers.dense(tf.layers.flatten(tf.layers.conv2d(image, 4, 3)), 2)
            """
        )
        done = migrate_source(source, "prog")
        assert "enable_argscope_for_module(tf_layers)" in done.source
        assert "argscope([tf_layers.conv2d], padding='same')" in done.source
        assert "tf_layers.dense(tf_layers.flatten(tf_layers.conv2d(image, 4, 3)), 2)" in done.source
        assert "from towerkit.layers import tf_layers" in done.source
        assert "enable_tf_layers" not in done.source
