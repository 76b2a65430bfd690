"""Scenarios: one training run of the suite, as a frozen, JSON-serializable record."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import attrs
from attrs.validators import ge, instance_of, optional

from towerkit.callbacks import LoopBounds
from towerkit.callbacks.plumbing import check_steps_per_execution
from towerkit.conformance._entries import one_of
from towerkit.conformance._trace import event_kind

if TYPE_CHECKING:
    from towerkit.callbacks import EventKind
    from towerkit.towers import Precision

CLOCK = "loop"
"""The name of the recorder that the suite always puts first in a scenario's callbacks."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _int(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{type(instance).__name__}: {attribute.name!r} must be an int; got {type(value).__name__} {value!r}"
        raise TypeError(msg)


def _opt_period(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    _int(instance, attribute, value)
    if value <= 0:
        msg = f"{type(instance).__name__}: {attribute.name!r} must be > 0 or None; got {value}"
        raise ValueError(msg)


def _name(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        msg = (
            f"{type(instance).__name__}: {attribute.name!r} must be a name of letters, digits "
            f"and '_' starting with a letter; got {value!r}"
        )
        raise ValueError(msg)


def _real(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        msg = (
            f"{type(instance).__name__}: {attribute.name!r} must be a finite number; got {value!r}"
        )
        raise TypeError(msg)


def _floats(value: Iterable[Any]) -> tuple[float, ...]:
    return tuple(float(v) for v in value)


@attrs.frozen(kw_only=True)
class LoopSpec:
    """The loop parameters of a run.

    Attributes:
        starting_epoch: the first epoch (1-based).
        max_epoch: the last epoch, inclusive (``starting_epoch - 1`` is an empty run).
        steps_per_epoch: steps (``run_step`` calls) per epoch.
        start_global_step: the global step restored before training starts.
        run_step_repeats: how many times each step calls the trainer's own
            ``run_step`` (0 makes steps without any ``hooked_sess.run``; 2 doubles them).
        steps_per_execution: training steps per session call (K, dividing
            ``steps_per_epoch``); the trainer builds its graph for K, and each
            ``run_step`` makes K steps.

    Examples:
        >>> LoopSpec(starting_epoch=2, max_epoch=3, steps_per_epoch=2)
        LoopSpec(starting_epoch=2, max_epoch=3, steps_per_epoch=2, start_global_step=0, run_step_repeats=1, steps_per_execution=1)
        >>> LoopSpec(starting_epoch=3, max_epoch=1)
        Traceback (most recent call last):
        ...
        ValueError: 'max_epoch' must be >= 'starting_epoch' - 1 (an empty run); got max_epoch=1, starting_epoch=3
    """

    starting_epoch: int = 1
    max_epoch: int = 2
    steps_per_epoch: int = 3
    start_global_step: int = attrs.field(default=0, validator=[_int, ge(0)])
    run_step_repeats: int = attrs.field(default=1, validator=[_int, ge(0)])
    steps_per_execution: int = attrs.field(default=1, validator=[_int, ge(1)])
    bounds: LoopBounds = attrs.field(init=False, repr=False, eq=False)
    """The epochs and steps, checked by the loop's own record."""

    @bounds.default
    def _bounds(self) -> LoopBounds:
        if self.steps_per_execution != 1:
            check_steps_per_execution(self.steps_per_epoch, self.steps_per_execution)
        return LoopBounds(
            starting_epoch=self.starting_epoch,
            max_epoch=self.max_epoch,
            steps_per_epoch=self.steps_per_epoch,
        )


def _decay(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, float) or not 0.0 <= value < 1.0:
        msg = f"{type(instance).__name__}: {attribute.name!r} must be a float in [0, 1); got {value!r}"
        raise ValueError(msg)


class CallbackSpec:
    """Base of the records describing a callback the suite attaches to a run.

    Each record names one real callback of the callbacks lib (or one of the suite's
    recorders) with its arguments; the runner builds it, the reference model
    predicts what it records.
    """

    TYPE: ClassVar[str] = ""


@attrs.frozen(kw_only=True)
class ProbeSpec(CallbackSpec):
    """A recorder of every callback method call, besides the suite's own first one.

    Attributes:
        name: the recorder's name.
        chief_only: its ``chief_only`` flag.
    """

    TYPE: ClassVar[str] = "probe"
    name: str = attrs.field(validator=_name)
    chief_only: bool = attrs.field(default=False, validator=instance_of(bool))


@attrs.frozen(kw_only=True)
class PeriodicTriggerSpec(CallbackSpec):
    """``PeriodicTrigger(recorder, every_k_steps, every_k_epochs, before_train)``.

    The recorder writes down each call of its ``trigger()``.

    Examples:
        >>> PeriodicTriggerSpec(name="t")
        Traceback (most recent call last):
        ...
        ValueError: PeriodicTriggerSpec 't': set every_k_steps, every_k_epochs or before_train
    """

    TYPE: ClassVar[str] = "periodic_trigger"
    name: str = attrs.field(validator=_name)
    every_k_steps: int | None = attrs.field(default=None, validator=_opt_period)
    every_k_epochs: int | None = attrs.field(default=None, validator=_opt_period)
    before_train: bool = attrs.field(default=False, validator=instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if self.every_k_steps is None and self.every_k_epochs is None and not self.before_train:
            msg = f"PeriodicTriggerSpec {self.name!r}: set every_k_steps, every_k_epochs or before_train"
            raise ValueError(msg)


@attrs.frozen(kw_only=True)
class PeriodicCallbackSpec(CallbackSpec):
    """``PeriodicCallback(recorder, every_k_steps, every_k_epochs)`` around a full recorder."""

    TYPE: ClassVar[str] = "periodic_callback"
    name: str = attrs.field(validator=_name)
    every_k_steps: int | None = attrs.field(default=None, validator=_opt_period)
    every_k_epochs: int | None = attrs.field(default=None, validator=_opt_period)

    def __attrs_post_init__(self) -> None:
        if self.every_k_steps is None and self.every_k_epochs is None:
            msg = f"PeriodicCallbackSpec {self.name!r}: set every_k_steps or every_k_epochs"
            raise ValueError(msg)


@attrs.frozen(kw_only=True)
class EnableIfSpec(CallbackSpec):
    """``EnableCallbackIf(recorder, pred)`` with ``pred``: ``global_step % modulus == remainder``.

    Each evaluation of the predicate is recorded too (as ``<name>.pred``).
    """

    TYPE: ClassVar[str] = "enable_if"
    name: str = attrs.field(validator=_name)
    modulus: int = attrs.field(default=2, validator=[_int, ge(1)])
    remainder: int = attrs.field(default=0, validator=[_int, ge(0)])

    def __attrs_post_init__(self) -> None:
        if self.remainder >= self.modulus:
            msg = f"EnableIfSpec {self.name!r}: 'remainder' must be < modulus {self.modulus}; got {self.remainder}"
            raise ValueError(msg)


def _points(value: Iterable[Any]) -> tuple[tuple[int, float], ...]:
    from towerkit.callbacks import piecewise_schedule

    return piecewise_schedule([(p, v) for p, v in value]).points


@attrs.frozen(kw_only=True)
class ScheduleSpec(CallbackSpec):
    """``ScheduledHyperParamSetter(<name>, points, interp, step_based, set_at_beginning)``.

    The parameter is a scalar float32 graph variable ``<name>`` created by the suite
    with value `initial`; a reader after the setter records its value.
    """

    TYPE: ClassVar[str] = "schedule"
    name: str = attrs.field(validator=_name)
    points: tuple[tuple[int, float], ...] = attrs.field(converter=_points)
    interp: Literal["linear"] | None = attrs.field(default=None, validator=one_of(None, "linear"))
    step_based: bool = attrs.field(default=False, validator=instance_of(bool))
    set_at_beginning: bool = attrs.field(default=True, validator=instance_of(bool))
    initial: float = attrs.field(default=-1.0, converter=float, validator=_real)


@attrs.frozen(kw_only=True)
class FuncSpec(CallbackSpec):
    """``HyperParamSetterWithFunc(<name>, f)`` with ``f(e, x) = x * factor if e % every == 0 else x``."""

    TYPE: ClassVar[str] = "func"
    name: str = attrs.field(validator=_name)
    factor: float = attrs.field(default=0.5, converter=float, validator=_real)
    every: int = attrs.field(default=2, validator=[_int, ge(1)])
    initial: float = attrs.field(default=1.0, converter=float, validator=_real)


@attrs.frozen(kw_only=True)
class StatSpec(CallbackSpec):
    """A callback that puts the scalar `name` to the monitors in each ``trigger_epoch``.

    The value put in epoch ``e`` (1-based) is ``values[(e - 1) % len(values)]``.
    """

    TYPE: ClassVar[str] = "stat"
    name: str = attrs.field(validator=_name)
    values: tuple[float, ...] = attrs.field(converter=_floats)

    def __attrs_post_init__(self) -> None:
        if not self.values:
            msg = f"StatSpec {self.name!r}: 'values' must hold at least one number"
            raise ValueError(msg)

    def value_in(self, epoch_num: int) -> float:
        """The value put in epoch `epoch_num` (1-based).

        Examples:
            >>> StatSpec(name="err", values=[3, 1]).value_in(3)
            3.0
        """
        return self.values[(epoch_num - 1) % len(self.values)]


@attrs.frozen(kw_only=True)
class StatMonitorSpec(CallbackSpec):
    """``StatMonitorParamSetter(<name>, stat, lambda x: x * factor, threshold, last_k, reverse)``."""

    TYPE: ClassVar[str] = "stat_monitor"
    name: str = attrs.field(validator=_name)
    stat: str = attrs.field(validator=_name)
    threshold: float = attrs.field(default=0.0, converter=float, validator=_real)
    last_k: int = attrs.field(default=2, validator=[_int, ge(1)])
    reverse: bool = attrs.field(default=False, validator=instance_of(bool))
    factor: float = attrs.field(default=0.5, converter=float, validator=_real)
    initial: float = attrs.field(default=1.0, converter=float, validator=_real)


@attrs.frozen(kw_only=True)
class SaverSpec(CallbackSpec):
    """``ModelSaver(max_to_keep)``, saving into the run's logdir every epoch.

    With `every_n_minutes`, it also saves by its time trigger, on the suite's clock:
    one minute per ``trigger_step`` the suite's first callback has seen (so the
    minutes are the session calls of the loop). With `background`, it writes on its
    thread (``ModelSaver(background=True)``).
    """

    TYPE: ClassVar[str] = "saver"
    name: str = attrs.field(default="ModelSaver", validator=_name)
    max_to_keep: int = attrs.field(default=10, validator=[_int, ge(0)])
    every_n_minutes: int | None = attrs.field(default=None, validator=_opt_period)
    background: bool = attrs.field(default=False, validator=instance_of(bool))


@attrs.frozen(kw_only=True)
class BestSaverSpec(CallbackSpec):
    """``MinSaver(stat, top_k=k)`` (or ``MaxSaver`` with `reverse`), after a ``ModelSaver``."""

    TYPE: ClassVar[str] = "best_saver"
    name: str = attrs.field(validator=_name)
    stat: str = attrs.field(validator=_name)
    reverse: bool = attrs.field(default=False, validator=instance_of(bool))
    top_k: int = attrs.field(default=1, validator=[_int, ge(1)])

    @property
    def filename(self) -> str:
        """The documented default file name of the copy.

        Examples:
            >>> BestSaverSpec(name="best", stat="val_error").filename
            'min-val_error.tfmodel'
        """
        return f"{'max' if self.reverse else 'min'}-{self.stat}.tfmodel"


@attrs.frozen(kw_only=True)
class MarkerSpec(CallbackSpec):
    """A scalar float32 graph variable ``<name>`` (value `initial`) read in ``before_train``.

    A user ``session_init`` may set it; what is read shows which initializer won.
    """

    TYPE: ClassVar[str] = "marker"
    name: str = attrs.field(default="conformance_marker", validator=_name)
    initial: float = attrs.field(default=0.0, converter=float, validator=_real)


@attrs.frozen(kw_only=True)
class VariablesSpec(CallbackSpec):
    """Records the model's variables in ``before_train`` and ``after_train``."""

    TYPE: ClassVar[str] = "variables"
    name: str = attrs.field(default="variables", validator=_name)


@attrs.frozen(kw_only=True)
class TowersSpec(CallbackSpec):
    """Builds a predictor (``trainer.get_predictor``) and records the tower handles."""

    TYPE: ClassVar[str] = "towers"
    name: str = attrs.field(default="towers", validator=_name)


SPEC_TYPES: dict[str, type[CallbackSpec]] = {
    cls.TYPE: cls
    for cls in (
        ProbeSpec,
        PeriodicTriggerSpec,
        PeriodicCallbackSpec,
        EnableIfSpec,
        ScheduleSpec,
        FuncSpec,
        StatSpec,
        StatMonitorSpec,
        SaverSpec,
        BestSaverSpec,
        MarkerSpec,
        VariablesSpec,
        TowersSpec,
    )
}
"""Every callback record, by its ``TYPE`` tag."""

PARAM_SPECS = (ScheduleSpec, FuncSpec, StatMonitorSpec, MarkerSpec)
"""The records that own a graph variable named after them."""


@attrs.frozen(kw_only=True)
class AutoResumeSpec:
    """Run through ``launch_train_with_config(AutoResumeTrainConfig(...), trainer)``.

    Attributes:
        always_resume: the config's ``always_resume``.
        starting_epoch: a ``starting_epoch`` given by the user, or None.
        marker: a user ``session_init`` setting the scenario's marker variable to
            this value, or None for no user ``session_init``.
    """

    always_resume: bool = attrs.field(default=True, validator=instance_of(bool))
    starting_epoch: int | None = attrs.field(default=None, validator=optional([_int, ge(1)]))
    marker: float | None = attrs.field(default=None, validator=optional(_real))


def _stop_at(value: Any) -> tuple[EventKind, int] | None:
    if value is None:
        return None
    kind, nth = value
    return (event_kind(kind), nth)


def _check_stop_at(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    del attribute
    if value is not None and (
        isinstance(value[1], bool) or not isinstance(value[1], int) or value[1] < 0
    ):
        msg = f"Scenario {instance.name!r}: 'stop_at' must be (kind, nth >= 0); got {value!r}"
        raise ValueError(msg)


def _specs(value: Iterable[Any]) -> tuple[CallbackSpec, ...]:
    out = tuple(value)
    bad = [
        f"#{i}: {type(s).__name__}" for i, s in enumerate(out) if not isinstance(s, CallbackSpec)
    ]
    if bad:
        msg = f"Scenario 'callbacks' must hold callback records; entries at fault: {', '.join(bad)}"
        raise TypeError(msg)
    return out


def _policy(value: str | Precision | None) -> Precision:
    """The towers' `Precision` record of `value` (None: `FLOAT32`); TensorFlow loads here, on use."""
    from towerkit.towers import FLOAT32, precision_policy

    return FLOAT32 if value is None else precision_policy(value)


def _policy_name(policy: Precision) -> str:
    return policy.name


@attrs.frozen(kw_only=True)
class Scenario:
    """One training run of the suite: loop parameters, callbacks, options.

    The suite always puts its own recorder (named ``"loop"``) first in the callbacks,
    then the callbacks of `callbacks` in order.

    Attributes:
        name: a unique name (results are looked up by it).
        loop: the loop parameters.
        callbacks: the callback records, in order.
        stop_at: ``(kind, nth)``: the first recorder raises ``StopTraining`` in its
            nth (0-based) call of that kind.
        plain_runs: the first recorder also calls ``trainer.sess.run`` (not the hooked
            session) in ``before_train``, ``trigger_step`` and ``trigger_epoch``.
        non_chief: the trainer's ``is_chief`` is set to False before callbacks are
            registered.
        logdir: the name of the log directory (under the run's work directory);
            scenarios with the same name share it, in the order they run; None
            writes no files.
        json_writer: use a ``JSONWriter`` monitor (needs `logdir`).
        auto_resume: run through ``AutoResumeTrainConfig`` (needs `logdir`).
        model: ``"quadratic"`` (mean squared error), ``"linear"`` (a cost whose
            gradient does not depend on the variables) or ``"layers"`` (the
            regression built with towerkit.layers' ``BatchNorm`` and ``FullyConnected``).
        precision: the mixed-precision policy the trainer builds in (``setup_graph(...,
            precision=...)``, ``TrainConfig(precision=...)``): a `Precision` record, or
            its name (`towerkit.towers.POLICIES`); None: the default, `FLOAT32`. The
            data of a scenario holds the name.

    Examples:
        >>> s = Scenario(name="order", loop=LoopSpec(max_epoch=2, steps_per_epoch=2))
        >>> scenario_from_data(scenario_to_data(s)) == s
        True
        >>> Scenario(name="x", loop=LoopSpec(), callbacks=[ProbeSpec(name="a"), ProbeSpec(name="a")])
        Traceback (most recent call last):
        ...
        ValueError: Scenario 'x': callback names must be unique and not 'loop'; at fault: 'a'
    """

    name: str = attrs.field(validator=instance_of(str))
    loop: LoopSpec = attrs.field(validator=instance_of(LoopSpec))
    callbacks: tuple[CallbackSpec, ...] = attrs.field(default=(), converter=_specs)
    stop_at: tuple[EventKind, int] | None = attrs.field(
        default=None, converter=_stop_at, validator=_check_stop_at
    )
    plain_runs: bool = attrs.field(default=False, validator=instance_of(bool))
    non_chief: bool = attrs.field(default=False, validator=instance_of(bool))
    logdir: str | None = attrs.field(default=None, validator=optional(_name))
    json_writer: bool = attrs.field(default=False, validator=instance_of(bool))
    auto_resume: AutoResumeSpec | None = attrs.field(
        default=None, validator=optional(instance_of(AutoResumeSpec))
    )
    model: Literal["quadratic", "linear", "layers"] = attrs.field(
        default="quadratic", validator=one_of("quadratic", "linear", "layers")
    )
    precision: Precision = attrs.field(
        default=None, converter=_policy, metadata={"to_data": _policy_name}
    )
    ema_decay: float | None = attrs.field(default=None, validator=optional(_decay))

    def __attrs_post_init__(self) -> None:
        names = [s.name for s in self.callbacks]  # type: ignore[attr-defined]
        dup = sorted({n for n in names if names.count(n) > 1 or n == CLOCK})
        if dup:
            msg = (
                f"Scenario {self.name!r}: callback names must be unique and not {CLOCK!r}; "
                f"at fault: {', '.join(map(repr, dup))}"
            )
            raise ValueError(msg)
        needs_dir = [
            what
            for what, on in (
                ("json_writer", self.json_writer),
                ("auto_resume", self.auto_resume is not None),
                (
                    "ModelSaver",
                    any(isinstance(s, SaverSpec | BestSaverSpec) for s in self.callbacks),
                ),
            )
            if on
        ]
        if needs_dir and self.logdir is None:
            msg = f"Scenario {self.name!r}: {', '.join(needs_dir)} write files: set 'logdir'"
            raise ValueError(msg)

    def find(self, name: str) -> CallbackSpec:
        """The callback record called `name`.

        Raises:
            KeyError: no such record; the message lists the names there are.
        """
        for spec in self.callbacks:
            if spec.name == name:  # type: ignore[attr-defined]
                return spec
        msg = f"scenario {self.name!r} has no callback {name!r}; it has {[s.name for s in self.callbacks]}"  # type: ignore[attr-defined]
        raise KeyError(msg)


def _to_data(obj: Any) -> Any:
    if isinstance(obj, enum.Enum):
        return obj.value
    if attrs.has(type(obj)):
        out: dict[str, Any] = {"type": getattr(obj, "TYPE", "") or type(obj).__name__}
        for f in attrs.fields(type(obj)):
            if f.init:  # derived fields (LoopSpec.bounds) are rebuilt on load
                value = getattr(obj, f.name)
                to_data = f.metadata.get("to_data")  # a record kept by a name (the precision)
                out[f.name] = to_data(value) if to_data is not None else _to_data(value)
        return out
    if isinstance(obj, tuple | list):
        return [_to_data(v) for v in obj]
    return obj


_RECORDS: dict[str, type] = {
    **SPEC_TYPES,
    "Scenario": Scenario,
    "LoopSpec": LoopSpec,
    "AutoResumeSpec": AutoResumeSpec,
}


def _from_data(data: Any) -> Any:
    if isinstance(data, Mapping) and "type" in data:
        cls = _RECORDS.get(data["type"])
        if cls is None:
            msg = f"unknown record type {data['type']!r}; known: {sorted(_RECORDS)}"
            raise ValueError(msg)
        return cls(**{k: _from_data(v) for k, v in data.items() if k != "type"})
    if isinstance(data, list):
        return [_from_data(v) for v in data]
    return data


def scenario_to_data(scenario: Scenario) -> dict[str, Any]:
    """`scenario` as JSON-ready data (dicts, lists, numbers, strings).

    Examples:
        >>> scenario_to_data(Scenario(name="s", loop=LoopSpec()))["loop"]["max_epoch"]
        2
    """
    data: dict[str, Any] = _to_data(scenario)
    return data


def scenario_from_data(data: Mapping[str, Any]) -> Scenario:
    """The scenario that `scenario_to_data` turned into `data`.

    Raises:
        ValueError: an unknown record type, or data that fails the records' validation.
    """
    out = _from_data(data)
    if not isinstance(out, Scenario):
        msg = f"'data' must describe a Scenario; got {type(out).__name__}"
        raise ValueError(msg)
    return out
