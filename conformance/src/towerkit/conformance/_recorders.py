"""The suite's recording callbacks: they write down what the loop shows them, nothing more."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from towerkit.callbacks import Callback, EventKind, StopTraining
from towerkit.conformance._layers_model import LAYER_VARIABLES
from towerkit.conformance._model import PROBE_INPUTS, VARIABLES
from towerkit.conformance._scenario import CLOCK
from towerkit.conformance._trace import TraceEvent
from towerkit.sessinit import EMA_SUFFIX
from towerkit.towers.compat import tf1

_SNAPSHOT_TRIES = 40
"""How often the towers recorder retries for variables that hold still (other workers)."""


class Recording:
    """Where the recorders of one run write: traces, values, the current event."""

    def __init__(self) -> None:
        self.traces: dict[str, list[TraceEvent]] = {}
        self.values: dict[str, list[tuple[TraceEvent, float]]] = {}
        self.current: TraceEvent | None = None
        self.variables: list[tuple[str, str, tuple[float, ...]]] = []
        self.towers: list[tuple[str, bool]] = []
        self.predictor: list[tuple[str, tuple[float, ...]]] = []

    def trace(self, name: str) -> list[TraceEvent]:
        """The list recorder `name` appends to."""
        return self.traces.setdefault(name, [])

    def value_trace(self, name: str) -> list[tuple[TraceEvent, float]]:
        """The list reader `name` appends to."""
        return self.values.setdefault(name, [])


def position(trainer: Any, kind: EventKind) -> TraceEvent:
    """The trainer's counters as a trace event of `kind`."""
    return TraceEvent(
        kind, int(trainer.epoch_num), int(trainer.local_step), int(trainer.global_step)
    )


class Probe(Callback):
    """Records ``(method, epoch_num, local_step, global_step)`` at every callback method.

    Args:
        name: where it records in `Recording`.
        recording: the run's recording.
        chief_only: the callback's ``chief_only``.
    """

    accepts_coarse_steps = True  # records what the loop shows, K steps per call or one

    def __init__(self, name: str, recording: Recording, chief_only: bool = False) -> None:
        self._name = name
        self._rec = recording
        self._events = recording.trace(name)
        self.chief_only = chief_only

    def _record(self, kind: EventKind) -> TraceEvent:
        event = position(self.trainer, kind)
        self._events.append(event)
        return event

    def _before_train(self) -> None:
        self._record(EventKind.BEFORE_TRAIN)

    def _before_epoch(self) -> None:
        self._record(EventKind.BEFORE_EPOCH)

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        self._record(EventKind.BEFORE_RUN)

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context, run_values
        self._record(EventKind.AFTER_RUN)

    def _trigger_step(self) -> None:
        self._record(EventKind.TRIGGER_STEP)

    def _after_epoch(self) -> None:
        self._record(EventKind.AFTER_EPOCH)

    def _trigger_epoch(self) -> None:
        self._record(EventKind.TRIGGER_EPOCH)

    def _after_train(self) -> None:
        self._record(EventKind.AFTER_TRAIN)

    def __str__(self) -> str:
        return f"Probe({self._name})"


class Clock(Probe):
    """The first callback of every run: a probe that also marks the current event.

    Later recorders read the current event from the recording (callbacks run in
    order, so the clock has seen each event first). It reads the global step
    variable in ``trigger_epoch``, can make plain ``sess.run`` calls, and can raise
    `StopTraining` in the nth call of a method.

    Args:
        recording: the run's recording.
        stop_at: ``(kind, nth)``, or None.
        plain_runs: call ``trainer.sess.run`` in ``before_train``, ``trigger_step`` and
            ``trigger_epoch``.
    """

    def __init__(
        self, recording: Recording, stop_at: tuple[EventKind, int] | None, plain_runs: bool
    ) -> None:
        super().__init__(CLOCK, recording, chief_only=False)
        self._stop_at = stop_at
        self._plain_runs = plain_runs
        self._counts: dict[EventKind, int] = {}
        self._gs: Any = None
        self._plain: Any = None
        self._gs_values = recording.value_trace(f"{CLOCK}.global_step")

    def count(self, kind: EventKind) -> int:
        """How many events of `kind` this clock has seen so far in the run."""
        return self._counts.get(kind, 0)

    def _setup_graph(self) -> None:
        self._gs = tf1.train.get_global_step(self.graph)
        self._plain = tf1.constant(1.0, name="plain_run")

    def _record(self, kind: EventKind) -> TraceEvent:
        event = super()._record(kind)
        self._rec.current = event
        if kind is EventKind.TRIGGER_EPOCH and self._gs is not None:
            self._gs_values.append((event, float(self.trainer.sess.run(self._gs))))
        if self._plain_runs and kind in (
            EventKind.BEFORE_TRAIN,
            EventKind.TRIGGER_STEP,
            EventKind.TRIGGER_EPOCH,
        ):
            self.trainer.sess.run(self._plain)
        n = self._counts.get(kind, 0)
        self._counts[kind] = n + 1
        if self._stop_at == (kind, n):
            msg = f"the conformance suite stops training at {kind.value} #{n}"
            raise StopTraining(msg)
        return event


class TriggerRecorder(Callback):
    """Records each call of its ``trigger()`` at the current event (for ``PeriodicTrigger``)."""

    def __init__(self, name: str, recording: Recording) -> None:
        self._name = name
        self._rec = recording
        self._events = recording.trace(name)
        self.chief_only = False

    def _trigger(self) -> None:
        current = self._rec.current
        event = position(self.trainer, current.kind if current else EventKind.BEFORE_TRAIN)
        self._events.append(event)

    def __str__(self) -> str:
        return f"TriggerRecorder({self._name})"


