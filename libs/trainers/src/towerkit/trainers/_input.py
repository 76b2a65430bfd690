"""Inputs: the `InputSource` protocol, its implementations and the default prefetching."""

from towerkit.trainers._errors import InputDataError, InputProducerError, InputTimeoutError
from towerkit.trainers._input_base import (
    InputSignatureError,
    InputSizeUnknownError,
    InputSource,
    check_input_tensors,
    spec_mismatches,
)
from towerkit.trainers._input_python import DummyConstantInput, FeedInput, IterableInput
from towerkit.trainers._input_sources import (
    NumpyInput,
    TFDatasetInput,
    datapoint_tuple,
    iterable_size,
    num_batches,
)
from towerkit.trainers._input_staging import StagingInput, apply_default_prefetch, wants_staging

__all__ = [
    "InputSource",
    "InputSignatureError",
    "InputSizeUnknownError",
    "InputDataError",
    "InputProducerError",
    "InputTimeoutError",
    "check_input_tensors",
    "spec_mismatches",
    "TFDatasetInput",
    "IterableInput",
    "NumpyInput",
    "DummyConstantInput",
    "FeedInput",
    "StagingInput",
    "apply_default_prefetch",
    "datapoint_tuple",
    "iterable_size",
    "num_batches",
    "wants_staging",
]
