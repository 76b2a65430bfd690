"""Saving in the background: a snapshot of the variables in the graph, and one writer thread.

`ModelSaver(background=True)` copies the saved variables, at the step it saves,
into snapshot variables of their own (one ``session.run`` of assignments, on each
variable's device), then a writer thread writes the snapshot to disk with a saver
that names each snapshot variable as its variable, while training goes on. The
checkpoint is exactly the state at that step, readable by any saver of the model.

This module holds the graph side (`build_snapshot`), the one save in flight
(`SaveInFlight`) and the registry that lets other callbacks wait for the saves into
a directory before they read it (`wait_for_saves`).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from towerkit.towers.compat import tf1

__all__ = ["SaveInFlight", "Snapshot", "build_snapshot", "snapshot_names", "wait_for_saves"]


@attrs.frozen
class Snapshot:
    """The snapshot side of the graph.

    Attributes:
        copy_op: assigns each saved variable's value to its snapshot variable.
        saver: a ``tf.compat.v1.train.Saver`` over the snapshot variables, under the
            names the saved variables have in a checkpoint.
        nbytes: the bytes the snapshot holds (what a save writes, less the index).
    """

    copy_op: Any
    saver: Any
    nbytes: int


def snapshot_names(variables: Sequence[Any]) -> list[str]:
    """The checkpoint name of each variable, as a saver given the list would name it.

    Raises:
        ValueError: a variable is a slice of a partitioned variable (its checkpoint
            entry is the whole variable's, which a snapshot cannot stand for), or two
            variables share a name.
    """
    names: list[str] = []
    for v in variables:
        if getattr(v, "_save_slice_info", None) is not None:
            msg = (
                f"ModelSaver(background=True): {v.name} is a part of a partitioned variable; "
                "background saving takes whole variables only (use background=False)"
            )
            raise ValueError(msg)
        names.append(v.op.name)
    seen: set[str] = set()
    dup = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
    if dup:
        msg = f"ModelSaver(background=True): variables share the checkpoint names {dup}"
        raise ValueError(msg)
    return names


def build_snapshot(variables: Sequence[Any], hours: float) -> Snapshot:
    """The snapshot variables of `variables`, the op that fills them and the saver over them.

    Each snapshot variable sits on its variable's device and is in no collection (no
    initializer, saver or ``global_variables()`` sees it); the copy op initializes it.

    Args:
        variables: the saved variables (whole, fully defined shapes).
        hours: the saver's ``keep_checkpoint_every_n_hours`` (unused by the pruning of
            `ModelSaver`, which is its own; kept for the saver's ``SaverDef``).
    """
    names = snapshot_names(variables)
    copies, by_name, nbytes = [], {}, 0
    graph = tf1.get_default_graph()
    with tf1.name_scope("snapshot"):
        for name, v in zip(names, variables, strict=True):
            shape = v.shape
            if not shape.is_fully_defined():
                msg = (
                    f"ModelSaver(background=True): {v.name} has the shape {shape}, not fully "
                    "defined; background saving needs a static shape (use background=False)"
                )
                raise ValueError(msg)
            dtype = v.dtype.base_dtype
            with graph.colocate_with(v.op):
                shadow = tf1.Variable(
                    tf1.zeros(shape, dtype=dtype),
                    trainable=False,
                    collections=[],
                    use_resource=True,
                    name=name,
                )
                copies.append(shadow.assign(v, read_value=False))
            by_name[name] = shadow
            nbytes += shape.num_elements() * dtype.size
        copy_op = tf1.group(*copies, name="copy")
    saver = tf1.train.Saver(
        var_list=by_name,
        max_to_keep=0,
        keep_checkpoint_every_n_hours=hours,
        write_version=tf1.train.SaverDef.V2,
        save_relative_paths=True,
        sharded=False,
    )
    return Snapshot(copy_op=copy_op, saver=saver, nbytes=int(nbytes))


class SaveInFlight:
    """At most one write at a time, on a thread of its own, and its outcome.

    `start` hands a write to the thread (waiting first for the one in flight, if
    any); `collect` gives back the outcome of a finished write once (its failure
    raised), and `wait` waits for the one in flight. The thread is not a daemon: a
    process that ends while a write is in flight finishes it first.

    Args:
        name: the prefix of the writer thread's name.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._future: concurrent.futures.Future[Any] | None = None
        self._step: int | None = None

    @property
    def step(self) -> int | None:
        """The global step of the write in flight (or finished and not collected), or None."""
        return self._step

    def start(self, step: int, write: Callable[[], Any]) -> None:
        """Run `write` on the writer thread; the write in flight, if any, is waited for first."""
        self.wait()
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=self._name
            )
        self._future = self._pool.submit(write)
        self._step = step

    def done(self) -> bool:
        """Whether there is an outcome to collect (cheap: read at every step)."""
        future = self._future
        return future is not None and future.done()

    def collect(self) -> Any:
        """The outcome of the finished write (None when there is none); its failure is raised."""
        future = self._future
        if future is None or not future.done():
            return None
        self._future = None
        self._step = None
        return future.result()

    def wait(self) -> Any:
        """Wait for the write in flight and give its outcome (`collect`); None when there is none."""
        future = self._future
        if future is None:
            return None
        concurrent.futures.wait([future])
        return self.collect()

    def settle(self) -> None:
        """Wait for the write in flight, leaving its outcome to `collect`."""
        future = self._future
        if future is not None:
            concurrent.futures.wait([future])

    def close(self) -> None:
        """Let the thread go (after `wait`)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


_SAVERS: weakref.WeakSet[Any] = weakref.WeakSet()
_SAVERS_LOCK = threading.Lock()


def register_saver(saver: Any) -> None:
    """Let `wait_for_saves` find `saver` (an object with ``checkpoint_dir`` and ``settle()``)."""
    with _SAVERS_LOCK:
        _SAVERS.add(saver)


def wait_for_saves(directory: str | os.PathLike[str]) -> None:
    """Wait until the background saves into `directory` in flight are published (or failed).

    A callback that reads a directory's latest checkpoint while training (`MinSaver`
    copying it) calls this first, so it reads the checkpoint of the current step. A
    failed save is not raised here: the saver reports it at the next step.
    """
    target = os.path.abspath(os.fspath(directory))
    with _SAVERS_LOCK:
        savers = list(_SAVERS)
    for saver in savers:
        own = saver.checkpoint_dir
        if own is not None and os.path.abspath(own) == target:
            saver.settle()