def recording_predicate(
    name: str, recording: Recording, modulus: int, remainder: int
) -> Callable[[Any], bool]:
    """``pred(self)`` for ``EnableCallbackIf``: ``global_step % modulus == remainder``, recorded."""
    calls = recording.trace(f"{name}.pred")

    def pred(wrapper: Any) -> bool:
        t = wrapper.trainer
        current = recording.current
        calls.append(position(t, current.kind if current else EventKind.BEFORE_TRAIN))
        step: int = t.global_step
        return step % modulus == remainder

    return pred


class Reader(Callback):
    """Reads a scalar graph variable in ``before_train``, ``trigger_step`` and ``trigger_epoch``."""

    def __init__(self, name: str, recording: Recording) -> None:
        self._name = name
        self._values = recording.value_trace(name)
        self._var: Any = None
        self.chief_only = False

    def _setup_graph(self) -> None:
        found = [v for v in tf1.global_variables() if v.op.name == self._name]
        self._var = found[0]

    def _read(self, kind: EventKind) -> None:
        value = float(np.asarray(self.trainer.sess.run(self._var)))
        self._values.append((position(self.trainer, kind), value))

    def _before_train(self) -> None:
        self._read(EventKind.BEFORE_TRAIN)

    def _trigger_step(self) -> None:
        self._read(EventKind.TRIGGER_STEP)

    def _trigger_epoch(self) -> None:
        self._read(EventKind.TRIGGER_EPOCH)

    def __str__(self) -> str:
        return f"Reader({self._name})"


class StatSource(Callback):
    """Puts the scalar `name` to the monitors in each ``trigger_epoch`` (``value_in(epoch_num)``)."""

    def __init__(self, name: str, value_in: Callable[[int], float]) -> None:
        self._name = name
        self._value_in = value_in
        self.chief_only = False

    def _trigger_epoch(self) -> None:
        self.trainer.monitors.put_scalar(self._name, self._value_in(self.trainer.epoch_num))

    def __str__(self) -> str:
        return f"StatSource({self._name})"


def model_variable_copies(graph: Any) -> list[Any]:
    """Every variable of the graph that is a copy of one of the model's variables.

    A copy is named like the model's variable, possibly under other scopes (a
    tower's copy, a global shadow): its name ends with ``linear/w`` or ``linear/b``
    (or, for the layers model, one of `LAYER_VARIABLES`).
    """
    seen: dict[str, Any] = {}
    for v in graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES) + graph.get_collection(
        tf1.GraphKeys.LOCAL_VARIABLES
    ):
        name = v.op.name
        if any(name == m or name.endswith("/" + m) for m in VARIABLES + LAYER_VARIABLES):
            seen.setdefault(name, v)
    return [seen[n] for n in sorted(seen)]


class VariablesRecorder(Callback):
    """Reads every copy of the model's variables in ``before_train`` and ``after_train``."""

    def __init__(self, recording: Recording) -> None:
        self._rec = recording
        self._vars: list[Any] = []
        self.chief_only = False

    def _setup_graph(self) -> None:
        copies = model_variable_copies(self.graph)
        # and their moving averages, when the optimizer keeps them (EMAOptimizer)
        by_name = {
            v.op.name: v
            for key in (tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.LOCAL_VARIABLES)
            for v in self.graph.get_collection(key)
        }
        shadows = [by_name.get(f"{v.op.name}/{EMA_SUFFIX}") for v in copies]
        self._vars = copies + [s for s in shadows if s is not None]

    def _read(self, when: str) -> None:
        values = self.trainer.sess.run(self._vars)
        for v, value in zip(self._vars, values):
            flat = tuple(float(x) for x in np.asarray(value).ravel())
            self._rec.variables.append((when, v.op.name, flat))

    def _before_train(self) -> None:
        self._read("before_train")

    def _after_train(self) -> None:
        self._read("after_train")


class TowersRecorder(Callback):
    """Builds a predictor in ``setup_graph``; records it and the tower handles in ``after_train``."""

    def __init__(self, recording: Recording) -> None:
        self._rec = recording
        self._predictor: Any = None
        self.chief_only = False

    def _setup_graph(self) -> None:
        get_predictor: Any = getattr(self.trainer, "get_predictor", None)
        if get_predictor is None:
            msg = f"{type(self.trainer).__name__} has no get_predictor: it is not a TowerTrainer"
            raise TypeError(msg)
        self._predictor = get_predictor(["x"], ["pred"])

    def _after_train(self) -> None:
        towers = self.trainer.towers
        self._rec.towers.extend((h.ns_name, bool(h.is_training)) for h in towers)
        first = towers.training()[0]
        names = list(VARIABLES)
        variables = first.get_variables(names)
        # In a cluster the other workers may still be stepping the shared variables:
        # take a snapshot that holds still across the predictor's call.
        for _ in range(_SNAPSHOT_TRIES):
            values = self.trainer.sess.run(variables)
            (out,) = self._predictor(PROBE_INPUTS)
            after = self.trainer.sess.run(variables)
            if all(np.array_equal(a, b) for a, b in zip(values, after)):
                break
            time.sleep(0.05)
        self._rec.predictor.append(("pred", tuple(float(x) for x in np.asarray(out).ravel())))
        for n, v in zip(names, values):
            self._rec.predictor.append((n, tuple(float(x) for x in np.asarray(v).ravel())))
