"""Layers: the suite's regression built with towerkit.layers, trained by every trainer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pytest

from towerkit.conformance._catalog import LAYERS
from towerkit.conformance._checks import check_no_error, require
from towerkit.conformance._layers_model import (
    INITIAL_STATISTICS,
    LAYER_SHAPES,
    LAYER_VARIABLES,
    STATISTICS,
    TRAINABLE,
    layers_sgd_step,
    moving_sequences,
)
from towerkit.conformance._model import first_batches, step_batches

if TYPE_CHECKING:
    from towerkit.conformance._entries import Capabilities, TrainerEntry
    from towerkit.conformance.plugin import _Runner

pytestmark = pytest.mark.conformance_group("layers")


def _model_name(name: str) -> str | None:
    return next((m for m in LAYER_VARIABLES if name == m or name.endswith("/" + m)), None)


def reference(
    entry: TrainerEntry, before: Mapping[str, Sequence[float]], steps: int
) -> dict[str, np.ndarray]:
    """The trainable variables after `steps` steps: every tower of every process on its batch."""
    caps = entry.capabilities
    params = {n: np.asarray(before[n], np.float64).reshape(LAYER_SHAPES[n]) for n in TRAINABLE}
    if not caps.trains:
        return params
    for step in range(steps):
        batches = step_batches(step, caps.num_towers, caps.processes)
        params = layers_sgd_step(params, batches, combine=caps.gradients)
    return params


def statistics(
    entry: TrainerEntry, before: Mapping[str, Sequence[float]], steps: int, rank: int
) -> list[dict[str, np.ndarray]]:
    """Every value the plain-named moving averages read by process `rank` may hold after `steps`.

    ``RunUpdateOps`` runs the main tower's update with every ``hooked_sess.run``
    (even when the trainer trains nothing). The towers of a process dequeue their
    batches of a step in no fixed order, so the main tower's batch of a step is any
    of them. With several processes, the plain-named copy may also hold rank 0's
    values (horovod broadcasts rank 0's variables after every epoch; a cluster's
    chief copies its own to the global copy), and in a cluster it lives on the
    parameter server, shared: every worker's updates land on it in some order, the
    other workers' possibly not all applied yet when this one reads it, and each
    computed from the value its worker read, which may be stale by the time it lands.
    """
    del before  # the statistics start from their initializers, read or not
    caps = entry.capabilities
    start = {n: np.full(LAYER_SHAPES[n], INITIAL_STATISTICS[n]) for n in STATISTICS}
    if caps.runs_per_step == 0:
        return [start]
    n = caps.num_towers

    def options(shard: int) -> list[list[np.ndarray]]:
        batches = first_batches(shard, steps * n)
        return [[batches[s * n + t][0] for t in range(n)] for s in range(steps)]

    out = list(moving_sequences(start, [options(rank)], 0))
    if caps.processes > 1 and rank != 0:
        out += list(moving_sequences(start, [options(0)], 0))
    if caps.launcher == "tf-distributed" and caps.processes > 1:
        # the parameter server's copy: any point of any interleaving (the chief may
        # not have copied its own yet, the other workers may be part-way); the
        # workers update it concurrently, each from the value it read, which another
        # worker's update may have changed before this one's lands
        queues = [options(shard) for shard in range(caps.processes)]
        out += list(moving_sequences(start, queues, None, stale_reads=True))
    return out


@pytest.mark.parametrize("steps", [1, 3], ids=["1-step", "3-steps"])
def test_layers_model_steps_equal_the_reference(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, steps: int
) -> None:
    """Spec 004 (TowerContext: is_training, is_main_training_tower; tensorpack's BatchNorm, FullyConnected, as towerkit.layers keeps them) and spec 000 (the data-parallel trainers): a model built with towerkit.layers has tensorpack's variable names in every trainer; each training tower's BatchNorm normalizes its own batch, so with plain SGD every copy of the trainable variables after each step equals the NumPy reference on the towers' batches; the main training tower of each process updates the moving averages once per step from its own batch."""
    caps = trainer_entry.capabilities
    if not caps.towers:
        pytest.skip(
            f"{trainer_entry.name} declares no tower function (capabilities.towers=False): "
            "the layers read training or inference from the tower context"
        )
    results = conformance_runner.run(LAYERS[steps])
    check_no_error(trainer_entry, results)
    start = results[0].variable_values("before_train")
    missing = [m for m in LAYER_VARIABLES if m not in start]
    require(
        not missing,
        f"{trainer_entry.name}: the layers model's variables {missing} were not found under "
        f"tensorpack's names; found {sorted(start)}",
    )
    for result in results:
        who = f"{trainer_entry.name} (rank {result.rank})"
        before = result.variable_values("before_train")
        for name, vals in before.items():
            m = _model_name(name)
            if m is None or (caps.launcher == "tf-distributed" and result.rank != 0):
                # A worker of a cluster starts from the parameter server's values when
                # it joins, which the chief's steps may already have moved.
                continue
            require(
                np.allclose(vals, np.ravel(start[m]), rtol=1e-6, atol=1e-7),
                f"{who}: {name!r} starts at {list(vals)}, unlike rank 0's {m!r} "
                f"{list(start[m])}: every copy must start from the same values",
            )
        want = reference(trainer_entry, start, steps)
        candidates = statistics(trainer_entry, start, steps, result.rank)
        after = result.variable_values("after_train")
        for name, vals in after.items():
            m = _model_name(name)
            if m is None:
                continue
            if m in STATISTICS:
                if name == m:
                    _check_statistic(who, name, vals, [c[m] for c in candidates], steps, caps)
                # Only the main training tower updates the moving averages; the other
                # towers' copies (if any) are not read by anything.
                continue
            if not caps.synchronous:
                # Asynchronous towers apply gradients of different variable values.
                require(
                    bool(np.isfinite(vals).all()),
                    f"{who}: {name!r} is not finite after {steps} step(s): {list(vals)}",
                )
                continue
            rule = (
                f"plain SGD lr 0.1 on the {caps.gradients} of {caps.total_towers} tower(s)' "
                "gradients, each tower normalizing its own batch"
                if caps.trains
                else "unchanged (the trainer trains nothing)"
            )
            require(
                np.allclose(vals, want[m].ravel(), rtol=1e-4, atol=1e-5),
                f"{who}: {name!r} after {steps} step(s) is {np.round(vals, 6).tolist()}; the "
                f"reference ({rule}) gives {np.round(want[m].ravel(), 6).tolist()}",
            )


def _check_statistic(
    who: str,
    name: str,
    vals: Sequence[float],
    candidates: Sequence[np.ndarray],
    steps: int,
    caps: Capabilities,
) -> None:
    if any(np.allclose(vals, c.ravel(), rtol=1e-4, atol=1e-5) for c in candidates):
        return
    rule = (
        "updated once per step by the main tower, from one of the step's batches, momentum "
        "0.9; see statistics() for the orders allowed with several processes"
        if caps.runs_per_step
        else "unchanged (the trainer makes no hooked run)"
    )
    shown = "; ".join(str(np.round(c.ravel(), 6).tolist()) for c in candidates[:4])
    require(
        False,
        f"{who}: {name!r} after {steps} step(s) is {np.round(vals, 6).tolist()}; the "
        f"reference ({rule}) allows {shown}" + (" ..." if len(candidates) > 4 else ""),
    )
