"""Checkpoint names and paths: steps parsed from names, prefixes resolved from user paths."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable

from towerkit.sessinit._errors import CheckpointNotFoundError, GlobPathError, NotACheckpointError

_SUFFIX = re.compile(r"\.(index|meta|data-\d+-of-\d+)$")
_STATE_LINE = re.compile(r'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"\s*$', re.MULTILINE)
STATE_FILENAME = "checkpoint"
"""The name of TensorFlow's checkpoint state file inside a checkpoint directory."""

logger = logging.getLogger("towerkit.sessinit")

GLOB_CHARACTERS = "[]*?\\"
"""The characters TensorFlow's checkpoint readers take as a glob pattern in a path."""


def glob_characters(path: str) -> str:
    """The characters of `path` that TensorFlow would read as a glob pattern, in order, once each.

    TensorFlow looks checkpoint files up with a glob (``Saver.restore``,
    ``NewCheckpointReader``, ``latest_checkpoint``), so a checkpoint whose path holds one
    of `GLOB_CHARACTERS` is written fine but cannot be read back.

    Examples:
        >>> glob_characters("runs/lr[0.1]/model-10")
        '[]'
        >>> glob_characters("runs/plain")
        ''
    """
    return "".join(dict.fromkeys(c for c in path if c in GLOB_CHARACTERS))


def require_globless(path: str | os.PathLike[str], what: str, *, reading: bool = False) -> str:
    r"""`path` as a string when TensorFlow can read checkpoints there; else `GlobPathError`.

    Args:
        path: the directory or checkpoint prefix.
        what: the argument's name, for the message (``"logdir"``, ``"checkpoint_dir"``).
        reading: the path names checkpoints to read (the message says to move them)
            rather than where to write them (it says to choose another path).

    Raises:
        GlobPathError: the absolute path holds one of `GLOB_CHARACTERS`; the message
            names them.

    Examples:
        >>> require_globless("runs/a", "logdir")
        'runs/a'
        >>> require_globless("runs/lr[0.1]", "logdir")
        Traceback (most recent call last):
        ...
        towerkit.sessinit.GlobPathError: 'logdir' 'runs/lr[0.1]' holds '[', ']': TensorFlow reads checkpoint paths as glob patterns, so checkpoints there could be written but never read back; choose a path without any of '[', ']', '*', '?', '\\'
    """
    text = os.fspath(path)
    found = glob_characters(os.path.abspath(text))
    if found:
        named = ", ".join(repr(c) for c in found)
        allowed = ", ".join(repr(c) for c in GLOB_CHARACTERS)
        fix = "move or rename them to" if reading else "choose"
        msg = (
            f"{what!r} {text!r} holds {named}: TensorFlow reads checkpoint paths as glob "
            "patterns, so checkpoints there could be written but never read back; "
            f"{fix} a path without any of {allowed}"
        )
        raise GlobPathError(msg)
    return text


def state_entry_inside(directory: str, entry: str) -> str | None:
    """The base name of a state-file entry when it names a file directly in `directory`, else None.

    A ``checkpoint`` state file may hold absolute paths (TensorFlow writes them unless
    told otherwise); once the directory is copied or moved they point into the old
    one. Readers and writers of a checkpoint directory only follow entries that stay
    inside it.

    Examples:
        >>> state_entry_inside("/runs/b", "model-10")
        'model-10'
        >>> state_entry_inside("/runs/b", "/runs/b/model-10")
        'model-10'
        >>> state_entry_inside("/runs/b", "/runs/a/model-10") is None
        True
        >>> state_entry_inside("/runs/b", "../a/model-10") is None
        True
    """
    root = os.path.normpath(os.path.abspath(directory))
    full = os.path.normpath(os.path.join(root, entry))
    if os.path.dirname(full) != root or not os.path.basename(full):
        return None
    return os.path.basename(full)


def checkpoint_step(filename: str, prefix: str = "model") -> int | None:
    """The step of a checkpoint file or prefix named ``<prefix>-<step>``, else None.

    Args:
        filename: A base name such as ``"model-1200.index"`` or ``"model-1200"``.
        prefix: The common prefix of the checkpoints (without the final ``-``).

    Returns:
        The step (the number of steps trained when it was written), or None when
        `filename` is not named ``<prefix>-<step>``.

    Examples:
        >>> checkpoint_step("model-1200.index")
        1200
        >>> checkpoint_step("model-1200.data-00000-of-00001")
        1200
        >>> checkpoint_step("best-7.index", prefix="model") is None
        True
    """
    stem = _SUFFIX.sub("", filename)
    match = re.fullmatch(re.escape(prefix) + r"-(\d+)", stem)
    return int(match.group(1)) if match else None


def sort_checkpoints(filenames: Iterable[str], prefix: str = "model") -> list[tuple[str, int]]:
    """The checkpoints among `filenames`, as ``(prefix, step)`` pairs sorted by step.

    A checkpoint counts only when its ``.index`` file is listed: the index is written
    last, so a checkpoint without one is incomplete.

    Examples:
        >>> sort_checkpoints(["model-20.index", "model-3.index", "model-3.data-00000-of-00001",
        ...                   "model-9.data-00000-of-00001", "checkpoint"])
        [('model-3', 3), ('model-20', 20)]
    """
    found = []
    for name in filenames:
        if not name.endswith(".index"):
            continue
        step = checkpoint_step(name, prefix)
        if step is not None:
            found.append((name.removesuffix(".index"), step))
    return sorted(found, key=lambda pair: (pair[1], pair[0]))


