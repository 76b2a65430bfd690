"""timeline: print when each callback of a training run fires and the values schedules set.

Reads a small description of the loop and its callbacks (a TOML file, or a Python file
that builds trigger records), walks the loop's pure event stream from
``towerkit.callbacks`` and prints every firing. TensorFlow is never imported.

A TOML description::

    [loop]
    steps_per_epoch = 100
    max_epoch = 10

    [[callbacks]]
    name = "ModelSaver"
    type = "PeriodicTrigger"        # calls trigger() every 2 epochs
    every_k_epochs = 2

    [[callbacks]]
    name = "learning_rate"
    type = "ScheduledHyperParamSetter"
    schedule = [[0, 0.1], [5, 0.01], [8, 0.001]]

A Python description defines ``loop`` (a dict) and ``callbacks`` (a list of the same
tables, or ``(name, trigger)`` / ``(name, trigger, event_kinds)`` tuples). Trigger
records and their combinators (``EveryK``, ``GlobalStepMultiple``, ``EpochMultiple``,
``AtLastStep``, ``OnKinds``, ``any_of``, ``all_of``, ``negate``, ``OnSchedule``,
``piecewise_schedule``, ...) are predefined in its namespace.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import runpy
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs
from attrs.validators import ge, instance_of

import towerkit.callbacks as cb
from towerkit.callbacks import EventKind, OnSchedule, TimelineEntry
from towerkit.callbacks.plumbing import (
    GATE_KINDS,
    SHELL_RECORDS,
    check_steps_per_execution,
    periodic_record,
    timeline_entry,
    trainer_event,
)
from towerkit.tools._files import ToolError, fail, read_toml
from towerkit.tools._timeline_output import render_json, render_text, summarize

__all__ = [
    "CALLBACK_TYPES",
    "GATED_METHODS",
    "Description",
    "LoopSpec",
    "entry_from_table",
    "iter_firings",
    "load_description",
    "main",
    "periodic_callback_rule",
    "read_description",
    "render_json",
    "render_text",
    "run_timeline",
    "summarize",
]

CALLBACK_TYPES = tuple(SHELL_RECORDS)
"""The ``type`` values a table entry may name: every trigger shell of the callbacks lib."""

GATED_METHODS = tuple(kind.value for kind in GATE_KINDS)
"""The methods of a wrapped callback that ``PeriodicCallback`` may gate (``methods``): the
callbacks lib's gated kinds (``after_run`` follows ``before_run``)."""


def _table_keys(kind: str) -> set[str]:
    """The keys a table of `kind` may hold: its name and type, and its builder's arguments."""
    return {"name", "type", *inspect.signature(SHELL_RECORDS[kind]).parameters}


_LOOP_KEYS = (
    "steps_per_epoch",
    "max_epoch",
    "starting_epoch",
    "start_global_step",
    "steps_per_execution",
)


@attrs.frozen(kw_only=True)
class LoopSpec:
    """The loop parameters of a run.

    Attributes:
        steps_per_epoch: steps per epoch (> 0).
        max_epoch: the last epoch, inclusive (1-based); ``starting_epoch - 1`` is an empty run.
        starting_epoch: the first epoch (1-based).
        start_global_step: the global step restored at the start (>= 0).
        steps_per_execution: training steps per session call (K, dividing
            ``steps_per_epoch``): step firings come once per call, at its last step.
        bounds: the epochs and steps as the loop's own record, which checks them.

    Examples:
        >>> LoopSpec(steps_per_epoch=10, max_epoch=3)
        LoopSpec(steps_per_epoch=10, max_epoch=3, starting_epoch=1, start_global_step=0, steps_per_execution=1)
    """

    steps_per_epoch: int
    max_epoch: int
    starting_epoch: int = 1
    start_global_step: int = attrs.field(default=0, validator=[instance_of(int), ge(0)])
    steps_per_execution: int = attrs.field(default=1, validator=[instance_of(int), ge(1)])
    bounds: cb.LoopBounds = attrs.field(init=False, repr=False, eq=False)

    @bounds.default
    def _bounds(self) -> cb.LoopBounds:
        if self.steps_per_execution != 1:
            check_steps_per_execution(self.steps_per_epoch, self.steps_per_execution)
        return cb.LoopBounds(
            starting_epoch=self.starting_epoch,
            max_epoch=self.max_epoch,
            steps_per_epoch=self.steps_per_epoch,
        )

    @property
    def total_steps(self) -> int:
        """The number of steps this run makes."""
        return self.bounds.total_steps


