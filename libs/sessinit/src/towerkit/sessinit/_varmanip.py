"""Variables as data: list, load and save checkpoints and npz files, dump a session's parameters."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.sessinit._atomic import atomic_checkpoint_prefix
from towerkit.sessinit._compat import tf1
from towerkit.sessinit._errors import (
    CheckpointVanishedError,
    CorruptCheckpointError,
    NotACheckpointError,
)
from towerkit.sessinit._npz import save_npz
from towerkit.sessinit._paths import resolve_checkpoint
from towerkit.sessinit._plan import VarInfo, normalize_name

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
"""The bookkeeping entry of object-based checkpoints; it holds no variable and is never listed."""


def vanished_error(prefix: str) -> CheckpointVanishedError | None:
    """The error for a checkpoint whose ``.index`` is gone since it was found, else None.

    A running `ModelSaver` prunes old checkpoints and a starting run moves checkpoints
    ahead of it aside; a reader racing them finds data files gone, which is no damage.
    """
    if os.path.isfile(prefix + ".index"):
        return None
    msg = (
        f"checkpoint {prefix!r} was deleted or moved while it was being read (a running "
        "ModelSaver pruned it, or a starting run moved it aside): nothing is damaged; read "
        "the directory's newest checkpoint again"
    )
    return CheckpointVanishedError(msg)


def _reader(prefix: str) -> Any:
    try:
        return tf1.train.NewCheckpointReader(prefix)
    except (tf.errors.OpError, ValueError) as err:
        gone = vanished_error(prefix)
        if gone is not None:
            raise gone from None
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        msg = f"{prefix!r} is not a readable TensorFlow checkpoint: {detail}"
        raise NotACheckpointError(msg) from None


def list_checkpoint_vars(path: str | os.PathLike[str]) -> tuple[VarInfo, ...]:
    """The variables a checkpoint holds (names, shapes, dtypes), without reading their values.

    The data files are checked too, without reading them: each shard must exist, and
    together they must hold at least the bytes the index describes.

    Args:
        path: A checkpoint prefix, one of its files, or a directory (its latest checkpoint).

    Returns:
        One record per variable, sorted by name.

    Raises:
        CheckpointNotFoundError: Nothing exists at `path`.
        NotACheckpointError: `path` exists but is not a readable checkpoint.
        CorruptCheckpointError: A data file is missing or shorter than the index says.
    """
    prefix = resolve_checkpoint(path)
    try:
        st = os.stat(prefix + ".index")
    except FileNotFoundError:
        raise vanished_error(prefix) or CheckpointVanishedError(prefix) from None
    infos = _list_vars(prefix, (st.st_ino, st.st_size, st.st_mtime_ns))
    check_data_files(prefix, infos)
    return infos


_DATA_FILE = re.compile(r"\.data-(\d{5})-of-(\d{5})$")


def missing_shards(names: Iterable[str], base: str) -> tuple[int, list[int]]:
    """``(number of shards, missing shard numbers)`` of checkpoint `base` among file `names`.

    The number of shards is read from the data file names (``-of-N``); with no data
    file at all it is 1 and shard 0 is missing.

    Examples:
        >>> missing_shards(["m.index", "m.data-00000-of-00002"], "m")
        (2, [1])
        >>> missing_shards(["m.index"], "m")
        (1, [0])
        >>> missing_shards(["m.index", "m.data-00000-of-00001", "m2.data-00000-of-00001"], "m")
        (1, [])
    """
    found: set[int] = set()
    total = 0
    for name in names:
        if not name.startswith(base):
            continue
        match = _DATA_FILE.fullmatch(name[len(base) :])
        if match:
            found.add(int(match.group(1)))
            total = max(total, int(match.group(2)))
    total = total or 1
    return total, [i for i in range(total) if i not in found]


def data_file_name(prefix: str, shard: int, shards: int) -> str:
    """The name of data file `shard` (0-based) of `shards` of checkpoint `prefix`.

    Examples:
        >>> data_file_name("logs/model-10", 0, 1)
        'logs/model-10.data-00000-of-00001'
    """
    return f"{prefix}.data-{shard:05d}-of-{shards:05d}"


def check_data_files(prefix: str, infos: Sequence[VarInfo]) -> None:
    """Raise `CorruptCheckpointError` when a data file of `prefix` is missing or too short.

    Only what can be told without reading the data: every shard exists, and the shards
    hold at least the bytes of the numeric variables the index lists (the values are
    stored whole, so a truncated file holds fewer). Damaged bytes are found when values
    are read, by their checksums.
    """
    directory = os.path.dirname(prefix) or "."
    base = os.path.basename(prefix)
    shards, missing = missing_shards(os.listdir(directory), base)
    if missing and (gone := vanished_error(prefix)) is not None:
        raise gone
    if missing:
        absent = ", ".join(repr(data_file_name(prefix, i, shards)) for i in missing)
        msg = (
            f"checkpoint {prefix!r} is incomplete: its index lists {len(infos)} variables but "
            f"the data file {absent} does not exist; restore it from a copy or use another "
            "checkpoint"
        )
        raise CorruptCheckpointError(msg)
    needed = 0
    for info in infos:
        itemsize = _fixed_itemsize(info.dtype)
        if itemsize is None or info.size is None:
            continue
        needed += info.size * itemsize
    files = [data_file_name(prefix, i, shards) for i in range(shards)]
    try:
        have = sum(os.path.getsize(f) for f in files)
    except FileNotFoundError:
        raise vanished_error(prefix) or CheckpointVanishedError(prefix) from None
    if have < needed:
        shown = files[0] if shards == 1 else f"{files[0]} ... ({shards} shards)"
        msg = (
            f"checkpoint {prefix!r} is truncated: its data file {shown!r} holds {have} bytes "
            f"but its index describes at least {needed} bytes of values; restore it from a "
            "copy or use another checkpoint"
        )
        raise CorruptCheckpointError(msg)


def _fixed_itemsize(dtype: str) -> int | None:
    """Bytes per element of a fixed-size dtype; None for strings and dtypes of unknown size."""
    if dtype == "string":
        return None
    try:
        size = tf.as_dtype(dtype).size
    except (TypeError, ValueError):
        return None
    return int(size) if size else None


def _reason(err: BaseException) -> str:
    """A short reason for a failed read of checkpoint values."""
    text = getattr(err, "message", None) or str(err)
    if "Checksum does not match" in text:
        return "checksum mismatch: its bytes changed after they were written"
    if "Read less bytes" in text or "Read fewer bytes" in text or isinstance(err, EOFError):
        return "the data file ends before its bytes: truncated"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    useful = [ln for ln in lines if "TensorBundle" in ln or "shard" in ln]
    return (useful or lines or [type(err).__name__])[-1]


def corrupt_checkpoint_error(
    prefix: str, names: Iterable[str], err: BaseException
) -> CorruptCheckpointError | CheckpointVanishedError:
    """The error for a read of `names` from checkpoint `prefix` that failed with `err`.

    A checkpoint deleted meanwhile (its ``.index`` gone) gives `CheckpointVanishedError`
    instead: it was pruned or moved aside, not damaged.

    Each of `names` is read again on its own, to list the variables at fault and why;
    the message names the data file(s) and says what is wrong.
    """
    gone = vanished_error(prefix)
    if gone is not None:
        return gone
    wanted = list(names)
    at_fault: list[str] = []
    try:
        reader = tf1.train.NewCheckpointReader(prefix)
        for name in wanted:
            try:
                reader.get_tensor(name)
            except Exception as one:
                at_fault.append(f"{name!r} ({_reason(one)})")
    except Exception:
        at_fault = []
    directory = os.path.dirname(prefix) or "."
    shards, _ = missing_shards(os.listdir(directory), os.path.basename(prefix))
    files = [data_file_name(prefix, i, shards) for i in range(shards)]
    where = repr(files[0]) if shards == 1 else f"{files[0]!r} ... ({shards} shards)"
    if not at_fault:
        at_fault = [f"a read of {len(wanted)} variables ({_reason(err)})"]
    shown = ", ".join(at_fault[:20]) + (
        f" and {len(at_fault) - 20} more" if len(at_fault) > 20 else ""
    )
    msg = (
        f"checkpoint {prefix!r} is corrupt: its data file {where} does not hold the values "
        f"its index describes; at fault: {shown}. Restore the files from a copy or use "
        "another checkpoint"
    )
    return CorruptCheckpointError(msg)


_READ_ERRORS: tuple[type[BaseException], ...] = (tf.errors.OpError, IndexError, EOFError)
"""What reading damaged checkpoint values raises (TensorFlow's errors, the reader's IndexError)."""


def read_checkpoint_values(prefix: str, names: Iterable[str]) -> dict[str, np.ndarray]:
    """Read `names` from checkpoint `prefix` with a checkpoint reader.

    Raises:
        NotACheckpointError: The index is not readable.
        CorruptCheckpointError: A value cannot be read back (missing, truncated or
            damaged data); the message lists every variable at fault.
    """
    wanted = list(names)
    reader = _reader(prefix)
    try:
        return {name: reader.get_tensor(name) for name in wanted}
    except _READ_ERRORS as err:
        raise corrupt_checkpoint_error(prefix, wanted, err) from err


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


def load_checkpoint_vars(
    path: str | os.PathLike[str], names: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Read every variable of a checkpoint (or those of `names`) into a ``{name: array}`` dict.

    Args:
        path: A checkpoint prefix, one of its files, or a directory (its latest checkpoint).
        names: The variables to read; all of them when None.

    Raises:
        CheckpointNotFoundError: Nothing exists at `path`.
        NotACheckpointError: `path` exists but is not a readable checkpoint.
        CorruptCheckpointError: A data file is missing, truncated or damaged.
        KeyError: A name of `names` is not in the checkpoint.
    """
    prefix = resolve_checkpoint(path)
    held = [info.name for info in list_checkpoint_vars(prefix)]
    if names is None:
        return read_checkpoint_values(prefix, held)
    wanted = list(names)
    unknown = sorted(set(wanted) - set(held))
    if unknown:
        msg = f"checkpoint {prefix!r} holds no variables {unknown[:20]}; it holds {held[:20]}"
        raise KeyError(msg)
    return read_checkpoint_values(prefix, wanted)


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
