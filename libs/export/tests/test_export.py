"""ModelExporter: compact frozen graphs and SavedModels, written atomically, loadable without towerkit."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from models import SIGNATURE, convnet, make_data, reference

from towerkit.export import (
    InferenceOptimizationError,
    ModelExporter,
    OfflinePredictor,
    PredictConfig,
    UnknownTensorError,
)
from towerkit.export._freeze import stateful_nodes
from towerkit.sessinit import SaverRestore, SessionInit
from towerkit.towers.compat import tf1


def _config(checkpoint, **kwargs):
    kwargs.setdefault("input_names", ["image"])
    kwargs.setdefault("output_names", ["prob"])
    return PredictConfig(
        tower_func=convnet,
        input_signature=SIGNATURE,
        session_init=SaverRestore(checkpoint),
        **kwargs,
    )


def _read_graph_def(path):
    graph_def = tf1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    return graph_def


def _run_graph_def(graph_def, feeds, fetches):
    with tf1.Graph().as_default() as graph:
        tf1.import_graph_def(graph_def, name="")
        with tf1.Session(graph=graph) as sess:
            return sess.run(fetches, feeds)


class FailingInit(SessionInit):
    """A session init that is interrupted while loading values."""

    def _run_init(self, sess):
        del sess
        raise KeyboardInterrupt


class InterruptOn(logging.Handler):
    """Interrupts the process (KeyboardInterrupt) when a log message contains `text`."""

    def __init__(self, text):
        super().__init__()
        self.text = text

    def emit(self, record):
        if self.text in record.getMessage():
            raise KeyboardInterrupt


class TestModelExporter:
    """`ModelExporter` checks its config at construction."""

    def test_fail(self, checkpoint):
        """A wrong kind of config and unknown output names are caught before any export."""
        with pytest.raises(TypeError, match=r"'config' must be a PredictConfig; got str"):
            ModelExporter("config")
        with pytest.raises(UnknownTensorError, match=r"not found: 'probability'"):
            ModelExporter(_config(checkpoint, output_names=["probability"]))

    def test_repr(self, checkpoint):
        """The repr shows the config."""
        assert repr(ModelExporter(_config(checkpoint))).startswith(
            "ModelExporter(PredictConfig(tower_fn=convnet"
        )


@pytest.mark.procs
class TestExportCompact:
    """`export_compact` writes a frozen, inference-only GraphDef."""

    def test_inference_only(self, checkpoint, checkpoint_values, tmp_path):
        """No variable, update or dropout op is left, and it computes the checkpoint's predictions."""
        path = str(tmp_path / "model.pb")
        assert ModelExporter(_config(checkpoint)).export_compact(path) == path
        graph_def = _read_graph_def(path)
        ops = {n.name: n.op for n in graph_def.node}
        assert stateful_nodes(ops.items()) == []
        assert not {"RandomUniform", "Mean", "SquaredDifference", "Identity"} & set(ops.values())
        # The batch normalization is folded into the convolution.
        assert not {"Rsqrt", "Mul", "Sub", "AddV2", "Add"} & set(ops.values())
        assert ops["image"] == "Placeholder"
        assert "label" not in ops
        image, _ = make_data(10, seed=11)
        prob = _run_graph_def(graph_def, {"image:0": image}, "prob:0")
        np.testing.assert_allclose(prob, reference(checkpoint_values, image), atol=1e-5)
        assert os.listdir(tmp_path) == ["model.pb"]

    def test_tensor_inside_the_model_as_input(self, tmp_path):
        """An input name may name a ``placeholder_with_default`` inside the model."""

        def generator(image):
            z = tf1.placeholder_with_default(tf1.zeros([tf1.shape(image)[0], 4]), [None, 4], "z")
            w = tf1.get_variable("gen/W", [4, 2], initializer=tf1.ones_initializer())
            tf1.identity(tf1.matmul(z, w) * 2.0, name="sample")

        config = PredictConfig(
            tower_func=generator,
            input_signature=SIGNATURE[:1],
            input_names=["z"],
            output_names=["sample"],
        )
        z = np.arange(12, dtype=np.float32).reshape(3, 4)
        want = 2.0 * z @ np.ones([4, 2], np.float32)
        path = ModelExporter(config).export_compact(str(tmp_path / "gen.pb"))
        graph_def = _read_graph_def(path)
        assert {n.name: n.op for n in graph_def.node}["z"] == "Placeholder"
        np.testing.assert_allclose(_run_graph_def(graph_def, {"z:0": z}, "sample:0"), want)
        serving = tf.saved_model.load(ModelExporter(config).export_serving(str(tmp_path / "sm")))
        got = serving.signatures["prediction_pipeline"](z=tf.constant(z))["sample"]
        np.testing.assert_allclose(got.numpy(), want)

    def test_unoptimized_same_outputs(self, checkpoint, tmp_path):
        """Optimized, TOCO-compatible and unoptimized graphs agree to 1e-6."""
        exporter = ModelExporter(_config(checkpoint))
        image, _ = make_data(10, seed=12)
        outs = [
            _run_graph_def(
                _read_graph_def(
                    exporter.export_compact(
                        str(tmp_path / f"{opt}-{toco}.pb"), optimize=opt, toco_compatible=toco
                    )
                ),
                {"image:0": image},
                "prob:0",
            )
            for opt, toco in ((True, False), (True, True), (False, False))
        ]
        np.testing.assert_allclose(outs[0], outs[2], atol=1e-6)
        np.testing.assert_allclose(outs[1], outs[2], atol=1e-6)
        unoptimized = {n.op for n in _read_graph_def(tmp_path / "False-False.pb").node}
        assert {"Rsqrt", "AddV2"} <= unoptimized

    def test_stale_temporaries_removed(self, checkpoint, tmp_path, caplog):
        """Temporaries of the same export left by a killed process are removed, logged."""
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        stale = f".model.tmp-{proc.pid}-0123abcd.pb"
        other = f".other.tmp-{proc.pid}-0123abcd.pb"
        for name in (stale, other):
            (tmp_path / name).write_bytes(b"partial")
        with caplog.at_level("WARNING", logger="towerkit.sessinit"):
            ModelExporter(_config(checkpoint)).export_compact(str(tmp_path / "model.pb"))
        assert sorted(os.listdir(tmp_path)) == [other, "model.pb"]
        assert stale in caplog.text

    def test_optimization_impossible(self, checkpoint, tmp_path, caplog):
        """When optimization cannot work it says why; the fallback writes the unoptimized graph."""
        exporter = ModelExporter(_config(checkpoint, input_names=["image", "label"]))
        path = tmp_path / "model.pb"
        with pytest.raises(
            InferenceOptimizationError,
            match=r"no output depends on the inputs \['label'\].*Pass fallback_unoptimized=True",
        ):
            exporter.export_compact(str(path))
        assert os.listdir(tmp_path) == []
        with caplog.at_level(logging.WARNING, logger="towerkit.export"):
            exporter.export_compact(str(path), fallback_unoptimized=True)
        assert "writing it unoptimized" in caplog.text
        ops = {n.name: n.op for n in _read_graph_def(path).node}
        assert ops["label"] == "Placeholder"
        image, label = make_data(3)
        prob = _run_graph_def(_read_graph_def(path), {"image:0": image, "label:0": label}, "prob:0")
        assert prob.shape == (3, 3)

    def test_existing_path(self, checkpoint, tmp_path):
        """An existing file is an error unless overwrite=True; a directory is always an error."""
        path = tmp_path / "model.pb"
        path.write_bytes(b"old")
        exporter = ModelExporter(_config(checkpoint))
        with pytest.raises(FileExistsError, match=r"model.pb' exists already: pass overwrite=True"):
            exporter.export_compact(str(path))
        assert path.read_bytes() == b"old"
        exporter.export_compact(path, overwrite=True)
        assert len(_read_graph_def(path).node) > 5
        with pytest.raises(IsADirectoryError, match=r"is a directory"):
            exporter.export_compact(str(tmp_path), overwrite=True)
        with pytest.raises(TypeError, match=r"'filename' must be a str or os.PathLike; got int"):
            exporter.export_compact(3)

    def test_interrupted_leaves_nothing(self, checkpoint, tmp_path):
        """An export interrupted while loading values writes nothing."""
        config = PredictConfig(
            tower_func=convnet,
            input_signature=SIGNATURE,
            output_names=["prob"],
            session_init=FailingInit(),
        )
        with pytest.raises(KeyboardInterrupt):
            ModelExporter(config).export_compact(str(tmp_path / "model.pb"))
        assert os.listdir(tmp_path) == []