def _as_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class Description:
    """A checked description: the loop, the timeline entries and what each stands for.

    Attributes:
        loop: the loop parameters.
        entries: one ``TimelineEntry`` per callback, in the given order.
        types: the callback class each entry stands for (``PeriodicTrigger``, ...).
    """

    loop: LoopSpec
    entries: tuple[Any, ...] = attrs.field(converter=_as_tuple)
    types: tuple[str, ...] = attrs.field(converter=_as_tuple)

    def only(self, pattern: re.Pattern[str]) -> Description:
        """The description with only the entries whose name matches `pattern`."""
        keep = [i for i, e in enumerate(self.entries) if pattern.search(e.name)]
        return attrs.evolve(
            self,
            entries=tuple(self.entries[i] for i in keep),
            types=tuple(self.types[i] for i in keep),
        )


def periodic_callback_rule(every_k_steps: int | None, every_k_epochs: int | None) -> Any:
    """The trigger record of ``PeriodicCallback(cb, every_k_steps, every_k_epochs)``.

    Every ``every_k_steps`` global steps, every ``every_k_epochs`` epochs, and with an
    epoch period also at the last step of training (the callbacks lib's
    ``periodic_record``).

    Examples:
        >>> periodic_callback_rule(None, 2)
        AnyOf(triggers=(EpochMultiple(k=2), AtLastStep()))
    """
    return periodic_record(every_k_steps, every_k_epochs)


def entry_from_table(table: Mapping[str, Any]) -> tuple[Any, str]:
    """Build a timeline entry from a description table (TOML ``[[callbacks]]`` or a dict).

    The ``type`` key names the callback class; without it, a table with ``schedule`` is a
    ``ScheduledHyperParamSetter``, one with ``every_k_steps``/``every_k_epochs``/
    ``before_train`` a ``PeriodicTrigger``, any other a plain ``Callback`` (which acts
    in every ``trigger_epoch``). The other keys are the class's arguments;
    ``PeriodicCallback`` also takes ``methods``, the methods of the wrapped callback
    that act (default ``["trigger_epoch"]``).

    Returns:
        ``(TimelineEntry, type)``.

    Raises:
        TypeError: `table` is not a mapping, or a value has the wrong type.
        ValueError: unknown type or keys (all listed), or invalid arguments.

    Examples:
        >>> entry, kind = entry_from_table({"name": "saver", "every_k_epochs": 2})
        >>> kind, entry.trigger
        ('PeriodicTrigger', EveryK(steps=None, epochs=2, before_train=False))
        >>> entry_from_table({"name": "lr", "schedule": [[0, 0.1], [3, 0.01]]})[1]
        'ScheduledHyperParamSetter'
        >>> entry_from_table({"name": "x", "every_k_epoch": 2})
        Traceback (most recent call last):
        ...
        ValueError: callback 'x' (Callback): unknown keys ['every_k_epoch']; expected some of ['name', 'type']
    """
    if not isinstance(table, Mapping):
        msg = f"a callback entry must be a table (dict); got {type(table).__name__} {table!r:.80}"
        raise TypeError(msg)
    name = table.get("name")
    if not isinstance(name, str) or not name:
        msg = f"a callback entry needs a non-empty string 'name'; got {table!r:.120}"
        raise TypeError(msg)
    kind = table.get("type")
    if kind is None:
        if "schedule" in table:
            kind = "ScheduledHyperParamSetter"
        elif {"every_k_steps", "every_k_epochs", "before_train"} & set(table):
            kind = "PeriodicTrigger"
        else:
            kind = "Callback"
    if kind not in SHELL_RECORDS:
        msg = f"callback {name!r}: unknown type {kind!r}; expected one of {list(CALLBACK_TYPES)}"
        raise ValueError(msg)
    allowed = _table_keys(kind)
    unknown = sorted(set(table) - allowed)
    if unknown:
        msg = f"callback {name!r} ({kind}): unknown keys {unknown}; expected some of {sorted(allowed)}"
        raise ValueError(msg)
    try:
        return _build_entry(name, kind, table), kind
    except (TypeError, ValueError) as err:
        msg = f"callback {name!r} ({kind}): {err}"
        raise type(err)(msg) from None


def _build_entry(name: str, kind: str, table: Mapping[str, Any]) -> Any:
    """The entry of a table, built by the shell's own builder from the callbacks lib."""
    args = {k: v for k, v in table.items() if k not in ("name", "type")}
    built = SHELL_RECORDS[kind](**args)
    return TimelineEntry(name=name, trigger=built.trigger, kinds=built.kinds)


