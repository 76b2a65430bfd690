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
    if health.waiting_since is not None:  # a connection waits unanswered: a word counts
        words = (health.alive_at or 0.0, health.vouched_at or 0.0)
        if now - max(health.waiting_since, *words) > dead_after:
            return False
    if health.alive_at is not None:
        alive = health.alive_at
        if not health.answered and now - health.since <= start_within:
            alive = max(alive, health.accepted_at or alive)  # alive by word: accepting counts
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
            "answered=False, accepted_at=1.0, reason='', vouched_at=None, waiting_since=None)"
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
                        (
                            "unreachable for",
                            "accepts no connection",
                            "accepts connections but",
                            "accepted a connection",
                        )
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
        """A task known alive by word whose probes are accepted but not answered (a
        stopped process's kernel accepts) is lost once dead_after has passed since the
        first connection that waits unanswered, or since its word."""
        first = None
        for now, kind, health in run(history, dead_after, 1e9, alive=True):
            first = now if kind is Reach.ACCEPTS and first is None else first
            assert health.waiting_since == first
            assert (health.status is Health.LOST) == (now - (first or 0.0) > dead_after)
            if health.status is Health.LOST:
                break

    @given(events, bounds, bounds, st.booleans())
    def test_a_connection_waits_until_an_answer(self, history, dead_after, start_within, alive):
        """The waiting connection is the first accepted since the last answer; a word
        does not end its wait (only an answer does) but keeps the task alive dead_after
        more."""
        waiting = None
        for now, kind, health in run(history, dead_after, start_within, alive=alive):
            if health.status is Health.LOST:
                break
            if kind is Reach.ANSWERS:
                waiting = None
            elif kind is Reach.ACCEPTS and waiting is None:
                waiting = now
            assert health.waiting_since == waiting
            if waiting is not None:
                assert now - max(waiting, health.alive_at or waiting) <= dead_after

    @given(gaps, st.floats(0.1, 5.0), bounds)
    def test_a_late_answer_keeps_it_alive(self, first, period, dead_after):
        """A live server on a loaded machine answers each probe's connection late (after
        the probe gave up, at the next one): it is never lost, however long it runs."""
        health = fold(start_health(0.0, alive=True), HEARD, first, dead_after, 1e9)
        now = first
        for _ in range(50):
            now += min(period, dead_after / 2)
            health = fold(health, Reach.ACCEPTS, now, dead_after, 1e9)  # not answered in time
            now += min(period, dead_after / 2)
            health = fold(health, Reach.ANSWERS, now, dead_after, 1e9)  # the kept one answers
            assert health.status is Health.ANSWERING
            assert health.waiting_since is None

    @given(
        st.sampled_from([True, False]),
        st.lists(st.tuples(gaps, st.sampled_from([Reach.ACCEPTS, None, HEARD])), max_size=40),
        bounds,
        bounds,
    )
    def test_accepting_forever_without_an_answer(self, alive, history, dead_after, start_within):
        """A task stopped before any probe of it was answered (its kernel accepts every
        connection, nothing answers) is lost within max(start_within, its last word +
        dead_after) of the watch's start, plus one tick: accepting alone never keeps it
        alive past start_within. A word (a check-in) keeps it alive dead_after more."""
        heard = 0.0 if alive else None
        history = [(g, k) for g, k in history if not (k == HEARD and not alive)]
        now, health = 0.0, start_health(0.0, alive=alive)
        for now, kind, health in run(history, dead_after, start_within, alive=alive):
            heard = now if kind == HEARD else heard
            if health.status is Health.LOST:
                assert now > start_within or now - (heard or 0.0) > dead_after
                break
            if heard is not None:
                assert now <= max(start_within, heard + dead_after)
            else:
                assert now <= start_within
        # ticks with accepts only go on: the task is lost once both bounds are past
        end = max(start_within, (heard or 0.0) + dead_after) + 1.0
        health = fold(health, Reach.ACCEPTS, max(end, now), dead_after, start_within)
        assert health.status is Health.LOST, health
        if heard is not None:
            assert health.reason.startswith(("unreachable for", "accepted a connection"))

    def test_accepting_after_start_within(self):
        """The reason says it accepts but never answered; a word still keeps it alive."""
        health = start_health(0.0, alive=True)
        health = fold(health, Reach.ACCEPTS, 10.0, 5.0, 20.0)
        health = fold(health, HEARD, 18.0, 5.0, 20.0)
        health = fold(health, Reach.ACCEPTS, 22.0, 5.0, 20.0)
        assert health.status is Health.ACCEPTING  # heard 4 s ago
        health = fold(health, Reach.ACCEPTS, 24.0, 5.0, 20.0)
        assert health.status is Health.LOST
        assert health.reason == (
            "unreachable for 6 s (it accepts connections but never answered a probe within 20 s)"
        )


VOUCHED = "vouched"
"""Word that the task was up (the job went past its start), not a probe."""

