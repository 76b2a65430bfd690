"""Checks on the callback lists a trainer is given: kinds, monitors, input callbacks, shared files."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from towerkit.callbacks import Callback, Callbacks
from towerkit.trainers._errors import UnregisteredInputError

_C = TypeVar("_C", bound=Callback)


def _as_callback_list(what: str, value: _C | Iterable[_C] | None) -> list[_C]:
    """`value` (a callback, a list of them, or None) as a list; TypeError listing bad entries."""
    if value is None:
        return []
    items: object = [value] if isinstance(value, Callback) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        msg = f"{what!r} must be a Callback or a list of Callbacks; got {type(value).__name__}"
        raise TypeError(msg)
    items = list(items)
    bad = [
        f"#{i}: {type(cb).__name__}" for i, cb in enumerate(items) if not isinstance(cb, Callback)
    ]
    if bad:
        msg = f"{what!r} must hold Callback instances; entries at fault: {', '.join(bad)}"
        raise TypeError(msg)
    return items


def _expand_input_callbacks(cbs: list[Callback]) -> list[Callback]:
    """`cbs` with each input source's stand-in (from ``InputSource.setup``) replaced by its callbacks."""
    from towerkit.trainers.inputs._callbacks import InputSourceCallbacks

    if not any(isinstance(cb, InputSourceCallbacks) for cb in cbs):
        return cbs
    out: list[Callback] = []
    for cb in cbs:
        for one in cb.callbacks() if isinstance(cb, InputSourceCallbacks) else [cb]:
            if not any(one is seen for seen in out):
                out.append(one)
    return out


def _check_inputs_registered(graph: Any) -> None:
    """Raise `UnregisteredInputError` naming each source of `graph` whose callbacks nobody drives."""
    from towerkit.trainers.inputs._base import unregistered_inputs

    missing = unregistered_inputs(graph)
    if missing:
        names = ", ".join(map(str, missing))
        msg = (
            f"the input {names} gave tensors to the trainer's graph, but its callbacks are not "
            "registered, so its tensors would produce no data (an iterator never "
            "initialized, placeholders never fed): register them before training, e.g. "
            "self.register_callback(input.setup(input_signature)) in the trainer, or "
            "self.register_callback(input.get_callbacks()) once the towers are built"
        )
        raise UnregisteredInputError(msg)


def _reject_monitors(what: str, cbs: Sequence[Callback]) -> None:
    """TypeError when monitors are given as callbacks: they would receive no statistics."""
    from towerkit.callbacks import MonitorBase

    bad = [f"#{i}: {cb}" for i, cb in enumerate(cbs) if isinstance(cb, MonitorBase)]
    if bad:
        msg = (
            f"{what!r} holds monitors ({', '.join(bad)}): a monitor given as a callback "
            "receives no statistics and writes nothing; pass it in 'monitors' instead"
        )
        raise TypeError(msg)


def _flatten(cbs: Iterable[Any]) -> Iterator[Any]:
    """Every callback of `cbs`, wrapped ones and the monitors of a `Monitors` group included."""
    from towerkit.callbacks import Monitors, ProxyCallback

    for cb in cbs:
        yield cb
        if isinstance(cb, Monitors):
            yield from _flatten(cb.monitors)
        elif isinstance(cb, Callbacks):
            yield from _flatten(cb.cbs)
        elif isinstance(cb, ProxyCallback):
            yield from _flatten([cb.cb])


def file_claims(cbs: Iterable[Any]) -> list[tuple[str, str]]:
    """``(path, callback)`` for each file set a callback of `cbs` writes (after ``setup_graph``).

    A `ModelSaver` claims ``<checkpoint_dir>/model-*``, a `JSONWriter` its ``stats.json``.
    """
    from towerkit.callbacks import JSONWriter, ModelSaver

    claims = []
    for cb in _flatten(cbs):
        if isinstance(cb, ModelSaver) and cb.checkpoint_dir is not None:
            claims.append((os.path.join(os.path.abspath(cb.checkpoint_dir), "model-*"), str(cb)))
        elif isinstance(cb, JSONWriter) and cb.path is not None:
            claims.append((os.path.abspath(cb.path), str(cb)))
    return claims


def claim_conflicts(claims: Iterable[tuple[str, str]]) -> list[str]:
    """The paths claimed more than once, each with its claimants, sorted by path.

    Examples:
        >>> claim_conflicts([("d/stats.json", "JSONWriter"), ("d/model-*", "ModelSaver"),
        ...                  ("d/stats.json", "JSONWriter")])
        ["'d/stats.json' (JSONWriter, JSONWriter)"]
        >>> claim_conflicts([("a/model-*", "ModelSaver"), ("b/model-*", "ModelSaver")])
        []
    """
    owners: dict[str, list[str]] = {}
    for path, who in claims:
        owners.setdefault(path, []).append(who)
    return [f"{p!r} ({', '.join(w)})" for p, w in sorted(owners.items()) if len(w) > 1]


def _check_file_claims(cbs: Iterable[Any]) -> None:
    """ValueError naming the files two callbacks of `cbs` would both write, and those callbacks."""
    conflicts = claim_conflicts(file_claims(cbs))
    if conflicts:
        msg = (
            f"callbacks would write the same files: {'; '.join(conflicts)}; keep one "
            "of each, or give them different directories (checkpoint_dir=...)"
        )
        raise ValueError(msg)
