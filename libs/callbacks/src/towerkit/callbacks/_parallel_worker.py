"""The worker process of a `ParallelIterable`: its pass over the source, its messages, its end."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import random
import signal
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np

from towerkit.callbacks._parallel_core import WorkerPlan, keeps_position, shard_indices, worker_seed
from towerkit.callbacks._parallel_shm import CREATING, encode, names

__all__ = ["worker_main"]


def _watch_parent(alive: Any) -> None:
    """In a worker: exit as soon as the process that started the pool is gone (even SIGKILLed).

    `alive` is the read end of a pipe whose only write end the pool's process holds:
    it reads as ended when that process dies or closes the pool. Under ``fork`` the
    siblings inherit that write end, so the parent's sentinel is watched instead.
    """
    if alive is None:
        parent = mp.parent_process()
        if parent is None:
            return
        alive = parent.sentinel
    mp.connection.wait([alive])
    CREATING.acquire()  # not while a shared memory block is half made
    os._exit(0)


class _Cursor:
    """The datapoint a worker is producing: its index, or its position in the pass."""

    index = 0


def _pass_items(
    source: Any, plan: WorkerPlan, worker: int, cursor: _Cursor, claim: Any
) -> Iterator[Any]:
    """The datapoints worker `worker` produces in one pass; `cursor` says which is next.

    With `claim` (an unordered pool over an indexed source) the workers take the pass's
    indices from one shared counter, each the next one not taken, so none sits idle at
    the pass's end while another still has its share to do.
    """
    if claim is not None:
        length = len(source)
        while True:
            with claim.get_lock():
                i = claim.value
                claim.value = i + 1
            if i >= length:
                return
            cursor.index = i
            yield source[i]
    if plan.split == "index":
        for i in shard_indices(len(source), plan.workers, worker):
            cursor.index = i
            yield source[i]
        return
    cursor.index = 0
    if plan.split != "stride":  # a factory's source, or this worker's copy: all of it
        for i, dp in enumerate(source):
            yield dp
            cursor.index = i + 1
        return
    for i, dp in enumerate(source):
        if keeps_position(i, plan.workers, worker):
            yield dp
        cursor.index = i + 1


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)


def _send(out: Any, slots: Any, message: tuple[Any, ...], large: Any = None) -> None:
    """Put one message into the worker's pipe once a slot is free (the pipe holds `capacity`).

    Pickled here, in the worker's only thread, so a datapoint that cannot be pickled is
    reported as that datapoint's error, and the write needs no second thread. With
    `large` (``(min_bytes, next_name)``), arrays of at least ``min_bytes`` go into a
    shared memory block named ``next_name()`` (`encode`).
    """
    if large is None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    else:
        payload = encode(message, *large)
    slots.acquire()
    out.send_bytes(payload)


def worker_main(
    source: Any,
    plan: WorkerPlan,
    worker: int,
    out: Any,
    slots: Any,
    started: Any,
    claim: Any,
    alive: Any,
    block_prefix: str = "",
    ready: Any = None,
) -> None:
    """A worker's life: pass after pass over its share, each datapoint sent through `out`.

    Messages: ``("dp", worker, datapoint, busy_s)``, ``("end", worker, pass_number)``,
    and ``("err", worker, index, pass_number, traceback_text)``, after which it ends.
    Each takes one of the `slots` the parent gives back when it reads a message.
    With `started` (unordered pools) a pass begins only once the parent has begun it,
    so one pass's datapoints never mix with the next's. `ready[worker]` is set first
    thing: a worker that dies with it unset died while multiprocessing prepared it.
    Under the ``copies`` split a pass that yields nothing is an error (the copy would
    spin through empty passes).
    """
    if ready is not None:
        ready[worker] = 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    threading.Thread(target=_watch_parent, args=(alive,), daemon=True).start()
    cursor = _Cursor()
    pass_number = 0
    large = None
    if plan.shared_memory_min_bytes is not None:
        large = (plan.shared_memory_min_bytes, names(f"{block_prefix}w{worker}_").__next__)
    try:
        # Under stride every worker must make the same pass (each keeps its share of
        # it), so all take worker 0's seeds; elsewhere each draws its own.
        seeded = 0 if plan.split == "stride" else worker
        _seed_all(worker_seed(plan.seed, seeded, 0))  # reset_state draws its own state
        if plan.split == "factory":
            source = source(worker, plan.workers)
        reset = getattr(source, "reset_state", None)
        if callable(reset):
            reset()
        while True:
            pass_number += 1
            while started is not None and started.value < pass_number:
                time.sleep(0.005)
            _seed_all(worker_seed(plan.seed, seeded, pass_number))
            start = time.perf_counter()
            made = 0
            for dp in _pass_items(source, plan, worker, cursor, claim):
                _send(out, slots, ("dp", worker, dp, time.perf_counter() - start), large)
                made += 1
                start = time.perf_counter()
            if made == 0 and plan.split == "copies":
                msg = f"pass {pass_number} of this worker's copy of the source yielded no datapoint"
                raise ValueError(msg)
            _send(out, slots, ("end", worker, pass_number))
    except BaseException:
        text = traceback.format_exc()
        with contextlib.suppress(OSError):
            _send(out, slots, ("err", worker, cursor.index, pass_number, text))
        out.close()
