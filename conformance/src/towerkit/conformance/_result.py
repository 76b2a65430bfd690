"""What one run of a scenario recorded, as a frozen, JSON-serializable record."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from towerkit.callbacks import loads_stats
from towerkit.conformance._trace import TraceEvent, trace_from_lists

ValueTrace = tuple[tuple[TraceEvent, float], ...]


def _traces(value: Any) -> tuple[tuple[str, tuple[TraceEvent, ...]], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(
        (str(name), tuple(e if isinstance(e, TraceEvent) else TraceEvent(*e) for e in events))
        for name, events in items
    )


def _values(value: Any) -> tuple[tuple[str, ValueTrace], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    out = []
    for name, pairs in items:
        rows = []
        for ev, v in pairs:
            rows.append((ev if isinstance(ev, TraceEvent) else TraceEvent(*ev), float(v)))
        out.append((str(name), tuple(rows)))
    return tuple(out)


def _pairs(value: Any) -> tuple[tuple[Any, Any], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((a, b) for a, b in items)


def _arrays(value: Any) -> tuple[tuple[str, str, tuple[float, ...]], ...]:
    return tuple((str(w), str(n), tuple(float(x) for x in vals)) for w, n, vals in value)


def _named_arrays(value: Iterable[Any]) -> tuple[tuple[str, tuple[float, ...]], ...]:
    return tuple((str(n), tuple(map(float, x))) for n, x in value)


def _strs(value: Iterable[Any]) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


@attrs.frozen(kw_only=True)
class RunResult:
    """What the recorders of one scenario run saw, in one process.

    Attributes:
        scenario: the scenario's name.
        rank: the process's rank (0 in-process and for the chief).
        traces: ``(recorder, events)`` pairs, as `ExpectedRun.traces`.
        values: ``(reader, ((event, value), ...))`` pairs, as `ExpectedRun.values`.
        error: ``"Type: message"`` of an exception that escaped training, or None.
        files: the files in the log directory after the run (relative paths, sorted).
            This and the next four are read by rank 0 only (empty on other ranks): the
            log directory is the chief's, and another rank that ends first would read
            it while the chief's savers still write and delete files.
        checkpoint_state: the checkpoint names the ``checkpoint`` state file lists,
            oldest first.
        best_steps: ``(file name, global step stored in it)`` of each
            ``MinSaver``/``MaxSaver`` copy found.
        saved_steps: ``(model-<step>, global step stored in it)`` of each ModelSaver
            checkpoint in the log directory.
        stats: the records of ``stats.json`` as JSON text (``"null"`` without a file).
        variables: ``(when, variable name, flat values)`` of every copy of the model's
            variables, read in ``before_train`` and ``after_train``.
        tower_calls: how many times the tower function was called while the graph
            was built (training and inference towers).
        towers: ``(name scope, training?)`` of each tower handle of ``trainer.towers``.
        predictor: ``(name, flat values)``: the predictor's output on the probe inputs
            (``"pred"``) and the variables of the first training tower it should use.
    """

    scenario: str = attrs.field(validator=attrs.validators.instance_of(str))
    rank: int = 0
    traces: tuple[tuple[str, tuple[TraceEvent, ...]], ...] = attrs.field(
        default=(), converter=_traces
    )
    values: tuple[tuple[str, ValueTrace], ...] = attrs.field(default=(), converter=_values)
    error: str | None = None
    files: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    checkpoint_state: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    best_steps: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=_pairs)
    saved_steps: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=_pairs)
    stats: str = "null"
    variables: tuple[tuple[str, str, tuple[float, ...]], ...] = attrs.field(
        default=(), converter=_arrays
    )
    tower_calls: int = 0
    towers: tuple[tuple[str, bool], ...] = attrs.field(default=(), converter=_pairs)
    predictor: tuple[tuple[str, tuple[float, ...]], ...] = attrs.field(
        default=(), converter=_named_arrays
    )

    def trace(self, name: str) -> tuple[TraceEvent, ...]:
        """What recorder `name` saw (empty when it saw nothing)."""
        return dict(self.traces).get(name, ())

    def value_trace(self, name: str) -> ValueTrace:
        """What reader `name` saw (empty when it read nothing)."""
        return dict(self.values).get(name, ())

    def stats_records(self) -> list[dict[str, Any]] | None:
        """The records of ``stats.json``, or None when there was no file.

        NaN and infinities come back as floats (`towerkit.callbacks.loads_stats`).
        """
        return None if self.stats == "null" else loads_stats(self.stats)

    def variable_values(self, when: str) -> dict[str, tuple[float, ...]]:
        """``{variable name: flat values}`` read at `when` (``before_train``/``after_train``)."""
        return {n: v for w, n, v in self.variables if w == when}

    def to_data(self) -> dict[str, Any]:
        """This result as JSON-ready data.

        Examples:
            >>> r = RunResult(scenario="s", traces={"loop": [TraceEvent("before_train", 0, -1, 0)]})
            >>> import json
            >>> RunResult.from_data(json.loads(json.dumps(r.to_data()))) == r
            True
        """
        data = attrs.asdict(self, recurse=False)
        data["traces"] = [[n, [e.as_list() for e in evs]] for n, evs in self.traces]
        data["values"] = [[n, [[e.as_list(), v] for e, v in vs]] for n, vs in self.values]
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> RunResult:
        """The result `to_data` turned into `data`."""
        fields = dict(data)
        fields["traces"] = [(n, trace_from_lists(evs)) for n, evs in fields.get("traces", ())]
        fields["values"] = [
            (n, [(TraceEvent(*e), v) for e, v in vs]) for n, vs in fields.get("values", ())
        ]
        return cls(**fields)
