"""Building the inference tower of a PredictConfig in a graph of its own."""

from __future__ import annotations

from models import SIGNATURE, convnet

from towerkit.export import PredictConfig
from towerkit.export._build import InferenceGraph, build_inference_graph
from towerkit.sessinit import SaverRestore
from towerkit.towers.compat import tf1


def _op_types(graph):
    return {op.type for op in graph.get_operations()}


class TestBuildInferenceGraph:
    """`build_inference_graph` builds one inference tower on placeholders."""

    def test_tower(self, checkpoint):
        """Placeholders for every spec, inputs and outputs as named, an open graph, no training ops."""
        config = PredictConfig(
            tower_func=convnet,
            input_signature=SIGNATURE,
            input_names=["image"],
            output_names=["prob", "cost:0"],
            session_init=SaverRestore(checkpoint),
        )
        built = build_inference_graph(config)
        assert isinstance(built, InferenceGraph)
        assert repr(built).startswith("InferenceGraph(graph=<tensorflow.python.framework.ops.Graph")
        assert [t.name for t in built.placeholders] == ["image:0", "label:0"]
        assert [t.name for t in built.inputs] == ["image:0"]
        assert [t.name for t in built.outputs] == ["prob:0", "cost:0"]
        assert not built.graph.finalized
        assert not built.handle.is_training
        assert built.graph is not tf1.get_default_graph()
        assert built.graph.get_collection(tf1.GraphKeys.UPDATE_OPS) == []
        assert "RestoreV2" in _op_types(built.graph)

    def test_without_restore_ops(self, checkpoint):
        """With setup_restore=False the graph holds the tower only."""
        config = PredictConfig(
            tower_func=convnet,
            input_signature=SIGNATURE,
            output_names=["prob"],
            session_init=SaverRestore(checkpoint),
        )
        built = build_inference_graph(config, setup_restore=False)
        assert "RestoreV2" not in _op_types(built.graph)
        assert [t.name for t in built.inputs] == ["image:0", "label:0"]
