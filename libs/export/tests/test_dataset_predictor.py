"""SimpleDatasetPredictor and MultiTowerOfflinePredictor, used as tensorpack programs use them."""

from __future__ import annotations

import numpy as np
import pytest
from models import SIGNATURE, convnet, make_data, reference

from towerkit.export import MultiTowerOfflinePredictor, PredictConfig, SimpleDatasetPredictor
from towerkit.sessinit import SmartInit


def _config(checkpoint, **kwargs):
    kwargs.setdefault("input_names", ["image"])
    kwargs.setdefault("output_names", ["prob"])
    return PredictConfig(
        tower_func=convnet,
        input_signature=SIGNATURE,
        session_init=SmartInit(checkpoint),
        **kwargs,
    )


class ImageBatches:
    """A DataFlow-like source of ``[images]`` batches, shuffled: unusable before reset_state()."""

    def __init__(self, images, batch):
        self.images = images
        self.batch = batch
        self.rng = None
        self.resets = 0

    def reset_state(self):
        self.resets += 1
        self.rng = np.random.RandomState(0)

    def __len__(self):
        return -(-len(self.images) // self.batch)

    def __iter__(self):
        order = self.rng.permutation(len(self.images))
        for start in range(0, len(order), self.batch):
            yield [self.images[np.sort(order[start : start + self.batch])]]


class TestSimpleDatasetPredictor:
    """One prediction per datapoint of a DataFlow, reset before each pass."""

    def test_results_per_datapoint(self, checkpoint, checkpoint_values):
        images, _ = make_data(10, seed=5)
        df = ImageBatches(images, batch=4)
        pred = SimpleDatasetPredictor(_config(checkpoint), df)
        results = pred.get_all_result()
        assert df.resets == 1
        assert [len(r[0]) for r in results] == [4, 4, 2]
        again = list(pred.get_result())
        assert df.resets == 2
        for (prob,), (prob2,) in zip(results, again):
            np.testing.assert_array_equal(prob, prob2)
        rows = np.concatenate([r[0] for r in results])
        want = reference(checkpoint_values, images)
        np.testing.assert_allclose(np.sort(rows, axis=0), np.sort(want, axis=0), atol=1e-5)
        pred.close()

    def test_list_dataset(self, checkpoint, checkpoint_values):
        images, _ = make_data(6, seed=2)
        pred = SimpleDatasetPredictor(_config(checkpoint), [[images[:3]], [images[3:]]])
        (a,), (b,) = pred.get_all_result()
        want = reference(checkpoint_values, images)
        np.testing.assert_allclose(np.concatenate([a, b]), want, atol=1e-5)

    def test_fail(self, checkpoint):
        with pytest.raises(TypeError, match="'dataset' is an iterator"):
            SimpleDatasetPredictor(_config(checkpoint), iter([]))
        with pytest.raises(TypeError, match="'dataset' must be a re-iterable"):
            SimpleDatasetPredictor(_config(checkpoint), 3)
        images, _ = make_data(2)
        pred = SimpleDatasetPredictor(_config(checkpoint), [images])
        with pytest.raises(ValueError, match=r"datapoint #0 \(0-based\) must be a list or tuple"):
            pred.get_all_result()


class TestMultiTowerOfflinePredictor:
    """Several inference towers on their own devices, one session, shared variables."""

    def test_towers_agree(self, checkpoint, checkpoint_values):
        images, _ = make_data(8, seed=4)
        pred = MultiTowerOfflinePredictor(_config(checkpoint), towers=[0, 1])
        assert len(pred.devices) == 2
        assert len(pred.get_predictors()) == 2
        assert pred.get_predictor(3) is pred.get_predictors()[1]
        want = reference(checkpoint_values, images)
        for p in [pred, *pred.get_predictors()]:
            (prob,) = p(images)
            np.testing.assert_allclose(prob, want, atol=1e-5)
        names = {op.name.split("/")[0] for op in pred.graph.get_operations()}
        assert {"towerp0", "towerp1"} <= names
        assert pred.graph.finalized
        pred.close()

    def test_fail(self, checkpoint):
        with pytest.raises(TypeError, match="'config' must be a PredictConfig"):
            MultiTowerOfflinePredictor(object(), towers=[0])
