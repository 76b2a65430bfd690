"""Tower functions: call a model-building function under tower contexts and keep a handle per call."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf

from towerkit.towers._context import BaseTowerContext, get_current_tower_context
from towerkit.towers._errors import TowerContextError
from towerkit.towers._names import get_op_tensor_name, join_scope
from towerkit.towers._precision import (
    Precision,
    cast_inputs,
    current_precision,
    precision_policy,
    precision_scope,
)
from towerkit.towers._seams import TowerFn
from towerkit.towers.compat import tf1

_VARIABLE_COLLECTIONS = ("variables", "local_variables", "model_variables")


def validate_input_signature(input_signature: Sequence[Any]) -> tuple[tf.TensorSpec, ...]:
    """Check that `input_signature` is a sequence of named, uniquely named `tf.TensorSpec`.

    Returns:
        The signature as a tuple.

    Raises:
        TypeError: `input_signature` is not a sequence, or has entries that are not TensorSpec.
        ValueError: some specs have no name, or share a name.
    """
    if isinstance(input_signature, (str, bytes)) or not isinstance(input_signature, Sequence):
        msg = f"'input_signature' must be a sequence of tf.TensorSpec; got {type(input_signature).__name__}"
        raise TypeError(msg)
    specs = tuple(input_signature)
    wrong = [
        f"{i}: {type(s).__name__}" for i, s in enumerate(specs) if not isinstance(s, tf.TensorSpec)
    ]
    if wrong:
        msg = (
            f"'input_signature' entries must be tf.TensorSpec; entries at fault: {', '.join(wrong)}"
        )
        raise TypeError(msg)
    unnamed = [str(i) for i, s in enumerate(specs) if not s.name]
    if unnamed:
        msg = (
            f"every spec of 'input_signature' needs a name (tf.TensorSpec(shape, dtype, name=...)); "
            f"unnamed entries: {', '.join(unnamed)}"
        )
        raise ValueError(msg)
    names = [s.name for s in specs]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        msg = f"'input_signature' names must be unique; repeated: {', '.join(map(repr, dups))}"
        raise ValueError(msg)
    return specs


def build_placeholders(
    input_signature: Sequence[tf.TensorSpec], prefix: str = ""
) -> list[tf.Tensor]:
    """Create one placeholder per spec, named ``prefix + spec.name``, in the default graph.

    Args:
        input_signature: named `tf.TensorSpec`s.
        prefix: prepended to every name (e.g. ``"predict_"``).

    Returns:
        The placeholders, in the order of `input_signature`.
    """
    specs = validate_input_signature(input_signature)
    return [tf1.placeholder(s.dtype, s.shape, name=prefix + s.name) for s in specs]


class TowerTensorHandle:
    """The scopes, inputs and outputs of one call of a tower function.

    Names given to the getters are names without the tower's prefix.
    """

    def __init__(
        self,
        ctx: BaseTowerContext,
        inputs: Sequence[Any],
        outputs: Any,
        input_signature: Sequence[tf.TensorSpec] | None = None,
    ) -> None:
        """Keep the context, the input tensors, the outputs and the input signature of a call."""
        self._ctx = ctx
        self._inputs = list(inputs)
        self._outputs = outputs
        self._signature = tuple(input_signature) if input_signature is not None else ()
        self._by_input_name = {s.name: t for s, t in zip(self._signature, self._inputs)}

    def __repr__(self) -> str:
        kind = "training" if self.is_training else "inference"
        return f"TowerTensorHandle(ns_name={self.ns_name!r}, vs_name={self.vs_name!r}, {kind})"

    @property
    def ctx(self) -> BaseTowerContext:
        """The tower context the call was made in."""
        return self._ctx

    @property
    def inputs(self) -> list[Any]:
        """The input tensors given to the call."""
        return list(self._inputs)

    @property
    def outputs(self) -> Any:
        """What the tower function returned."""
        return self._outputs

    @property
    def input_signature(self) -> tuple[tf.TensorSpec, ...]:
        """The input signature of the tower function (empty when unknown)."""
        return self._signature

    @property
    def is_training(self) -> bool:
        """Whether the tower was a training tower."""
        return self._ctx.is_training

    @property
    def ns_name(self) -> str:
        """The tower's name scope."""
        return self._ctx.ns_name

    @property
    def vs_name(self) -> str:
        """The tower's own variable scope (``""`` when it used the enclosing one)."""
        return self._ctx.vs_name

    @property
    def graph(self) -> Any:
        """The graph the tower lives in."""
        return self._ctx.graph

    def _find_variable(self, op_name: str) -> Any | None:
        graph = self._ctx.graph
        candidates = [join_scope(self.vs_name, op_name), join_scope(self.ns_name, op_name)]
        for full in dict.fromkeys(candidates):
            for key in _VARIABLE_COLLECTIONS:
                for var in graph.get_collection(key):
                    if var.op.name == full:
                        return var
        return None

    def get_tensor(self, name: str) -> Any:
        """A tensor (or variable) of this tower.

        Args:
            name: either a tensor or variable name without the tower prefix
                (``"fc/out"`` or ``"fc/out:0"``), or a name of the input signature,
                which gives the tensor that was passed as that input (its own name
                may differ, e.g. when it comes from a queue).

        Raises:
            KeyError: no such tensor or variable in this tower.
        """
        op_name, tensor_name = get_op_tensor_name(name)
        if op_name in self._by_input_name and tensor_name == f"{op_name}:0":
            return self._by_input_name[op_name]
        full = join_scope(self.ns_name, tensor_name)
        try:
            return self._ctx.graph.get_tensor_by_name(full)
        except KeyError:
            pass
        if tensor_name.endswith(":0"):
            var = self._find_variable(op_name)
            if var is not None:
                return var
        msg = (
            f"tower {self.ns_name!r} has no tensor {name!r}: looked for tensor {full!r}, "
            f"variables under {self.vs_name!r} and {self.ns_name!r}, and the input names "
            f"{sorted(self._by_input_name)}"
        )
        raise KeyError(msg)

    def get_tensors(self, names: Sequence[str]) -> list[Any]:
        """`get_tensor` for each name."""
        return [self.get_tensor(n) for n in names]

    __getitem__ = get_tensor

    def get_variable(self, name: str) -> Any:
        """A variable used by this tower, named without the tower's variable-scope prefix.

        Raises:
            KeyError: no such variable.
        """
        var = self._find_variable(get_op_tensor_name(name)[0])
        if var is None:
            msg = (
                f"tower {self.ns_name!r} has no variable {name!r} under variable scope "
                f"{self.vs_name!r} or name scope {self.ns_name!r}"
            )
            raise KeyError(msg)
        return var

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        """`get_variable` for each name."""
        return [self.get_variable(n) for n in names]

    def get_collection(self, key: str | None = None, name: str | None = None) -> list[Any]:
        """The items added to collection `key` by this tower.

        See `BaseTowerContext.get_collection_in_tower`. `name` is a deprecated
        alias of `key`.
        """
        if name is not None:
            warnings.warn(
                "TowerTensorHandle.get_collection(name=...) is deprecated: use key=...",
                DeprecationWarning,
                stacklevel=2,
            )
            key = key or name
        if key is None:
            msg = "TowerTensorHandle.get_collection needs a collection 'key'"
            raise TypeError(msg)
        return self._ctx.get_collection_in_tower(key)


