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