starting = st.lists(
    st.tuples(gaps, st.sampled_from([Reach.ACCEPTS, Reach.NOTHING, None])), max_size=30
)
"""Probes and ticks of a job still starting: nothing answers, no word."""


def fold_vouched(health, kind, now, dead_after, start_within):
    if kind == VOUCHED:
        return advance_health(
            health, None, now, dead_after=dead_after, start_within=start_within, vouched=True
        )
    return fold(health, kind, now, dead_after, start_within)


class TestVouched:
    """Word that a task never reached was up bounds it by dead_after, never earlier."""

    @given(starting, bounds, bounds)
    def test_never_lost_early_while_starting(self, history, dead_after, start_within):
        """With no word that the job went past its start, a task that never answered is
        not lost before start_within, unless it accepted a connection more than
        dead_after ago (that connection still waits for its answer)."""
        health, now, accepted = start_health(0.0), 0.0, None
        for gap, kind in history:
            now += gap
            health = fold(health, kind, now, dead_after, start_within)
            accepted = now if kind is Reach.ACCEPTS and accepted is None else accepted
            if health.status is Health.LOST:
                assert now > start_within or (accepted is not None and now - accepted > dead_after)
                break
            assert health.vouched_at is None

    def test_an_accept_before_the_word_does_not_shorten_the_bound(self):
        """Accepted at 0, word at 1, nothing at 2 with dead_after 1: quiet 1 s, not lost.

        The watch once measured the quiet from the accept before the word (2 s) and
        counted the task lost a second early.
        """
        health = fold_vouched(start_health(0.0), Reach.ACCEPTS, 0.0, 1.0, 2.0)
        health = fold_vouched(health, VOUCHED, 1.0, 1.0, 2.0)
        health = fold_vouched(health, Reach.NOTHING, 2.0, 1.0, 2.0)
        assert health.status is Health.SILENT
        health = fold_vouched(health, Reach.NOTHING, 2.5, 1.0, 2.0)
        assert health.status is Health.LOST
        assert health.reason.startswith("unreachable for 2 s after the job went past its start")

    @given(starting, gaps, starting, bounds, bounds)
    def test_lost_within_dead_after_of_the_word(
        self, before, vouch_gap, after, dead_after, start_within
    ):
        """Once vouched for, a task never known alive is lost exactly when it has
        accepted nothing for more than dead_after since the first word (or start_within
        passed, or a connection it accepted waited unanswered for dead_after since the
        word), never before; later words do not move the bound."""
        health, now = start_health(0.0), 0.0
        for gap, kind in before:
            now += gap
            health = fold_vouched(health, kind, now, dead_after, start_within)
        if health.status is Health.LOST:
            return
        now += vouch_gap
        health = fold_vouched(health, VOUCHED, now, dead_after, start_within)
        vouched_at = now
        quiet = max(vouched_at, health.accepted_at if health.accepted_at is not None else 0.0)
        for gap, kind in [(0.0, None), *[(g, k) for g, k in after], (dead_after + 1, VOUCHED)]:
            if health.status is Health.LOST:
                break
            now += gap
            health = fold_vouched(health, kind, now, dead_after, start_within)
            quiet = now if kind is Reach.ACCEPTS else quiet
            waited = health.waiting_since  # the first accepted connection, never answered
            past = now - quiet > dead_after or (
                waited is not None and now - max(waited, vouched_at) > dead_after
            )
            past = past or (health.accepted_at is not None and now - health.since > start_within)
            past = past or (now - health.since > start_within and health.accepted_at is None)
            assert (health.status is Health.LOST) == past
            if health.status is not Health.LOST:
                assert health.vouched_at == vouched_at
        assert health.status is Health.LOST or now - quiet <= dead_after
        if health.status is Health.LOST and now - quiet > dead_after:
            assert "after the job went past its start" in health.reason or "within" in (
                health.reason
            )
        if health.status is Health.LOST and health.reason.startswith("accepted a connection"):
            assert now - max(health.waiting_since, vouched_at) > dead_after

    @given(gaps, gaps, bounds)
    def test_answering_task_is_bound_as_before(self, answered_at, later, dead_after):
        """Word does not shorten the bound of a task known alive: dead_after from its
        last answer."""
        health = fold(start_health(0.0), Reach.ANSWERS, answered_at, dead_after, 1e9)
        health = fold_vouched(health, VOUCHED, answered_at, dead_after, 1e9)
        now = answered_at + later
        health = fold(health, Reach.NOTHING, now, dead_after, 1e9)
        assert (health.status is Health.LOST) == (now - answered_at > dead_after)

    def test_reason(self):
        """The reason names the bound."""
        health = advance_health(
            start_health(0.0), None, 3.0, dead_after=5, start_within=600, vouched=True
        )
        assert health.status is Health.NEVER_SEEN
        health = advance_health(health, Reach.NOTHING, 9.0, dead_after=5, start_within=600)
        assert health.reason == (
            "unreachable for 6 s after the job went past its start "
            "(it was up; this task never reached it)"
        )
