"""The TensorFlow towerkit runs on: imported once, version-checked, graph mode.

This is the one public home of TensorFlow access for the libs above the leaves (callbacks,
trainers, export), the conformance suite, the tools, examples and benchmarks:
``from towerkit.towers.compat import tf1`` gives ``tf.compat.v1`` after checking that
the installed TensorFlow is in `SUPPORTED_RANGE`. (The sessinit lib, a leaf beside
towers, keeps its own private loader so that it installs and imports alone.)
"""

from __future__ import annotations

import types

__all__ = ["SUPPORTED_RANGE", "check_tf_version", "import_tf", "parse_tf_version", "tf1"]

SUPPORTED_RANGE = ((2, 16), (3, 0))
"""Supported TensorFlow versions: from the first (inclusive) to the second (exclusive)."""


def parse_tf_version(version: str) -> tuple[int, int]:
    """Return the (major, minor) pair of a TensorFlow version string.

    Examples:
        >>> parse_tf_version("2.21.0")
        (2, 21)
        >>> parse_tf_version("2.16.0rc1")
        (2, 16)
    """
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "0")
    except (IndexError, ValueError):
        msg = f"cannot read a TensorFlow version from {version!r}: expected 'MAJOR.MINOR[.PATCH]'"
        raise ValueError(msg) from None


def check_tf_version(version: str, lib: str = "towerkit-towers") -> None:
    """Raise ImportError unless `version` is inside SUPPORTED_RANGE.

    Examples:
        >>> check_tf_version("2.21.0")
        >>> check_tf_version("2.15.1")
        Traceback (most recent call last):
        ...
        ImportError: towerkit-towers supports TensorFlow >=2.16,<3.0; found TensorFlow 2.15.1
    """
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_RANGE
    if not (lo_major, lo_minor) <= parse_tf_version(version) < (hi_major, hi_minor):
        msg = (
            f"{lib} supports TensorFlow >={lo_major}.{lo_minor},<{hi_major}.{hi_minor}; "
            f"found TensorFlow {version}"
        )
        raise ImportError(msg)


def import_tf() -> types.ModuleType:
    """Import TensorFlow, check its version and return `tf.compat.v1`."""
    try:
        import tensorflow as tf
    except ImportError as err:
        msg = (
            "towerkit-towers needs TensorFlow >=2.16,<3.0 and none is installed: "
            "install 'towerkit-towers[cpu]' (tensorflow-cpu), 'towerkit-towers[gpu]' "
            "(tensorflow with CUDA), or keep the TensorFlow you already have"
        )
        raise ImportError(msg) from err
    check_tf_version(tf.__version__)
    v1: types.ModuleType = tf.compat.v1
    return v1


tf1 = import_tf()
