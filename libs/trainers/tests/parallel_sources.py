"""Sources for the parallel input tests, importable by the worker processes they spawn."""

from __future__ import annotations

import os
import random
import time

import numpy as np


class Indexed:
    """Datapoints ``[i]`` for i in range(n), by index, each costing `cost_s` of Python."""

    def __init__(self, n: int, cost_s: float = 0.0) -> None:
        self.n = n
        self.cost_s = cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.cost_s:
            end = time.perf_counter() + self.cost_s
            while time.perf_counter() < end:
                pass
        return [np.array([[float(i)]], np.float32)]


class Streamed:
    """The same datapoints as `Indexed`, from a generator (no index)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield [np.array([[float(i)]], np.float32)]


class Augmented:
    """Datapoints drawn from NumPy's and random's global generators (what augmentations do)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        return (i, float(np.random.rand()), random.random(), os.getpid())


class RaisesAt:
    """Raises ValueError at index `bad`."""

    def __init__(self, n: int, bad: int) -> None:
        self.n = n
        self.bad = bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.bad:
            msg = f"bad datapoint {i}"
            raise ValueError(msg)
        return [np.array([[float(i)]], np.float32)]


class Blocks:
    """Datapoint 0, then blocks forever."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        if i >= 1:
            time.sleep(3600)
        return [np.array([[float(i)]], np.float32)]


def shard(worker: int, workers: int) -> list[tuple[int, int]]:
    """A factory: worker k's own datapoints (k, j)."""
    return [(worker, j) for j in range(3 + worker)]


class UnpicklableAt:
    """Datapoint 2 is a lambda, which cannot be pickled back to the parent."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        return (lambda: i) if i == 2 else i


class ExitsAt(Indexed):
    """Like `Indexed`, but the worker producing index `bad` ends its process at once (status 0),
    as a library calling ``os._exit`` would: no exception, no message."""

    def __init__(self, n: int, bad: int) -> None:
        super().__init__(n)
        self.bad = bad

    def __getitem__(self, i: int):
        if i == self.bad:
            os._exit(0)
        return super().__getitem__(i)


class SlowWorker:
    """Datapoints ``[i, worker]`` by index; worker `slow` (read from the worker process's
    name, ``"... worker k"``) spends `cost_s` on each of its datapoints."""

    def __init__(self, n: int, slow: int, cost_s: float) -> None:
        self.n, self.slow, self.cost_s = n, slow, cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import multiprocessing

        worker = int(multiprocessing.current_process().name.rsplit(" ", 1)[-1])
        if worker == self.slow:
            time.sleep(self.cost_s)
        return [np.array([[float(i)]], np.float32), worker]


class Large:
    """Datapoints of large arrays: ``[big (nbytes of i), small [i], big Fortran-ordered]``."""

    def __init__(self, n: int, nbytes: int = 1 << 20, sleep_s: float = 0.0) -> None:
        self.n = n
        self.nbytes = nbytes
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        big = np.full(self.nbytes // 4, i, np.float32)
        side = np.asfortranarray(np.full((256, self.nbytes // 2048), -i, np.float64))
        return [big, np.array([i], np.int64), side]


def busy(cost_s: float) -> None:
    """Spend `cost_s` seconds of this thread's CPU (decoding, augmenting)."""
    end = time.thread_time() + cost_s
    while time.thread_time() < end:
        pass


class UserFlow:
    """A DataFlow as users write one: a length, ``reset_state()`` making its generator, and
    the cost in ``__iter__`` (a shuffle, then each datapoint decoded); no ``__getitem__``.

    Datapoints are ``[x]`` (x = the index i as a [1, 1] float32 array); with `tagged`,
    ``[x, pid, made]``: the process that made it and how many datapoints its copy had
    made by then (so a test can count the work done).
    """

    def __init__(self, n: int, cost_s: float = 0.0, tagged: bool = False) -> None:
        self.n, self.cost_s, self.tagged = n, cost_s, tagged
        self.rng: np.random.RandomState | None = None
        self.made = 0

    def __len__(self) -> int:
        return self.n

    def reset_state(self) -> None:
        self.rng = np.random.RandomState(np.random.randint(1 << 30))

    def __iter__(self):
        assert self.rng is not None, "reset_state() was not called"
        for i in self.rng.permutation(self.n):
            busy(self.cost_s)
            self.made += 1
            x = np.array([[float(i)]], np.float32)
            yield [x, os.getpid(), self.made] if self.tagged else [x]


class EmptyFlow:
    """A DataFlow that says it has 3 datapoints and yields none."""

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        return iter(())
