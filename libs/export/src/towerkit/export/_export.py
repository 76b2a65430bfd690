"""ModelExporter: a compact frozen GraphDef or a SavedModel, written atomically."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from tensorflow.python.util import deprecation

from towerkit.export._build import build_inference_graph, open_session
from towerkit.export._config import PredictConfig
from towerkit.export._errors import InferenceOptimizationError
from towerkit.export._freeze import freeze_session_graph, optimize_graph_def
from towerkit.export._names import as_names, signature_key
from towerkit.sessinit import atomic_path, atomic_write_bytes, remove_stale_temporaries
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.export")


def _target(filename: Any, overwrite: bool, *, directory: bool) -> str:
    """`filename` as a string, checked for what exists there already."""
    if not isinstance(filename, (str, os.PathLike)):
        msg = f"'filename' must be a str or os.PathLike; got {type(filename).__name__}"
        raise TypeError(msg)
    path = os.fspath(filename)
    if not path:
        msg = "'filename' is empty: expected the path to write the model to"
        raise ValueError(msg)
    if os.path.lexists(path):
        if not overwrite:
            msg = f"{path!r} exists already: pass overwrite=True to replace it"
            raise FileExistsError(msg)
        if not directory and os.path.isdir(path):
            msg = f"{path!r} is a directory: a compact graph is one file; pick another name"
            raise IsADirectoryError(msg)
    base = os.path.basename(os.path.normpath(path))
    remove_stale_temporaries(os.path.dirname(os.path.abspath(path)), lambda n: n == base, what=base)
    return path


def _check_signature_name(signature_name: Any) -> str:
    if not isinstance(signature_name, str):
        msg = f"'signature_name' must be a str; got {type(signature_name).__name__}"
        raise TypeError(msg)
    if not signature_name:
        msg = "'signature_name' is empty: expected a name such as 'prediction_pipeline'"
        raise ValueError(msg)
    return signature_name


def _restored_values(config: PredictConfig) -> dict[str, Any]:
    """The value of every global variable of `config`'s tower once `session_init` has run."""
    built = build_inference_graph(config)
    with built.graph.as_default():
        variables = {v.op.name: v for v in tf1.global_variables()}
    with open_session(config, built.graph) as sess:
        return sess.run(variables) if variables else {}


