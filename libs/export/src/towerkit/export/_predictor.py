"""OfflinePredictor: a model built for inference in its own graph and session, callable on numpy."""

from __future__ import annotations

from typing import Any

from towerkit.export._build import InferenceGraph, build_inference_graph, open_session
from towerkit.export._config import PredictConfig
from towerkit.towers import OnlinePredictor


class OfflinePredictor(OnlinePredictor):
    """Builds the inference tower of a `PredictConfig` in a new graph and session.

    The graph is finalized once the values are loaded. Call it with one numpy
    array per input name; it returns a list with one array per output name
    (or ``(inputs, outputs)`` when the config has ``return_input=True``).

    Examples:
        ``predictor = OfflinePredictor(PredictConfig(model=..., input_names=["image"],
        output_names=["prob"], session_init=SmartInit("train_log/model-1000")))``
        then ``prob, = predictor(images)``.
    """

    def __init__(self, config: PredictConfig) -> None:
        """Build the tower, open the session, load the values, then finalize the graph.

        Raises:
            TypeError: `config` is not a `PredictConfig`.
            UnknownTensorError: an output name names no tensor of the tower.
        """
        if not isinstance(config, PredictConfig):
            msg = f"'config' must be a PredictConfig; got {type(config).__name__}"
            raise TypeError(msg)
        built = build_inference_graph(config)
        sess = open_session(config, built.graph)
        built.graph.finalize()
        self._config = config
        self._built = built
        super().__init__(built.inputs, built.outputs, return_input=config.return_input, sess=sess)
        # One callable, made now, so the first call costs the same as the others.
        self._run = sess.make_callable(list(built.outputs), feed_list=list(built.inputs))
        self._arity = len(built.inputs)
        self._with_inputs = config.return_input

    def __repr__(self) -> str:
        return (
            f"OfflinePredictor(input_names={list(self._config.input_names)}, "
            f"output_names={list(self._config.output_names)})"
        )

    @property
    def config(self) -> PredictConfig:
        """The config the predictor was built from."""
        return self._config

    @property
    def graph(self) -> Any:
        """The predictor's own (finalized) graph."""
        return self._built.graph

    @property
    def inference_graph(self) -> InferenceGraph:
        """The built tower: graph, handle, placeholders, inputs and outputs."""
        return self._built

    def __call__(self, *inputs: Any) -> Any:
        """Run the outputs on one array per input name.

        Returns:
            A list with one numpy array per output name, or ``(inputs, outputs)``.

        Raises:
            TypeError: the number of inputs differs from the number of input names.
        """
        if len(inputs) != self._arity:
            msg = (
                f"predictor takes {len(self._config.input_names)} inputs "
                f"({list(self._config.input_names)}); got {len(inputs)}"
            )
            raise TypeError(msg)
        outputs = list(self._run(*inputs))
        return (list(inputs), outputs) if self._with_inputs else outputs

    def close(self) -> None:
        """Close the session; the predictor cannot be called afterwards."""
        self.sess.close()

    def __enter__(self) -> OfflinePredictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
