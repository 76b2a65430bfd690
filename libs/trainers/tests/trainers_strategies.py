"""Hypothesis strategies shared by the trainers tests."""

from hypothesis import strategies as st


@st.composite
def loop_runs(draw, max_epochs=3, max_steps=3):
    """(starting_epoch, max_epoch, steps_per_epoch, restored global step) of a small run."""
    starting = draw(st.integers(1, 3))
    max_epoch = draw(st.integers(starting - 1, starting + max_epochs - 1))
    steps = draw(st.integers(1, max_steps))
    start_gs = draw(st.integers(0, 20))
    return starting, max_epoch, steps, start_gs


@st.composite
def crashed_runs(draw):
    """A run killed somewhere, as what it left on disk.

    The run has ``steps_per_epoch`` steps per epoch from epoch 1; a saver writes a
    checkpoint every ``save_every`` epochs and keeps the newest ``keep``; at the end of
    each epoch the saver and the statistics writer run in either order; the process
    dies at a random global step, possibly between those two writes.

    Returns:
        dict with ``steps_per_epoch``, ``checkpoints`` ((path, step) pairs) and ``epochs``
        ((epoch_num, global_step) records), plus ``killed_at`` (global step).
    """
    spe = draw(st.integers(1, 5))
    save_every = draw(st.integers(1, 3))
    keep = draw(st.integers(1, 4))
    stats_first = draw(st.booleans())
    n_epochs = draw(st.integers(0, 6))
    # 0: died mid-epoch after the last completed epoch; 1: between the two writes
    between = draw(st.booleans()) and n_epochs > 0
    checkpoints, epochs = [], []
    for epoch in range(1, n_epochs + 1):
        step = epoch * spe
        writes = []
        if epoch % save_every == 0:
            writes.append("ckpt")
        writes.insert(0 if stats_first else len(writes), "stats")
        last = epoch == n_epochs
        for i, w in enumerate(writes):
            if last and between and i == len(writes) - 1:
                break
            if w == "ckpt":
                checkpoints.append((f"d/model-{step}", step))
                checkpoints = checkpoints[-keep:]
            else:
                epochs.append((epoch, step))
    mid = draw(st.integers(0, spe - 1))
    return {
        "steps_per_epoch": spe,
        "checkpoints": checkpoints,
        "epochs": epochs,
        "killed_at": n_epochs * spe + mid,
    }


@st.composite
def saved_runs(draw):
    """A run saved by `ModelSaver` on any schedule and killed anywhere, as it left the disk.

    ``steps_per_epoch`` steps per epoch from epoch 1; a `ModelSaver` with ``max_to_keep``
    is triggered every ``every`` steps (its pruning is the real `plan_pruning`), or at
    epoch ends only; a `JSONWriter` records each epoch after the saver's epoch-end
    save; the process dies after a random number of writes.

    Returns:
        dict with ``steps_per_epoch``, ``checkpoints``, ``epochs``, ``killed_at`` (the
        global step) and ``last_recorded`` (the last epoch recorded, 0 for none).
    """
    from towerkit.callbacks import plan_pruning

    spe = draw(st.integers(1, 5))
    every = draw(st.one_of(st.none(), st.integers(1, 7)))
    keep = draw(st.integers(1, 4))
    n_steps = draw(st.integers(0, 6 * spe))
    events = []  # ("ckpt", step) or ("stats", epoch, step)
    for step in range(1, n_steps + 1):
        epoch_end = step % spe == 0
        if (every is not None and step % every == 0) or (every is None and epoch_end):
            events.append(("ckpt", step))
        if epoch_end:
            events.append(("stats", step // spe, step))
    cut = draw(st.integers(0, len(events)))
    saved: dict[int, float] = {}
    epochs = []
    for event in events[:cut]:
        if event[0] == "ckpt":
            saved[event[1]] = float(event[1])
            plan = plan_pruning(
                list(saved.items()),
                max_to_keep=keep,
                epoch_ends={s for s in saved if s % spe == 0},
                preserve_every_s=1e9,
                next_preserve_time=1e9,
            )
            saved = {s: t for s, t in saved.items() if s in plan.keep}
        else:
            epochs.append((event[1], event[2]))
    last_step = max([0] + [e[-1] for e in events[:cut]])
    return {
        "steps_per_epoch": spe,
        "checkpoints": [(f"d/model-{s}", s) for s in sorted(saved)],
        "epochs": epochs,
        "killed_at": last_step,
        "last_recorded": epochs[-1][0] if epochs else 0,
        "epoch_ends_saved": every is None or spe % every == 0,
    }
