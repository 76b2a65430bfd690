"""The session object behind the suite's fixtures: runners per trainer, drawn examples, properties."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from towerkit.conformance._catalog import named_scenarios
from towerkit.conformance._entries import TrainerEntry
from towerkit.conformance._result import RunResult
from towerkit.conformance._scenario import Scenario
from towerkit.conformance._session import HorovodRunner, InProcessRunner

DEFAULT_EXAMPLES = 5
"""Hypothesis examples per property check and trainer."""


def _strategies() -> dict[str, Callable[[], Any]]:
    from towerkit.conformance.strategies import loop_scenarios, trigger_scenarios

    return {"loop": loop_scenarios, "triggers": trigger_scenarios}


def _settings(examples: int, *, generate_only: bool = False) -> Any:
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


class ConformanceSession:
    """What the suite shares across tests: a work directory, a runner per trainer, examples.

    Args:
        workdir: a fresh directory for the log directories and jobs of this session.
        examples: hypothesis examples per property check and trainer.
    """

    def __init__(self, workdir: Path, examples: int = DEFAULT_EXAMPLES) -> None:
        self.workdir = Path(workdir)
        self.examples = examples
        self._runners: dict[str, Any] = {}
        self._drawn: dict[str, list[Scenario]] = {}

    def runner(self, entry: TrainerEntry) -> Any:
        """The runner of `entry` (made once per session)."""
        found = self._runners.get(entry.name)
        if found is None:
            safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in entry.name)
            where = self.workdir / safe
            where.mkdir(parents=True, exist_ok=True)
            if entry.capabilities.launcher == "horovod":
                found = HorovodRunner(entry, where, self.planned, entry.capabilities.processes)
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

    def planned(self) -> list[Scenario]:
        """Every scenario a multi-process job runs: the named ones, then the drawn examples."""
        return [*named_scenarios(), *self.drawn("loop"), *self.drawn("triggers")]

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
