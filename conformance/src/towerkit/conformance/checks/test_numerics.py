"""Numerics: steps of every trainer against a NumPy single-tower reference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pytest

from towerkit.conformance._catalog import NUMERICS, NUMERICS_MIXED
from towerkit.conformance._checks import check_no_error, require
from towerkit.conformance._model import SHAPES, VARIABLES, sgd_step, step_batches

if TYPE_CHECKING:
    from towerkit.conformance._entries import TrainerEntry
    from towerkit.conformance._scenario import Scenario
    from towerkit.conformance.plugin import _Runner

pytestmark = pytest.mark.conformance_group("numerics")


def reference(
    entry: TrainerEntry, before: Mapping[str, Sequence[float]], steps: int, kind: str
) -> dict[str, np.ndarray]:
    """The variables after `steps` steps: towers of every process on their own batches."""
    caps = entry.capabilities
    params = {n: np.asarray(before[n], np.float64).reshape(SHAPES[n]) for n in VARIABLES}
    if not caps.trains:
        return params
    for step in range(steps):
        batches = step_batches(step, caps.num_towers, caps.processes)
        params = sgd_step(params, batches, kind=kind, combine=caps.gradients)
    return params


@pytest.mark.parametrize("steps", [1, 3], ids=["1-step", "3-steps"])
def test_steps_equal_the_single_tower_reference(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, steps: int
) -> None:
    """Spec 000 (SyncMultiGPUTrainer*, AsyncMultiGPUTrainer, HorovodTrainer; NoOpTrainer) and the data-parallel design: with plain SGD, each step equals one step of a single tower on the concatenation of every tower's batch (averaged or summed gradients); a NoOpTrainer changes nothing."""
    kind = "quadratic" if trainer_entry.capabilities.synchronous else "linear"
    check_steps(trainer_entry, conformance_runner, NUMERICS[(steps, kind)], steps, 1e-5, 1e-6)


def test_mixed_bfloat16_steps_near_the_single_tower_reference(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Mixed precision (``precision="mixed_bfloat16"``): the towers compute in bfloat16 and the variables stay float32, so 3 steps land within bfloat16's rounding (a relative 2^-8 per operation) of the float32 single-tower reference."""
    kind = "quadratic" if trainer_entry.capabilities.synchronous else "linear"
    check_steps(trainer_entry, conformance_runner, NUMERICS_MIXED[kind], 3, 3e-2, 3e-3)


def check_steps(
    trainer_entry: TrainerEntry,
    conformance_runner: _Runner,
    scenario: Scenario,
    steps: int,
    rtol: float,
    atol: float,
) -> None:
    """Run `scenario`; every copy starts from rank 0's values and ends at the reference."""
    caps = trainer_entry.capabilities
    kind = scenario.model
    results = conformance_runner.run(scenario)
    check_no_error(trainer_entry, results)
    start = results[0].variable_values("before_train")
    base = {m: start[m] for m in VARIABLES if m in start}
    require(
        len(base) == len(VARIABLES),
        f"{trainer_entry.name}: the model's variables {list(VARIABLES)} were not found under "
        f"their plain names; found {sorted(start)}",
    )
    want = reference(trainer_entry, base, steps, kind)
    what = (
        f"{caps.gradients} of {caps.total_towers} tower(s)' gradients"
        if caps.trains
        else "no change (the trainer trains nothing)"
    )
    for result in results:
        who = f"{trainer_entry.name} (rank {result.rank})"
        for name, vals in result.variable_values("before_train").items():
            m = next(v for v in VARIABLES if name == v or name.endswith("/" + v))
            require(
                np.allclose(vals, np.ravel(base[m]), rtol=1e-6, atol=1e-7),
                f"{who}: {name!r} starts at {list(vals)}, unlike rank 0's {m!r} "
                f"{list(base[m])}: every copy must start from the same values",
            )
        for name, vals in result.variable_values("after_train").items():
            m = next(v for v in VARIABLES if name == v or name.endswith("/" + v))
            require(
                np.allclose(vals, want[m].ravel(), rtol=rtol, atol=atol),
                f"{who}: {name!r} after {steps} step(s) in {scenario.precision} is "
                f"{np.round(vals, 6).tolist()}; the single-tower reference ({kind} cost, SGD "
                f"lr 0.1, {what}, float32; tolerance rtol {rtol:g}, atol {atol:g}) gives "
                f"{np.round(want[m].ravel(), 6).tolist()}",
            )
