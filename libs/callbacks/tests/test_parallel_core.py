"""The pure core of parallel Python input: splits, the ordered merge, the workers' seeds."""

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import WorkerPlan
from towerkit.callbacks.plumbing import (
    MergeState,
    StartLimit,
    check_worker_limits,
    choose_split,
    keeps_position,
    merge_after_datapoint,
    merge_after_end,
    room_for_workers,
    round_robin,
    shard_indices,
    start_merge,
    worker_seed,
)

lengths = st.integers(min_value=0, max_value=200)
worker_counts = st.integers(min_value=1, max_value=9)


class TestWorkerPlan:
    """`WorkerPlan` validates the options of a worker pool."""

    def test_repr(self):
        """The repr lists every field."""
        assert repr(WorkerPlan(workers=3, split="stride", ordered=False)) == (
            "WorkerPlan(workers=3, split='stride', ordered=False, seed=0, "
            "start_method='spawn', capacity=8, shared_memory_min_bytes=1048576, "
            "pass_length=None)"
        )

    def test_fail_copies(self):
        """The copies split is unordered, and a pass length is for it alone."""
        with pytest.raises(ValueError, match=r"'ordered' must be False under the 'copies' split"):
            WorkerPlan(workers=2, split="copies", ordered=True)
        with pytest.raises(ValueError, match=r"'pass_length' is for the 'copies' split only"):
            WorkerPlan(workers=2, split="index", pass_length=4)
        with pytest.raises(ValueError, match=r"'pass_length' must be an int >= 1 .*got 0"):
            WorkerPlan(workers=2, split="copies", ordered=False, pass_length=0)
        plan = WorkerPlan(workers=2, split="copies", ordered=False, pass_length=4)
        assert plan.pass_length == 4

    @pytest.mark.parametrize("value", [0, -1, 1.5, True, "1M"])
    def test_fail_shared_memory_min_bytes(self, value):
        """A threshold that is not a positive int (or None) is refused, naming the option."""
        with pytest.raises(ValueError, match=r"'shared_memory_min_bytes' must be an int >= 1"):
            WorkerPlan(workers=2, split="index", shared_memory_min_bytes=value)

    @pytest.mark.parametrize("workers", [0, -2])
    def test_fail_workers(self, workers):
        """Zero or negative workers are refused, naming the option and what to do."""
        with pytest.raises(
            ValueError, match=rf"'workers' must be >= 1 .*got {workers}: give workers=1"
        ):
            WorkerPlan(workers=workers, split="index")

    def test_fail_kinds(self):
        """A bool, a float or an unknown start method is refused."""
        with pytest.raises(TypeError, match=r"'workers' must be an int >= 1 .*got bool"):
            WorkerPlan(workers=True, split="index")
        with pytest.raises(TypeError, match="got float"):
            WorkerPlan(workers=2.0, split="index")
        with pytest.raises(ValueError, match=r"'start_method' must be one of .*got 'threads'"):
            WorkerPlan(workers=2, split="index", start_method="threads")
        with pytest.raises(ValueError, match=r"'seed' must be an int >= 0; got -1"):
            WorkerPlan(workers=2, split="index", seed=-1)

    @given(worker_counts, st.sampled_from(["index", "stride", "factory", "copies"]), st.booleans())
    def test_evolve_revalidates(self, workers, split, ordered):
        """A record built from valid values is equal to its evolved copy, which validates."""
        plan = WorkerPlan(workers=workers, split=split, ordered=ordered and split != "copies")
        assert attrs.evolve(plan) == plan
        with pytest.raises(ValueError):
            attrs.evolve(plan, workers=0)


class TestChooseSplit:
    """`choose_split` names the split of a source."""

    @given(st.booleans(), st.booleans())
    def test_factory_wins(self, has_len, has_getitem):
        """A function is always split as a factory."""
        assert choose_split(has_len, has_getitem, True) == "factory"

    @given(st.booleans(), st.booleans(), st.sampled_from([None, False, True]))
    def test_index_needs_both(self, has_len, has_getitem, ordered):
        """Only a source with both a length and an index is split by index."""
        split = choose_split(has_len, has_getitem, False, ordered)
        assert (split == "index") == (has_len and has_getitem)

    @given(st.booleans(), st.sampled_from([None, False]))
    def test_work_done_once_unless_asked(self, has_len, ordered):
        """A source without an index is never split by stride (its work done N times)
        unless order is asked for: by default each worker iterates a copy of its own."""
        assert choose_split(has_len, False, False, ordered) == "copies"
        assert choose_split(has_len, False, False, True) == "stride"


