"""One input vocabulary: training and inference classify an input the same way.

`TrainConfig(data=...)`, a trainer's default input (`apply_default_prefetch`) and the
inference runners all ask `towerkit.callbacks.plumbing.input_kind`, so a value that one
of them refuses as "no input" is refused by all, and a Python datapoint that does not
fit is refused by training and inference alike.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import ClassificationError, InferenceRunner
from towerkit.callbacks.plumbing import DatapointLayout, conform_datapoint, input_kind
from towerkit.trainers import FeedInput, InputDataError, TrainConfig, apply_default_prefetch

DATAPOINTS = [(np.zeros([2, 2], np.float32), np.zeros([2], np.int32))]


def values():
    """One value of each kind, and values of none."""
    return [
        ("iterable", DATAPOINTS),
        ("builder", lambda: tf.data.Dataset.from_tensors(DATAPOINTS[0])),
        ("dataset", tf.data.Dataset.from_tensors(DATAPOINTS[0])),
        ("source", FeedInput(DATAPOINTS)),
        (None, np.zeros([3, 2])),
        (None, "train.npz"),
        (None, 3),
    ]


@pytest.mark.procs
@pytest.mark.parametrize("index", range(7))
def test_same_kind_everywhere(index):
    """Refused as no input by all three readers, or accepted by each that takes its kind."""
    with tf.Graph().as_default():
        kind, value = values()[index]
        assert input_kind(value) == kind
        if kind in ("source", "dataset", "builder"):
            TrainConfig(data=value)
        else:
            with pytest.raises(TypeError):
                TrainConfig(data=value)
        if kind is None:
            with pytest.raises(TypeError):
                apply_default_prefetch(value)
            with pytest.raises(TypeError, match="'input' must be"):
                InferenceRunner(value, ClassificationError())
        else:
            assert apply_default_prefetch(value) is not None
            InferenceRunner(value, ClassificationError())


def test_one_casting_rule():
    """A float for an integer input: InputDataError in training, ValueError in inference,
    with the same words; within a kind, both cast."""
    layout = DatapointLayout.from_specs(
        [tf.TensorSpec([None, 2], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]
    )
    bad = (np.zeros([2, 2]), np.full([2], 0.5))
    with pytest.raises(InputDataError) as training:
        conform_datapoint(bad, layout, InputDataError)
    with pytest.raises(ValueError) as inference:
        conform_datapoint(bad, layout)
    assert (
        str(training.value)
        == str(inference.value)
        == ("#1 'y': expected int32(None,), got float64(2,)")
    )
    x, y = conform_datapoint((np.zeros([2, 2]), np.zeros([2], np.int64)), layout)
    assert (x.dtype, y.dtype) == (np.float32, np.int32)