def checkpoint_prefix_of(path: str) -> str:
    """The checkpoint prefix a path names: ``.index``, ``.meta`` and ``.data-*`` suffixes dropped.

    Examples:
        >>> checkpoint_prefix_of("train_log/model-10.index")
        'train_log/model-10'
        >>> checkpoint_prefix_of("train_log/model-10")
        'train_log/model-10'
    """
    return _SUFFIX.sub("", path)


def parse_checkpoint_state(text: str) -> str | None:
    r"""The latest checkpoint a ``checkpoint`` state file names, or None if it names none.

    Examples:
        >>> parse_checkpoint_state('model_checkpoint_path: "model-30"\n'
        ...                        'all_model_checkpoint_paths: "model-20"\n')
        'model-30'
        >>> parse_checkpoint_state("") is None
        True
    """
    match = _STATE_LINE.search(text)
    if match is None:
        return None
    return re.sub(r"\\(.)", r"\1", match.group(1))


def get_all_checkpoints(
    dir: str | os.PathLike[str], prefix: str = "model"
) -> list[tuple[str, int]]:
    """All complete checkpoints named ``<prefix>-<step>`` in a directory, sorted by step.

    Args:
        dir: The checkpoint directory.
        prefix: The common prefix of the checkpoints (without the final ``-``).

    Returns:
        ``(name, step)`` pairs in increasing step order, where `name` is the checkpoint
        prefix joined to `dir` (what `load_checkpoint_vars` and `SaverRestore` accept).

    Raises:
        CheckpointNotFoundError: `dir` is not a directory.
    """
    directory = os.fspath(dir)
    if not os.path.isdir(directory):
        msg = f"checkpoint directory {directory!r} does not exist or is not a directory"
        raise CheckpointNotFoundError(msg)
    return [
        (os.path.join(directory, name), step)
        for name, step in sort_checkpoints(os.listdir(directory), prefix)
    ]


def _latest_in_dir(directory: str) -> str:
    state = os.path.join(directory, STATE_FILENAME)
    if os.path.isfile(state):
        with open(state, encoding="utf-8", errors="replace") as f:
            named = parse_checkpoint_state(f.read())
        if named:
            inside = state_entry_inside(directory, named)
            if inside is None:
                logger.warning(
                    "the state file %s names %r, outside its directory (a copied directory?): "
                    "ignored; looking for %r in the directory instead",
                    state,
                    named,
                    os.path.basename(named),
                )
                inside = os.path.basename(named)
            candidate = os.path.join(directory, inside)
            if os.path.isfile(candidate + ".index"):
                return candidate
    indexes = sorted(
        n for n in os.listdir(directory) if n.endswith(".index") and not n.startswith(".")
    )
    if len(indexes) == 1:
        return os.path.join(directory, indexes[0].removesuffix(".index"))
    stepped = [
        (step, name)
        for name in indexes
        if (step := _trailing_step(name.removesuffix(".index"))) is not None
    ]
    if stepped:
        return os.path.join(directory, max(stepped)[1].removesuffix(".index"))
    listing = sorted(os.listdir(directory))[:20]
    msg = (
        f"directory {directory!r} holds no checkpoint: expected a 'checkpoint' state file or "
        f"'<prefix>-<step>.index' files; found {listing}"
    )
    if indexes:
        msg = (
            f"directory {directory!r} holds several checkpoints without steps and no "
            f"'checkpoint' state file naming the latest: {indexes}; pass one of them"
        )
    raise CheckpointNotFoundError(msg)


def _trailing_step(stem: str) -> int | None:
    match = re.search(r"-(\d+)$", stem)
    return int(match.group(1)) if match else None


def resolve_checkpoint(path: str | os.PathLike[str]) -> str:
    """The checkpoint prefix that a user path names, one TensorFlow can read.

    Args:
        path: A checkpoint prefix (``"train_log/model-1000"``), one of its files
            (``.index``, ``.data-*``, ``.meta``), a checkpoint directory (its latest
            checkpoint, from the ``checkpoint`` state file, else the highest step), or
            the state file itself.

    Returns:
        The prefix, with ``<prefix>.index`` present on disk.

    Raises:
        CheckpointNotFoundError: Nothing exists at `path`, or a directory holds no checkpoint.
        NotACheckpointError: `path` exists but is not a checkpoint.
        GlobPathError: the prefix holds a character TensorFlow reads as a glob
            pattern (`GLOB_CHARACTERS`); the message names it.
    """
    return require_globless(_resolve_checkpoint(path), "checkpoint", reading=True)


def _resolve_checkpoint(path: str | os.PathLike[str]) -> str:
    path = os.path.expanduser(os.fspath(path))
    if not path:
        msg = "checkpoint path '' is empty: expected a checkpoint prefix, file or directory"
        raise CheckpointNotFoundError(msg)
    if os.path.isdir(path):
        return _latest_in_dir(path)
    if os.path.basename(path) == STATE_FILENAME and os.path.isfile(path):
        return _latest_in_dir(os.path.dirname(path) or ".")
    prefix = checkpoint_prefix_of(path)
    if os.path.isfile(prefix + ".index"):
        return prefix
    if os.path.exists(path):
        msg = (
            f"{path!r} is not a TensorFlow checkpoint: expected a prefix such as "
            "'model-1000' with 'model-1000.index' beside it, one of its files, or a "
            "directory holding checkpoints"
        )
        raise NotACheckpointError(msg)
    directory = os.path.dirname(prefix) or "."
    msg = f"checkpoint {path!r} does not exist: no file {prefix + '.index'!r}"
    if os.path.isdir(directory):
        nearby = [
            n.removesuffix(".index") for n in sorted(os.listdir(directory)) if n.endswith(".index")
        ]
        msg += f"; checkpoints in {directory!r}: {nearby[:20]}"
    else:
        msg += f"; directory {directory!r} does not exist either"
    raise CheckpointNotFoundError(msg)