class TestWorkerLimits:
    """`room_for_workers` and `check_worker_limits` bound the workers a machine can start."""

    @given(
        st.integers(0, 10**6),
        st.integers(0, 10**6),
        st.integers(1, 8),
        st.integers(0, 1000),
    )
    def test_room_fits(self, limit, in_use, per_worker, reserve):
        """The room never goes below 0, and that many workers fit under the limit."""
        room = room_for_workers(limit, in_use, per_worker, reserve)
        assert room >= 0
        if room:
            assert in_use + reserve + room * per_worker <= limit
            assert in_use + reserve + (room + 1) * per_worker > limit

    @given(st.integers(1, 10**5), st.lists(st.integers(0, 10**5), max_size=4))
    def test_refuses_over_the_tightest(self, workers, rooms):
        """More workers than the tightest limit allows is refused, naming that limit."""
        limits = [StartLimit(what=f"limit {i}", workers=r) for i, r in enumerate(rooms)]
        if not rooms or workers <= min(rooms):
            check_worker_limits(workers, limits)
            return
        tightest = rooms.index(min(rooms))
        with pytest.raises(
            ValueError,
            match=rf"'workers' must be at most {min(rooms)} on this machine "
            rf"\(limit {tightest}\); got {workers}",
        ):
            check_worker_limits(workers, limits)

    def test_repr_and_fail(self):
        """The record's repr, and a negative room refused."""
        assert repr(StartLimit(what="x", workers=3)) == "StartLimit(what='x', workers=3)"
        with pytest.raises(ValueError, match="'workers' must be >= 0"):
            StartLimit(what="x", workers=-1)


class TestShares:
    """`shard_indices` and `keeps_position` give each datapoint to exactly one worker."""

    @given(lengths, worker_counts)
    def test_partition(self, length, workers):
        """The shares are disjoint, cover the source, and differ in size by at most one."""
        shares = [list(shard_indices(length, workers, k)) for k in range(workers)]
        assert sorted(i for s in shares for i in s) == list(range(length))
        sizes = [len(s) for s in shares]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)

    @given(lengths, worker_counts)
    def test_stride_matches_index(self, length, workers):
        """Keeping every N-th position gives each worker the indices of the index split."""
        for k in range(workers):
            kept = [p for p in range(length) if keeps_position(p, workers, k)]
            assert kept == list(shard_indices(length, workers, k))


class TestMerge:
    """The ordered merge gives one worker's order back."""

    @given(lengths, worker_counts)
    def test_split_then_merge_is_identity(self, length, workers):
        """Merging the index shares in `round_robin` order yields range(length)."""
        shares = [list(shard_indices(length, workers, k)) for k in range(workers)]
        merged = [shares[k][j] for k, j in round_robin([len(s) for s in shares])]
        assert merged == list(range(length))

    @given(st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=8))
    def test_any_counts(self, counts):
        """For any counts (a factory's shares) each worker's datapoints come once, in order."""
        merged = list(round_robin(counts))
        assert len(merged) == sum(counts)
        for k, n in enumerate(counts):
            assert [j for w, j in merged if w == k] == list(range(n))

    @given(st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=8))
    def test_no_worker_waits_twice(self, counts):
        """Between two datapoints of one worker every other still-active worker gives one."""
        merged = [w for w, _ in round_robin(counts)]
        for i in range(len(merged)):
            active = {
                k for k in range(len(counts)) if counts[k] > sum(1 for w in merged[:i] if w == k)
            }
            if len(active) > 1 and i + 1 < len(merged):
                assert merged[i + 1] != merged[i] or active == {merged[i]}

    def test_state_steps(self):
        """The state walks the turn order and drops ended workers."""
        state = start_merge(3)
        assert state.current == 0
        state = merge_after_datapoint(state)
        assert state.current == 1
        state = merge_after_end(state)
        assert state == MergeState(active=(0, 2), turn=1)
        assert state.current == 2
        state = merge_after_end(merge_after_end(state))
        assert state.done


class TestWorkerSeed:
    """`worker_seed` gives distinct, reproducible seeds."""

    @given(st.integers(min_value=0, max_value=2**31), st.integers(1, 16), st.integers(1, 50))
    def test_distinct_and_bounded(self, seed, workers, passes):
        """Each (worker, pass) of a run gets its own seed, a valid NumPy seed."""
        seeds = {worker_seed(seed, k, p) for k in range(workers) for p in range(1, passes + 1)}
        assert len(seeds) == workers * passes
        assert all(0 <= s < 2**32 for s in seeds)

    @given(st.integers(min_value=0, max_value=2**40), st.integers(0, 64), st.integers(1, 10**6))
    def test_reproducible(self, seed, worker, pass_number):
        """The same inputs give the same seed."""
        assert worker_seed(seed, worker, pass_number) == worker_seed(seed, worker, pass_number)
