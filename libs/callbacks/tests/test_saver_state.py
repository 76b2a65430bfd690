"""ModelSaver's tracking as one frozen record advanced by a pure function over `plan_pruning`."""

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import EPOCH_ENDS_KEPT, plan_pruning
from towerkit.callbacks._pruning import SaverState, after_save, start_saver_state


@st.composite
def saver_runs(draw):
    """A run's start (inherited checkpoints, start step, steps per epoch) and its saves."""
    spe = draw(st.integers(1, 4))
    start = draw(st.integers(0, 12))
    inherited = {
        s: float(draw(st.integers(0, 50))) for s in draw(st.sets(st.integers(0, start), max_size=5))
    }
    saves, step, clock = [], start, 100.0
    for _ in range(draw(st.integers(1, 12))):
        step += draw(st.integers(0, 3))  # 0: the same step saved again (after_train's save)
        clock += draw(st.sampled_from([0.0, 1.0, 30.0]))
        saves.append((step, clock, draw(st.booleans())))
    return {
        "inherited": inherited,
        "start": start,
        "spe": spe,
        "saves": saves,
        "max_to_keep": draw(st.integers(0, 4)),
        "preserve_every_s": draw(st.sampled_from([10.0, 1e9])),
        "next_preserve_time": draw(st.sampled_from([0.0, 110.0, 1e12])),
    }


def reference(run):
    """The saver's former procedure: three mutable fields kept in step by hand."""
    saved = dict(run["inherited"])
    own: list[int] = []
    ends = {s for s in saved if (s - run["start"]) % run["spe"] == 0}
    nxt = run["next_preserve_time"]
    out = []
    for step, written, at_end in run["saves"]:
        saved[step] = written
        if step in own:
            own.remove(step)
        own.append(step)
        (ends.add if at_end else ends.discard)(step)
        plan = plan_pruning(
            list(saved.items()),
            max_to_keep=run["max_to_keep"],
            epoch_ends=ends,
            preserve_every_s=run["preserve_every_s"],
            next_preserve_time=nxt,
            own=own,
        )
        nxt = plan.next_preserve_time
        for gone in (*plan.delete, *plan.preserve):
            del saved[gone]
            ends.discard(gone)
            if gone in own:
                own.remove(gone)
        out.append((plan, dict(saved), tuple(own), frozenset(ends), nxt))
    return out


def fold(run):
    """(state before, step, plan, state after) for each save, through `after_save`."""
    state = start_saver_state(
        run["inherited"],
        start_step=run["start"],
        steps_per_epoch=run["spe"],
        next_preserve_time=run["next_preserve_time"],
    )
    out = []
    for step, written, at_end in run["saves"]:
        new, plan = after_save(
            state,
            step,
            written,
            at_epoch_end=at_end,
            max_to_keep=run["max_to_keep"],
            preserve_every_s=run["preserve_every_s"],
        )
        out.append((state, step, at_end, plan, new))
        state = new
    return out


@given(saver_runs())
def test_same_as_the_three_fields(run):
    """Each save's plan and tracking equal those of the former mutable procedure."""
    for (_, _, _, plan, new), (ref_plan, saved, own, ends, nxt) in zip(
        fold(run), reference(run), strict=True
    ):
        assert plan == ref_plan
        assert (new.written, new.own, new.epoch_ends, new.next_preserve_time) == (
            saved,
            own,
            ends,
            nxt,
        )


@given(saver_runs())
def test_invariants(run):
    """The newest epoch ends and the newest max_to_keep are never pruned, the step just saved
    is kept, inherited checkpoints go before any of this run's, and nothing tracked is lost."""
    inherited = set(run["inherited"])
    for before, step, at_end, plan, new in fold(run):
        own = (*(s for s in before.own if s != step), step)
        tracked = set(before.written) | {step}
        assert set(plan.keep) | set(plan.delete) | set(plan.preserve) == tracked
        assert not set(plan.keep) & set(plan.delete + plan.preserve)
        assert set(new.written) == set(plan.keep)
        assert step in plan.keep
        assert new.own[-1] == step
        assert set(new.own) <= set(new.written)
        assert new.epoch_ends <= set(new.written)
        # newest first is this run's in save order, then the inherited by step
        ranked = [s for s in sorted(tracked) if s not in own] + list(own)
        ends = (before.epoch_ends - {step}) | ({step} if at_end else set())
        newest_ends = set([s for s in ranked if s in ends][-EPOCH_ENDS_KEPT:])
        assert newest_ends <= set(plan.keep)
        k = run["max_to_keep"]
        if k:
            assert set(ranked[-k:]) <= set(plan.keep)
            assert len(plan.keep) <= k + EPOCH_ENDS_KEPT
        else:
            assert plan.delete == plan.preserve == ()
        if set(plan.delete + plan.preserve) & set(own):
            assert set(plan.keep) & inherited <= newest_ends


def test_record():
    """The record is frozen, keeps steps by step and converts its fields."""
    state = SaverState(saved=[(5, 2), (3, 1)], own=[5], epoch_ends=[5], next_preserve_time=7)
    assert state.saved == ((3, 1.0), (5, 2.0))
    assert state.epoch_ends == frozenset({5})
    assert state.next_preserve_time == 7.0
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        state.own = ()  # type: ignore[misc]
