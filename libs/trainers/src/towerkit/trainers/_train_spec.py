"""`TrainSpec`: the validated, frozen record behind `TrainConfig`'s tensorpack signature."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

from towerkit.callbacks import Callback, LoopBounds
from towerkit.callbacks.plumbing import check_steps_per_execution, input_kind, whole_number
from towerkit.towers import FLOAT32, Precision, precision_policy
from towerkit.trainers._callback_checks import _as_callback_list, _reject_monitors
from towerkit.trainers._model import ModelDescBase
from towerkit.trainers._multistep import check_k
from towerkit.trainers._resume import LOGDIR_ACTIONS
from towerkit.trainers._seams import DatasetFactory
from towerkit.trainers._xla import check_xla

if TYPE_CHECKING:
    import tensorflow as tf

    from towerkit.callbacks import MonitorBase
    from towerkit.sessinit import SessionInit
    from towerkit.trainers._sesscreate import SessionCreatorLike
    from towerkit.trainers.inputs._base import InputSource

__all__ = ["TrainSpec"]


def _data(spec: Any, __: attrs.Attribute[Any], data: Any) -> None:
    if spec.dataflow is not None and data is not None:
        msg = "TrainConfig takes 'dataflow' or 'data', not both"
        raise ValueError(msg)
    if data is not None and input_kind(data) not in ("source", "dataset", "builder"):
        msg = (
            "'data' must be an InputSource, a tf.data.Dataset or a function of no "
            f"argument building one; got {type(data).__name__} (give an iterable of "
            "datapoints as 'dataflow')"
        )
        raise TypeError(msg)


def _session_creator(spec: Any, attribute: attrs.Attribute[Any], creator: Any) -> None:
    if creator is not None and spec.session_config is not None:
        msg = "TrainConfig takes 'session_creator' or 'session_config', not both"
        raise ValueError(msg)
    _has_method("create_session", "a create_session() method")(spec, attribute, creator)


def _model(_: Any, __: attrs.Attribute[Any], model: Any) -> None:
    if model is not None and not isinstance(model, ModelDescBase):
        msg = f"'model' must be a ModelDesc; got {type(model).__name__}"
        raise TypeError(msg)


def _has_method(name: str, what: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not callable(getattr(value, name, None)):
            msg = f"{attribute.name!r} must have {what}; got {type(value).__name__}"
            raise TypeError(msg)

    return check


def _callback_tuple(what: str, value: Sequence[Callback] | None) -> tuple[Callback, ...] | None:
    if value is None:
        return None
    items = tuple(_as_callback_list(what, value))
    if what != "monitors":
        _reject_monitors(what, items)
    return items


def _callbacks(value: Sequence[Callback] | None) -> tuple[Callback, ...]:
    return _callback_tuple("callbacks", value) or ()


def _extra_callbacks(value: Sequence[Callback] | None) -> tuple[Callback, ...] | None:
    return _callback_tuple("extra_callbacks", value)


def _monitors(value: Sequence[MonitorBase] | None) -> tuple[MonitorBase, ...] | None:
    return cast("tuple[MonitorBase, ...] | None", _callback_tuple("monitors", value))


def _logdir(value: str | os.PathLike[str] | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        msg = f"'logdir' must be a path or None; got {type(value).__name__}"
        raise TypeError(msg)
    return os.path.abspath(os.fspath(value))


def _logdir_action(_: Any, __: attrs.Attribute[Any], action: str) -> None:
    if action not in LOGDIR_ACTIONS:
        msg = f"'logdir_action' must be one of {LOGDIR_ACTIONS}; got {action!r}"
        raise ValueError(msg)


def _seed(_: Any, __: attrs.Attribute[Any], seed: Any) -> None:
    if seed is None:
        return
    msg = f"'seed' must be an int in [0, 2**32) (NumPy's seeds) or None; got {seed!r}"
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(msg)
    if not 0 <= seed < 2**32:
        raise ValueError(msg)


def _flag(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        msg = f"'{attribute.name}' must be True or False; got {value!r}"
        raise TypeError(msg)


def _as_int(value: Any) -> Any:
    """A loop bound as tensorpack's ``int(value)`` took it (``'3'``, ``1e3``); else as given.

    What is not a whole number is left for the loop's check to refuse with its message.
    """
    whole = whole_number(value)
    return value if whole is None else whole


@attrs.frozen(kw_only=True)
class TrainSpec:
    """Every option of a single-cost training run, validated once, when it is built.

    `TrainConfig` keeps tensorpack's signature and builds this record; its attributes
    read the record. Each option is checked by its field's validator, which also
    refuses the options it excludes (``data`` with ``dataflow``, ``session_creator``
    with ``session_config``); the loop's bounds are checked together after them.

    Attributes:
        dataflow: a data flow to read from, or None.
        data: an input source, a dataset or a function building one, or None.
        model: the `ModelDesc`, or None.
        callbacks: the callbacks, a tuple (empty when none were given).
        extra_callbacks: the callbacks after them; None for the defaults.
        monitors: the monitors; None for the defaults.
        session_creator: makes the session (has ``create_session``), or None.
        session_config: the ``ConfigProto`` of the default session creator, or None.
        session_init: loads values into the session (has ``init``), or None.
        starting_epoch: the first epoch (1-based).
        max_epoch: the last epoch, inclusive.
        steps_per_epoch: steps in each epoch; None: the input's size, when it is known.
        logdir: the run's directory, absolute, or None.
        logdir_action: ``"error"``, ``"overwrite"`` or ``"keep"``.
        steps_per_execution: steps per session call (K).
        precision: the mixed-precision policy, a `Precision` record (a name given is
            made one: `towerkit.towers.POLICIES` holds the names); the same record goes
            on to ``setup_graph`` and to the check that the graph was built in it.
        seed: the run's seed (Python's, NumPy's, the graph's, the input workers'), or None.
        deterministic: whether TensorFlow's ops run deterministically.
        xla: False, True, ``"auto"``, or None (the trainer's ``XLA_COMPILE``).

    Examples:
        >>> spec = TrainSpec(max_epoch=3, steps_per_epoch=10)
        >>> spec.loop_bounds()
        LoopBounds(starting_epoch=1, max_epoch=3, steps_per_epoch=10)
        >>> TrainSpec(max_epoch=3).loop_bounds(input_size=4).steps_per_epoch
        4
        >>> TrainSpec(max_epoch=3, steps_per_epoch=10, steps_per_execution=4)
        Traceback (most recent call last):
        ...
        ValueError: 'steps_per_execution' 4 must divide 'steps_per_epoch' 10 (an epoch is a whole number of session calls); divisors near 4: 2, 5
    """

    dataflow: Iterable[Any] | None = None
    data: InputSource | tf.data.Dataset | DatasetFactory | None = attrs.field(
        default=None, validator=_data
    )
    model: ModelDescBase | None = attrs.field(default=None, validator=_model)
    callbacks: tuple[Callback, ...] = attrs.field(default=(), converter=_callbacks)
    extra_callbacks: tuple[Callback, ...] | None = attrs.field(
        default=None, converter=_extra_callbacks
    )
    monitors: tuple[MonitorBase, ...] | None = attrs.field(default=None, converter=_monitors)
    session_creator: SessionCreatorLike | None = attrs.field(
        default=None, validator=_session_creator
    )
    session_config: Any = None
    session_init: SessionInit | None = attrs.field(
        default=None, validator=_has_method("init", "an init(sess) method or be None")
    )
    starting_epoch: int = attrs.field(default=1, converter=_as_int)
    max_epoch: int = attrs.field(default=99999, converter=_as_int)
    steps_per_epoch: int | None = attrs.field(default=None, converter=_as_int)
    logdir: str | None = attrs.field(default=None, converter=_logdir)
    logdir_action: str = attrs.field(default="error", validator=_logdir_action)
    steps_per_execution: int = attrs.field(default=1, converter=check_k)
    precision: Precision = attrs.field(default=FLOAT32, converter=precision_policy)
    seed: int | None = attrs.field(default=None, validator=_seed)
    deterministic: bool = attrs.field(default=False, validator=_flag)
    xla: bool | str | None = attrs.field(default=None, converter=check_xla)

    def __attrs_post_init__(self) -> None:
        if self.deterministic and self.seed is None:
            msg = (
                "deterministic=True needs a seed (e.g. seed=0): deterministic ops with "
                "unseeded random initial values still differ from run to run"
            )
            raise ValueError(msg)
        # checked by the loop's own record now (steps_per_epoch may wait for the input)
        self._bounds(self.steps_per_epoch)

    def loop_bounds(self, input_size: int | None = None) -> LoopBounds:
        """The run's `LoopBounds`: ``steps_per_epoch``, or `input_size` when it is None.

        The one place the loop's bounds are made from the options; the steps per call
        (K) must divide the steps per epoch.

        Raises:
            ValueError: bad bounds, a K that does not divide the steps per epoch, or
                neither ``steps_per_epoch`` nor `input_size`.
        """
        steps = self.steps_per_epoch if self.steps_per_epoch is not None else input_size
        if steps is None:
            msg = "'steps_per_epoch' is needed: it was not given and the input's size is unknown"
            raise ValueError(msg)
        return self._bounds(steps)

    def _bounds(self, steps: int | None) -> LoopBounds:
        """The bounds with `steps` per epoch (1, and K unchecked, while it is None)."""
        bounds = LoopBounds(
            starting_epoch=self.starting_epoch,
            max_epoch=self.max_epoch,
            steps_per_epoch=1 if steps is None else steps,
        )
        if steps is not None:
            check_steps_per_execution(bounds.steps_per_epoch, self.steps_per_execution)
        return bounds
