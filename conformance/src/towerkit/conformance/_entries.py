"""Trainer entries: the rows of the suite's table, and how ``--trainer MODULE:ATTR`` loads them."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs
from attrs.validators import ge, instance_of

from towerkit.conformance._errors import EntryError

LAUNCHERS = ("inprocess", "horovod", "tf-distributed")
"""How the suite runs a trainer: in the test process, as a horovod job of `processes`
ranks, or as a TensorFlow cluster (one parameter server, `processes` workers) on 127.0.0.1."""

_TARGET = re.compile(r"^(?P<module>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_][\w.]*)$")


def _int(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{type(instance).__name__}: {attribute.name!r} must be an int; got {type(value).__name__} {value!r}"
        raise TypeError(msg)


def one_of(*choices: Any) -> Any:
    """An attrs validator accepting only `choices`, with a message naming the field.

    Examples:
        >>> @attrs.frozen
        ... class R:
        ...     mode: str = attrs.field(validator=one_of("a", "b"))
        >>> R("c")
        Traceback (most recent call last):
        ...
        ValueError: R: 'mode' must be one of ('a', 'b'); got 'c'
    """

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in choices:
            msg = f"{type(instance).__name__}: {attribute.name!r} must be one of {choices}; got {value!r}"
            raise ValueError(msg)

    return check


@attrs.frozen(kw_only=True)
class Capabilities:
    """What a trainer promises, so the suite knows what to expect of it.

    Attributes:
        num_towers: training towers each process builds (one batch each per step).
        variables: ``"shared"``: one copy of each model variable per process, used by
            every tower; ``"replicated"``: a copy per tower, kept equal.
        trains: whether a step changes the model's variables (False for
            ``NoOpTrainer``).
        gradients: how a data-parallel step combines the towers' (and processes')
            gradients: ``"average"`` or ``"sum"``.
        synchronous: whether the towers' updates are one synchronous update; an
            asynchronous trainer is checked on a model whose gradients do not depend
            on the variables, where the order of updates does not matter.
        runs_per_step: ``hooked_sess.run`` calls the trainer's ``run_step`` makes.
        launcher: ``"inprocess"``, ``"horovod"`` (a job of `processes` ranks) or
            ``"tf-distributed"`` (a parameter server and `processes` workers; the
            global step lives on the parameter server and counts the chief's runs,
            and the other workers apply their gradients asynchronously).
        processes: processes of a job (workers); the chief is rank 0.
        towers: whether the trainer has a tower function (``tower_func``, ``towers``,
            ``get_predictor``: a ``TowerTrainer``).
        steps_per_execution: whether ``setup_graph(..., steps_per_execution=K)`` builds a
            K-step loop (several steps per session call); the scenarios with K > 1 are
            skipped for a trainer that declares False.
        precision: whether ``setup_graph(..., precision=...)`` builds the towers in a
            mixed-precision policy; the mixed scenarios are skipped for a trainer that
            declares False.
        plain_sgd: whether a step applies the model's optimizer (plain SGD in the suite)
            to the towers' gradients and nothing else, so that the variables after a
            step can be checked against a NumPy SGD reference. A trainer whose update
            differs on purpose (gradient accumulation, an average of the weights, its own
            optimizer) declares False: the ``numerics`` group and the layers model's
            steps are skipped, with this reason; every other check applies.

    Examples:
        >>> Capabilities(num_towers=2, variables="replicated").is_data_parallel
        True
        >>> Capabilities(variables="mirrored")
        Traceback (most recent call last):
        ...
        ValueError: Capabilities: 'variables' must be one of ('shared', 'replicated'); got 'mirrored'
    """

    num_towers: int = attrs.field(default=1, validator=[_int, ge(1)])
    variables: Literal["shared", "replicated"] = attrs.field(
        default="shared", validator=one_of("shared", "replicated")
    )
    trains: bool = attrs.field(default=True, validator=instance_of(bool))
    gradients: Literal["average", "sum"] = attrs.field(
        default="average", validator=one_of("average", "sum")
    )
    synchronous: bool = attrs.field(default=True, validator=instance_of(bool))
    runs_per_step: int = attrs.field(default=1, validator=[_int, ge(0)])
    launcher: Literal["inprocess", "horovod", "tf-distributed"] = attrs.field(
        default="inprocess", validator=one_of(*LAUNCHERS)
    )
    processes: int = attrs.field(default=1, validator=[_int, ge(1)])
    towers: bool = attrs.field(default=True, validator=instance_of(bool))
    steps_per_execution: bool = attrs.field(default=True, validator=instance_of(bool))
    precision: bool = attrs.field(default=True, validator=instance_of(bool))
    plain_sgd: bool = attrs.field(default=True, validator=instance_of(bool))

    @property
    def is_data_parallel(self) -> bool:
        """Whether one step trains on several batches (towers times processes)."""
        return self.num_towers * self.processes > 1

    @property
    def chief_by_role(self) -> bool:
        """Whether the chief is fixed by the process's role (worker 0 of a cluster)."""
        return self.launcher == "tf-distributed"

    @property
    def total_towers(self) -> int:
        """Training towers over all processes of a job."""
        return self.num_towers * self.processes