@pytest.mark.procs
class TestExportServing:
    """`export_serving` writes a SavedModel directory with one predict signature."""

    def test_layout_and_tags(self, checkpoint, checkpoint_values, tmp_path):
        """saved_model.pb and variables/ only; custom tags and signature name load with the v1 loader."""
        path = str(tmp_path / "serving")
        exporter = ModelExporter(_config(checkpoint, output_names=["prob:0", "logits"]))
        assert (
            exporter.export_serving(path, tags=["serve", "cpu"], signature_name="classify") == path
        )
        assert sorted(os.listdir(path)) == ["saved_model.pb", "variables"]
        assert os.listdir(tmp_path) == ["serving"]
        image, _ = make_data(5, seed=4)
        with tf1.Graph().as_default() as graph, tf1.Session(graph=graph) as sess:
            meta = tf1.saved_model.loader.load(sess, ["serve", "cpu"], path)
            assert list(meta.signature_def) == ["classify"]
            signature = meta.signature_def["classify"]
            assert sorted(signature.inputs) == ["image"]
            assert sorted(signature.outputs) == ["logits", "prob"]
            assert signature.method_name == "tensorflow/serving/predict"
            prob = sess.run(signature.outputs["prob"].name, {signature.inputs["image"].name: image})
            names = [op.name for op in graph.get_operations()]
        np.testing.assert_allclose(prob, reference(checkpoint_values, image), atol=1e-5)
        assert [n for n in names if "Adam" in n or "dropout" in n or "moments" in n] == []

    def test_existing_path(self, checkpoint, tmp_path):
        """An existing path is an error unless overwrite=True, which replaces it whole."""
        path = tmp_path / "serving"
        path.mkdir()
        (path / "stale.txt").write_text("old")
        exporter = ModelExporter(_config(checkpoint))
        with pytest.raises(FileExistsError, match=r"serving' exists already: pass overwrite=True"):
            exporter.export_serving(str(path))
        exporter.export_serving(str(path), overwrite=True)
        assert sorted(os.listdir(path)) == ["saved_model.pb", "variables"]
        assert os.listdir(tmp_path) == ["serving"]

    def test_interrupted_keeps_old(self, checkpoint, tmp_path):
        """Interrupted while writing, an overwrite leaves the old model whole and no temporary files."""
        path = tmp_path / "serving"
        exporter = ModelExporter(_config(checkpoint))
        exporter.export_serving(str(path))
        before = sorted(os.listdir(path))
        stamp = (path / "saved_model.pb").stat().st_mtime_ns
        tf_logger = logging.getLogger("tensorflow")
        handler = InterruptOn("SavedModel written to")
        level = tf_logger.level
        tf_logger.addHandler(handler)
        tf_logger.setLevel(logging.INFO)
        try:
            with pytest.raises(KeyboardInterrupt):
                exporter.export_serving(str(path), overwrite=True)
        finally:
            tf_logger.removeHandler(handler)
            tf_logger.setLevel(level)
        assert sorted(os.listdir(path)) == before
        assert (path / "saved_model.pb").stat().st_mtime_ns == stamp
        assert os.listdir(tmp_path) == ["serving"]

    def test_interrupted_new_leaves_nothing(self, checkpoint, tmp_path):
        """Interrupted while writing a new model, nothing appears under its name."""
        tf_logger = logging.getLogger("tensorflow")
        handler = InterruptOn("SavedModel written to")
        level = tf_logger.level
        tf_logger.addHandler(handler)
        tf_logger.setLevel(logging.INFO)
        try:
            with pytest.raises(KeyboardInterrupt):
                ModelExporter(_config(checkpoint)).export_serving(str(tmp_path / "serving"))
        finally:
            tf_logger.removeHandler(handler)
            tf_logger.setLevel(level)
        assert os.listdir(tmp_path) == []

    def test_fail(self, checkpoint, tmp_path):
        """Bad tags and signature names are rejected before anything is written."""
        exporter = ModelExporter(_config(checkpoint))
        with pytest.raises(TypeError, match=r"'tags' must be a sequence of strings; got str"):
            exporter.export_serving(str(tmp_path / "a"), tags="serve")
        with pytest.raises(ValueError, match=r"'tags' is empty: give at least one tag"):
            exporter.export_serving(str(tmp_path / "a"), tags=[])
        with pytest.raises(TypeError, match=r"'signature_name' must be a str; got int"):
            exporter.export_serving(str(tmp_path / "a"), signature_name=1)
        with pytest.raises(ValueError, match=r"'signature_name' is empty"):
            exporter.export_serving(str(tmp_path / "a"), signature_name="")
        assert os.listdir(tmp_path) == []


CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf

    compact, serving, data, out = sys.argv[1:5]
    image = np.load(data)["image"]
    results = {}

    graph_def = tf.compat.v1.GraphDef()
    with open(compact, "rb") as f:
        graph_def.ParseFromString(f.read())
    with tf.Graph().as_default() as graph:
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as sess:
            results["compact_prob"], results["compact_logits"] = sess.run(
                ["prob:0", "logits:0"], {"image:0": image}
            )

    loaded = tf.saved_model.load(serving)
    outputs = loaded.signatures["prediction_pipeline"](image=tf.constant(image))
    results["v2_prob"] = outputs["prob"].numpy()
    results["v2_logits"] = outputs["logits"].numpy()

    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], serving)
        signature = meta.signature_def["prediction_pipeline"]
        results["v1_prob"], results["v1_logits"] = sess.run(
            [signature.outputs["prob"].name, signature.outputs["logits"].name],
            {signature.inputs["image"].name: image},
        )

    loaded_towerkit = sorted(m for m in sys.modules if m.split(".")[0] == "towerkit")
    if loaded_towerkit:
        raise SystemExit(f"towerkit was imported: {loaded_towerkit}")
    np.savez(out, **results)
    """
)


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory):
    """Both exports of the trained model, and the predictor's outputs on test images."""
    root = tmp_path_factory.mktemp("exported")
    config = _config(checkpoint, output_names=["prob", "logits:0"])
    exporter = ModelExporter(config)
    compact = exporter.export_compact(str(root / "compact.pb"))
    serving = exporter.export_serving(str(root / "serving"))
    image, _ = make_data(32, seed=99)
    with OfflinePredictor(config) as predictor:
        prob, logits = predictor(image)
    return {
        "compact": compact,
        "serving": serving,
        "image": image,
        "prob": prob,
        "logits": logits,
        "root": root,
    }


