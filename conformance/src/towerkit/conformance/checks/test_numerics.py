"""Numerics: steps of every trainer against a NumPy single-tower reference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pytest

from towerkit.conformance._catalog import EMA, NUMERICS, NUMERICS_MIXED
from towerkit.conformance._checks import check_no_error, require
from towerkit.conformance._model import (
    SHAPES,
    VARIABLES,
    gradient_magnitudes,
    sgd_step,
    step_batches,
)
from towerkit.conformance._sizes import LEARNING_RATE

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


def rounding_scale(
    entry: TrainerEntry, before: Mapping[str, Sequence[float]], steps: int, kind: str
) -> dict[str, np.ndarray]:
    """What a low precision's rounding error in `steps` steps scales with, per variable.

    The sum over the steps of the learning rate times `gradient_magnitudes` (combined
    over the towers as the trainer combines gradients), along the reference's path.
    """
    caps = entry.capabilities
    params = {n: np.asarray(before[n], np.float64).reshape(SHAPES[n]) for n in VARIABLES}
    scale = {n: np.zeros(SHAPES[n]) for n in VARIABLES}
    if not caps.trains:
        return scale
    for step in range(steps):
        batches = step_batches(step, caps.num_towers, caps.processes)
        mags = [gradient_magnitudes(params, b, kind) for b in batches]
        for name in VARIABLES:
            total = np.sum([g[name] for g in mags], axis=0)
            scale[name] += LEARNING_RATE * (
                total / len(mags) if caps.gradients == "average" else total
            )
        params = sgd_step(params, batches, kind=kind, combine=caps.gradients)
    return scale


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
    """Mixed precision (``precision="mixed_bfloat16"``): the towers compute in bfloat16 and the variables stay float32, so 3 steps land within bfloat16's rounding of the float32 single-tower reference: a few units of 2^-8 times the magnitude of the updates' terms (see `rounding_scale`), plus a relative 1e-3 for the float32 variables."""
    kind = "quadratic" if trainer_entry.capabilities.synchronous else "linear"
    scenario = NUMERICS_MIXED[kind]
    check_steps(trainer_entry, conformance_runner, scenario, 3, 1e-3, 1e-6, rounding=8 * 2.0**-8)


def check_steps(
    trainer_entry: TrainerEntry,
    conformance_runner: _Runner,
    scenario: Scenario,
    steps: int,
    rtol: float,
    atol: float,
    *,
    rounding: float = 0.0,
) -> None:
    """Run `scenario`; every copy starts from rank 0's values and ends at the reference.

    A copy may be off by ``rtol`` times the reference, plus ``atol``, plus ``rounding``
    times `rounding_scale` (a low precision's error).
    """
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
    scale = rounding_scale(trainer_entry, base, steps, kind)
    what = (
        f"{caps.gradients} of {caps.total_towers} tower(s)' gradients"
        if caps.trains
        else "no change (the trainer trains nothing)"
    )
    for result in results:
        who = f"{trainer_entry.name} (rank {result.rank})"
        exact = True  # every variable within float32's rounding of the reference
        for name, vals in result.variable_values("before_train").items():
            m = next(v for v in VARIABLES if name == v or name.endswith("/" + v))
            require(
                np.allclose(vals, np.ravel(base[m]), rtol=1e-6, atol=1e-7),
                f"{who}: {name!r} starts at {list(vals)}, unlike rank 0's {m!r} "
                f"{list(base[m])}: every copy must start from the same values",
            )
        for name, vals in result.variable_values("after_train").items():
            m = next(v for v in VARIABLES if name == v or name.endswith("/" + v))
            bound = rtol * np.abs(want[m].ravel()) + atol + rounding * scale[m].ravel()
            off = np.abs(np.asarray(vals, np.float64) - want[m].ravel())
            require(
                bool((off <= bound).all()),
                f"{who}: {name!r} after {steps} step(s) in {scenario.precision.name} is "
                f"{np.round(vals, 6).tolist()}; the single-tower reference ({kind} cost, SGD "
                f"lr 0.1, {what}, float32) gives {np.round(want[m].ravel(), 6).tolist()}: off by "
                f"{np.round(off, 6).tolist()}, allowed {np.round(bound, 6).tolist()} (rtol "
                f"{rtol:g}, atol {atol:g}"
                + (f", {rounding:g} x rounding scale)" if rounding else ")")
                + "; a trainer whose update is not plain SGD on purpose declares "
                "plain_sgd=False (see Capabilities)",
            )
            exact = exact and np.allclose(vals, want[m].ravel(), rtol=1e-5, atol=1e-6)
        require(
            not (rounding and caps.trains and exact),
            f"{who}: after {steps} step(s) in {scenario.precision.name} every variable equals the "
            f"float32 reference within float32's rounding (rtol 1e-5, atol 1e-6): the towers "
            f"did not compute in the policy's low precision (is setup_graph's precision ignored?)",
        )


@pytest.mark.parametrize("case", list(EMA), ids=list(EMA))
def test_moving_averages_follow_the_reference(
    trainer_entry: TrainerEntry, conformance_runner: _Runner, case: str
) -> None:
    """EMAOptimizer: every copy of a weight has a moving average that moved once per step, after the step's update: ``s <- d s + (1 - d) w`` along the single-tower reference's path (K steps per call and mixed precision included)."""
    caps = trainer_entry.capabilities
    if not caps.trains:
        pytest.skip("the trainer trains nothing: no optimizer, no averages")
    if not caps.synchronous:
        pytest.skip(
            "the trainer is not synchronous (towers or workers apply their gradients one by "
            "one): the averages move once per apply, in an order the reference does not fix"
        )
    scenario = EMA[case]
    decay = scenario.ema_decay
    if decay is None:  # pragma: no cover - every EMA scenario sets it
        msg = f"the scenario {scenario.name!r} sets no ema_decay"
        raise TypeError(msg)
    rounding = 8 * 2.0**-8 if scenario.precision.mixed else 0.0
    rtol = 1e-3 if scenario.precision.mixed else 1e-5
    results = conformance_runner.run(scenario)
    check_no_error(trainer_entry, results)
    start = results[0].variable_values("before_train")
    base = {m: np.asarray(start[m], np.float64).reshape(SHAPES[m]) for m in VARIABLES}
    steps = scenario.loop.steps_per_epoch
    params, shadow = dict(base), dict(base)
    scale = rounding_scale(trainer_entry, start, steps, "quadratic")
    for step in range(steps):
        batches = step_batches(step, caps.num_towers, caps.processes)
        params = sgd_step(params, batches, kind="quadratic", combine=caps.gradients)
        shadow = {m: decay * shadow[m] + (1 - decay) * params[m] for m in VARIABLES}
    suffix = "/ExponentialMovingAverage"
    for result in results:
        after = result.variable_values("after_train")
        averages = {n: v for n, v in after.items() if n.endswith(suffix)}
        weights = [n for n in after if not n.endswith(suffix)]
        require(
            sorted(averages) == sorted(n + suffix for n in weights),
            f"{trainer_entry.name} (rank {result.rank}): the moving averages found are "
            f"{sorted(averages)}; expected one per copy of a weight: "
            f"{sorted(n + suffix for n in weights)}",
        )
        for name, vals in averages.items():
            m = next(v for v in VARIABLES if name[: -len(suffix)].endswith(v))
            bound = rtol * np.abs(shadow[m].ravel()) + 1e-6 + rounding * scale[m].ravel()
            off = np.abs(np.asarray(vals, np.float64) - shadow[m].ravel())
            require(
                bool((off <= bound).all()),
                f"{trainer_entry.name} (rank {result.rank}): {name!r} after {steps} steps is "
                f"{np.round(vals, 6).tolist()}; the average (decay {decay}) of the reference's "
                f"weights after each step is {np.round(shadow[m].ravel(), 6).tolist()}: off by "
                f"{np.round(off, 6).tolist()}, allowed {np.round(bound, 6).tolist()}\n"
                f"  rule: EMAOptimizer updates the average once per step, after the update "
                f"[towerkit, EMAOptimizer]",
            )
