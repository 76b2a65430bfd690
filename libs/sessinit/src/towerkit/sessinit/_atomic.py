"""Atomic writes: files, directories and multi-file checkpoints appear whole or not at all."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from towerkit.sessinit._paths import STATE_FILENAME

logger = logging.getLogger("towerkit.sessinit")

_SUFFIX = re.compile(r"\.(index|meta|data-\d+-of-\d+)")
_TEMP = re.compile(
    r"\.(?P<stem>.+)\.(?P<tag>tmp|old)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})(?P<rest>.*)", re.DOTALL
)


def temp_name(final_name: str, tag: str = "tmp") -> str:
    """A hidden sibling name for `final_name` that keeps its extension.

    The name starts with a dot (so directory listings and checkpoint scans skip it)
    and ends with the final extension (``np.savez`` appends ``.npz`` otherwise).

    Examples:
        >>> name = temp_name("params.npz")
        >>> name.startswith(".params.tmp-") and name.endswith(".npz")
        True
    """
    stem, ext = os.path.splitext(final_name)
    if not stem:
        stem, ext = ext, ""
    return f".{stem}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}{ext}"


def parse_temp_name(name: str) -> tuple[str, int] | None:
    """The final name a temporary made by `temp_name` stands for, and its writer's process id.

    Files written under a temporary name keep any suffix added after it (a checkpoint's
    ``.index`` and ``.data-*`` files, TensorFlow's own ``.tempstate*`` files), and the
    final name returned keeps it too.

    Args:
        name: A directory entry's base name.

    Returns:
        ``(final name, process id)``, or None when `name` is not such a temporary.

    Examples:
        >>> parse_temp_name(".stats.tmp-4242-0123abcd.json")
        ('stats.json', 4242)
        >>> parse_temp_name(".model-100.tmp-7-89abcdef.index")
        ('model-100.index', 7)
        >>> parse_temp_name(".checkpoint.tmp-7-89abcdef")
        ('checkpoint', 7)
        >>> parse_temp_name("model-100.index") is None
        True
    """
    match = _TEMP.fullmatch(name)
    if match is None:
        return None
    return match["stem"] + match["rest"], int(match["pid"])


def _process_gone(pid: int) -> bool:
    """Whether process `pid` can no longer be writing (ended, a zombie, or this very process)."""
    if pid == os.getpid():
        return True
    if os.name != "posix":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[:1] == ["Z"]
    except OSError:
        return False


def remove_stale_temporaries(
    directory: str | os.PathLike[str], belongs: Callable[[str], bool], *, what: str
) -> list[str]:
    """Remove the temporaries that interrupted atomic writes of some files left in `directory`.

    A process killed while writing (`atomic_path`, `atomic_checkpoint_prefix`,
    `write_checkpoint_state`) leaves its hidden temporary behind; the final file is
    never touched. A writer calls this before writing again into a directory, for the
    kind of files it writes (`belongs` is asked about each temporary's final name), and
    the temporaries whose writing process has ended (or is this process) are removed,
    with one warning that lists them. Temporaries of a process still running are left
    alone.

    Args:
        directory: The directory to clean; nothing happens when it does not exist.
        belongs: Whether a final name (such as ``"model-100.index"``) is of this kind.
        what: The kind, for the log line (``"checkpoint"``, ``"statistics"``...).

    Returns:
        The base names removed, sorted.

    Examples:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> for n in (".stats.tmp-999999999-0123abcd.json", ".a.tmp-999999999-0123abcd", "stats.json"):
        ...     open(os.path.join(d, n), "w").close()
        >>> remove_stale_temporaries(d, lambda n: n == "stats.json", what="statistics")
        ['.stats.tmp-999999999-0123abcd.json']
        >>> sorted(os.listdir(d))
        ['.a.tmp-999999999-0123abcd', 'stats.json']
    """
    root = os.fspath(directory)
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for name in sorted(names):
        parsed = parse_temp_name(name)
        if parsed is None or not belongs(parsed[0]) or not _process_gone(parsed[1]):
            continue
        _remove(os.path.join(root, name))
        removed.append(name)
    if removed:
        logger.warning(
            "removed %d stale temporary file(s) of %s files from %s, left by a write that "
            "was interrupted: %s",
            len(removed),
            what,
            root,
            ", ".join(removed),
        )
    return removed


def _fsync_path(path: str, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


@contextlib.contextmanager
def atomic_path(final_path: str | os.PathLike[str], *, fsync: bool = True) -> Iterator[str]:
    """Write to a temporary path, then move it to `final_path` in one step.

    The body writes a file or a directory at the yielded path, which sits in the same
    directory as `final_path`. When the body returns, the result replaces `final_path`
    (an existing file is replaced by ``os.replace``; an existing directory is moved
    aside first, then deleted). When the body raises, the temporary path is removed
    and `final_path` is left as it was. A process killed in the middle leaves at most a
    hidden temporary entry, never a partial `final_path`.

    Args:
        final_path: Where the result should appear.
        fsync: Flush a written file and the directory entry to disk before returning,
            so the result also survives a power loss.

    Yields:
        The temporary path to write.

    Raises:
        FileNotFoundError: The body wrote nothing at the temporary path.

    Examples:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> with atomic_path(os.path.join(d, "out.txt")) as tmp:
        ...     with open(tmp, "w") as f:
        ...         _ = f.write("done")
        >>> sorted(os.listdir(d))
        ['out.txt']
    """
    final = os.path.abspath(os.fspath(final_path))
    directory, base = os.path.split(final)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, temp_name(base))
    try:
        yield tmp
        if not os.path.lexists(tmp):
            msg = f"nothing was written to the temporary path {tmp!r} for {final!r}"
            raise FileNotFoundError(msg)
        if os.path.isdir(tmp) and not os.path.islink(tmp):
            _replace_dir(tmp, final)
        else:
            if fsync:
                _fsync_path(tmp)
            os.replace(tmp, final)
        if fsync:
            _fsync_path(directory, directory=True)
    except BaseException:
        _remove(tmp)
        raise


def _replace_dir(tmp: str, final: str) -> None:
    if not os.path.lexists(final):
        os.rename(tmp, final)
        return
    directory, base = os.path.split(final)
    old = os.path.join(directory, temp_name(base, tag="old"))
    os.rename(final, old)
    os.rename(tmp, final)
    _remove(old)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True) -> None:
    """Write `data` to `path` so that readers see the old content or all of the new.

    Examples:
        >>> import tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "blob")
        >>> atomic_write_bytes(p, b"abc")
        >>> open(p, "rb").read()
        b'abc'
    """
    with atomic_path(path, fsync=fsync) as tmp, open(tmp, "wb") as f:
        f.write(data)


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8", fsync: bool = True
) -> None:
    """Write `text` to `path` atomically (see `atomic_write_bytes`).

    Examples:
        >>> import tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "stats.json")
        >>> atomic_write_text(p, "[]")
        >>> open(p).read()
        '[]'
    """
    atomic_write_bytes(path, text.encode(encoding), fsync=fsync)


def _checkpoint_files(directory: str, base: str, *, owned: bool = False) -> dict[str, str]:
    """Entries of `directory` that belong to checkpoint `base`, keyed by suffix (".index"...).

    With `owned`, `base` is a unique temporary name and every entry starting with it
    counts; otherwise only `base` followed by a checkpoint file suffix does.
    """
    found = {}
    for name in os.listdir(directory):
        if not name.startswith(base):
            continue
        suffix = name[len(base) :]
        if owned or _SUFFIX.fullmatch(suffix):
            found[suffix] = os.path.join(directory, name)
    return found


@contextlib.contextmanager
def atomic_checkpoint_prefix(
    final_prefix: str | os.PathLike[str], *, fsync: bool = True
) -> Iterator[str]:
    """Write a TensorFlow checkpoint under a temporary prefix, then publish it under `final_prefix`.

    A checkpoint is several files (``.data-*`` shards, ``.index``, optionally ``.meta``)
    and is visible to readers through its ``.index``. On success the old ``.index`` of
    `final_prefix` (if any) is removed first, the data and meta files are moved into
    place, and the new ``.index`` is moved last. A crash at any moment therefore leaves
    either the previous complete checkpoint or no checkpoint under `final_prefix`.
    The ``checkpoint`` state file is not touched (see `write_checkpoint_state`).

    Args:
        final_prefix: The checkpoint prefix to publish, such as ``"train_log/model-100"``.
        fsync: Flush the files before publishing the index.

    Yields:
        The temporary prefix to save to (same directory, hidden name).

    Raises:
        FileNotFoundError: No ``.index`` was written under the temporary prefix.
    """
    final = os.path.abspath(os.fspath(final_prefix))
    directory, base = os.path.split(final)
    os.makedirs(directory, exist_ok=True)
    tmp_base = temp_name(base)
    tmp = os.path.join(directory, tmp_base)
    try:
        yield tmp
        written = _checkpoint_files(directory, tmp_base, owned=True)
        if ".index" not in written:
            msg = f"no checkpoint was written under the temporary prefix {tmp!r} for {final!r}"
            raise FileNotFoundError(msg)
        _publish_checkpoint(written, final, fsync=fsync)
    except BaseException:
        for path in _checkpoint_files(directory, tmp_base, owned=True).values():
            _remove(path)
        raise


def _publish_checkpoint(written: dict[str, str], final: str, *, fsync: bool) -> None:
    directory, base = os.path.split(final)
    with contextlib.suppress(FileNotFoundError):
        os.remove(final + ".index")
    for suffix, path in _checkpoint_files(directory, base).items():
        if suffix not in written:
            _remove(path)
    for suffix, path in sorted(written.items()):
        if suffix == ".index" or not _SUFFIX.fullmatch(suffix):
            continue
        if fsync:
            _fsync_path(path)
        os.replace(path, final + suffix)
    if fsync:
        _fsync_path(written[".index"])
        _fsync_path(directory, directory=True)
    os.replace(written[".index"], final + ".index")
    if fsync:
        _fsync_path(directory, directory=True)
    for suffix, path in written.items():
        if not _SUFFIX.fullmatch(suffix):
            _remove(path)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_checkpoint_state(
    directory: str | os.PathLike[str],
    latest: str,
    all_checkpoints: Sequence[str] = (),
    *,
    timestamps: Sequence[float] = (),
    fsync: bool = True,
) -> None:
    """Atomically write the ``checkpoint`` state file that names the latest checkpoint.

    Args:
        directory: The checkpoint directory.
        latest: The latest checkpoint prefix; stored relative to `directory` when inside it.
        all_checkpoints: Every checkpoint kept, oldest first (`latest` is appended if absent).
        timestamps: Seconds since the epoch at which each of `all_checkpoints` was written.
        fsync: Flush the file before it replaces the old one.

    Examples:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> write_checkpoint_state(d, os.path.join(d, "model-20"), [os.path.join(d, "model-10")])
        >>> print(open(os.path.join(d, "checkpoint")).read(), end="")
        model_checkpoint_path: "model-20"
        all_model_checkpoint_paths: "model-10"
        all_model_checkpoint_paths: "model-20"
    """
    root = os.path.abspath(os.fspath(directory))

    def rel(path: str) -> str:
        absolute = os.path.abspath(os.path.join(root, path))
        return os.path.basename(absolute) if os.path.dirname(absolute) == root else absolute

    paths = [rel(p) for p in all_checkpoints]
    if rel(latest) not in paths:
        paths.append(rel(latest))
    lines = [f"model_checkpoint_path: {_quote(rel(latest))}"]
    lines += [f"all_model_checkpoint_paths: {_quote(p)}" for p in paths]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in timestamps]
    atomic_write_text(os.path.join(root, STATE_FILENAME), "\n".join(lines) + "\n", fsync=fsync)


def atomic_save_checkpoint(
    saver: Any,
    sess: Any,
    save_path: str | os.PathLike[str],
    global_step: Any = None,
    *,
    write_meta_graph: bool = True,
    write_state: bool = True,
    fsync: bool = True,
) -> str:
    """Save with a ``tf.compat.v1.train.Saver`` so that no half-written checkpoint is ever visible.

    The saver writes under a temporary prefix (see `atomic_checkpoint_prefix`), deleting
    checkpoints beyond its ``max_to_keep`` as usual (its own state file goes to a scratch
    name and is dropped). Then the saver's list of kept checkpoints is updated to the
    final name, so later saves delete the right files, and the ``checkpoint`` state file
    is rewritten atomically.

    Args:
        saver: A ``tf.compat.v1.train.Saver``.
        sess: The session holding the values.
        save_path: The checkpoint prefix without step, such as ``"train_log/model"``.
        global_step: If given (an int, or a tensor/variable evaluated in `sess`), the step
            is appended as ``save_path-<step>``.
        write_meta_graph: Also write ``<prefix>.meta``.
        write_state: Rewrite the ``checkpoint`` state file to name this checkpoint.
        fsync: Flush files before publishing them.

    Returns:
        The published checkpoint prefix.
    """
    final = os.path.abspath(os.fspath(save_path))
    if global_step is not None:
        step = global_step if isinstance(global_step, int) else sess.run(global_step)
        final = f"{final}-{int(step)}"
    directory = os.path.dirname(final)
    scratch_state = temp_name(STATE_FILENAME)
    tracks = bool(saver.saver_def.max_to_keep)  # max_to_keep=0: the saver deletes nothing
    with atomic_checkpoint_prefix(final, fsync=fsync) as tmp:
        try:
            saver.save(
                sess,
                tmp,
                write_meta_graph=write_meta_graph,
                write_state=tracks,
                latest_filename=scratch_state,
            )
        finally:
            _remove(os.path.join(directory, scratch_state))
    kept = []
    for path in saver.last_checkpoints:
        name = final if os.path.abspath(path) == tmp else path
        with contextlib.suppress(OSError):
            kept.append((name, os.path.getmtime(name + ".index")))
            continue
        kept.append((name, time.time()))
    saver.set_last_checkpoints_with_time(kept)
    if write_state:
        write_checkpoint_state(
            directory,
            final,
            [p for p, _ in kept],
            timestamps=[t for _, t in kept],
            fsync=fsync,
        )
    return final
