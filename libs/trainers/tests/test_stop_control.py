"""The stop control: `StopState` and its transitions (pure), and the `StopControl` shell."""

from __future__ import annotations

import itertools
import os
import signal
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers import PreemptionPolicy, loop_outcome
from towerkit.trainers._interrupt import StopControl, deferred_sigint
from towerkit.trainers._stop import (
    StopEvent,
    StopState,
    join_stop_states,
    next_stop_state,
    stop_outcome,
)

EVENTS = st.lists(st.sampled_from(list(StopEvent)), max_size=12)
STATES = st.builds(
    StopState,
    coordinated=st.booleans(),
    sigints=st.integers(0, 4),
    signalled=st.booleans(),
    preempted=st.booleans(),
    requested=st.booleans(),
    aborted=st.booleans(),
    raised=st.booleans(),
    callback_stop=st.booleans(),
)
FLAGS = ("signalled", "preempted", "requested", "aborted", "raised", "callback_stop")


def run(events, coordinated=False):
    """The states along `events`, from a fresh state."""
    states = [StopState(coordinated=coordinated)]
    for event in events:
        states.append(next_stop_state(states[-1], event))
    return states


class TestStopState:
    """`StopState` and `next_stop_state`: any sequence of events."""

    def test_repr(self):
        """The repr names every field."""
        assert repr(StopState()) == (
            "StopState(coordinated=False, sigints=0, signalled=False, preempted=False, "
            "requested=False, aborted=False, raised=False, callback_stop=False)"
        )

    def test_fail(self):
        """An event that is not a `StopEvent` is refused, named."""
        with pytest.raises(TypeError, match="'event' must be a StopEvent; got 'sigint'"):
            next_stop_state(StopState(), "sigint")

    @given(EVENTS, st.booleans())
    def test_invariants(self, events, coordinated):
        """After any events: preempted asks to stop, an abort follows two SIGINTs, raised follows
        an abort, a stop is asked exactly after a SIGINT or a preemption, and alone a process
        agrees with itself."""
        for s in run(events, coordinated):
            assert not s.preempted or s.requested
            assert not s.aborted or (s.sigints >= 2 and s.requested)
            assert not s.raised or s.aborted
            assert s.requested == (s.sigints >= 1 or s.preempted)
            assert s.coordinated or not s.signalled or s.preempted
            assert s.coordinated == coordinated

    @given(EVENTS, st.booleans())
    def test_flags_stay_set(self, events, coordinated):
        """No transition clears a flag or lowers the count of SIGINTs."""
        states = run(events, coordinated)
        for before, after in itertools.pairwise(states):
            assert after.sigints >= before.sigints
            assert all(getattr(after, f) >= getattr(before, f) for f in FLAGS)

    @given(EVENTS, st.booleans())
    def test_counts(self, events, coordinated):
        """The SIGINTs are counted; a preemption is agreed on alone or by an `AGREED` event."""
        end = run(events, coordinated)[-1]
        assert end.sigints == events.count(StopEvent.SIGINT)
        assert end.signalled == (StopEvent.PREEMPT_SIGNAL in events)
        agreed = StopEvent.AGREED in events or (not coordinated and end.signalled)
        assert end.preempted == agreed
        assert end.callback_stop == (StopEvent.STOP_TRAINING in events)

    @given(EVENTS, st.booleans())
    def test_a_stop_wins_over_a_pending_preemption(self, events, coordinated):
        """`stop_outcome` is `loop_outcome` over the state: a callback's stop is never a
        preemption, Ctrl-C (no preemption agreed) is an interruption."""
        for s in run(events, coordinated):
            got = stop_outcome(s)
            assert got == loop_outcome(
                callback_stop=s.callback_stop, preempted=s.preempted, ctrl_c=s.ctrl_c
            )
            if s.callback_stop:
                assert got != "preempted"
            assert (got == "interrupted") == (s.sigints > 0 and not s.preempted)


class TestJoin:
    """`join_stop_states`: two updates from one state add up."""

    @given(STATES, STATES)
    def test_commutative_and_idempotent(self, a, b):
        """Order does not matter, and joining a state with itself gives it back."""
        assert join_stop_states(a, b) == join_stop_states(b, a)
        assert join_stop_states(a, a) == a

    @given(STATES, st.sampled_from(list(StopEvent)), st.sampled_from(list(StopEvent)))
    def test_keeps_an_update_made_in_between(self, start, first, second):
        """An event applied while another's result waits to be stored is kept in the join."""
        late = next_stop_state(start, first)  # computed, not yet stored
        between = next_stop_state(start, second)  # stored meanwhile (a signal handler)
        joined = join_stop_states(between, late)
        for f in FLAGS:
            assert getattr(joined, f) >= getattr(between, f)
            assert getattr(joined, f) >= getattr(late, f)


class TestStopControl:
    """`StopControl`: the shell applies events and mirrors the flags the loop polls."""

    def test_take_mirrors_the_record(self):
        """After each event the plain attributes are the record's."""
        control = StopControl(coordinated=True)
        assert control.take(StopEvent.PREEMPT_SIGNAL) == StopState(coordinated=True)
        assert (control.signalled, control.preempted, control.requested) == (True, False, False)
        control.agree()
        assert (control.preempted, control.requested) == (True, True)
        control.take(StopEvent.SIGINT)
        assert control.signals == control.state.sigints == 1
        assert control.state == StopState(
            coordinated=True, sigints=1, signalled=True, preempted=True, requested=True
        )

    def test_threads_lose_no_event(self):
        """Events taken from several threads at once are all counted."""
        control = StopControl()

        def sigints():
            for _ in range(200):
                control.take(StopEvent.SIGINT)

        threads = [threading.Thread(target=sigints) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert control.signals == 800
        assert control.aborted

    def test_a_real_signal(self):
        """A real SIGUSR1 reaches the control of `deferred_sigint` as a preemption event."""
        policy = PreemptionPolicy(signals=["SIGUSR1"], grace_s=600)
        with deferred_sigint(policy) as control:
            os.kill(os.getpid(), signal.SIGUSR1)
            arrived = threading.Event()
            for _ in range(3000):  # the main thread's handler takes it at its next bytecode
                if control.signalled:
                    break
                arrived.wait(0.01)
            assert control.state == StopState(signalled=True, preempted=True, requested=True)
            assert stop_outcome(control.state) == "preempted"
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
