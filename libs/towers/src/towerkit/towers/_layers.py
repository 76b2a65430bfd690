"""Graph-mode layers: ``tf.compat.v1.layers`` from tf-keras (Keras 2), as towerkit's layer library."""

from __future__ import annotations

import os
import sys
import types
import warnings
from typing import Any

from towerkit.towers._errors import LayersUnavailableError
from towerkit.towers.compat import parse_tf_version, tf1

__all__ = [
    "LEGACY_KERAS_ENV",
    "check_tf_keras_version",
    "enable_tf_layers",
    "layers_loader_state",
    "layers_loaders",
]

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
"""The environment variable with which TensorFlow routes its Keras names to tf-keras."""

_INSTALL = "install the 'layers' extra: pip install 'towerkit-towers[layers]'"


def check_tf_keras_version(tf_version: str, tf_keras_version: str) -> None:
    """Raise `LayersUnavailableError` unless tf-keras has TensorFlow's major.minor version.

    tf-keras is released in step with TensorFlow: tf-keras 2.21.x goes with
    TensorFlow 2.21.x.

    Examples:
        >>> check_tf_keras_version("2.21.0", "2.21.1")
        >>> check_tf_keras_version("2.21.0", "2.18.0")
        Traceback (most recent call last):
        ...
        towerkit.towers.LayersUnavailableError: tf-keras 2.18.0 does not match TensorFlow 2.21.0: expected tf-keras 2.21.x (pip install 'tf-keras~=2.21.0')
    """
    want = parse_tf_version(tf_version)
    if parse_tf_version(tf_keras_version) != want:
        msg = (
            f"tf-keras {tf_keras_version} does not match TensorFlow {tf_version}: expected "
            f"tf-keras {want[0]}.{want[1]}.x (pip install 'tf-keras~={want[0]}.{want[1]}.0')"
        )
        raise LayersUnavailableError(msg)


def layers_loader_state(module: Any) -> str | None:
    """How TensorFlow's lazy Keras loader `module` resolves, without resolving it.

    Returns:
        None for an ordinary module (not one of TensorFlow's lazy Keras loaders),
        ``"unresolved"`` for a loader not used yet, else the Keras it was routed to
        (``"tf_keras"``, ``"keras_3"`` or ``"keras_2"``).
    """
    state = getattr(module, "__dict__", {})
    if "_tfll_initialized" not in state:
        return None
    if not state["_tfll_initialized"]:
        return "unresolved"
    return str(state.get("_tfll_keras_version"))


def layers_loaders() -> list[types.ModuleType]:
    """Every distinct object that ``tf.compat.v1.layers`` names in this process.

    Importing tf-keras re-imports ``tensorflow.compat.v1``, after which
    ``tf.compat.v1`` is a new module object with a lazy loader of its own, while
    code that kept the old ``tf.compat.v1`` (``tf1 = tf.compat.v1``) keeps the old
    loader: both must route to tf-keras.
    """
    import tensorflow as tf

    holders = [
        tf1,
        tf.compat.v1,
        sys.modules.get("tensorflow.compat.v1"),
        sys.modules.get("tensorflow._api.v2.compat.v1"),
    ]
    out: list[types.ModuleType] = []
    for holder in holders:
        if holder is None:
            continue
        try:
            module = holder.layers
        except AttributeError:
            continue
        if isinstance(module, types.ModuleType) and all(module is not m for m in out):
            out.append(module)
    return out


def enable_tf_layers() -> types.ModuleType:
    """Make ``tf.compat.v1.layers`` the graph-mode layers of tf-keras, and return that module.

    On TensorFlow 2.16+ ``tf.compat.v1.layers`` (``conv2d``, ``dense``,
    ``batch_normalization``, ...) exists only in tf-keras (Keras 2), installed by
    the ``towerkit-towers[layers]`` extra. TensorFlow routes the name to tf-keras
    when the environment variable ``TF_USE_LEGACY_KERAS`` is ``1`` at the moment the
    name is first used. This function sets the variable only while TensorFlow
    resolves ``tf.compat.v1.layers`` and then restores it, so ``tf.keras`` keeps
    resolving as it would have (to Keras 3 unless ``TF_USE_LEGACY_KERAS`` is set in
    the environment). It also silences tf-keras's warning, at each layer call,
    that ``tf.layers.<name>`` is deprecated. Calling it again is harmless.

    Returns:
        The tf-keras module behind ``tf.compat.v1.layers``.

    Raises:
        LayersUnavailableError: tf-keras is not installed, its version does not
            match TensorFlow's, or ``tf.compat.v1.layers`` was already resolved to
            Keras 3 (used before this call without ``TF_USE_LEGACY_KERAS``).
    """
    import tensorflow as tf

    try:
        import tf_keras
    except ImportError as err:
        msg = (
            "tf.compat.v1.layers needs the tf-keras package (Keras 2), which is not installed: "
            f"{_INSTALL}, or pip install 'tf-keras~={tf.__version__.rsplit('.', 1)[0]}.0'"
        )
        raise LayersUnavailableError(msg) from err
    check_tf_keras_version(tf.__version__, tf_keras.__version__)
    loaders = layers_loaders()
    before = os.environ.get(LEGACY_KERAS_ENV)
    os.environ[LEGACY_KERAS_ENV] = "1"
    try:
        for module in loaders:
            if layers_loader_state(module) == "unresolved":
                dir(module)  # resolves the loader: it reads the variable now
    finally:
        if before is None:
            del os.environ[LEGACY_KERAS_ENV]
        else:
            os.environ[LEGACY_KERAS_ENV] = before
    wrong = {layers_loader_state(m) for m in loaders} - {None, "tf_keras"}
    if wrong:
        msg = (
            f"tf.compat.v1.layers was already resolved to {', '.join(sorted(map(str, wrong)))} "
            "(used before enable_tf_layers() without TF_USE_LEGACY_KERAS=1), where these "
            "layers do not exist: call enable_tf_layers() before any use of "
            "tf.compat.v1.layers, or set TF_USE_LEGACY_KERAS=1 in the environment before "
            "starting Python"
        )
        raise LayersUnavailableError(msg)
    module = tf.compat.v1.layers
    warnings.filterwarnings(
        "ignore", message=r"`tf\.layers\.\w+` is deprecated", category=UserWarning
    )
    return _resolved(module)


def _resolved(module: types.ModuleType) -> types.ModuleType:
    """The module a resolved lazy loader stands for (the loader's target by name)."""
    real = sys.modules.get(module.__name__)
    if real is None:
        conv2d = getattr(module, "conv2d", None)
        if conv2d is None:
            msg = f"{module.__name__} has no conv2d: it is not the graph-mode layers module"
            raise LayersUnavailableError(msg)
        real = module
    return real