class ModelExporter:
    """Export the inference tower of a `PredictConfig` for use without towerkit.

    Each export builds the tower in a new graph under
    ``TowerContext('', is_training=False)``, loads the values with the config's
    `session_init`, and writes the result under a temporary name in the target's
    directory, moved into place only once complete.
    """

    def __init__(self, config: PredictConfig) -> None:
        """Check `config` by building its tower once (output names and restore are checked now).

        Raises:
            TypeError: `config` is not a `PredictConfig`.
            UnknownTensorError: an output name names no tensor of the tower.
            RestoreMismatchError: the config's `session_init` does not fit the tower.
        """
        if not isinstance(config, PredictConfig):
            msg = f"'config' must be a PredictConfig; got {type(config).__name__}"
            raise TypeError(msg)
        build_inference_graph(config)
        self._config = config

    def __repr__(self) -> str:
        return f"ModelExporter({self._config!r})"

    @property
    def config(self) -> PredictConfig:
        """The config exported."""
        return self._config

    def export_compact(
        self,
        filename: str | os.PathLike[str],
        optimize: bool = True,
        toco_compatible: bool = False,
        *,
        fallback_unoptimized: bool = False,
        overwrite: bool = False,
    ) -> str:
        """Write a self-contained, inference-only ``GraphDef`` (binary protobuf) to `filename`.

        Variables are folded into constants and everything the outputs do not need is
        removed; the inputs are placeholders named as in `input_names` (feed
        ``"<name>:0"``), the outputs keep their tensor names. Load it with
        ``tf.compat.v1.import_graph_def``.

        Args:
            filename: the file to write.
            optimize: pass the graph through TensorFlow's optimize-for-inference
                (fold batch normalizations, drop training-only nodes). It cannot
                transform every graph; see `fallback_unoptimized`.
            toco_compatible: with `optimize`, keep to transformations that TensorFlow
                Lite's converter (TOCO) supports.
            fallback_unoptimized: when optimization is impossible, log why and write the
                unoptimized frozen graph instead of raising.
            overwrite: replace an existing file at `filename`.

        Returns:
            The path written (`filename`).

        Raises:
            FileExistsError: `filename` exists and `overwrite` is False.
            IsADirectoryError: `filename` is a directory.
            InferenceOptimizationError: `optimize` is set, the graph cannot be optimized,
                and `fallback_unoptimized` is not set; the message says why.
        """
        path = _target(filename, overwrite, directory=False)
        config = self._config
        built = build_inference_graph(config)
        input_nodes = [t.op.name for t in built.inputs]
        output_nodes = list(dict.fromkeys(t.op.name for t in built.outputs))
        with open_session(config, built.graph) as sess:
            graph_def = freeze_session_graph(sess, input_nodes, output_nodes)
        optimized = False
        if optimize:
            dtypes = [t.dtype for t in built.inputs]
            try:
                graph_def = optimize_graph_def(
                    graph_def, input_nodes, output_nodes, dtypes, toco_compatible
                )
                optimized = True
            except InferenceOptimizationError as err:
                if not fallback_unoptimized:
                    msg = (
                        f"cannot optimize the graph for inference: {err}. Pass "
                        "fallback_unoptimized=True to write the unoptimized frozen graph "
                        "instead, or optimize=False to skip the optimization"
                    )
                    raise InferenceOptimizationError(msg) from err
                logger.warning(
                    "Cannot optimize the graph for inference (%s); writing it unoptimized.", err
                )
        data = graph_def.SerializeToString()
        atomic_write_bytes(path, data)
        logger.info(
            "Exported a compact graph (%d nodes, %d bytes, %s) to %s.",
            len(graph_def.node),
            len(data),
            "optimized" if optimized else "not optimized",
            path,
        )
        return path

    def export_serving(
        self,
        filename: str | os.PathLike[str],
        tags: Sequence[str] | None = None,
        signature_name: str = "prediction_pipeline",
        *,
        overwrite: bool = False,
    ) -> str:
        """Write a SavedModel directory (``saved_model.pb`` and ``variables/``) to `filename`.

        It has one meta graph, tagged `tags`, holding the inference tower only, and one
        predict signature named `signature_name` whose input keys are `input_names`
        and whose output keys are `output_names` without a ``:0`` port. Load it with
        ``tf.saved_model.load`` or ``tf.compat.v1.saved_model.loader.load``, or serve it
        with TensorFlow Serving.

        Args:
            filename: the directory to create.
            tags: the meta graph's tags (default: ``("serve",)``).
            signature_name: the name of the predict signature.
            overwrite: replace what exists at `filename`.

        Returns:
            The path written (`filename`).

        Raises:
            FileExistsError: `filename` exists and `overwrite` is False.
            TypeError: `tags` is not a sequence of strings, or `signature_name` not a string.
            ValueError: `tags` is empty or holds an empty tag, or `signature_name` is empty.
        """
        path = _target(filename, overwrite, directory=True)
        signature_name = _check_signature_name(signature_name)
        tags = (tf1.saved_model.tag_constants.SERVING,) if tags is None else as_names("tags", tags)
        if not tags:
            msg = "'tags' is empty: give at least one tag (None gives ('serve',))"
            raise ValueError(msg)
        config = self._config
        values = _restored_values(config)
        built = build_inference_graph(config, setup_restore=False)
        utils = tf1.saved_model.utils
        with built.graph.as_default(), deprecation.silence():
            inputs = {
                name: utils.build_tensor_info(t)
                for name, t in zip(config.input_names, built.inputs)
            }
            outputs = {
                signature_key(name): utils.build_tensor_info(t)
                for name, t in zip(config.output_names, built.outputs)
            }
            signature = tf1.saved_model.signature_def_utils.build_signature_def(
                inputs=inputs,
                outputs=outputs,
                method_name=tf1.saved_model.signature_constants.PREDICT_METHOD_NAME,
            )
            variables = tf1.global_variables()
            local = tf1.local_variables()
            main_op = tf1.variables_initializer(local, name="init_local") if local else None
        with tf1.Session(graph=built.graph) as sess, atomic_path(path) as tmp:
            if variables:
                sess.run(
                    [v.initializer for v in variables],
                    {v.initial_value: values[v.op.name] for v in variables},
                )
            builder = tf1.saved_model.Builder(tmp)
            builder.add_meta_graph_and_variables(
                sess,
                list(tags),
                signature_def_map={signature_name: signature},
                main_op=main_op,
                strip_default_attrs=True,
                clear_devices=True,
            )
            builder.save()
        logger.info(
            "Exported a SavedModel (tags %s, signature %r) to %s.", list(tags), signature_name, path
        )
        return path
