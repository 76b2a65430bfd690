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
