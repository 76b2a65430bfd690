"""The lib's version and public names."""

import importlib
import importlib.metadata

import towerkit.layers as lib


class TestVersion:
    """`__version__` matches the installed distribution."""

    def test_matches_metadata(self):
        """The module's version is the distribution's version."""
        assert lib.__version__ == importlib.metadata.version("towerkit-layers")


class TestAll:
    """Every name in `__all__` is importable from the lib."""

    def test_in_all(self):
        """Each `__all__` entry resolves to an attribute."""
        mod = importlib.import_module("towerkit.layers")
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert missing == []
        assert len(set(mod.__all__)) == len(mod.__all__)

    def test_tensorpack_names(self):
        """Every name of tensorpack 0.11's ``tensorpack.models`` is here, and nothing of Keras is imported."""
        names = {
            "BatchNorm", "BatchRenorm", "layer_register", "VariableHolder",
            "rename_tflayer_get_variable", "disable_layer_logging", "Conv2D", "Deconv2D",
            "Conv2DTranspose", "FullyConnected", "LayerNorm", "InstanceNorm", "LinearWrap",
            "Maxout", "PReLU", "BNReLU", "MaxPooling", "FixedUnPooling", "AvgPooling",
            "GlobalAvgPooling", "regularize_cost", "regularize_cost_from_collection",
            "l2_regularizer", "l1_regularizer", "Dropout", "ConcatWith",
        }  # fmt: skip
        assert names - set(lib.__all__) == set()