CAPABILITY_NAMES = tuple(f.name for f in attrs.fields(Capabilities))
"""The attributes a factory may carry to declare its capabilities."""


def _factory(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    del instance, attribute
    if isinstance(value, str):
        parse_target(value)
    elif not callable(value):
        msg = f"'factory' must be a callable or a 'module:attr' string; got {type(value).__name__}"
        raise TypeError(msg)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@attrs.frozen(kw_only=True)
class TrainerEntry:
    """One row of the suite: a trainer, how to make it, what it promises.

    The factory is called with a fresh ``tf.Graph`` as the default graph:

    - ``factory()`` returns a trainer with nothing built; the suite calls
      ``trainer.setup_graph(model.input_signature, model.make_input(),
      model.build_cost, model.make_optimizer)`` (the trainer is a
      ``SingleCostTrainer``), or ``launch_train_with_config`` for resume checks;
    - ``factory(model)`` builds the graph itself from the suite's model (see
      `SuiteModel`) and returns a trainer ready for ``train_with_defaults``.

    Attributes:
        name: the row's name in test ids and the summary table.
        factory: the factory, or where to import it from (``"module:attr"``); a
            string is needed for multi-process launchers, whose processes import it.
        capabilities: what the trainer promises.
        requires: names that must be importable from ``towerkit.trainers`` for the
            row to exist (built-in rows of trainers an older lib does not ship).

    Examples:
        >>> TrainerEntry(name="mine", factory="my_pkg.trainers:make")
        TrainerEntry(name='mine', factory='my_pkg.trainers:make', capabilities=Capabilities(num_towers=1, variables='shared', trains=True, gradients='average', synchronous=True, runs_per_step=1, launcher='inprocess', processes=1, towers=True, steps_per_execution=True, precision=True, plain_sgd=True), requires=())
    """

    name: str = attrs.field(validator=instance_of(str))
    factory: str | Callable[..., Any] = attrs.field(validator=_factory)
    capabilities: Capabilities = attrs.field(
        factory=Capabilities, validator=instance_of(Capabilities)
    )
    requires: tuple[str, ...] = attrs.field(default=(), converter=_names)

    def __attrs_post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "[]\n"):
            msg = f"TrainerEntry 'name' must be non-empty, without brackets or newlines; got {self.name!r}"
            raise ValueError(msg)
        if self.capabilities.launcher != "inprocess" and not isinstance(self.factory, str):
            msg = (
                f"TrainerEntry {self.name!r}: launcher {self.capabilities.launcher!r} runs the "
                "factory in other processes, so 'factory' must be a 'module:attr' string"
            )
            raise ValueError(msg)

    def load_factory(self) -> Callable[..., Any]:
        """The factory callable (imported when given as a string).

        Raises:
            EntryError: the module or attribute cannot be imported, or is not callable.
        """
        factory = resolve_target(self.factory) if isinstance(self.factory, str) else self.factory
        if not callable(factory):
            msg = f"trainer entry {self.name!r}: {self.factory!r} is not callable"
            raise EntryError(msg)
        return factory

    @property
    def builds_graph(self) -> bool:
        """Whether the factory takes the model and builds the graph itself."""
        return takes_model(self.load_factory())

    def factory_path(self) -> str:
        """``"module:attr"`` of the factory, for other processes.

        Raises:
            EntryError: a callable that cannot be imported back by its qualified name.
        """
        if isinstance(self.factory, str):
            return self.factory
        module = getattr(self.factory, "__module__", None)
        qual = getattr(self.factory, "__qualname__", "")
        if not module or "<" in qual:
            msg = f"trainer entry {self.name!r}: its factory {self.factory!r} cannot be imported by name"
            raise EntryError(msg)
        return f"{module}:{qual}"


def parse_target(text: str) -> tuple[str, str]:
    """Split ``"package.module:attr"`` into module and attribute.

    Raises:
        EntryError: not of that form.

    Examples:
        >>> parse_target("my_pkg.trainers:make_trainer")
        ('my_pkg.trainers', 'make_trainer')
        >>> parse_target("make_trainer")
        Traceback (most recent call last):
        ...
        towerkit.conformance.EntryError: '--trainer' takes MODULE:ATTR (e.g. my_pkg.trainers:make_trainer) or the name of a built-in row; got 'make_trainer'
    """
    m = _TARGET.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        msg = (
            "'--trainer' takes MODULE:ATTR (e.g. my_pkg.trainers:make_trainer) or the name of "
            f"a built-in row; got {text!r}"
        )
        raise EntryError(msg)
    return m["module"], m["attr"]


