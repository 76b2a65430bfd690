"""Variables as data: list, load and save checkpoints and npz files, dump a session's parameters."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.sessinit._atomic import atomic_checkpoint_prefix
from towerkit.sessinit._compat import tf1
from towerkit.sessinit._errors import NotACheckpointError
from towerkit.sessinit._npz import save_npz
from towerkit.sessinit._paths import resolve_checkpoint
from towerkit.sessinit._plan import VarInfo, normalize_name

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
"""The bookkeeping entry of object-based checkpoints; it holds no variable and is never listed."""


def _reader(prefix: str) -> Any:
    try:
        return tf1.train.NewCheckpointReader(prefix)
    except (tf.errors.OpError, ValueError) as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        msg = f"{prefix!r} is not a readable TensorFlow checkpoint: {detail}"
        raise NotACheckpointError(msg) from None


def list_checkpoint_vars(path: str | os.PathLike[str]) -> tuple[VarInfo, ...]:
    """The variables a checkpoint holds (names, shapes, dtypes), without reading their values.

    Args:
        path: A checkpoint prefix, one of its files, or a directory (its latest checkpoint).

    Returns:
        One record per variable, sorted by name.

    Raises:
        CheckpointNotFoundError: Nothing exists at `path`.
        NotACheckpointError: `path` exists but is not a readable checkpoint.
    """
    prefix = resolve_checkpoint(path)
    st = os.stat(prefix + ".index")
    return _list_vars(prefix, (st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=16)
def _list_vars(prefix: str, stamp: tuple[int, int, int]) -> tuple[VarInfo, ...]:
    """The listing of a checkpoint, remembered while its index file is unchanged."""
    del stamp
    reader = _reader(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    return tuple(
        VarInfo(name=name, shape=shapes[name], dtype=dtypes[name].name)
        for name in sorted(shapes)
        if name != OBJECT_GRAPH_KEY
    )


def load_checkpoint_vars(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read every variable of a checkpoint into a ``{name: array}`` dict.

    Args:
        path: A checkpoint prefix, one of its files, or a directory (its latest checkpoint).

    Raises:
        CheckpointNotFoundError: Nothing exists at `path`.
        NotACheckpointError: `path` exists but is not a readable checkpoint.
    """
    prefix = resolve_checkpoint(path)
    reader = _reader(prefix)
    names = sorted(n for n in reader.get_variable_to_shape_map() if n != OBJECT_GRAPH_KEY)
    return {name: reader.get_tensor(name) for name in names}


def as_arrays(values: Any, what: str = "variable dict") -> dict[str, np.ndarray]:
    """Check a ``{name: value}`` mapping and return it as ``{name without :0: ndarray}``.

    Raises:
        TypeError: `values` is not a mapping, a key is not a string, or values are not
            numeric or string arrays (all offending keys are listed).
        ValueError: Two keys name the same variable (``"a"`` and ``"a:0"``).
    """
    if not isinstance(values, Mapping):
        msg = f"{what} is a {type(values).__name__}: expected a mapping of names to arrays"
        raise TypeError(msg)
    bad_keys = [k for k in values if not isinstance(k, str)]
    if bad_keys:
        msg = f"{what} has keys that are not strings: {bad_keys[:20]!r}"
        raise TypeError(msg)
    arrays: dict[str, np.ndarray] = {}
    bad: list[str] = []
    dups: list[str] = []
    for key, value in values.items():
        try:
            array = np.asarray(value)
        except (ValueError, TypeError):
            bad.append(key)
            continue
        if array.dtype.hasobject:
            bad.append(key)
            continue
        name = normalize_name(key)
        if name in arrays:
            dups.append(name)
        arrays[name] = array
    if bad:
        kinds = {k: type(values[k]).__name__ for k in bad[:20]}
        msg = f"{what} has values that are not numeric or string arrays: {kinds}"
        raise TypeError(msg)
    if dups:
        msg = f"{what} names variables twice (with and without ':0'): {sorted(dups)}"
        raise ValueError(msg)
    return arrays


def _tf_dtype(array: np.ndarray) -> Any:
    if array.dtype.kind in "SU":
        return tf.string
    return tf.as_dtype(array.dtype)


def _write_checkpoint(arrays: Mapping[str, np.ndarray], prefix: str) -> None:
    names = sorted(arrays)
    graph = tf.Graph()
    with graph.as_default():
        path = tf1.placeholder(tf.string, shape=[], name="prefix")
        holders = [
            tf1.placeholder(_tf_dtype(arrays[n]), shape=arrays[n].shape, name="value")
            for n in names
        ]
        op = tf.raw_ops.SaveV2(
            prefix=path, tensor_names=names, shape_and_slices=[""] * len(names), tensors=holders
        )
    feed: dict[Any, Any] = {path: prefix}
    feed.update((h, arrays[n]) for h, n in zip(holders, names))
    config = tf1.ConfigProto(device_count={"GPU": 0})
    with tf1.Session(graph=graph, config=config) as sess:
        sess.run(op, feed_dict=feed)


def save_checkpoint_vars(dic: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Save ``{name: array}`` as an npz file or a TensorFlow checkpoint, atomically.

    Nothing half-written ever appears under `path`: the file (or the checkpoint's files,
    its ``.index`` last) is written under a hidden temporary name and renamed. A
    checkpoint written here does not update the directory's ``checkpoint`` state file.

    Args:
        dic: ``{name: value}``; values are NumPy arrays (or what ``np.asarray`` makes one
            of); names may carry ``:0``, which is dropped.
        path: An ``.npz`` path, or else a checkpoint prefix such as ``"out/model-0"``.

    Raises:
        TypeError: `dic` is not a mapping of strings to numeric or string arrays.
        ValueError: Two keys name the same variable.
    """
    arrays = as_arrays(dic)
    target = os.fspath(path)
    if target.endswith(".npz"):
        save_npz(target, arrays)
        return
    with atomic_checkpoint_prefix(target) as tmp:
        _write_checkpoint(arrays, tmp)


def dump_session_params(path: str | os.PathLike[str]) -> None:
    """Save the values of all trainable and model variables of the default session to an npz file.

    The file is loadable by `SmartInit` and is written atomically. All values are fetched
    in one ``session.run``.

    Args:
        path: The file to write; must end with ``.npz``.

    Raises:
        ValueError: `path` does not end with ``.npz``.
        RuntimeError: There is no default session.
    """
    target = os.fspath(path)
    if not target.endswith(".npz"):
        msg = f"dump_session_params path {target!r} does not end with '.npz'"
        raise ValueError(msg)
    sess = tf1.get_default_session()
    if sess is None:
        msg = "dump_session_params needs a default session: call it under 'with sess.as_default():'"
        raise RuntimeError(msg)
    found: dict[str, Any] = {}
    for key in (tf1.GraphKeys.TRAINABLE_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES):
        for var in sess.graph.get_collection(key):
            found.setdefault(normalize_name(var.name), var)
    values = sess.run(list(found.values())) if found else []
    save_npz(target, dict(zip(found, values)))
