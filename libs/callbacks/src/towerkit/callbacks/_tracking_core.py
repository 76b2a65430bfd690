"""What the experiment trackers' monitors decide, without a tracker: parameters, end status, run ids.

Pure functions over plain values (no TensorFlow, no tracker package): which parameters
a run reports (`run_params`, `flat_params`), how a run ended (`end_status`), whether a
run continues a tracker run recorded in its logdir (`resumes_tracker_run`), and the
record of those runs (`TRACKER_RUNS_FILE`, `tracker_runs_text`, `read_tracker_runs`).
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

EndStatus = Literal["FINISHED", "FAILED", "KILLED"]
"""How a run ended, in MLflow's words: the epochs done or a stop; an error; Ctrl-C or a preemption."""

TRACKER_RUNS_FILE = "tracker_runs.json"
"""The file in the logdir that records each tracker's run id, so a resumed run continues it."""

MAX_PARAM_CHARS = 500
"""A parameter's value is cut to this many characters (trackers limit a value's length)."""


def end_status(*, preempted: bool, failure: BaseException | None) -> EndStatus:
    """How a run ended, from the trainer's ``preempted`` and ``run_failure``.

    A preemption or a Ctrl-C (``KeyboardInterrupt``) is ``"KILLED"``: the run was
    stopped from outside and may be resumed; any other exception is ``"FAILED"``; a
    run that did its epochs, or that a callback stopped, is ``"FINISHED"``.

    Examples:
        >>> end_status(preempted=False, failure=None)
        'FINISHED'
        >>> end_status(preempted=True, failure=None)
        'KILLED'
        >>> end_status(preempted=False, failure=KeyboardInterrupt())
        'KILLED'
        >>> end_status(preempted=False, failure=ValueError("nan"))
        'FAILED'
    """
    if preempted or isinstance(failure, KeyboardInterrupt):
        return "KILLED"
    if failure is not None:
        return "FAILED"
    return "FINISHED"


def param_value(value: Any) -> str | None:
    """`value` as a parameter's text, or None when it is not a plain value.

    Plain values are None, booleans, numbers, strings and bytes-free lists or tuples of
    them; a class or an object reports its class's name elsewhere (`run_params`).
    Text longer than `MAX_PARAM_CHARS` is cut and ends with ``...``.

    Examples:
        >>> param_value(0.1), param_value(True), param_value("adam"), param_value([1, 2])
        ('0.1', 'True', 'adam', '[1, 2]')
        >>> param_value(object()) is None
        True
    """
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | str):
        text = str(value)
    elif isinstance(value, numbers.Number) and not isinstance(value, complex):
        text = repr(value)
    elif isinstance(value, list | tuple) and all(param_value(v) is not None for v in value):
        text = json.dumps([_jsonable(v) for v in value])
    else:
        return None
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


def _jsonable(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


Scalar = bool | int | float | str | None
"""A parameter's value as the trackers take it."""


def plain_value(value: Any) -> Scalar:
    """`value` as a tracker's parameter value: a scalar as it is, anything else as text.

    NumPy scalars become Python's; lists and tuples of plain values become their JSON
    text; other objects their class's name. Text is cut to `MAX_PARAM_CHARS`.

    Examples:
        >>> plain_value(3), plain_value(0.5), plain_value(True), plain_value(None)
        (3, 0.5, True, None)
        >>> plain_value((1, "a")), plain_value(object())
        ('[1, "a"]', 'object')
    """
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int | float):
        return value
    text = param_value(value)
    return text if text is not None else type(value).__name__