class TowerTensorHandles:
    """A sequence of `TowerTensorHandle`, indexed by position or by tower name."""

    def __init__(self, handles: Sequence[TowerTensorHandle]) -> None:
        """Wrap `handles` (kept in order)."""
        self._handles = tuple(handles)

    def __repr__(self) -> str:
        return f"TowerTensorHandles({[h.ns_name for h in self._handles]!r})"

    def __len__(self) -> int:
        return len(self._handles)

    def __iter__(self) -> Iterator[TowerTensorHandle]:
        return iter(self._handles)

    def __getitem__(self, name_or_index: str | int) -> TowerTensorHandle:
        """The handle at a 0-based position, or the handle whose name scope is `name_or_index`.

        Raises:
            KeyError: no tower has that name.
            IndexError: the position is out of range.
            TypeError: neither a string nor an int.
        """
        if isinstance(name_or_index, str):
            for handle in self._handles:
                if handle.ns_name == name_or_index:
                    return handle
            msg = (
                f"no tower named {name_or_index!r}; towers: {[h.ns_name for h in self._handles]!r}"
            )
            raise KeyError(msg)
        if isinstance(name_or_index, int) and not isinstance(name_or_index, bool):
            return self._handles[name_or_index]
        msg = f"towers are indexed by name (str) or position (int); got {type(name_or_index).__name__}"
        raise TypeError(msg)

    def training(self) -> TowerTensorHandles:
        """The training towers only."""
        return TowerTensorHandles([h for h in self._handles if h.is_training])

    def inference(self) -> TowerTensorHandles:
        """The inference towers only."""
        return TowerTensorHandles([h for h in self._handles if not h.is_training])