@pytest.mark.procs
@pytest.mark.slow
class TestFreshProcess:
    """The exports are real: another process loads them with TensorFlow alone."""

    def test_outputs_match(self, exported):
        """Compact graph, SavedModel (tf.saved_model.load and the v1 loader) all match the predictor to 1e-6."""
        root = exported["root"]
        np.savez(root / "data.npz", image=exported["image"])
        out = root / "out.npz"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD,
                exported["compact"],
                exported["serving"],
                str(root / "data.npz"),
                str(out),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = np.load(out)
        assert sorted(results.files) == sorted(
            f"{form}_{name}" for form in ("compact", "v2", "v1") for name in ("prob", "logits")
        )
        for form in ("compact", "v2", "v1"):
            # Probabilities to 1e-6; logits (about 10 in size) to 1e-6 relative, as float32
            # resolves them no finer and the compact graph's folded constants round differently.
            np.testing.assert_allclose(results[f"{form}_prob"], exported["prob"], atol=1e-6)
            np.testing.assert_allclose(
                results[f"{form}_logits"], exported["logits"], rtol=1e-6, atol=1e-6
            )

    def test_saved_model_cli(self, exported):
        """`saved_model_cli show --all` lists the signature with its names, dtypes and shapes."""
        cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run(
            [cli, "show", "--all", "--dir", exported["serving"]],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        text = proc.stdout
        assert "signature_def['prediction_pipeline']:" in text
        assert "Method name is: tensorflow/serving/predict" in text
        for key, shape, name in (
            ("inputs['image']", "(-1, 8, 8, 1)", "image:0"),
            ("outputs['prob']", "(-1, 3)", "prob:0"),
            ("outputs['logits']", "(-1, 3)", "logits:0"),
        ):
            block = text[text.index(key) :].split("\n")[:4]
            assert "dtype: DT_FLOAT" in block[1]
            assert f"shape: {shape}" in block[2]
            assert f"name: {name}" in block[3]