def _entry(item: Any, index: int) -> tuple[Any, str]:
    if isinstance(item, Mapping):
        return entry_from_table(item)
    if isinstance(item, tuple) and len(item) == 3:
        name, rule, kinds = item
        entry = TimelineEntry(name=name, trigger=rule, kinds=kinds)
    else:
        try:
            found = timeline_entry(item)
        except TypeError:
            msg = (
                f"callbacks #{index}: expected a table, a (name, trigger) or (name, trigger, "
                f"event_kinds) tuple, or a callback; got {type(item).__name__} {item!r:.80}"
            )
            raise TypeError(msg) from None
        if found is None:
            msg = f"callbacks #{index}: {item} never fires (it has no trigger_epoch)"
            raise ValueError(msg)
        entry = found
    kind = getattr(item, "__class__", type(item)).__name__
    if isinstance(item, tuple):
        kind = "ScheduledHyperParamSetter" if isinstance(entry.trigger, OnSchedule) else "trigger"
    return entry, kind


def load_description(
    loop: Mapping[str, Any], callbacks: Iterable[Any], overrides: Mapping[str, Any] | None = None
) -> Description:
    """Check a description's ``loop`` table and ``callbacks`` list and build the records.

    Args:
        loop: ``steps_per_epoch``, ``max_epoch`` and optionally ``starting_epoch`` and
            ``start_global_step``.
        callbacks: tables, ``(name, trigger)`` / ``(name, trigger, event_kinds)`` tuples,
            ``TimelineEntry`` records, or callbacks (what ``timeline_entry`` accepts).
        overrides: loop values that replace those of `loop` (None values are ignored).

    Raises:
        TypeError, ValueError: what is wrong, with every unknown key or bad entry listed.

    Examples:
        >>> d = load_description({"steps_per_epoch": 5, "max_epoch": 2},
        ...                      [{"name": "saver"}], {"max_epoch": 4})
        >>> d.loop.max_epoch, [e.name for e in d.entries], d.types
        (4, ['saver'], ('Callback',))
    """
    if not isinstance(loop, Mapping):
        msg = f"'loop' must be a table with {list(_LOOP_KEYS)}; got {type(loop).__name__}"
        raise TypeError(msg)
    values = dict(loop)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    unknown = sorted(set(values) - set(_LOOP_KEYS))
    if unknown:
        msg = f"'loop' has unknown keys {unknown}; expected some of {list(_LOOP_KEYS)}"
        raise ValueError(msg)
    missing = [k for k in ("steps_per_epoch", "max_epoch") if k not in values]
    if missing:
        msg = f"'loop' needs {missing} (give them in the description or on the command line)"
        raise ValueError(msg)
    spec = LoopSpec(**values)
    if isinstance(callbacks, str | bytes | Mapping) or not isinstance(callbacks, Iterable):
        msg = f"'callbacks' must be a list; got {type(callbacks).__name__}"
        raise TypeError(msg)
    built = [_entry(item, i) for i, item in enumerate(callbacks)]
    names = [e.name for e, _ in built]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        msg = f"callback names must be unique; repeated: {dups}"
        raise ValueError(msg)
    return Description(
        loop=spec, entries=tuple(e for e, _ in built), types=tuple(t for _, t in built)
    )


def run_timeline(description: Description) -> list[Any]:
    """Every firing of the description's callbacks over its run, in loop order.

    Walks the whole run and keeps every firing: `iter_firings` gives them one at a
    time instead.

    Examples:
        >>> d = load_description(
        ...     {"steps_per_epoch": 3, "max_epoch": 4},
        ...     [{"name": "saver", "every_k_epochs": 2},
        ...      {"name": "lr", "schedule": [[0, 0.1], [3, 0.01]]}])
        >>> [(f.kind.value, f.epoch_num, f.global_step, f.name, f.value) for f in run_timeline(d)]
        [('before_train', 0, 0, 'lr', 0.1), ('trigger_epoch', 2, 6, 'saver', None), ('trigger_epoch', 3, 9, 'lr', 0.01), ('trigger_epoch', 4, 12, 'saver', None)]
    """
    return list(iter_firings(description))


