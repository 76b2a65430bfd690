"""Hypothesis strategies shared by the callbacks tests."""

from hypothesis import strategies as st


@st.composite
def loop_params(draw, max_epochs=6, max_steps=6):
    """(starting_epoch, max_epoch, steps_per_epoch, start_global_step) of a small run."""
    starting = draw(st.integers(1, max_epochs))
    max_epoch = draw(st.integers(starting - 1, starting + max_epochs))
    steps = draw(st.integers(1, max_steps))
    start_gs = draw(st.integers(0, 50))
    return starting, max_epoch, steps, start_gs


@st.composite
def stat_series(draw, max_size=20):
    """(global_step, value) observations as a callback reads them: steps non-decreasing,
    the same step seen again when the statistic was not updated."""
    n = draw(st.integers(0, max_size))
    step = draw(st.integers(0, 5))
    out = []
    for _ in range(n):
        step += draw(st.sampled_from([0, 1, 3]))
        out.append((step, draw(st.floats(-10, 10, allow_nan=False))))
    return out


@st.composite
def every_k(draw):
    """Keyword arguments of a valid `EveryK` / `PeriodicTrigger`."""
    steps = draw(st.none() | st.integers(1, 7))
    epochs = draw(st.none() | st.integers(1, 4))
    before = draw(st.booleans())
    if steps is None and epochs is None:
        before = True
    return {"steps": steps, "epochs": epochs, "before_train": before}


def triggers(max_leaves=6):
    """Trigger records, combinations included."""
    from towerkit.callbacks import (
        AtLastStep,
        EpochMultiple,
        EveryK,
        GlobalStepMultiple,
        OnKinds,
        all_of,
        any_of,
        negate,
    )

    leaves = st.one_of(
        every_k().map(lambda kw: EveryK(**kw)),
        st.integers(1, 7).map(GlobalStepMultiple),
        st.integers(1, 4).map(EpochMultiple),
        st.just(AtLastStep()),
        st.sets(
            st.sampled_from(["before_train", "trigger_step", "trigger_epoch", "before_run"]),
            min_size=1,
        ).map(OnKinds),
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=3).map(lambda ts: any_of(*ts)),
            st.lists(children, max_size=3).map(lambda ts: all_of(*ts)),
            children.map(negate),
        ),
        max_leaves=max_leaves,
    )


# -- reference loops: the documented rules as plain nested loops ------------------------


def reference_every_k(starting, max_epoch, steps, start_gs, k_steps, k_epochs, before):
    """Where tensorpack's PeriodicTrigger documentation says `trigger()` runs, as
    (kind, epoch, global_step), from a plain nested loop."""
    out = []
    if before:
        out.append(("before_train", starting - 1, start_gs))
    gs = start_gs
    for epoch in range(starting, max_epoch + 1):
        for _ in range(steps):
            gs += 1
            if k_steps is not None and gs % k_steps == 0:
                out.append(("trigger_step", epoch, gs))
        if k_epochs is not None and epoch % k_epochs == 0:
            out.append(("trigger_epoch", epoch, gs))
    return out


def reference_periodic(starting, max_epoch, steps, start_gs, k_steps, k_epochs):
    """Where PeriodicCallback enables `trigger_epoch` and `trigger_step`, from a plain loop."""

    def on(epoch, local, gs):
        return (
            (k_steps is not None and gs % k_steps == 0)
            or (k_epochs is not None and epoch % k_epochs == 0)
            or (k_epochs is not None and epoch == max_epoch and local == steps - 1)
        )

    out = []
    gs = start_gs
    for epoch in range(starting, max_epoch + 1):
        for local in range(steps):
            gs += 1
            if on(epoch, local, gs):
                out.append(("trigger_step", epoch, gs))
        if on(epoch, steps - 1, gs):
            out.append(("trigger_epoch", epoch, gs))
    return out


@st.composite
def schedule_points(draw, max_size=6, max_point=20):
    """Strictly increasing (point, value) pairs."""
    xs = sorted(draw(st.sets(st.integers(0, max_point), min_size=1, max_size=max_size)))
    return [(x, draw(st.floats(-10, 10, allow_nan=False, width=32))) for x in xs]


def reference_value_at(points, interp, point):
    """The documented schedule rule as a linear scan (tensorpack's wording, our code)."""
    for i, (p, v) in enumerate(points):
        if p == point:
            return v
        if p > point:
            if i == 0 or interp is None:
                return None
            p0, v0 = points[i - 1]
            return v0 + (v - v0) * (point - p0) / (p - p0)
    return None


def reference_in_effect(points, interp, point):
    """The value a run resumed at `point` should hold: scan for the last point at or before."""
    if point < points[0][0]:
        return None
    exact = reference_value_at(points, interp, point)
    if exact is not None:
        return exact
    return [v for p, v in points if p <= point][-1]
