"""The tower-rule checker: build a tower function as several towers and report broken rules."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import tensorflow as tf

from towerkit.towers import _context
from towerkit.towers._context import TowerContext
from towerkit.towers._errors import TowerCheckError, TowerRuleError
from towerkit.towers._names import scope_segments, strip_tower_prefix
from towerkit.towers._seams import TowerFn
from towerkit.towers._tower import validate_input_signature
from towerkit.towers._varreplace import custom_getter_scope
from towerkit.towers._violations import (
    Violation,
    dedupe_violations,
    format_violations,
    normalize_tower_name,
    outputs_signature,
    reserved_scopes,
)
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.towers")

_ASSIGN_OPS = frozenset(
    {
        "Assign",
        "AssignAdd",
        "AssignSub",
        "AssignVariableOp",
        "AssignAddVariableOp",
        "AssignSubVariableOp",
        "ScatterUpdate",
        "ScatterAdd",
        "ScatterSub",
        "ResourceScatterUpdate",
        "ResourceScatterAdd",
        "ResourceScatterSub",
    }
)


@attrs.define
class _Build:
    """What one tower of the check created and requested (internal, mutable while building)."""

    name: str
    requested: list[str] = attrs.field(factory=list)
    returned: list[Any] = attrs.field(factory=list)
    new_vars: list[Any] = attrs.field(factory=list)
    new_ops: list[Any] = attrs.field(factory=list)
    outputs: Any = None
    error: BaseException | None = None
    reuse_flipped: str | None = None
    lost: list[str] = attrs.field(factory=list)

    stored: frozenset[str] = frozenset()

    def used(self) -> set[str]:
        """Names of the variables the tower asked ``get_variable`` for or read directly."""
        reads = {
            t.op.name
            for op in self.new_ops
            for t in op.inputs
            if t.op.type in ("VarHandleOp", "VariableV2", "Variable")
        }
        return reads | set(self.requested)

    def via_getter(self, var: Any) -> bool:
        """Whether `var` came from ``get_variable`` (seen by the getter, or in the variable store)."""
        return any(v is var for v in self.returned) or var.op.name in self.stored


def _stored_names(graph: Any) -> frozenset[str]:
    """Names of the variables made by ``get_variable`` in `graph` (its variable store)."""
    names: set[str] = set()
    for store in graph.get_collection(("__variable_store",)):
        names.update(getattr(store, "_vars", {}))
    return frozenset(names)


def _all_vars(graph: Any) -> list[Any]:
    out: dict[int, Any] = {}
    for key in (tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.LOCAL_VARIABLES):
        for v in graph.get_collection(key):
            out.setdefault(id(v), v)
    return list(out.values())


def _build(
    graph: Any,
    name: str,
    ctx_kwargs: dict[str, Any],
    tower_fn: TowerFn,
    inputs: Sequence[Any],
    specs: Sequence[Any],
) -> _Build:
    build = _Build(name=name)
    vars_before = {id(v) for v in _all_vars(graph)}
    n_ops = len(graph.get_operations())
    collections = {
        k: {id(x) for x in graph.get_collection(k)} for k in graph.get_all_collection_keys()
    }

    def record(getter: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
        build.requested.append(name)
        var = getter(name, *args, **kwargs)
        build.returned.append(var)
        return var

    with TowerContext(name, **ctx_kwargs), custom_getter_scope(record):
        tower_inputs = [tf.identity(t, name=s.name) for t, s in zip(inputs, specs)]
        scope = tf1.get_variable_scope()
        reuse_before = scope.reuse
        try:
            build.outputs = tower_fn(*tower_inputs)
        except Exception as err:
            build.error = err
        if not reuse_before and tf1.get_variable_scope().reuse:
            build.reuse_flipped = tf1.get_variable_scope().name or "(the root variable scope)"
    build.new_vars = [v for v in _all_vars(graph) if id(v) not in vars_before]
    build.new_ops = graph.get_operations()[n_ops:]
    build.stored = _stored_names(graph)
    for key, ids in collections.items():
        now = {id(x) for x in graph.get_collection(key)}
        if ids - now:
            build.lost.append(key)
    return build


def _fn_name(tower_fn: TowerFn) -> str:
    return getattr(tower_fn, "__qualname__", None) or repr(tower_fn)


def _is_trainable(var: Any, graph: Any) -> bool:
    return any(v is var for v in graph.get_collection(tf1.GraphKeys.TRAINABLE_VARIABLES))


def _assigned_in(var: Any, ops: Sequence[Any]) -> bool:
    for op in ops:
        if (
            op.type in _ASSIGN_OPS
            and op is not var.initializer
            and op.inputs
            and op.inputs[0].op is var.op
        ):
            return True
    return False


def _tower_failure(build: _Build, reference_names: set[str], fn_name: str) -> Violation:
    err = build.error
    missing = [n for n in build.requested if n not in reference_names]
    if isinstance(err, ValueError) and missing and "does not exist" in str(err):
        name = missing[-1]
        return Violation(
            rule=3,
            subject=normalize_tower_name(name),
            message=(
                f"tower {build.name!r} asked for variable {name!r}, which the first training tower "
                "did not create: the variable's name depends on the name scope, a tensor name or "
                "the tower"
            ),
            fix=(
                "name variables and variable scopes with fixed strings (layer names such as "
                "tf1.variable_scope('fc1')), never from tf1.get_default_graph().get_name_scope() "
                "or tensor names"
            ),
        )
    return Violation(
        rule=1,
        subject=fn_name,
        message=(
            f"the tower function fails when built again as tower {build.name!r}: "
            f"{type(err).__name__}: {err}"
        ),
        fix=(
            "keep no state between calls: create objects such as hub modules outside the tower "
            "function, and do not set attributes that change what the next call builds"
        ),
    )


def _check_collections(build: _Build) -> list[Violation]:
    return [
        Violation(
            rule=1,
            subject=key,
            message=f"tower {build.name!r} removed items that were in collection {key!r} before it",
            fix="only add to collections inside a tower function; never clear or edit them",
        )
        for key in build.lost
    ]


def _check_reuse_flip(build: _Build) -> list[Violation]:
    if build.reuse_flipped is None:
        return []
    return [
        Violation(
            rule=4,
            subject=build.reuse_flipped,
            message=(
                f"tower {build.name!r} turned on reuse of variable scope {build.reuse_flipped!r}, "
                "which it did not open"
            ),
            fix=(
                "open your own scope instead: `with tf1.variable_scope('name', reuse=True):`, "
                "or decorate the function with auto_reuse_variable_scope"
            ),
        )
    ]


def _check_first(build: _Build, graph: Any) -> list[Violation]:
    out: list[Violation] = []
    ns = build.name
    trainable = [v for v in build.new_vars if _is_trainable(v, graph)]
    for var in trainable:
        name = var.op.name
        if not build.via_getter(var):
            out.append(
                Violation(
                    rule=4,
                    subject=normalize_tower_name(strip_tower_prefix(name, ns)),
                    message=(
                        f"trainable variable {name!r} is created with tf.Variable, which ignores "
                        "variable reuse: every tower gets its own copy, named after its name scope"
                    ),
                    fix=(
                        "create trainable variables with tf1.get_variable; keep tf.Variable for "
                        "non-trainable per-tower state"
                    ),
                )
            )
        elif ns in name:
            out.append(
                Violation(
                    rule=3,
                    subject=normalize_tower_name(name),
                    message=(
                        f"trainable variable {name!r} has the tower's name scope {ns!r} in its "
                        "name: its name depends on the name scope or on a tensor name"
                    ),
                    fix=(
                        "name variables and variable scopes with fixed strings (layer names), "
                        "not with name scopes or tensor names"
                    ),
                )
            )
        if not (var.dtype.base_dtype.is_floating or var.dtype.base_dtype.is_complex):
            out.append(
                Violation(
                    rule=2,
                    subject=name,
                    message=(
                        f"variable {name!r} of dtype {var.dtype.base_dtype.name} is in "
                        "TRAINABLE_VARIABLES, but gradient descent cannot train it"
                    ),
                    fix="create it with trainable=False",
                )
            )
        elif _assigned_in(var, build.new_ops):
            out.append(
                Violation(
                    rule=2,
                    subject=name,
                    message=(
                        f"trainable variable {name!r} is updated by assignment inside the tower: "
                        "it is state, not a parameter trained by gradient descent"
                    ),
                    fix=(
                        "create it with trainable=False (and add it to MODEL_VARIABLES if "
                        "inference needs it)"
                    ),
                )
            )
    names = [strip_tower_prefix(op.name, ns) for op in build.new_ops]
    names += [v.op.name for v in build.new_vars if build.via_getter(v)]
    for scope in reserved_scopes(normalize_tower_name(n, (ns,)) for n in names):
        out.append(
            Violation(
                rule=5,
                subject=scope,
                message=f"scope or variable {scope!r} contains 'tower', a name reserved for towers",
                fix="rename the scope or variable so that it does not contain 'tower'",
            )
        )
    return out


def _check_again(build: _Build, first: _Build, graph: Any) -> list[Violation]:
    out = []
    for var in build.new_vars:
        if not _is_trainable(var, graph):
            continue
        name = var.op.name
        if build.via_getter(var):
            out.append(
                Violation(
                    rule=3,
                    subject=normalize_tower_name(name),
                    message=(
                        f"tower {build.name!r} created trainable variable {name!r} instead of "
                        "reusing the first tower's: its name differs between towers"
                    ),
                    fix="name variables and variable scopes with fixed strings (layer names)",
                )
            )
        else:
            out.append(
                Violation(
                    rule=4,
                    subject=normalize_tower_name(strip_tower_prefix(name, build.name)),
                    message=(
                        f"tower {build.name!r} created trainable variable {name!r} with "
                        "tf.Variable instead of reusing the first tower's"
                    ),
                    fix="create trainable variables with tf1.get_variable, which respects reuse",
                )
            )
    return out


def _check_outputs(build: _Build, first: _Build, fn_name: str) -> list[Violation]:
    before, after = outputs_signature(first.outputs), outputs_signature(build.outputs)
    if before == after:
        return []
    return [
        Violation(
            rule=1,
            subject=fn_name,
            message=(
                f"the tower function returned {after} as tower {build.name!r} but {before} as the "
                "first tower: it builds something else when called again"
            ),
            fix="keep no state between calls (no attributes set on the first call, no caches)",
        )
    ]


def _check_requests(build: _Build, first: _Build, fn_name: str, graph: Any) -> list[Violation]:
    params = [v.op.name for v in first.new_vars if first.via_getter(v) and _is_trainable(v, graph)]
    used = build.used()
    dropped = [n for n in params if n not in used]
    return [
        Violation(
            rule=1,
            subject=name,
            message=(
                f"tower {build.name!r} did not use variable {name!r} that the first training "
                f"tower of {fn_name!r} used: the function builds less when called again"
            ),
            fix="keep no state between calls (no attributes set on the first call, no caches)",
            severity="warning",
        )
        for name in dropped
    ]


def _check_own_scope(
    build: _Build, first: _Build, graph: Any, skip: Iterable[str] = ()
) -> list[Violation]:
    vs = build.name
    out = []
    reference = {
        v.op.name for v in first.new_vars if first.via_getter(v) and _is_trainable(v, graph)
    }
    created = {v.op.name for v in build.new_vars if _is_trainable(v, graph)}
    for name in sorted(reference - set(skip)):
        if f"{vs}/{name}" not in created:
            out.append(
                Violation(
                    rule=3,
                    subject=name,
                    message=(
                        f"built under its own variable scope {vs!r}, the tower has no "
                        f"{vs + '/' + name!r}: trainable variable {name!r} is not created under "
                        "the enclosing variable scope"
                    ),
                    fix=(
                        "open variable scopes relative to the current one (by name, never an "
                        "absolute VariableScope object) so each tower's variables live in its scope"
                    ),
                )
            )
    for var in build.new_vars:
        if not (build.via_getter(var) and _is_trainable(var, graph)):
            continue
        name = var.op.name
        if not name.startswith(vs + "/"):
            out.append(
                Violation(
                    rule=3,
                    subject=name,
                    message=(
                        f"trainable variable {name!r} does not start with the enclosing variable "
                        f"scope {vs!r}"
                    ),
                    fix="open variable scopes relative to the current one (no absolute scopes)",
                )
            )
            continue
        relative = name[len(vs) + 1 :]
        if vs in scope_segments(relative):
            out.append(
                Violation(
                    rule=3,
                    subject=normalize_tower_name(name),
                    message=(
                        f"trainable variable {name!r} uses the variable scope's name {vs!r} twice"
                    ),
                    fix=(
                        "do not re-open the current variable scope by its name; variable names "
                        "are relative to it already"
                    ),
                )
            )
        elif relative not in reference:
            out.append(
                Violation(
                    rule=3,
                    subject=normalize_tower_name(relative),
                    message=(
                        f"under variable scope {vs!r} the tower creates {name!r}, but the first "
                        f"tower has no {relative!r}: the name depends on the scopes around it"
                    ),
                    fix="name variables and variable scopes with fixed strings (layer names)",
                )
            )
    return out


def _check_inference(build: _Build, first: _Build, graph: Any) -> list[Violation]:
    out = []
    model_vars = graph.get_collection(tf1.GraphKeys.MODEL_VARIABLES)
    shared = {id(v) for v in first.new_vars}
    unique = {id(v): v for v in build.returned}.values()
    for var in unique:
        if not isinstance(var, tf.Variable) or id(var) not in shared or _is_trainable(var, graph):
            continue
        if not any(v is var for v in model_vars):
            name = var.op.name
            out.append(
                Violation(
                    rule=2,
                    subject=name,
                    message=(
                        f"non-trainable variable {name!r} is used for inference but is not in "
                        "MODEL_VARIABLES, so exports and predictors may not restore it"
                    ),
                    fix=(
                        "create it with collections=[tf1.GraphKeys.GLOBAL_VARIABLES, "
                        "tf1.GraphKeys.MODEL_VARIABLES]"
                    ),
                    severity="warning",
                )
            )
    return out


def _run_check(tower_fn: TowerFn, specs: Sequence[Any]) -> list[Violation]:
    _context._CURRENT.set(None)
    fn_name = _fn_name(tower_fn)
    graph = tf.Graph()
    with graph.as_default():
        inputs = [
            tf1.placeholder(s.dtype, s.shape, name=f"check_input_{i}") for i, s in enumerate(specs)
        ]
        first = _build(
            graph, "tower0", {"is_training": True, "index": 0, "total": 3}, tower_fn, inputs, specs
        )
        if first.error is not None:
            msg = (
                f"tower function {fn_name!r} fails when built once as the main training tower, "
                f"so its rules cannot be checked: {type(first.error).__name__}: {first.error}"
            )
            raise TowerCheckError(msg) from first.error
        violations = (
            _check_collections(first) + _check_reuse_flip(first) + _check_first(first, graph)
        )
        reference = {v.op.name for v in first.new_vars} | set(first.requested)
        shared = _build(
            graph, "tower1", {"is_training": True, "index": 1, "total": 3}, tower_fn, inputs, specs
        )
        if shared.error is not None:
            violations.append(_tower_failure(shared, reference, fn_name))
        else:
            violations += _check_collections(shared)
            violations += _check_again(shared, first, graph)
            violations += _check_outputs(shared, first, fn_name)
            violations += _check_requests(shared, first, fn_name, graph)
        own = _build(
            graph,
            "tower2",
            {"is_training": True, "vs_name": "tower2", "index": 2, "total": 3},
            tower_fn,
            inputs,
            specs,
        )
        if own.error is not None:
            violations.append(_tower_failure(own, set(), fn_name))
        else:
            violations += _check_collections(own) + _check_reuse_flip(own)
            dropped = [v.subject for v in violations if v.rule == 1 and v.severity == "warning"]
            violations += _check_own_scope(own, first, graph, skip=dropped)
        infer = _build(
            graph, "InferenceTower", {"is_training": False, "reuse": True}, tower_fn, inputs, specs
        )
        if infer.error is not None:
            violations.append(_tower_failure(infer, reference, fn_name))
        else:
            violations += _check_collections(infer)
            violations += _check_again(infer, first, graph)
            violations += _check_inference(infer, first, graph)
    return dedupe_violations(violations)


def check_tower_function(tower_fn: TowerFn, input_signature: Sequence[Any]) -> list[Violation]:
    """Build `tower_fn` in a scratch graph and report the tower-function rules it breaks.

    The function is built four times in a new graph, from placeholders of
    `input_signature`: as the main training tower ``tower0``, as a second
    training tower ``tower1`` sharing its variables, as a training tower
    ``tower2`` with its own variable scope, and as an inference tower. The
    caller's graph and tower context are not touched.

    What is reported, by rule:

    1. the function fails when called again, builds different outputs or uses
       fewer variables the second time, or removes items from collections;
    2. trainable variables that gradient descent cannot train (non-float dtype,
       or assigned inside the tower); non-trainable variables used for inference
       but missing from ``MODEL_VARIABLES`` (warning);
    3. variable names that depend on the name scope, the tower or tensor names,
       that leave the enclosing variable scope, or repeat its name;
    4. trainable variables created with ``tf.Variable`` (no reuse), and reuse
       turned on for a variable scope the function did not open;
    5. scopes or variables whose name contains ``tower``.

    Args:
        tower_fn: the tower function.
        input_signature: named ``tf.TensorSpec`` of its inputs.

    Returns:
        The violations found, in the order found; empty for a function that follows the rules.

    Raises:
        TowerCheckError: the function fails the first time it is built.
    """
    specs = validate_input_signature(input_signature)
    if not callable(tower_fn):
        msg = f"'tower_fn' must be callable; got {type(tower_fn).__name__}"
        raise TypeError(msg)
    return contextvars.copy_context().run(_run_check, tower_fn, specs)


def ensure_tower_rules(
    tower_fn: TowerFn,
    input_signature: Sequence[Any],
    *,
    warnings_as_errors: bool = False,
) -> list[Violation]:
    """Run `check_tower_function`, log warnings, and raise when there are errors.

    Trainers call this when asked to check their tower function.

    Returns:
        The violations (warnings only, when it returns).

    Raises:
        TowerRuleError: some violations are errors (or any, with `warnings_as_errors`).
    """
    violations = check_tower_function(tower_fn, input_signature)
    errors = [v for v in violations if v.severity == "error" or warnings_as_errors]
    if errors:
        msg = (
            f"tower function {_fn_name(tower_fn)!r} breaks {len(errors)} tower-function rule(s):\n"
            f"{format_violations(errors)}"
        )
        raise TowerRuleError(msg)
    for v in violations:
        _log.warning("tower function %s: %s", _fn_name(tower_fn), v)
    return violations
