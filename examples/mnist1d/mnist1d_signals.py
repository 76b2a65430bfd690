"""MNIST-1D's signals, generated from code by the ``mnist1d`` package (nothing is downloaded)."""

from __future__ import annotations

import hashlib

import attrs
import numpy as np
from mnist1d_recipe import DATASETS, TRAIN_SIZE, fixed_permutation

PAPER_DATA_SHA256 = "88f08da0dd64d2d6d06fa706a5ca0cdb81d4d57d67b5468c783c28f431defe26"
"""SHA-256 of the paper's ``mnist1d_data.pkl`` as float32 signals and int32 labels, in the
order x, y, x_test, y_test (the generator's float64 values differ from the pickle's by
at most 9e-16, less than one float32 step)."""


@attrs.frozen(kw_only=True)
class Split:
    """Training and test signals ``(n, 40)`` float32 and their int32 labels 0-9."""

    x: np.ndarray = attrs.field(eq=False)
    y: np.ndarray = attrs.field(eq=False)
    x_test: np.ndarray = attrs.field(eq=False)
    y_test: np.ndarray = attrs.field(eq=False)

    def sha256(self) -> str:
        """SHA-256 of the four arrays' bytes, in the order x, y, x_test, y_test."""
        digest = hashlib.sha256()
        for array in (self.x, self.y, self.x_test, self.y_test):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


def generate() -> Split:
    """The paper's data set: 5,000 signals made by ``mnist1d.data.make_dataset``, split 4,000/1,000.

    ``make_dataset`` with the package's default arguments (``get_dataset_args()``:
    seed 42, templates padded and scaled, translated, sheared, correlated and iid noise,
    40 positions) builds the ``mnist1d_data.pkl`` that the paper's notebooks download
    (equal as float32: `PAPER_DATA_SHA256`); ``get_dataset`` would try that download
    first, so it is not used.

    Raises:
        ValueError: the installed ``mnist1d`` made other data than the paper's.
    """
    from mnist1d.data import get_dataset_args, make_dataset

    data = make_dataset(get_dataset_args())
    split = Split(
        x=np.asarray(data["x"], np.float32),
        y=np.asarray(data["y"], np.int32),
        x_test=np.asarray(data["x_test"], np.float32),
        y_test=np.asarray(data["y_test"], np.int32),
    )
    if len(split.x) != TRAIN_SIZE or split.x.shape[1:] != (40,):
        msg = (
            f"mnist1d made {split.x.shape} training signals; the recipe expects ({TRAIN_SIZE}, 40)"
        )
        raise ValueError(msg)
    if split.sha256() != PAPER_DATA_SHA256:
        from importlib.metadata import version

        msg = (
            f"mnist1d {version('mnist1d')} generated data other than the paper's (SHA-256"
            f" {split.sha256()}, expected {PAPER_DATA_SHA256}): install the version the"
            " recipe names (the 'recipes' group of the root pyproject.toml)"
        )
        raise ValueError(msg)
    return split


def variant(split: Split, data: str) -> Split:
    """`split` as it is (``plain``) or with every signal's positions in one fixed order (``shuffled``).

    The order is the same for training and test signals, so a model that ignores where
    a value sits (the MLP, logistic regression) loses nothing, and one that relies on
    neighbours (the CNN, the GRU) loses its prior.
    """
    if data not in DATASETS:
        msg = f"'data' must be one of {DATASETS}; got {data!r}"
        raise ValueError(msg)
    if data == "plain":
        return split
    order = fixed_permutation(split.x.shape[1])
    return attrs.evolve(split, x=split.x[:, order], x_test=split.x_test[:, order])
