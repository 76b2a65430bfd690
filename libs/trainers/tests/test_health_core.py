"""A task's health as the watch sees it: the pure transition over any sequence of events."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers.parallel._health_core import (
    Health,
    Reach,
    TaskHealth,
    advance_health,
    lost_reason,
    start_health,
)

HEARD = "heard"
"""An event that is word of the task alive (a check-in), not a probe."""

kinds = st.sampled_from([Reach.ANSWERS, Reach.ACCEPTS, Reach.NOTHING, None, HEARD])
gaps = st.floats(0.0, 30.0, allow_nan=False)
bounds = st.floats(0.5, 100.0, allow_nan=False)
events = st.lists(st.tuples(gaps, kinds), max_size=40)


def fold(health: TaskHealth, kind, now: float, dead_after: float, start_within: float):
    reach = None if kind == HEARD else kind
    return advance_health(
        health, reach, now, dead_after=dead_after, start_within=start_within, heard=kind == HEARD
    )


def run(history, dead_after, start_within, *, alive=False):
    """Every health along `history` (gaps and kinds from time 0), with its time."""
    health, now, out = start_health(0.0, alive=alive), 0.0, []
    for gap, kind in history:
        now += gap
        health = fold(health, kind, now, dead_after, start_within)
        out.append((now, kind, health))
    return out


def within_bounds(health: TaskHealth, now: float, dead_after: float, start_within: float) -> bool:
    """The bound of each state, written out (independently of `lost_reason`)."""
    if health.alive_at is not None:
        alive = health.alive_at
        if not health.answered:  # known alive by word only: accepting counts
            alive = max(alive, health.accepted_at or alive)
        return now - alive <= dead_after
    if health.accepted_at is not None:
        return now - health.accepted_at <= dead_after and now - health.since <= start_within
    return now - health.since <= start_within


class TestTaskHealth:
    """The record."""

    def test_repr(self):
        """The repr shows the state and its times."""
        assert repr(start_health(1.0, alive=True)) == (
            "TaskHealth(status=<Health.ANSWERING: 'answering'>, since=1.0, alive_at=1.0, "
            "answered=False, accepted_at=1.0, reason='')"
        )

    def test_fail(self):
        """A status that is not a Health is refused."""
        with pytest.raises(TypeError, match="'status' must be <enum 'Health'>"):
            TaskHealth(status="lost", since=0.0)

    @given(st.floats(0, 1e6, allow_nan=False), st.booleans())
    def test_start(self, now, alive):
        """A task starts never seen, or answering when known alive (both times now)."""
        health = start_health(now, alive=alive)
        assert health.since == now
        if alive:
            assert health.status is Health.ANSWERING
            assert health.alive_at == health.accepted_at == now
        else:
            assert health.status is Health.NEVER_SEEN
            assert health.alive_at is health.accepted_at is None
        assert attrs.evolve(health) == health


class TestAdvanceHealth:
    """The transition, over any sequence of probe results, words and ticks."""

    @given(events, bounds, bounds, st.booleans())
    def test_never_past_its_bound_unnoticed(self, history, dead_after, start_within, alive):
        """After every event, a task not lost is within its state's bound; lost, it was
        past it at the event that lost it, and the reason says which bound."""
        before = start_health(0.0, alive=alive)
        for now, _, health in run(history, dead_after, start_within, alive=alive):
            if health.status is Health.LOST:
                if before.status is not Health.LOST:
                    unlost = attrs.evolve(health, status=before.status, reason="")
                    assert not within_bounds(unlost, now, dead_after, start_within)
                    assert lost_reason(unlost, now, dead_after, start_within)
                    assert health.reason.startswith(
                        ("unreachable for", "accepts no connection", "accepts connections but")
                        if unlost.accepted_at is not None
                        else ("never came up within",)
                    )
            else:
                assert within_bounds(health, now, dead_after, start_within)
                assert health.reason == ""
            before = health

    @given(events, bounds, bounds, st.booleans())
    def test_lost_is_final(self, history, dead_after, start_within, alive):
        """Once lost, no event changes the health: a port that answers again (the task
        restarted, or another server took its port) does not bring it back."""
        lost = None
        for now, kind, health in run(history, dead_after, start_within, alive=alive):
            if lost is not None:
                assert health == lost
                assert fold(lost, kind, now, dead_after, start_within) == lost
            elif health.status is Health.LOST:
                lost = health

    @given(events, bounds, bounds)
    def test_status_follows_the_last_event(self, history, dead_after, start_within):
        """Not lost, the status is what the last probe found (a word counts as an answer);
        a tick keeps it; nothing found is silence once seen, else never seen."""
        seen = False
        status = Health.NEVER_SEEN
        for _, kind, health in run(history, dead_after, start_within):
            if kind in (Reach.ANSWERS, HEARD):
                status, seen = Health.ANSWERING, True
            elif kind is Reach.ACCEPTS:
                status, seen = Health.ACCEPTING, True
            elif kind is Reach.NOTHING:
                status = Health.SILENT if seen else Health.NEVER_SEEN
            if health.status is Health.LOST:
                break
            assert health.status is status

    @given(events, bounds, bounds, st.booleans())
    def test_times_move_forward(self, history, dead_after, start_within, alive):
        """The last-alive and last-accepted times only move forward; alive implies accepted."""
        last = start_health(0.0, alive=alive)
        for _, _, health in run(history, dead_after, start_within, alive=alive):
            if last.alive_at is not None:
                assert health.alive_at is not None
                assert health.alive_at >= last.alive_at
            if last.accepted_at is not None:
                assert health.accepted_at is not None
                assert health.accepted_at >= last.accepted_at
            if health.alive_at is not None:
                assert health.accepted_at is not None
                assert health.accepted_at >= health.alive_at
            last = health

    @given(st.lists(st.tuples(gaps, st.sampled_from([Reach.NOTHING, None])), max_size=30), bounds)
    def test_never_seen(self, history, start_within):
        """A task no probe reaches is lost at the first event past start_within."""
        for now, _, health in run(history, 5.0, start_within):
            assert (health.status is Health.LOST) == (now > start_within)
            if health.status is Health.LOST:
                assert health.reason == f"never came up within {start_within:g} s"
                break

    @given(
        st.lists(st.tuples(gaps, st.sampled_from([Reach.ACCEPTS, Reach.NOTHING, None]))),
        bounds,
    )
    def test_answered_then_only_accepting(self, history, dead_after):
        """A task that answered a probe and then answers nothing more is lost past
        dead_after, whatever accepts its connections (a stopped process, a reused port)."""
        probed = None
        history = [(0.0, Reach.ANSWERS), *history]
        for now, kind, health in run(history, dead_after, 1e9):
            probed = probed if kind is None else kind
            assert (health.status is Health.LOST) == (now > dead_after)
            if health.status is Health.LOST:
                assert health.reason.startswith(f"unreachable for {now:.0f} s")
                last = {Reach.NOTHING: "(no connection)", Reach.ACCEPTS: "answers nothing)"}
                assert health.reason.endswith(last.get(probed, " s"))
                break

    @given(gaps, gaps, bounds)
    def test_heard_from_a_task_never_probed(self, heard_at, later, dead_after):
        """Word that a task never reached by a probe is alive bounds it by dead_after from then."""
        health = fold(start_health(0.0), HEARD, heard_at, dead_after, 1e9)
        assert health.status is Health.ANSWERING
        now = heard_at + later
        health = fold(health, Reach.NOTHING, now, dead_after, 1e9)
        assert (health.status is Health.LOST) == (now - heard_at > dead_after)

    @given(st.lists(st.tuples(gaps, st.sampled_from([Reach.ACCEPTS, None]))), bounds)
    def test_known_alive_by_word_and_accepting(self, history, dead_after):
        """A task known alive by word whose probes were never answered in time (a live
        server on a loaded machine) lives while it accepts: lost only dead_after past the
        last connection it accepted."""
        accepted = 0.0
        for now, kind, health in run(history, dead_after, 1e9, alive=True):
            accepted = now if kind is Reach.ACCEPTS else accepted
            assert (health.status is Health.LOST) == (now - accepted > dead_after)
            if health.status is Health.LOST:
                break
