"""tensorpack's own DataFlows under towerkit's parallel input, beside tensorpack's own runner.

Runs where tensorpack 0.11 is importable (``nox -s tensorpack_dataflows``); skipped
elsewhere. Each worker of a `ParallelIterable` iterates a copy of the DataFlow reset
in that worker, as ``MultiProcessRunnerZMQ`` does.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

dataflow = pytest.importorskip(
    "tensorpack.dataflow", reason="tensorpack 0.11 not installed: nox -s tensorpack_dataflows"
)

from towerkit.callbacks import ParallelIterable  # noqa: E402

pytestmark = pytest.mark.procs  # the workers are processes

N = 24


def decode(dp):
    """A costly map (decoding, augmenting): 2 ms of this thread's CPU, then x -> 2x."""
    end = time.thread_time() + 0.002
    while time.thread_time() < end:
        pass
    return [dp[0] * 2, os.getpid()]


class Shuffled(dataflow.RNGDataFlow):
    """An RNGDataFlow as tensorpack users write one: ``self.rng`` made by ``reset_state``."""

    def __len__(self):
        return N

    def __iter__(self):
        for i in self.rng.permutation(N):
            yield [np.float32(i), os.getpid()]


def mapped():
    """tensorpack's idiom: a cheap list, shuffled, and a costly function mapped over it."""
    return dataflow.MapData(dataflow.DataFromList([[np.float32(i)] for i in range(N)]), decode)


def test_map_data_gets_a_copy_per_worker():
    """``MapData(DataFromList(...), f)``: copies, a pass of the flow's length, every
    datapoint one the flow makes (f applied in the workers)."""
    pool = ParallelIterable(mapped(), 2)
    assert (pool.plan.split, pool.plan.ordered, len(pool)) == ("copies", False, N)
    try:
        passes = [list(pool) for _ in range(3)]
    finally:
        pool.close()
    assert [len(p) for p in passes] == [N] * 3
    values = {float(dp[0]) for p in passes for dp in p}
    assert values <= {2.0 * i for i in range(N)}
    assert os.getpid() not in {dp[1] for p in passes for dp in p}, "mapped in the workers"


def test_rng_dataflow_copies_shuffle_their_own_way():
    """Each worker's copy of an RNGDataFlow is reset in that worker: its own order."""
    pool = ParallelIterable(Shuffled(), 2, capacity=N)
    try:
        got = list(pool) + list(pool) + list(pool)
    finally:
        pool.close()
    orders: dict[int, list[int]] = {}
    for value, pid in got:
        orders.setdefault(pid, []).append(int(value))
    for order in orders.values():
        first = order[: min(N, len(order))]
        assert len(set(first)) == len(first), "a copy's pass is a permutation"
    if len(orders) == 2:  # both workers had their turn (they start at their own pace)
        a, b = (o[:8] for o in orders.values())
        assert a != b, "each copy shuffles with its own generator"


def test_same_datapoints_as_tensorpack_runner():
    """towerkit's pool and ``MultiProcessRunnerZMQ(df, 2)`` give passes of the same size
    and the same kind of datapoints over the same flow."""
    ours = ParallelIterable(mapped(), 2)
    theirs = dataflow.MultiProcessRunnerZMQ(mapped(), num_proc=2)
    theirs.reset_state()
    try:
        mine = [float(dp[0]) for _ in range(2) for dp in ours]
        peer = [float(dp[0]) for _ in range(2) for dp in theirs]
    finally:
        ours.close()
        del theirs
    assert len(mine) == len(peer) == 2 * N
    allowed = {2.0 * i for i in range(N)}
    assert set(mine) <= allowed
    assert set(peer) <= allowed


class MappedItems:
    """The ordered parallel map the trainers' README gives: a map-style source over items."""

    def __init__(self, items, func):
        self.items, self.func = items, func

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.func(self.items[i])


def test_map_style_source_is_a_strict_map_that_keeps_order():
    """``MultiProcessMapDataZMQ(..., strict=True)`` gives each datapoint once a pass, in
    another order; a map-style source over the same items gives each once too, mapped
    in the workers, and in the items' order."""
    items = [[np.float32(i)] for i in range(N)]
    ours = ParallelIterable(MappedItems(items, decode), 2)
    assert (ours.plan.split, ours.plan.ordered) == ("index", True)
    theirs = dataflow.MultiProcessMapDataZMQ(
        dataflow.DataFromList(items, shuffle=False), 2, decode, buffer_size=8, strict=True
    )
    theirs.reset_state()
    try:
        mine = [list(ours) for _ in range(2)]
        peer = [[float(dp[0]) for dp in theirs] for _ in range(2)]
    finally:
        ours.close()
        del theirs
    expected = [2.0 * i for i in range(N)]
    for one_pass in peer:
        assert sorted(one_pass) == expected, "tensorpack's strict map: each once a pass"
    for one_pass in mine:
        assert [float(dp[0]) for dp in one_pass] == expected, "each once, in the items' order"
        assert os.getpid() not in {dp[1] for dp in one_pass}, "mapped in the workers"
