"""Towers: calls of the tower function, shared or replicated variables, the tower rules, predictors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pytest

from towerkit.conformance._catalog import TOWERS
from towerkit.conformance._checks import check_no_error, require
from towerkit.conformance._model import PROBE_INPUTS, VARIABLES, SuiteModel, predict

if TYPE_CHECKING:
    from towerkit.conformance._entries import TrainerEntry
    from towerkit.conformance.plugin import _Runner

pytestmark = pytest.mark.conformance_group("towers")


def _needs_towers(entry: TrainerEntry) -> None:
    if not entry.capabilities.towers:
        pytest.skip(f"{entry.name} declares no tower function (capabilities.towers=False)")


def copies(values: Mapping[str, tuple[float, ...]]) -> dict[str, dict[str, tuple[float, ...]]]:
    """``{model variable: {copy name: values}}`` for every copy of each model variable."""
    out: dict[str, dict[str, tuple[float, ...]]] = {m: {} for m in VARIABLES}
    for name, vals in values.items():
        for m in VARIABLES:
            if name == m or name.endswith("/" + m):
                out[m][name] = vals
    return out


def test_tower_function_called_once_per_tower(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 001 (tower functions) and 000 (TowerTrainer.towers, get_predictor): the tower function is called once per training tower, plus once per inference tower; trainer.towers has a handle for each."""
    _needs_towers(trainer_entry)
    n = trainer_entry.capabilities.num_towers
    results = conformance_runner.run(TOWERS)
    check_no_error(trainer_entry, results)
    for result in results:
        who = f"{trainer_entry.name} (rank {result.rank})"
        require(
            result.tower_calls == n + 1,
            f"{who}: the tower function was called {result.tower_calls} times, expected {n + 1} "
            f"({n} training tower(s) and the predictor's inference tower)",
        )
        training = [name for name, is_training in result.towers if is_training]
        inference = [name for name, is_training in result.towers if not is_training]
        require(
            len(training) == n and len(inference) == 1,
            f"{who}: trainer.towers holds training towers {training} and inference towers "
            f"{inference}; expected {n} training tower(s) and 1 inference tower",
        )


def test_variables_shared_or_replicated(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 000 (SyncMultiGPUTrainerReplicated, SyncMultiGPUTrainerParameterServer, DistributedTrainerReplicated) and 001: replicated trainers keep one equal copy of the variables per tower, the others one shared copy; in a cluster, a worker's local copies are equal to each other (the global copy on the parameter server moves with the other workers' steps)."""
    _needs_towers(trainer_entry)
    caps = trainer_entry.capabilities
    results = conformance_runner.run(TOWERS)
    check_no_error(trainer_entry, results)
    for result in results:
        who = f"{trainer_entry.name} (rank {result.rank})"
        for when in ("before_train", "after_train"):
            for var, found in copies(result.variable_values(when)).items():
                if caps.variables == "shared":
                    require(
                        len(found) == 1,
                        f"{who}: variables='shared' means one copy of {var!r}; found "
                        f"{sorted(found)}",
                    )
                else:
                    require(
                        len(found) >= caps.num_towers,
                        f"{who}: variables='replicated' means a copy of {var!r} per tower "
                        f"({caps.num_towers}); found {sorted(found)}",
                    )
                compared = found
                if caps.launcher == "tf-distributed" and caps.variables != "shared":
                    # The global copy lives on the parameter server, where the other
                    # workers keep applying their steps: this worker's local copies match
                    # it right after each of its own syncs only. Its local copies must
                    # still be equal to each other at every moment.
                    require(
                        var in found,
                        f"{who}: no global copy of {var!r} on the parameter server; found "
                        f"{sorted(found)}",
                    )
                    compared = {k: v for k, v in found.items() if k != var}
                values = list(compared.values())
                require(
                    all(np.allclose(v, values[0], rtol=1e-6, atol=1e-7) for v in values),
                    f"{who}: the copies of {var!r} differ in {when}: "
                    + "; ".join(f"{k}={list(v)}" for k, v in sorted(compared.items())),
                )


def test_tower_rules_hold_for_the_suite_model(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 001 (rules of tower functions): the tower function a trainer builds from the suite's model passes the tower-rule checker."""
    _needs_towers(trainer_entry)
    import tensorflow as tf

    from towerkit.towers import check_tower_function, format_violations

    for kind in ("quadratic", "linear"):
        model = SuiteModel(kind=kind)
        fn, signature = model.build_cost, model.input_signature
        if conformance_runner.in_process:
            from towerkit.conformance._execute import make_trainer

            with tf.Graph().as_default():
                trainer = make_trainer(trainer_entry, model)
                func = trainer.tower_func
                require(
                    func is not None,
                    f"{trainer_entry.name}: trainer.tower_func is None after the graph is set up",
                )
                fn, signature = func.tower_fn, func.input_signature
        errors = [v for v in check_tower_function(fn, signature) if v.severity == "error"]
        require(
            not errors,
            f"{trainer_entry.name}: the tower function breaks the tower rules:\n"
            + format_violations(errors),
        )


def test_get_predictor_uses_the_trained_variables(
    trainer_entry: TrainerEntry, conformance_runner: _Runner
) -> None:
    """Spec 000 (TowerTrainer.get_predictor): the predictor runs the tower function under an inference tower context with the trained variables."""
    _needs_towers(trainer_entry)
    results = conformance_runner.run(TOWERS)
    check_no_error(trainer_entry, results)
    for result in results:
        who = f"{trainer_entry.name} (rank {result.rank})"
        got = dict(result.predictor)
        params = {n: np.asarray(got[n]) for n in VARIABLES}
        want = predict(params, PROBE_INPUTS).ravel()
        out = np.asarray(got["pred"])
        require(
            np.allclose(out, want, rtol=1e-5, atol=1e-6),
            f"{who}: get_predictor(['x'], ['pred']) returned {out.tolist()} for the probe "
            f"inputs; the first training tower's variables give {want.tolist()}",
        )
