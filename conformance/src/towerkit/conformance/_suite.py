"""The session object behind the suite's fixtures: runners per trainer, drawn examples, properties."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from towerkit.conformance._catalog import named_scenarios
from towerkit.conformance._entries import TrainerEntry
from towerkit.conformance._result import RunResult
from towerkit.conformance._scenario import Scenario
from towerkit.conformance._session import ClusterRunner, HorovodRunner, InProcessRunner, JobRunner

if TYPE_CHECKING:
    from hypothesis import settings as Settings
    from hypothesis.strategies import SearchStrategy

DEFAULT_EXAMPLES = 5
"""Hypothesis examples per property check and trainer."""


def _strategies() -> dict[str, Callable[[], SearchStrategy[Scenario]]]:
    from towerkit.conformance.strategies import loop_scenarios, trigger_scenarios

    return {"loop": loop_scenarios, "triggers": trigger_scenarios}


def _settings(examples: int, *, generate_only: bool = False) -> Settings:
    from hypothesis import HealthCheck, Phase, settings

    phases = (Phase.generate,) if generate_only else (Phase.explicit, Phase.generate, Phase.shrink)
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


def not_applicable(entry: TrainerEntry, scenario: Scenario) -> str | None:
    """Why `scenario` says nothing about `entry`'s trainer (a skip reason), or None.

    Examples:
        >>> from towerkit.conformance._catalog import CHIEF
        >>> from towerkit.conformance._entries import Capabilities
        >>> e = TrainerEntry(name="d", factory="m:f", capabilities=Capabilities(launcher="tf-distributed"))
        >>> not_applicable(e, CHIEF[False])
        'the chief is worker 0 of the cluster: is_chief cannot be set to False there'
        >>> from towerkit.conformance._catalog import NUMERICS
        >>> mine = TrainerEntry(name="a", factory="m:f", capabilities=Capabilities(plain_sgd=False))
        >>> not_applicable(mine, NUMERICS[(1, "quadratic")])
        'the trainer declares that its update is not plain SGD (plain_sgd=False): no step has the NumPy SGD reference'
    """
    caps = entry.capabilities
    if scenario.loop.steps_per_execution != 1 and not caps.steps_per_execution:
        return "the trainer runs one step per session call (steps_per_execution is not supported)"
    if scenario.loop.steps_per_execution != 1 and entry.builds_graph:
        return "the factory builds the graph itself: the suite cannot ask for a K-step loop"
    if scenario.precision.mixed and not caps.precision:
        return "the trainer builds in float32 only (precision is not supported)"
    if scenario.precision.mixed and entry.builds_graph:
        return "the factory builds the graph itself: the suite cannot ask for a precision policy"
    if scenario.non_chief and caps.chief_by_role:
        return "the chief is worker 0 of the cluster: is_chief cannot be set to False there"
    if scenario.name.startswith(("numerics-", "layers-")) and not caps.plain_sgd:
        return (
            "the trainer declares that its update is not plain SGD (plain_sgd=False): "
            "no step has the NumPy SGD reference"
        )
    if scenario.name.startswith("numerics-") and caps.launcher == "tf-distributed":
        return (
            "workers of a TensorFlow cluster apply their gradients asynchronously (spec 000: "
            "gradients are not averaged across workers): no step has a single-tower reference"
        )
    if scenario.name.startswith("numerics-") and scenario.model == "linear" and caps.synchronous:
        return "a synchronous trainer is checked on the quadratic model"
    if (
        scenario.name.startswith("numerics-")
        and scenario.model == "quadratic"
        and not caps.synchronous
    ):
        return "an asynchronous trainer is checked on the linear model"
    return None


class ConformanceSession:
    """What the suite shares across tests: a work directory, a runner per trainer, examples.

    Args:
        workdir: a fresh directory for the log directories and jobs of this session.
        examples: hypothesis examples per property check and trainer.
    """

    def __init__(self, workdir: Path, examples: int = DEFAULT_EXAMPLES) -> None:
        self.workdir = Path(workdir)
        self.examples = examples
        self._runners: dict[str, InProcessRunner | JobRunner] = {}
        self._drawn: dict[str, list[Scenario]] = {}

    def runner(self, entry: TrainerEntry) -> InProcessRunner | JobRunner:
        """The runner of `entry` (made once per session)."""
        found = self._runners.get(entry.name)
        if found is None:
            safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in entry.name)
            where = self.workdir / safe
            where.mkdir(parents=True, exist_ok=True)
            launcher = entry.capabilities.launcher
            if launcher in ("horovod", "tf-distributed"):
                cls = HorovodRunner if launcher == "horovod" else ClusterRunner
                found = cls(entry, where, lambda: self.planned(entry), entry.capabilities.processes)
            else:
                found = InProcessRunner(entry, where)
            self._runners[entry.name] = found
        return found

    def run(self, entry: TrainerEntry, scenario: Scenario) -> list[RunResult]:
        """The results of `scenario` with `entry`, one per process."""
        return self.runner(entry).run(scenario)

    def drawn(self, key: str) -> list[Scenario]:
        """The examples of property `key` for multi-process trainers (drawn once, reproducibly)."""
        if key not in self._drawn:
            from hypothesis import given

            found: list[Scenario] = []
            strategy = _strategies()[key]()

            @_settings(self.examples * 3, generate_only=True)
            @given(strategy)
            def collect(scenario: Scenario) -> None:
                if scenario not in found:
                    found.append(scenario)

            collect()
            self._drawn[key] = [
                attrs.evolve(s, name=f"{key}-drawn-{i}")
                for i, s in enumerate(found[: self.examples])
            ]
        return self._drawn[key]

    def planned(self, entry: TrainerEntry) -> list[Scenario]:
        """What a multi-process job of `entry` runs: the named scenarios, then drawn examples.

        Scenarios that do not apply to the trainer (see `not_applicable`) are left out.
        """
        every = [*named_scenarios(), *self.drawn("loop"), *self.drawn("triggers")]
        return [s for s in every if not_applicable(entry, s) is None]

    def check_property(
        self, entry: TrainerEntry, key: str, check: Callable[[Scenario, list[RunResult]], None]
    ) -> None:
        """Run `check` on hypothesis examples of property `key` with `entry`.

        In-process trainers run fresh examples (shrunk on failure); multi-process
        trainers run the examples drawn for their job.
        """
        runner = self.runner(entry)
        if not runner.in_process:
            for scenario in self.drawn(key):
                check(scenario, runner.run(scenario))
            return
        from hypothesis import given

        @_settings(self.examples)
        @given(_strategies()[key]())
        def prop(scenario: Scenario) -> None:
            check(scenario, runner.run(scenario, cache=False))

        prop()
