"""OfflinePredictor: the inference tower in its own graph and session."""

from __future__ import annotations

import numpy as np
import pytest
from models import SIGNATURE, convnet, make_data, reference

from towerkit.export import OfflinePredictor, PredictConfig, UnknownTensorError
from towerkit.sessinit import DictRestore, SaverRestore
from towerkit.towers import TowerContext, build_placeholders
from towerkit.towers.compat import tf1


def _config(session_init=None, **kwargs):
    kwargs.setdefault("input_names", ["image"])
    kwargs.setdefault("output_names", ["prob"])
    return PredictConfig(
        tower_func=convnet, input_signature=SIGNATURE, session_init=session_init, **kwargs
    )


class TestOfflinePredictor:
    """`OfflinePredictor` predicts with the inference behaviour of the restored model."""

    def test_matches_numpy(self, checkpoint, checkpoint_values):
        """Outputs are the model's inference maths on the checkpoint's values (moving statistics)."""
        assert not np.allclose(checkpoint_values["bn/mean/EMA"], 0.0)
        image, _ = make_data(16, seed=7)
        with OfflinePredictor(_config(SaverRestore(checkpoint))) as predictor:
            (prob,) = predictor(image)
        np.testing.assert_allclose(prob, reference(checkpoint_values, image), atol=1e-5)

    def test_inference_behaviour(self, checkpoint):
        """Deterministic (no dropout) and per-sample (no batch statistics), unlike a training tower."""
        image, label = make_data(8, seed=3)
        config = _config(SaverRestore(checkpoint), output_names=["logits"])
        with OfflinePredictor(config) as predictor:
            (whole,) = predictor(image)
            (again,) = predictor(image)
            (first,) = predictor(image[:1])
        np.testing.assert_array_equal(whole, again)
        np.testing.assert_allclose(first[0], whole[0], rtol=1e-6, atol=1e-6)
        with tf1.Graph().as_default() as graph:
            x, y = build_placeholders(SIGNATURE)
            with TowerContext("", is_training=True):
                convnet(x, y)
            with tf1.Session(graph=graph) as sess:
                SaverRestore(checkpoint).init(sess)
                training = sess.run("logits:0", {x: image, y: label})
        assert np.abs(training - whole).max() > 0.1

    def test_graph_and_session(self):
        """It owns a finalized graph holding one inference tower, and no training ops."""
        with OfflinePredictor(_config()) as predictor:
            assert predictor.graph.finalized
            assert predictor.sess.graph is predictor.graph
            assert not predictor.inference_graph.handle.is_training
            assert predictor.graph.get_collection(tf1.GraphKeys.UPDATE_OPS) == []
            assert (
                repr(predictor) == "OfflinePredictor(input_names=['image'], output_names=['prob'])"
            )

    def test_several_outputs_and_return_input(self, checkpoint_values):
        """Outputs come in `output_names` order; `return_input` also returns the inputs."""
        values = {
            k: v for k, v in checkpoint_values.items() if "Adam" not in k and "power" not in k
        }
        image, label = make_data(4, seed=1)
        config = _config(
            DictRestore(values),
            input_names=["label", "image"],
            output_names=["cost", "prob:0", "logits"],
            return_input=True,
        )
        with OfflinePredictor(config) as predictor:
            inputs, (cost, prob, logits) = predictor(label, image)
        assert inputs[0] is label
        assert inputs[1] is image
        np.testing.assert_allclose(prob, reference(values, image), atol=1e-5)
        assert logits.shape == (4, 3)
        expected = -np.mean(np.log(prob[np.arange(4), label]))
        np.testing.assert_allclose(cost, expected, atol=1e-6)

    def test_session_creator(self):
        """A given session creator makes the session, under the predictor's graph."""
        made = []

        class Creator:
            def create_session(self):
                sess = tf1.Session()
                sess.run(tf1.global_variables_initializer())
                made.append(sess)
                return sess

        with OfflinePredictor(_config(session_creator=Creator())) as predictor:
            assert made == [predictor.sess]
            assert predictor(make_data(2)[0])[0].shape == (2, 3)

    def test_feed_a_tensor_inside_the_model(self):
        """A sampler feeds a ``placeholder_with_default`` inside the model, not a model input."""

        def generator(image):
            batch = tf1.shape(image)[0]
            z = tf1.placeholder_with_default(tf1.zeros([batch, 4]), [None, 4], name="z")
            w = tf1.get_variable("gen/W", [4, 2], initializer=tf1.ones_initializer())
            h = tf1.identity(tf1.matmul(z, w), name="hidden")
            tf1.identity(h * 2.0, name="sample")

        config = PredictConfig(
            tower_func=generator,
            input_signature=SIGNATURE[:1],
            input_names=["z"],
            output_names=["sample"],
        )
        z = np.arange(12, dtype=np.float32).reshape(3, 4)
        with OfflinePredictor(config) as sampler:
            (sample,) = sampler(z)
            np.testing.assert_allclose(sample, 2.0 * z @ np.ones([4, 2], np.float32))
            assert sampler.input_tensors[0].op.type == "PlaceholderWithDefault"
        # an intermediate tensor, fed together with a model input
        config = PredictConfig(
            tower_func=generator,
            input_signature=SIGNATURE[:1],
            input_names=["image", "hidden"],
            output_names=["sample"],
        )
        with OfflinePredictor(config) as predictor:
            image = np.full([2, 8, 8, 1], 3.0, np.float32)
            (sample,) = predictor(image, np.ones([2, 2], np.float32))
            np.testing.assert_allclose(sample, np.full([2, 2], 2.0))

    def test_fail(self, checkpoint):
        """Unknown outputs list suggestions; wrong arity and config kind are rejected."""
        with pytest.raises(
            UnknownTensorError,
            match=r"'input_names' must name tensors of the input signature or of the inference "
            r"tower; not found: 'imag' \(did you mean 'image'\?\)",
        ):
            OfflinePredictor(_config(input_names=["imag"]))
        with pytest.raises(
            TypeError, match=r"can be fed, not variables or their handles; at fault: 'fc/W'"
        ):
            OfflinePredictor(_config(input_names=["fc/W"]))
        with pytest.raises(
            UnknownTensorError,
            match=r"not found: 'probs' \(did you mean 'prob'\?\), 'logit' \(did you mean 'logits'\?\)",
        ):
            OfflinePredictor(_config(output_names=["probs", "prob", "logit"]))
        with pytest.raises(TypeError, match=r"'config' must be a PredictConfig; got dict"):
            OfflinePredictor({})
        with pytest.raises(TypeError, match=r"not variables or their handles; at fault: 'fc/W'"):
            OfflinePredictor(_config(output_names=["fc/W"]))
        with (
            OfflinePredictor(_config(SaverRestore(checkpoint))) as predictor,
            pytest.raises(TypeError, match=r"predictor takes 1 inputs \(\['image'\]\); got 2"),
        ):
            predictor(*make_data(2))