def resolve_target(text: str) -> Any:
    """Import ``"module:attr"`` (``attr`` may be dotted) and return the object.

    Raises:
        EntryError: the import or the attribute lookup fails; the message says which.
    """
    module_name, attr = parse_target(text)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        msg = f"cannot import module {module_name!r} of {text!r}: {type(err).__name__}: {err}"
        raise EntryError(msg) from err
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as err:
            msg = f"module {module_name!r} has no attribute {attr!r} (from {text!r})"
            raise EntryError(msg) from err
    return obj


def takes_model(factory: Callable[..., Any]) -> bool:
    """Whether a factory takes the suite's model (one required positional parameter).

    Raises:
        EntryError: it takes more than one required argument.

    Examples:
        >>> takes_model(lambda: None), takes_model(lambda model: None)
        (False, True)
    """
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) > 1:
        msg = (
            f"a trainer factory takes no argument or the suite's model; {factory!r} requires "
            f"{[p.name for p in required]}"
        )
        raise EntryError(msg)
    return len(required) == 1


def capabilities_of(factory: Any) -> Capabilities:
    """The capabilities a factory declares as attributes (``capabilities`` or one per field).

    Examples:
        >>> def make(): ...
        >>> make.num_towers = 2
        >>> capabilities_of(make).num_towers
        2
    """
    declared = getattr(factory, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared
    given = {n: getattr(factory, n) for n in CAPABILITY_NAMES if hasattr(factory, n)}
    try:
        return Capabilities(**given)
    except (TypeError, ValueError) as err:
        msg = f"the capabilities declared on {factory!r} are invalid: {err}"
        raise EntryError(msg) from err


def entries_from(target: str) -> list[TrainerEntry]:
    """The rows a ``--trainer MODULE:ATTR`` option names.

    ``ATTR`` may be a `TrainerEntry`, a list of them, or a factory (a callable;
    its capabilities read with `capabilities_of`, its row named ``ATTR``).

    Raises:
        EntryError: the target cannot be imported or is none of those.
    """
    obj = resolve_target(target)
    if isinstance(obj, TrainerEntry):
        return [obj]
    if isinstance(obj, list | tuple) and obj and all(isinstance(e, TrainerEntry) for e in obj):
        return list(obj)
    if callable(obj):
        takes_model(obj)
        _, attr = parse_target(target)
        return [TrainerEntry(name=attr, factory=target, capabilities=capabilities_of(obj))]
    msg = (
        f"{target!r} is a {type(obj).__name__}; expected a trainer factory, a TrainerEntry "
        "or a list of TrainerEntry"
    )
    raise EntryError(msg)


def available(entry: TrainerEntry) -> bool:
    """Whether every name the entry requires is in the installed ``towerkit.trainers``."""
    if not entry.requires:
        return True
    trainers = importlib.import_module("towerkit.trainers")
    return all(hasattr(trainers, n) for n in entry.requires)


def select_entries(targets: Sequence[str], builtin: Sequence[TrainerEntry]) -> list[TrainerEntry]:
    """The rows to run for the ``--trainer`` options given.

    No option: every built-in row. Otherwise each option adds rows: ``builtin``
    (every built-in row), the name of a built-in row, or ``MODULE:ATTR``. A later row
    with the name of an earlier one replaces it.

    Raises:
        EntryError: an option that names nothing.

    Examples:
        >>> rows = [TrainerEntry(name="A", factory="m:a"), TrainerEntry(name="B", factory="m:b")]
        >>> [e.name for e in select_entries([], rows)]
        ['A', 'B']
        >>> [e.name for e in select_entries(["B"], rows)]
        ['B']
    """
    if not targets:
        return list(builtin)
    by_name = {e.name: e for e in builtin}
    out: dict[str, TrainerEntry] = {}
    for target in targets:
        if target == "builtin":
            found = list(builtin)
        elif target in by_name:
            found = [by_name[target]]
        elif ":" in target:
            found = entries_from(target)
        else:
            msg = (
                f"'--trainer {target}' names no built-in row (they are {sorted(by_name)} or "
                "'builtin') and is not MODULE:ATTR"
            )
            raise EntryError(msg)
        for entry in found:
            out.pop(entry.name, None)
            out[entry.name] = entry
    return list(out.values())
