"""PredictConfig: what to build for inference, which tensors to feed and fetch, how to load values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import tensorflow as tf

from towerkit.export._names import as_names, check_input_names, check_output_names
from towerkit.sessinit import JustCurrentSession, SessionInit
from towerkit.towers import (
    FLOAT32,
    Precision,
    TowerFunc,
    precision_policy,
    validate_input_signature,
)


def _all_input_names(spec: PredictSpec) -> tuple[str, ...]:
    return tuple(s.name for s in spec.input_signature)


def _input_names_tuple(value: Any) -> tuple[str, ...]:
    return as_names("input_names", value)


def _check_input_names(
    spec: PredictSpec, _attr: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]
) -> None:
    check_input_names(value, _all_input_names(spec))


def _policy_name(value: Precision) -> str:
    return repr(value.name)


@attrs.frozen(kw_only=True)
class PredictSpec:
    """The checked names of a `PredictConfig`: its input signature, what to feed, what to fetch.

    Attributes:
        input_signature: the named specs the tower function takes, in order.
        input_names: the names fed by a predictor, in call order: names of the input
            signature, or of any tensor of the tower (e.g. a ``placeholder_with_default``).
        output_names: tensor names inside the tower, fetched in this order.
        return_input: a predictor returns ``(inputs, outputs)`` instead of ``outputs``.
        precision: the mixed-precision policy the tower is built in, a `Precision`
            record (a policy's name given is made one; its repr shows the name).

    Examples:
        >>> import tensorflow as tf
        >>> spec = PredictSpec(
        ...     input_signature=[tf.TensorSpec([None, 4], tf.float32, "x")], output_names=["prob"]
        ... )
        >>> spec.input_names, spec.output_names
        (('x',), ('prob',))
    """

    input_signature: tuple[tf.TensorSpec, ...] = attrs.field(converter=validate_input_signature)
    input_names: tuple[str, ...] = attrs.field(
        default=attrs.Factory(_all_input_names, takes_self=True),
        converter=_input_names_tuple,
        validator=_check_input_names,
    )
    output_names: tuple[str, ...] = attrs.field(converter=check_output_names)
    return_input: bool = attrs.field(default=False, converter=bool)
    precision: Precision = attrs.field(
        default=FLOAT32, converter=precision_policy, repr=_policy_name
    )

    @property
    def input_specs(self) -> tuple[tf.TensorSpec, ...]:
        """The specs of `input_names` that are names of the input signature, in feeding order.

        Names of other tensors of the tower have no spec before the tower is built.
        """
        by_name = {s.name: s for s in self.input_signature}
        return tuple(by_name[n] for n in self.input_names if n in by_name)


def _model_parts(model: Any) -> tuple[Callable[..., Any], Sequence[tf.TensorSpec]]:
    """The tower function and input signature of a model-description object."""
    build = getattr(model, "build_graph", None)
    get_signature = getattr(model, "get_input_signature", None) or getattr(model, "inputs", None)
    if not callable(build) or not callable(get_signature):
        msg = (
            "'model' must have `build_graph(*inputs)` and `inputs()` (a list of tf.TensorSpec), "
            f"as a ModelDesc does; got {type(model).__name__}"
        )
        raise TypeError(msg)
    return build, get_signature()


def _tower_parts(
    tower_func: Any, input_signature: Sequence[tf.TensorSpec] | None
) -> tuple[Callable[..., Any], Sequence[tf.TensorSpec]]:
    """The function and input signature of a `TowerFunc` or of a plain callable."""
    if isinstance(tower_func, TowerFunc):
        own = tower_func.input_signature
        if input_signature is not None and tuple(input_signature) != own:
            msg = (
                "'input_signature' differs from the one of 'tower_func': "
                f"expected {list(own)} or None; got {list(input_signature)}"
            )
            raise ValueError(msg)
        return tower_func.tower_fn, own
    if not callable(tower_func):
        msg = f"'tower_func' must be a TowerFunc or a callable; got {type(tower_func).__name__}"
        raise TypeError(msg)
    if input_signature is None:
        msg = "'input_signature' is required with a plain callable 'tower_func' (not a TowerFunc)"
        raise ValueError(msg)
    return tower_func, input_signature


class PredictConfig:
    """Everything needed to build a model for inference and load its values.

    Give either `model` (an object with ``inputs()`` returning named
    ``tf.TensorSpec``s and ``build_graph(*inputs)``, as a ``ModelDesc``), or
    `tower_func` (a `TowerFunc`, or a callable together with `input_signature`).
    The tower is always built under ``TowerContext('', is_training=False)``, so
    layers use their inference behaviour (moving statistics, no dropout).
    """

    def __init__(
        self,
        model: Any = None,
        tower_func: Any = None,
        input_signature: Sequence[tf.TensorSpec] | None = None,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
        session_init: SessionInit | None = None,
        session_creator: Any = None,
        return_input: bool = False,
        precision: str | Precision = FLOAT32,
    ) -> None:
        """Check every argument; nothing is built yet.

        Args:
            model: a model description (``inputs()`` and ``build_graph(*inputs)``).
            tower_func: a `TowerFunc` or a callable building the tower from its inputs.
            input_signature: the named specs of a plain callable `tower_func`.
            input_names: the names to feed, in call order (default: every input of the
                signature): names of the input signature, or of any tensor of the tower
                (``"z"`` for a ``placeholder_with_default`` named ``z`` in the model).
            output_names: names of tensors inside the tower to fetch (``"prob"`` or ``"prob:0"``).
            session_init: a `SessionInit` loading the values (default: `JustCurrentSession`,
                which keeps the variables' initial values).
            session_creator: an object with ``create_session()`` returning a session on the
                default graph with variables initialized; default: a new session on the
                predictor's graph, variables initialized by their initializers.
            return_input: predictors return ``(inputs, outputs)`` instead of ``outputs``.
            precision: the mixed-precision policy the tower is built in, a `Precision`
                record or its name (`FLOAT32`, the default; ``"mixed_bfloat16"`` or
                ``"mixed_float16"``: it computes in the low precision from the float32
                variables, for predictors and for the exported graphs; outputs the model
                computes in low precision come out so).

        Raises:
            TypeError: an argument of the wrong kind.
            ValueError: both or neither of `model` and `tower_func`; no input or output
                names, or repeated ones. Names that name no tensor fail when the tower is
                built (`UnknownTensorError`, e.g. in `OfflinePredictor`).
        """
        if (model is None) == (tower_func is None):
            given = "both" if model is not None else "neither"
            msg = f"PredictConfig needs exactly one of 'model' and 'tower_func'; got {given}"
            raise ValueError(msg)
        if model is not None:
            if input_signature is not None:
                msg = "'input_signature' comes from 'model.inputs()'; do not pass it with 'model'"
                raise ValueError(msg)
            fn, signature = _model_parts(model)
        else:
            fn, signature = _tower_parts(tower_func, input_signature)
        names = {} if input_names is None else {"input_names": input_names}
        self._spec = PredictSpec(
            input_signature=signature,
            output_names=output_names,
            return_input=return_input,
            precision=precision,
            **names,
        )
        if session_init is None:
            session_init = JustCurrentSession()
        if not isinstance(session_init, SessionInit):
            msg = (
                "'session_init' must be a SessionInit (e.g. SmartInit(path)); "
                f"got {type(session_init).__name__}"
            )
            raise TypeError(msg)
        if session_creator is not None and not callable(
            getattr(session_creator, "create_session", None)
        ):
            msg = (
                "'session_creator' must have a create_session() method; "
                f"got {type(session_creator).__name__}"
            )
            raise TypeError(msg)
        self._model = model
        self._tower_fn = fn
        self._session_init = session_init
        self._session_creator = session_creator

    def __repr__(self) -> str:
        fn = getattr(self._tower_fn, "__qualname__", repr(self._tower_fn))
        return (
            f"PredictConfig(tower_fn={fn}, input_names={list(self.input_names)}, "
            f"output_names={list(self.output_names)}, session_init={self._session_init!r})"
        )

    @property
    def spec(self) -> PredictSpec:
        """The checked names, as a record."""
        return self._spec

    @property
    def model(self) -> Any:
        """The model description given, or None."""
        return self._model

    @property
    def tower_fn(self) -> Callable[..., Any]:
        """The function building one tower from its inputs."""
        return self._tower_fn

    @property
    def tower_func(self) -> TowerFunc:
        """A new `TowerFunc` over `tower_fn` and the input signature (its towers start empty)."""
        return TowerFunc(self._tower_fn, self._spec.input_signature)

    @property
    def input_signature(self) -> tuple[tf.TensorSpec, ...]:
        """The named specs the tower function takes."""
        return self._spec.input_signature

    @property
    def input_names(self) -> tuple[str, ...]:
        """The signature names fed, in call order."""
        return self._spec.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        """The tensor names fetched, in output order."""
        return self._spec.output_names

    @property
    def session_init(self) -> SessionInit:
        """What loads the values into a new session."""
        return self._session_init

    @property
    def session_creator(self) -> Any:
        """The session creator given, or None for the default one."""
        return self._session_creator

    @property
    def return_input(self) -> bool:
        """Whether predictors return ``(inputs, outputs)``."""
        return self._spec.return_input

    @property
    def precision(self) -> Precision:
        """The mixed-precision policy the tower is built in (`FLOAT32` by default), a record."""
        return self._spec.precision