def iter_firings(description: Description) -> Iterator[Any]:
    """The firings of `run_timeline`, computed lazily as they are taken.

    Delegates to ``towerkit.callbacks.iter_timeline`` (one ``hooked_sess.run`` per
    step): taking the first ``n`` firings walks the loop only up to the ``n``-th,
    whatever the run's length, in bounded memory.

    Examples:
        >>> d = load_description({"steps_per_epoch": 1000, "max_epoch": 99_999},
        ...                      [{"name": "every step", "every_k_steps": 1}])
        >>> from itertools import islice
        >>> [f.global_step for f in islice(iter_firings(d), 3)]
        [1, 2, 3]
    """
    spec = description.loop
    return cb.iter_timeline(
        list(description.entries),
        spec.starting_epoch,
        spec.max_epoch,
        spec.steps_per_epoch,
        start_global_step=spec.start_global_step,
        steps_per_execution=spec.steps_per_execution,
    )


_NAMESPACE = (
    *("AllOf", "AnyOf", "AtLastStep", "EpochMultiple", "EveryK", "GlobalStepMultiple", "Not"),
    *("OnKinds", "Trigger", "all_of", "any_of", "fires", "negate"),
    *("OnSchedule", "PiecewiseSchedule", "Schedule", "piecewise_schedule", "scheduled_value"),
    *("value_at", "value_in_effect"),
)
"""The trigger and schedule names of ``towerkit.callbacks`` a Python description sees."""


def _python_namespace() -> dict[str, Any]:
    names: dict[str, Any] = {n: getattr(cb, n) for n in _NAMESPACE}
    names.update(
        EventKind=EventKind,
        TimelineEntry=TimelineEntry,
        periodic_callback_rule=periodic_callback_rule,
        trainer_event=trainer_event,
    )
    return names


def read_description(path: str) -> tuple[Mapping[str, Any], Any]:
    """The ``loop`` table and ``callbacks`` list of a ``.toml`` or ``.py`` description.

    Raises:
        ToolError: the file is missing, unreadable, or does not define both.
    """
    if not os.path.exists(path):
        msg = f"description {path!r} does not exist"
        raise ToolError(msg)
    if os.path.isdir(path):
        msg = f"description {path!r} is a directory: expected a .toml or .py file"
        raise ToolError(msg)
    if path.endswith(".toml"):
        data: Mapping[str, Any] = read_toml(path)
    elif path.endswith(".py"):
        try:
            data = runpy.run_path(path, init_globals=_python_namespace())
        except Exception as err:
            msg = f"description {path!r} failed: {type(err).__name__}: {err}"
            raise ToolError(msg) from None
    else:
        msg = f"description {path!r} must end with '.toml' or '.py'"
        raise ToolError(msg)
    missing = [k for k in ("loop", "callbacks") if k not in data]
    if missing:
        msg = f"description {path!r} does not define {missing}"
        raise ToolError(msg)
    return data["loop"], data["callbacks"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="timeline",
        description=(
            "Print when each callback of a training run fires and the value each schedule "
            "sets, from a TOML or Python description, without TensorFlow."
        ),
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("description", help="a .toml or .py file describing the loop and callbacks")
    parser.add_argument("--steps-per-epoch", type=int, help="override loop.steps_per_epoch")
    parser.add_argument(
        "--max-epoch", type=int, help="override loop.max_epoch (1-based, inclusive)"
    )
    parser.add_argument("--starting-epoch", type=int, help="override loop.starting_epoch (1-based)")
    parser.add_argument("--start-global-step", type=int, help="override loop.start_global_step")
    parser.add_argument(
        "--steps-per-execution", type=int, help="override loop.steps_per_execution (K)"
    )
    parser.add_argument("--only", type=re.compile, help="show only callbacks whose name matches")
    parser.add_argument(
        "--limit",
        type=int,
        help="compute and print at most this many firings (the run is walked no further)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 2 when the description is missing or invalid.
    """
    args = _parser().parse_args(argv)
    overrides = {
        "steps_per_epoch": args.steps_per_epoch,
        "max_epoch": args.max_epoch,
        "starting_epoch": args.starting_epoch,
        "start_global_step": args.start_global_step,
        "steps_per_execution": args.steps_per_execution,
    }
    if args.limit is not None and args.limit < 0:
        return fail("timeline", f"--limit must be >= 0; got {args.limit}")
    try:
        loop, callbacks = read_description(args.description)
        description = load_description(loop, callbacks, overrides)
        if args.only is not None:
            description = description.only(args.only)
        firings = iter_firings(description)
    except (ToolError, TypeError, ValueError) as err:
        return fail("timeline", err)
    if args.json:
        print(render_json(description, firings, limit=args.limit))
    else:
        print(render_text(description, firings, limit=args.limit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