def flat_values(params: Mapping[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """`params` flattened: nested mappings become ``outer/inner`` names, values `plain_value`.

    Raises:
        TypeError: a name that is not a non-empty string.

    Examples:
        >>> flat_values({"lr": 0.1, "opt": {"name": "adam", "beta": 0.9}})
        {'lr': 0.1, 'opt/name': 'adam', 'opt/beta': 0.9}
    """
    out: dict[str, Scalar] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name:
            msg = (
                f"a parameter's name must be a non-empty str; got {name!r} in {prefix or 'params'}"
            )
            raise TypeError(msg)
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            out.update(flat_values(value, f"{key}/"))
        else:
            out[key] = plain_value(value)
    return out


def flat_params(params: Mapping[str, Any]) -> dict[str, str]:
    """`params` as ``{name: text}`` (`flat_values`, each value as text).

    Raises:
        TypeError: a name that is not a non-empty string.

    Examples:
        >>> flat_params({"lr": 0.1, "opt": {"name": "adam", "beta": 0.9}})
        {'lr': '0.1', 'opt/name': 'adam', 'opt/beta': '0.9'}
        >>> flat_params({"model": object()})
        {'model': 'object'}
    """
    return {k: str(param_value(v)) for k, v in flat_values(params).items()}


_TRAINER_COUNTS = ("steps_per_epoch", "starting_epoch", "max_epoch", "steps_per_execution")
_TRAINER_EXTRAS = ("num_towers", "num_workers")
_CONFIG_FIELDS = (
    "steps_per_epoch",
    "starting_epoch",
    "max_epoch",
    "steps_per_execution",
    "logdir_action",
)


def run_params(
    trainer: Any, config: Any = None, params: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """`run_values` as text: the parameters MLflow and W&B get.

    Examples:
        >>> from types import SimpleNamespace
        >>> t = SimpleNamespace(steps_per_epoch=10, max_epoch=3, starting_epoch=1)
        >>> run_params(t, params={"lr": 0.1})["lr"], run_params(t)["max_epoch"]
        ('0.1', '3')
    """
    return {k: str(param_value(v)) for k, v in run_values(trainer, config, params).items()}


def run_values(
    trainer: Any, config: Any = None, params: Mapping[str, Any] | None = None
) -> dict[str, Scalar]:
    """The parameters a tracker gets for a run: what the trainer knows, the config's, the user's.

    From `trainer` (read through its public attributes, each only when it has it): its
    class, the loop's counts (``steps_per_epoch``, ``starting_epoch``, ``max_epoch``,
    ``steps_per_execution``), the precision policy's name, ``num_towers`` and
    ``num_workers``, the model's class (the owner of the tower function) and its
    optimizer's class. From `config` (a ``TrainConfig``, or any object): its plain-valued
    fields of those names and its model's and data's classes. Then `params`, which win.

    Examples:
        >>> from types import SimpleNamespace
        >>> t = SimpleNamespace(steps_per_epoch=10, max_epoch=3, starting_epoch=1)
        >>> run_values(t, params={"lr": 0.1})["lr"], run_values(t)["max_epoch"]
        (0.1, 3)
        >>> run_values(t)["trainer"]
        'SimpleNamespace'
    """
    out: dict[str, Any] = {"trainer": type(trainer).__name__}
    for name in (*_TRAINER_COUNTS, *_TRAINER_EXTRAS):
        value = _read(trainer, name)
        if value is not None and param_value(value) is not None:
            out[name] = value
    precision = _read(trainer, "precision")
    if precision is not None:
        out["precision"] = getattr(precision, "name", precision)
    model = _owner(_read(_read(trainer, "tower_func"), "tower_fn"))
    if config is not None:
        for name in _CONFIG_FIELDS:
            value = _read(config, name)
            if value is not None and param_value(value) is not None:
                out.setdefault(name, value)
        model = model if model is not None else _read(config, "model")
        data = _read(config, "data")
        data = data if data is not None else _read(config, "dataflow")
        if data is not None:
            out["data"] = type(data).__name__
    if model is not None:
        out["model"] = type(model).__name__
        optimizer = _optimizer(model)
        if optimizer is not None:
            out["optimizer"] = type(optimizer).__name__
    return flat_values({**out, **(params or {})})


def _read(obj: Any, name: str) -> Any:
    """``obj.name``, or None where `obj` is None, lacks it or cannot give it now."""
    if obj is None:
        return None
    try:
        return getattr(obj, name, None)
    except Exception:  # a property that cannot answer yet (before the loop, say)
        return None


def _owner(fn: Any) -> Any:
    """The object a bound method (a model's ``build_graph``) belongs to, through wrappers."""
    seen = 0
    while fn is not None and seen < 8:
        owner = getattr(fn, "__self__", None)
        if owner is not None:
            return owner
        fn = getattr(fn, "func", None) or getattr(fn, "__wrapped__", None)
        seen += 1
    return None


def _optimizer(model: Any) -> Any:
    """The model's optimizer when it has made it already (``get_optimizer`` caches it)."""
    get = getattr(model, "get_optimizer", None)
    if get is None or "_optimizer" not in getattr(model, "__dict__", {}):
        return None
    try:
        return get()
    except Exception:
        return None


def resumes_tracker_run(
    stored: str | None, *, starting_epoch: int, resumed_steps: int, global_step: int
) -> bool:
    """Whether a run continues the tracker run `stored` in its logdir (None: none recorded).

    It does when one is recorded and the run does not start from nothing: it starts
    after epoch 1, inside an epoch, or at a global step restored from a checkpoint.

    Examples:
        >>> resumes_tracker_run("abc", starting_epoch=3, resumed_steps=0, global_step=20)
        True
        >>> resumes_tracker_run("abc", starting_epoch=1, resumed_steps=0, global_step=0)
        False
        >>> resumes_tracker_run(None, starting_epoch=3, resumed_steps=0, global_step=20)
        False
    """
    if not stored:
        return False
    return starting_epoch > 1 or resumed_steps > 0 or global_step > 0


def tracker_runs_text(runs: Mapping[str, Mapping[str, str]]) -> str:
    """The text of `TRACKER_RUNS_FILE` holding `runs` (``{tracker: {"run_id": ..., ...}}``).

    Examples:
        >>> text = tracker_runs_text({"mlflow": {"run_id": "abc"}})
        >>> read_tracker_runs(text)
        {'mlflow': {'run_id': 'abc'}}
    """
    return (
        json.dumps({k: dict(v) for k, v in sorted(runs.items())}, indent=2, sort_keys=True) + "\n"
    )


def read_tracker_runs(text: str | None) -> dict[str, dict[str, str]]:
    """The runs recorded in `text` (a `TRACKER_RUNS_FILE`'s); ``{}`` for None or a damaged file.

    A damaged file means no run to continue: the tracker starts a new one.

    Examples:
        >>> read_tracker_runs('{"wandb": {"run_id": "x1"}, "bad": 3}')
        {'wandb': {'run_id': 'x1'}}
        >>> read_tracker_runs("{not json")
        {}
    """
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k): {str(a): str(b) for a, b in v.items() if isinstance(b, str)}
        for k, v in data.items()
        if isinstance(v, dict) and isinstance(v.get("run_id"), str) and v["run_id"]
    }
