"""The loop's accounting with several steps per session call (``steps_per_execution``)."""

import pytest
from callbacks_strategies import every_k, loop_params, triggers
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
    Callback,
    Callbacks,
    EventKind,
    EveryK,
    GlobalStepMultiple,
    MergeAllSummaries,
    PeriodicCallback,
    PeriodicTrigger,
    ProgressBar,
    any_of,
    execution_ends,
    execution_faults,
    fires,
    loop_events,
    negate,
)
from towerkit.callbacks.plumbing import check_steps_per_execution, coarse_step_faults


@st.composite
def loop_with_k(draw):
    """Loop parameters and a K that divides their steps per epoch."""
    starting, max_epoch, steps, start = draw(loop_params(max_steps=12))
    k = draw(st.sampled_from([d for d in range(1, steps + 1) if steps % d == 0]))
    return starting, max_epoch, steps, start * k, k


def reference_k(starting, max_epoch, steps, start_gs, runs, k):
    """The loop with K steps per call written as plain nested loops."""
    out = [("before_train", starting - 1, -1, start_gs)]
    gs, local, epoch = start_gs, -1, starting - 1
    for epoch in range(starting, max_epoch + 1):
        out.append(("before_epoch", epoch, -1, gs))
        local = -1
        for _ in range(steps // k):
            local += k
            for _ in range(runs):
                out.append(("before_run", epoch, local, gs))
                gs += k
                out.append(("after_run", epoch, local, gs))
            out.append(("trigger_step", epoch, local, gs))
        out.append(("after_epoch", epoch, local, gs))
        out.append(("trigger_epoch", epoch, local, gs))
    out.append(("after_train", epoch, local, gs))
    return out


def as_tuples(events):
    return [(e.kind.value, e.epoch_num, e.local_step, e.global_step) for e in events]


class TestLoopEventsWithK:
    """`loop_events(..., steps_per_execution=K)` models K steps per call."""

    @given(loop_with_k(), st.integers(0, 2))
    def test_matches_reference(self, params, runs):
        """The stream equals a plain nested loop of calls of K steps."""
        starting, max_epoch, steps, start, k = params
        got = loop_events(
            starting,
            max_epoch,
            steps,
            start_global_step=start,
            runs_per_step=runs,
            steps_per_execution=k,
        )
        assert as_tuples(got) == reference_k(starting, max_epoch, steps, start, runs, k)

    @given(loop_with_k())
    def test_epoch_events_do_not_depend_on_k(self, params):
        """Epoch events (and the positions they show) are those of K=1."""
        starting, max_epoch, steps, start, k = params
        epoch_kinds = {EventKind.BEFORE_EPOCH, EventKind.AFTER_EPOCH, EventKind.TRIGGER_EPOCH}
        kw = {"start_global_step": start, "kinds": epoch_kinds}
        one = list(loop_events(starting, max_epoch, steps, **kw))
        many = list(loop_events(starting, max_epoch, steps, steps_per_execution=k, **kw))
        assert [(e.kind, e.epoch_num, e.global_step) for e in one] == [
            (e.kind, e.epoch_num, e.global_step) for e in many
        ]

    @given(loop_with_k())
    def test_step_events_are_the_call_ends(self, params):
        """The K-stream's trigger_step events are K=1's at every K-th step."""
        starting, max_epoch, steps, start, k = params
        one = [
            e
            for e in loop_events(starting, max_epoch, steps, start_global_step=start)
            if e.kind is EventKind.TRIGGER_STEP
        ]
        many = [
            e
            for e in loop_events(
                starting, max_epoch, steps, start_global_step=start, steps_per_execution=k
            )
            if e.kind is EventKind.TRIGGER_STEP
        ]
        assert many == [e for e in one if e.local_step % k == k - 1]
        assert [e.local_step for e in many[: steps // k]] == list(execution_ends(steps, k))[
            : len(many)
        ]

    def test_k_must_divide(self):
        """A K that does not divide steps_per_epoch is refused, naming both."""
        with pytest.raises(
            ValueError, match=r"'steps_per_execution' 4 must divide 'steps_per_epoch' 6"
        ):
            list(loop_events(1, 1, 6, steps_per_execution=4))


class TestExecutionFaults:
    """`execution_faults` and `check_steps_per_execution`."""

    @given(st.integers(1, 300), st.integers(1, 300))
    def test_divides(self, steps, k):
        """No fault exactly when K divides steps_per_epoch; the message names both."""
        faults = execution_faults(steps, k)
        assert (faults == []) == (steps % k == 0)
        if faults:
            assert f"'steps_per_execution' {k} must divide 'steps_per_epoch' {steps}" in faults[0]

    @given(st.integers(2, 300), st.integers(1, 300))
    def test_divisors_named_are_divisors(self, steps, k):
        """The divisors suggested divide steps_per_epoch."""
        for fault in execution_faults(steps, k):
            near = fault.split("divisors near")[1].split(":")[1]
            assert all(steps % int(d) == 0 for d in near.split(","))

    def test_fail(self):
        """Kinds and values."""
        with pytest.raises(TypeError, match=r"must be an int >= 1; got 2\.5"):
            check_steps_per_execution(10, 2.5)
        with pytest.raises(ValueError, match="must be an int >= 1; got -1"):
            check_steps_per_execution(10, -1)


class TestCoarseStepFaults:
    """`coarse_step_faults`: a trigger that needs a global step inside a call."""

    @given(every_k(), st.integers(1, 4), st.integers(1, 3), st.integers(0, 3))
    def test_no_fault_means_nothing_missed(self, params, k, epochs, start_calls):
        """Without faults, an EveryK fires at the same global steps with K steps per call as with one."""
        record = EveryK(**params)
        if coarse_step_faults(record, k):
            return
        steps = 2 * k

        def firings(kk):
            return [
                (e.kind, e.global_step)
                for e in loop_events(
                    1, epochs, steps, start_global_step=start_calls * k, steps_per_execution=kk
                )
                if e.kind is not EventKind.BEFORE_RUN
                and e.kind is not EventKind.AFTER_RUN
                and fires(record, e)
            ]

        assert firings(k) == firings(1)

    @given(triggers(), st.integers(2, 6))
    def test_total(self, trigger, k):
        """Any trigger tree gets a list of messages, each naming K."""
        assert all(f"steps_per_execution={k}" in f for f in coarse_step_faults(trigger, k))

    @given(st.integers(1, 50), st.integers(1, 10))
    def test_every_k_steps(self, period, k):
        """EveryK(steps=n) faults exactly when n is not a multiple of K."""
        assert bool(coarse_step_faults(EveryK(steps=period), k)) == (period % k != 0)
        assert bool(coarse_step_faults(GlobalStepMultiple(period), k)) == (period % k != 0)

    def test_trees(self):
        """Combinations are walked; epoch periods never fault."""
        tree = any_of(EveryK(epochs=1), negate(EveryK(steps=6)))
        assert coarse_step_faults(tree, 4) == [
            "a period of 6 global steps is not a multiple of steps_per_execution=4"
        ]
        assert coarse_step_faults(tree, 3) == []

    def test_fail(self):
        """Not a trigger."""
        with pytest.raises(TypeError, match="'trigger' must be a trigger record; got int"):
            coarse_step_faults(3, 2)


class _Step(Callback):
    def _trigger_step(self):
        pass


class _Coarse(_Step):
    accepts_coarse_steps = True


class TestCallbackFaults:
    """`Callback.coarse_steps_faults`: what a callback declares."""

    def test_plain_and_declared(self):
        """Per-step hooks fault unless declared; no hooks, no fault; K=1 never."""
        assert _Step().coarse_steps_faults(4)
        assert _Step().coarse_steps_faults(1) == []
        assert _Coarse().coarse_steps_faults(4) == []
        assert Callback().coarse_steps_faults(4) == []

    def test_wrappers_and_groups(self):
        """Wrappers check their period and the wrapped callback; a group all of them."""
        assert PeriodicTrigger(_Coarse(), every_k_steps=8).coarse_steps_faults(4) == []
        assert (
            "period of 6" in PeriodicTrigger(_Coarse(), every_k_steps=6).coarse_steps_faults(4)[0]
        )
        assert PeriodicTrigger(_Step(), every_k_epochs=1).coarse_steps_faults(4)
        assert (
            "period of 3" in PeriodicCallback(_Coarse(), every_k_steps=3).coarse_steps_faults(2)[0]
        )
        assert len(Callbacks([_Step(), _Coarse(), _Step()]).coarse_steps_faults(2)) == 2

    def test_progress_bar(self):
        """A bar counts K steps a call; the tensors it shows are inside the loop."""
        assert ProgressBar().coarse_steps_faults(8) == []
        assert "fetches" in ProgressBar(["cost"]).coarse_steps_faults(8)[0]

    def test_summaries(self):
        """MergeAllSummaries: a period multiple of K; never alone."""
        assert MergeAllSummaries().coarse_steps_faults(8) == []
        assert MergeAllSummaries(period=16).coarse_steps_faults(8) == []
        assert "period=12" in MergeAllSummaries(period=12).coarse_steps_faults(8)[0]