class TowerFunc:
    """A tower function with its input signature; every call is recorded as a tower handle.

    Call it inside a `TowerContext`, with one input tensor per spec of the input
    signature; it calls ``tower_fn(*inputs)`` and returns what that returns.
    Calling it outside any tower context raises `TowerContextError`: the tower's
    mode and scopes would be undefined.
    """

    def __init__(self, tower_fn: TowerFn, input_signature: Sequence[tf.TensorSpec]) -> None:
        """Validate `tower_fn` and `input_signature` (named, unique `tf.TensorSpec`s)."""
        if not callable(tower_fn):
            msg = f"'tower_fn' must be callable; got {type(tower_fn).__name__}"
            raise TypeError(msg)
        self._tower_fn = tower_fn
        self._signature = validate_input_signature(input_signature)
        self._handles: list[TowerTensorHandle] = []
        self._policy: Precision | None = None

    def under_precision(self, policy: str | Precision) -> TowerFunc:
        """This tower function building every tower under `policy` (`precision_scope`).

        The returned function shares this one's towers (a call of either is recorded in
        both), so a trainer can hand it to code that calls the tower function itself
        (a custom ``_setup_graph``) and the policy still applies. Under float32 it is
        this function. The policy applies to training towers; an inference tower
        (``is_training=False``) builds in the enclosing `precision_scope`'s policy,
        float32 outside any, as predictors and ``InferenceRunner`` do.

        .. versionchanged:: 0.2
            Inference towers of a bound function follow the enclosing scope.
        """
        policy = precision_policy(policy)
        if not policy.mixed:
            return self
        bound = TowerFunc(self._tower_fn, self._signature)
        bound._handles = self._handles
        bound._policy = policy
        return bound

    def __repr__(self) -> str:
        fn = getattr(self._tower_fn, "__qualname__", repr(self._tower_fn))
        return f"TowerFunc({fn}, inputs={[s.name for s in self._signature]!r}, towers={len(self._handles)})"

    @property
    def tower_fn(self) -> TowerFn:
        """The wrapped function."""
        return self._tower_fn

    @property
    def input_signature(self) -> tuple[tf.TensorSpec, ...]:
        """The named input specs."""
        return self._signature

    @property
    def towers(self) -> TowerTensorHandles:
        """A handle per call so far, in call order."""
        return TowerTensorHandles(self._handles)

    def __call__(self, *inputs: Any) -> Any:
        """Build one tower from `inputs` (one tensor per input spec) and record its handle.

        Under a mixed `precision_scope` the floating inputs reach the tower function
        cast to the policy's compute dtype; the handle keeps the inputs as given.

        Raises:
            TowerContextError: called outside a tower context.
            TypeError: the number of inputs differs from the input signature.
        """
        ctx = get_current_tower_context()
        if ctx is None:
            msg = (
                "a TowerFunc must be called inside a tower context: "
                "use `with TowerContext('', is_training=True): tower_func(*inputs)`"
            )
            raise TowerContextError(msg)
        if len(inputs) != len(self._signature):
            msg = (
                f"tower function takes {len(self._signature)} inputs "
                f"({[s.name for s in self._signature]}); got {len(inputs)}"
            )
            raise TypeError(msg)
        # the bound policy is the training towers': inference towers (InferenceRunner,
        # predictors) build in the enclosing scope's precision, float32 unless asked
        if self._policy is not None and ctx.is_training and current_precision() != self._policy:
            with precision_scope(self._policy):
                outputs = self._tower_fn(*cast_inputs(inputs, self._policy))
        else:
            outputs = self._tower_fn(*cast_inputs(inputs, current_precision()))
        self._handles.append(TowerTensorHandle(ctx, inputs, outputs, self._signature))
        return outputs
