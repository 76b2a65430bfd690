"""The wheel cache: keys naming what a wheel was built against, stored and found atomically under a lock."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from towerkit.sessinit import atomic_path
from towerkit.tools.install_horovod._records import WHEEL_CACHE_ENV, BuildOptions, Probe

__all__ = ["cache_key", "find_cached_wheel", "store_wheel", "evict_cached_wheel"]


_PYTHON_TAG_RE = re.compile(r"^[a-z]+\d+[a-z]*$")


_DIST_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


_DIST_VERSION_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.+!_-]*[A-Za-z0-9])?$")


def cache_key(options: BuildOptions, probe: Probe) -> str:
    """The wheel cache entry for a horovod built with ``options`` for the target ``probe`` read.

    The key holds everything the compiled extension depends on: horovod's version, the
    interpreter's Python tag and platform, each distribution that provides ``tensorflow``
    with its exact version (horovod's ops link against that TensorFlow's framework library),
    and the controllers built in; for a GPU build also the CUDA and cuDNN versions
    TensorFlow was built with and the installed NCCL distributions (``none`` where there
    are none), since the NCCL operations link against them. The build's parallelism is
    left out. Names are normalized
    as wheel file names normalize them (``tensorflow-cpu`` and ``tensorflow_cpu`` are one
    distribution); fields are joined by ``-``, which no field contains, so the key is one
    path component.

    Args:
        options: What to build.
        probe: What the target interpreter reported.

    Returns:
        ``horovod-<version>-<python tag>-<platform>-<dist>==<version>[,...]-<controllers>``.

    Raises:
        ValueError: The probe lacks a field of the key or holds one a key cannot carry; lists
            each.

    Examples:
        >>> probe = Probe(python_tag="cp311", platform="linux-x86_64",
        ...               tensorflow_dists=(("tensorflow-cpu", "2.21.0"),))
        >>> cache_key(BuildOptions(), probe)
        'horovod-0.28.1-cp311-linux_x86_64-tensorflow_cpu==2.21.0-gloo'
        >>> cache_key(BuildOptions(with_mpi=True, gpu=True, jobs=8), probe)
        'horovod-0.28.1-cp311-linux_x86_64-tensorflow_cpu==2.21.0-gloo+mpi+nccl-cudanone+cudnnnone+ncclnone'
    """
    problems = []
    if probe.python_tag is None or not _PYTHON_TAG_RE.match(probe.python_tag):
        problems.append(f"'python_tag' must be a tag such as 'cp311', got {probe.python_tag!r}")
    if not probe.platform or not re.search(r"[A-Za-z0-9]", probe.platform):
        problems.append(
            f"'platform' must name a platform such as 'linux-x86_64', got {probe.platform!r}"
        )
    if not probe.tensorflow_dists:
        problems.append(
            "'tensorflow_dists' is empty: no installed distribution provides 'tensorflow'"
        )
    problems += [
        f"'tensorflow_dists' entry {name!r} is not a distribution name"
        for name, _ in probe.tensorflow_dists
        if not _DIST_NAME_RE.match(name)
    ]
    problems += [
        f"'tensorflow_dists' entry {name!r} has version {version!r}, not a release version"
        for name, version in probe.tensorflow_dists
        if not _DIST_VERSION_RE.match(version)
    ]
    if problems:
        msg = "cannot key the wheel cache: " + "; ".join(problems)
        raise ValueError(msg)
    dists = sorted(
        {
            (re.sub(r"[-_.]+", "_", name).lower(), version.replace("-", "_"))
            for name, version in probe.tensorflow_dists
        }
    )
    controllers = "+".join(
        label
        for label, on in (("gloo", True), ("mpi", options.with_mpi), ("nccl", options.gpu))
        if on
    )
    fields = [
        "horovod",
        options.version.replace("-", "_"),
        str(probe.python_tag),
        re.sub(r"[^A-Za-z0-9]+", "_", str(probe.platform)),
        ",".join(f"{name}=={version}" for name, version in dists),
        controllers,
    ]
    if options.gpu:
        fields.append(_gpu_stack(probe))
    return "-".join(fields)


def _gpu_stack(probe: Probe) -> str:
    """The CUDA, cuDNN and NCCL versions a GPU build links against, as one key field.

    >>> _gpu_stack(Probe(cuda="12.5.1", cudnn="9", nccl_dists=(("nvidia-nccl-cu12", "2.23.4"),)))
    'cuda12.5.1+cudnn9+nccl2.23.4'
    """

    def clean(value: str | None) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "_", value) if value else "none"

    nccl = ",".join(clean(v) for _, v in sorted(probe.nccl_dists)) or "none"
    return f"cuda{clean(probe.cuda)}+cudnn{clean(probe.cudnn)}+nccl{nccl}"


def _entry(cache: Path, key: str) -> Path:
    if not key or key.startswith(".") or "/" in key or "\\" in key or "\0" in key:
        msg = f"'key' must be one visible path component such as cache_key() returns, got {key!r}"
        raise ValueError(msg)
    return Path(cache) / key


def find_cached_wheel(cache: str | os.PathLike[str], key: str) -> Path | None:
    """The wheel stored under ``cache/key/``, or None when there is none.

    Only finished files named ``horovod-*.whl`` count; temporary files of a store in
    progress have hidden names and are never returned.

    Args:
        cache: The wheel cache directory (need not exist).
        key: The entry, from :func:`cache_key`.

    Returns:
        The wheel's path, or None.

    Raises:
        ValueError: ``key`` is not a single visible path component.
    """
    entry = _entry(Path(cache), key)
    if not entry.is_dir():
        return None
    wheels = sorted(path for path in entry.glob("horovod-*.whl") if path.is_file())
    return wheels[-1] if wheels else None


def store_wheel(wheel: str | os.PathLike[str], cache: str | os.PathLike[str], key: str) -> Path:
    """Copy ``wheel`` into ``cache/key/``, atomically, as the entry's only wheel.

    The copy is written under a hidden temporary name in the entry, flushed to disk and
    renamed over the final name, so a reader sees no wheel or the whole one. It is readable
    by every user of the machine (mode 0644). Other wheels in the entry are removed
    afterwards.

    Args:
        wheel: The built wheel (``horovod-<version>-<tags>.whl``).
        cache: The wheel cache directory (created when missing).
        key: The entry, from :func:`cache_key`.

    Returns:
        The cached wheel's path.

    Raises:
        ValueError: ``wheel`` is not named ``horovod-*.whl``, or ``key`` is not a single
            visible path component.
        FileNotFoundError: ``wheel`` does not exist.
    """
    source = Path(wheel)
    if not (source.name.startswith("horovod-") and source.name.endswith(".whl")):
        msg = f"'wheel' must be a file named 'horovod-*.whl', got {str(source)!r}"
        raise ValueError(msg)
    entry = _entry(Path(cache), key)
    entry.mkdir(parents=True, exist_ok=True)
    final = entry / source.name
    with source.open("rb") as src, atomic_path(final) as tmp, open(tmp, "wb") as out:
        shutil.copyfileobj(src, out)
        os.fchmod(out.fileno(), 0o644)
    for other in entry.glob("horovod-*.whl"):
        if other.name != final.name:
            other.unlink(missing_ok=True)
    return final


def evict_cached_wheel(cache: str | os.PathLike[str], key: str) -> bool:
    """Remove the entry ``cache/key/`` and its wheel.

    The entry is first renamed to a hidden name, so a concurrent lookup finds the whole
    entry or none, then deleted.

    Args:
        cache: The wheel cache directory.
        key: The entry, from :func:`cache_key`.

    Returns:
        Whether there was an entry to remove.

    Raises:
        ValueError: ``key`` is not a single visible path component.
    """
    entry = _entry(Path(cache), key)
    doomed = entry.with_name(f".{key}.evicted-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(entry, doomed)
    except FileNotFoundError:
        return False
    shutil.rmtree(doomed, ignore_errors=True)
    return True


def _wheel_cache_dir(option: str | None, environ: Mapping[str, str]) -> Path | None:
    """``--wheel-cache``, else ``$TOWERKIT_HOROVOD_WHEEL_CACHE``, as an absolute path; '' is none."""
    value = option if option is not None else environ.get(WHEEL_CACHE_ENV, "")
    if not value:
        return None
    return Path(value).expanduser().absolute()


@contextlib.contextmanager
def _entry_lock(cache: Path, key: str) -> Iterator[None]:
    """Hold an exclusive lock on the entry ``key`` (a hidden lock file beside it).

    A second installer for the same key waits here while the first builds, then finds the
    wheel the first stored.
    """
    import fcntl

    cache.mkdir(parents=True, exist_ok=True)
    path = _entry(cache, key).with_name(f".{key}.lock")
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another install-horovod to finish {cache / key}", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
