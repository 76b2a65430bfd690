"""The launcher's watch over the ranks of its machine: which rank stopped answering."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers import RankFailure, launch_horovod_job
from towerkit.trainers.parallel._hvd_watch import (
    RankWatchState,
    advance_rank_watch,
    local_rank_states,
    mark_killed,
    overdue_ranks,
    parse_proc_stat,
    stopped_ranks,
)
from towerkit.trainers.parallel._hvdrun import blame_failure, first_failure

STATES = st.sampled_from("RSDTtZ")
SAMPLE = st.dictionaries(st.integers(0, 3), STATES, max_size=4)
SAMPLES = st.lists(SAMPLE, max_size=12)


def replay(samples: list[dict[int, str]]) -> list[RankWatchState]:
    """The watch after each sample, one second apart."""
    state, out = RankWatchState(), []
    for i, sample in enumerate(samples):
        state = advance_rank_watch(state, sample, float(i))
        out.append(state)
    return out


def alive(sample: dict[int, str]) -> set[int]:
    return {r for r, s in sample.items() if s not in "ZX"}


class TestAdvanceRankWatch:
    """advance_rank_watch: stops, the first exit, the ranks stopped at it."""

    def test_repr(self):
        """The record prints its fields."""
        assert repr(RankWatchState()) == (
            "RankWatchState(seen=frozenset(), stopped_since=(), exited=False, "
            "stopped_at_exit=(), killed=())"
        )

    @given(SAMPLES)
    def test_stopped_since(self, samples):
        """A rank is listed while stopped, since the first sample of its current stop."""
        for i, state in enumerate(replay(samples)):
            stopped = {r for r, s in samples[i].items() if s == "T"}
            assert [r for r, _ in state.stopped_since] == sorted(stopped)
            for rank, since in state.stopped_since:
                start = i
                while start > 0 and samples[start - 1].get(rank) == "T":
                    start -= 1
                assert since == float(start)

    @given(SAMPLES)
    def test_first_exit(self, samples):
        """The first exit is when a rank seen alive is missing; the stopped ranks then are kept."""
        states = replay(samples)
        seen: set[int] = set()
        first = None
        for i, sample in enumerate(samples):
            if seen - alive(sample):
                first = i
                break
            seen |= alive(sample)
        for i, state in enumerate(states):
            assert state.exited == (first is not None and i >= first)
            if first is not None and i >= first:
                before = {r for r, s in samples[first - 1].items() if s == "T"}
                assert state.stopped_at_exit == tuple(sorted(before))
            else:
                assert state.stopped_at_exit == ()

    @given(SAMPLES)
    def test_never_stopped_names_none(self, samples):
        """Without a rank stopped by a signal (``t`` is a debugger's), no rank is named."""
        samples = [{r: s for r, s in x.items() if s != "T"} for x in samples]
        for state in replay(samples):
            assert stopped_ranks(state) == ()
            assert overdue_ranks(state, 1e9, 1.0) == ()

    def test_survivor_ends_after_freeze(self):
        """Rank 1 frozen, rank 0 ends normally: rank 1 is named, and overdue at the limit."""
        state = RankWatchState()
        for now, sample in enumerate([{0: "S", 1: "S"}, {0: "S", 1: "T"}, {1: "T"}, {1: "T"}]):
            state = advance_rank_watch(state, sample, float(now))
        assert stopped_ranks(state) == (1,)
        assert overdue_ranks(state, 20.9, 20.0) == ()
        assert overdue_ranks(state, 21.0, 20.0) == (1,)


class TestOverdue:
    """overdue_ranks and mark_killed: a rank stopped too long is killed once."""

    @given(SAMPLES, st.floats(0.5, 20.0), st.floats(0.0, 50.0))
    def test_monotone(self, samples, limit, later):
        """A rank overdue now is overdue later, until it is marked killed; then never again."""
        if not samples:
            return
        state = replay(samples)[-1]
        now = float(len(samples))
        overdue = overdue_ranks(state, now, limit)
        assert set(overdue) <= set(overdue_ranks(state, now + later, limit))
        for rank, since in state.stopped_since:
            assert (rank in overdue) == (now - since >= limit)
        killed = mark_killed(state, overdue)
        assert overdue_ranks(killed, now + later, limit) == tuple(
            r for r in overdue_ranks(state, now + later, limit) if r not in overdue
        )
        assert set(overdue) <= set(stopped_ranks(killed))


class TestBlameFailure:
    """blame_failure: a stopped rank is named; otherwise the launcher's first failure stands."""

    @given(
        st.lists(st.tuples(st.integers(0, 3), st.integers(-15, 255)), max_size=4),
        st.lists(st.integers(0, 3), max_size=3),
    )
    def test_named(self, exits, stopped):
        """The lowest stopped rank, flagged; with none stopped, `first_failure` unchanged."""
        hosts = ["a", "b", "c", "d"]
        out = " ".join(f"Process {r} exit with status code {c}." for r, c in exits)
        first = first_failure(out, hosts)
        found = blame_failure(first, stopped, out, hosts)
        if not stopped:
            assert found == first
            return
        assert found is not None
        assert (found.rank, found.host, found.stopped) == (min(stopped), hosts[min(stopped)], True)
        statuses = dict(reversed(exits))
        assert found.status == statuses.get(min(stopped), -1)
        assert found.line().startswith(
            f"[horovod job failed: rank {found.rank} on host {found.host} stopped answering ("
        )

    def test_kill_line_unchanged(self):
        """A killed rank's line is the launcher's, as before."""
        out = "Process 1 exit with status code 137. Terminating remaining workers after failure of Process 1."
        found = blame_failure(first_failure(out, ["localhost"] * 2), [], out, ["localhost"] * 2)
        assert found == RankFailure(1, "localhost", 137)
        assert found.line() == (
            "[horovod job failed: rank 1 on host localhost ended first "
            "(exit status 137, killed by SIGKILL)]"
        )


class TestFrozenAfter:
    """launch_horovod_job's `frozen_after`: checked before anything starts."""

    @pytest.mark.parametrize("bad", [0.0, 5.0, 9.99, float("nan"), -1.0])
    def test_fail(self, bad, tmp_path):
        """Under 10 s (horovod's own stop of a rank lasts up to 5 s): refused, naming it."""
        with pytest.raises(ValueError, match=r"'frozen_after' must be >= 10 seconds .* got "):
            launch_horovod_job(["true"], 2, timeout=5, cwd=tmp_path, frozen_after=bad)
        assert list(tmp_path.iterdir()) == []


class TestParseProcStat:
    """parse_proc_stat: pid, state and parent from a /proc/PID/stat line."""

    @given(
        st.integers(1, 2**22),
        st.text(st.characters(exclude_characters="\n\0"), max_size=15),
        st.sampled_from("RSDTtZX"),
        st.integers(0, 2**22),
    )
    def test_round_trip(self, pid, comm, state, ppid):
        """Any command name, parentheses and spaces included."""
        assert parse_proc_stat(f"{pid} ({comm}) {state} {ppid} 1 1 0 -1 4194560\n") == (
            pid,
            state,
            ppid,
        )

    def test_fail(self):
        """Not a stat line: a ValueError naming what was expected."""
        with pytest.raises(ValueError, match=r"not a /proc/PID/stat line \(expected 'PID \(COMM\)"):
            parse_proc_stat("hello")


@pytest.mark.procs
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc (Linux)")
class TestLocalRankStates:
    """local_rank_states over real processes: each rank's own process and its state."""

    def test_stopped_rank(self):
        """Two rank processes under a shell; the one stopped by SIGSTOP reads ``T``."""
        sleeper = f"{sys.executable} -c 'import time, os; time.sleep(60)'"
        script = f"env HOROVOD_RANK=1 {sleeper} & env HOROVOD_RANK=0 {sleeper} & wait"
        root = subprocess.Popen(["sh", "-c", script], start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            found = local_rank_states(root.pid)
            while len(found) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
                found = local_rank_states(root.pid)
            assert sorted(found) == [0, 1], found
            assert all(state != "T" for _, state in found.values()), found
            os.kill(found[1][0], signal.SIGSTOP)
            deadline = time.monotonic() + 10
            while local_rank_states(root.pid)[1][1] != "T" and time.monotonic() < deadline:
                time.sleep(0.05)
            states = local_rank_states(root.pid)
            assert states[1] == (found[1][0], "T"), states
            assert states[0][1] != "T", states
        finally:
            os.killpg(root.pid, signal.SIGKILL)
            root.wait()

    def test_no_such_root(self):
        """A root with no descendants: no ranks."""
        assert local_rank_states(2**22 + 1) == {}
