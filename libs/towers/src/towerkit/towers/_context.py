"""The tower context: which replica of the model is being built, and how its scopes are opened."""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any, Literal

import attrs

from towerkit.towers._errors import TowerContextError
from towerkit.towers.compat import tf1

_log = logging.getLogger("towerkit.towers")

Reuse = Literal["inherit", "reuse", "auto"]
"""How a tower's variable scope treats existing variables (see `tower_reuse`)."""

_REUSE_ARGS: dict[Any, Reuse] = {None: "inherit", False: "inherit", True: "reuse", "auto": "auto"}


def _check_reuse(_inst: object, _attr: attrs.Attribute[bool | str | None], value: object) -> None:
    if not any(value is key or (isinstance(value, str) and value == key) for key in _REUSE_ARGS):
        msg = f"'reuse' must be None, False, True or 'auto'; got {value!r}"
        raise ValueError(msg)


def _check_index(inst: TowerSpec, _attr: attrs.Attribute[int], value: int) -> None:
    if isinstance(inst.total, int) and inst.total >= 1 and not 0 <= value < inst.total:
        msg = f"'index' must be in [0, total={inst.total}) (0-based); got {value}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class TowerSpec:
    """What a tower context opens: its name scope, variable scope, mode and place among towers.

    Attributes:
        ns_name: the tower's name scope (``""`` opens none).
        vs_name: a variable scope opened for the tower (``""`` keeps the current one).
        is_training: a training tower (True) or an inference tower (False).
        index: 0-based index of a training tower among the `total` built together.
        total: how many training towers are built together.
        reuse: ``None`` for the default (see `tower_reuse`), ``True``, ``False`` or ``"auto"``.

    Examples:
        >>> TowerSpec(ns_name="tower1", is_training=True, index=1, total=2)
        TowerSpec(ns_name='tower1', vs_name='', is_training=True, index=1, total=2, reuse=None)
    """

    ns_name: str = attrs.field(validator=attrs.validators.instance_of(str))
    vs_name: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    is_training: bool = attrs.field(converter=bool)
    index: int = attrs.field(default=0, validator=[attrs.validators.instance_of(int), _check_index])
    total: int = attrs.field(
        default=1, validator=[attrs.validators.instance_of(int), attrs.validators.ge(1)]
    )
    reuse: bool | str | None = attrs.field(default=None, validator=_check_reuse)


def tower_reuse(spec: TowerSpec) -> Reuse:
    """How the tower described by `spec` opens its variable scope.

    With ``reuse=None`` (the default):

    - the first training tower (index 0) and a training tower with its own
      ``vs_name`` inherit the enclosing scope's reuse flag, so they create variables;
    - a later training tower without a ``vs_name`` reuses the first tower's
      variables (shared-variable multi-tower training);
    - an inference tower uses ``AUTO_REUSE``: it reuses the training variables
      when they exist and creates them when it is the only tower of its graph
      (export, offline prediction).

    ``True`` forces reuse, ``"auto"`` forces ``AUTO_REUSE``, ``False`` inherits.

    Examples:
        >>> tower_reuse(TowerSpec(ns_name="tower0", is_training=True, total=2))
        'inherit'
        >>> tower_reuse(TowerSpec(ns_name="tower1", is_training=True, index=1, total=2))
        'reuse'
        >>> tower_reuse(TowerSpec(ns_name="tower1", vs_name="tower1", is_training=True, index=1, total=2))
        'inherit'
        >>> tower_reuse(TowerSpec(ns_name="InferenceTower", is_training=False))
        'auto'
    """
    if spec.reuse is not None:
        return _REUSE_ARGS[spec.reuse]
    if not spec.is_training:
        return "auto"
    if spec.index > 0 and not spec.vs_name:
        return "reuse"
    return "inherit"


def is_main_training_tower(spec: TowerSpec) -> bool:
    """Whether `spec` is the main (first, index 0) training tower.

    Examples:
        >>> is_main_training_tower(TowerSpec(ns_name="tower0", is_training=True))
        True
        >>> is_main_training_tower(TowerSpec(ns_name="InferenceTower", is_training=False))
        False
    """
    return spec.is_training and spec.index == 0


def has_own_variables(spec: TowerSpec) -> bool:
    """Whether the tower is meant to own (create) its trainable variables.

    The main training tower creates the shared variables; a training tower with
    its own variable scope creates its own copy. Inference towers own none.

    Examples:
        >>> has_own_variables(TowerSpec(ns_name="tower1", is_training=True, index=1, total=2))
        False
        >>> has_own_variables(TowerSpec(ns_name="tower1", vs_name="tower1", is_training=True, index=1, total=2))
        True
    """
    return spec.is_training and (spec.index == 0 or bool(spec.vs_name))


_CURRENT: contextvars.ContextVar[BaseTowerContext | None] = contextvars.ContextVar(
    "towerkit_tower_context", default=None
)


def get_current_tower_context() -> BaseTowerContext | None:
    """The tower context being built in, or None outside every tower context."""
    return _CURRENT.get()


class BaseTowerContext:
    """A context in which one replica (tower) of the model is built.

    Create one with `TowerContext`. Entering it opens the tower's variable scope
    and name scope and makes it the value of `get_current_tower_context`;
    tower contexts do not nest.
    """

    def __init__(self, ns_name: str, vs_name: str = "", **spec_fields: Any) -> None:
        """Build the context from its name scope, variable scope and `TowerSpec` fields."""
        self._spec = TowerSpec(ns_name=ns_name, vs_name=vs_name, **spec_fields)
        self._graph: Any = None
        self._stack: contextlib.ExitStack | None = None
        self._token: contextvars.Token[BaseTowerContext | None] | None = None
        self._start: dict[str, set[int]] = {}
        self._added: dict[str, list[Any]] | None = None

    @property
    def spec(self) -> TowerSpec:
        """The record this context was built from."""
        return self._spec

    @property
    def is_training(self) -> bool:
        """Whether the tower is built for training."""
        return self._spec.is_training

    @property
    def is_main_training_tower(self) -> bool:
        """Whether this is the main (first, index 0) training tower."""
        return is_main_training_tower(self._spec)

    @property
    def has_own_variables(self) -> bool:
        """Whether this tower creates its own trainable variables."""
        return has_own_variables(self._spec)

    @property
    def index(self) -> int:
        """0-based index of the tower among the training towers built together."""
        return self._spec.index

    @property
    def total(self) -> int:
        """How many training towers are built together."""
        return self._spec.total

    @property
    def name(self) -> str:
        """The name scope of the tower."""
        return self._spec.ns_name

    @property
    def ns_name(self) -> str:
        """The name scope of the tower."""
        return self._spec.ns_name

    @property
    def vs_name(self) -> str:
        """The variable scope the tower opens (``""`` when it keeps the enclosing one)."""
        return self._spec.vs_name

    @property
    def graph(self) -> Any:
        """The graph the tower was entered in (None before it is entered)."""
        return self._graph

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._spec!r})"

    def __enter__(self) -> BaseTowerContext:
        outer = _CURRENT.get()
        if outer is not None:
            msg = (
                f"cannot enter tower context {self.ns_name!r} inside tower context "
                f"{outer.ns_name!r}: tower contexts do not nest"
            )
            raise TowerContextError(msg)
        if self._stack is not None or self._added is not None:
            msg = f"tower context {self.ns_name!r} was already entered once: create a new one"
            raise TowerContextError(msg)
        graph = tf1.get_default_graph()
        stack = contextlib.ExitStack()
        reuse = {"inherit": None, "reuse": True, "auto": tf1.AUTO_REUSE}[tower_reuse(self._spec)]
        scope = self._spec.vs_name or tf1.get_variable_scope()
        stack.enter_context(tf1.variable_scope(scope, reuse=reuse, auxiliary_name_scope=False))
        if self._spec.ns_name:
            stack.enter_context(tf1.name_scope(self._spec.ns_name + "/"))
        self._graph = graph
        self._stack = stack
        self._start = {key: {id(x) for x in graph.get_collection(key)} for key in graph.collections}
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._token is not None:
                _CURRENT.reset(self._token)
        finally:
            self._token = None
            self._added = {key: self._added_to(key) for key in self._graph.collections}
            self._drop_update_ops()
            stack, self._stack = self._stack, None
            if stack is not None:
                stack.close()

    def _drop_update_ops(self) -> None:
        """Keep summaries and ``UPDATE_OPS`` to the main training tower's.

        Batch-norm layers add their moving-statistics updates to ``UPDATE_OPS`` in
        every tower; only the first tower's run (`RunUpdateOps`), so a later training
        tower's leave the collection. Summaries (``tf.compat.v1.summary.*`` in the
        tower function) are the main training tower's only, as in tensorpack: every
        other tower's, inference towers' included, leave ``SUMMARIES`` (an inference
        tower's read placeholders that no training step feeds). The dropped ops stay
        listed in `get_collection_in_tower`.
        """
        if is_main_training_tower(self._spec) or self._added is None:
            return
        keys = [tf1.GraphKeys.SUMMARIES]
        if self._spec.is_training:
            keys.append(tf1.GraphKeys.UPDATE_OPS)
        for key in keys:
            added = {id(x) for x in self._added.get(key, [])}
            if not added:
                continue
            ref = self._graph.get_collection_ref(key)
            ref[:] = [x for x in ref if id(x) not in added]
            _log.info(
                "tower %r: %d op(s) left out of %s (only the main training tower's are kept)",
                self._spec.ns_name,
                len(added),
                key,
            )

    def _added_to(self, key: str) -> list[Any]:
        start = self._start.get(key, set())
        return [x for x in self._graph.get_collection(key) if id(x) not in start]

    def get_collection_in_tower(self, key: str) -> list[Any]:
        """The items added to collection `key` while this tower was being built.

        It compares the collection at the start and end of the tower (or now,
        while the tower is still open), so an item created elsewhere but added
        here counts as added here.

        Raises:
            TowerContextError: the context was never entered.
        """
        if self._added is not None:
            return list(self._added.get(key, []))
        if self._graph is None:
            msg = f"tower context {self.ns_name!r} was never entered: it has no collections yet"
            raise TowerContextError(msg)
        return self._added_to(key)


class TrainTowerContext(BaseTowerContext):
    """A training tower: `index` among `total` towers, index 0 being the main training tower."""

    def __init__(
        self,
        ns_name: str,
        vs_name: str = "",
        index: int = 0,
        total: int = 1,
        reuse: bool | str | None = None,
    ) -> None:
        """See `TowerContext` for the arguments."""
        super().__init__(ns_name, vs_name, is_training=True, index=index, total=total, reuse=reuse)


class PredictTowerContext(BaseTowerContext):
    """An inference tower: it reuses training variables and is never a main training tower."""

    def __init__(
        self,
        ns_name: str,
        vs_name: str = "",
        index: int = 0,
        total: int = 1,
        reuse: bool | str | None = None,
    ) -> None:
        """See `TowerContext` for the arguments."""
        super().__init__(ns_name, vs_name, is_training=False, index=index, total=total, reuse=reuse)


def TowerContext(
    tower_name: str,
    is_training: bool,
    vs_name: str = "",
    *,
    index: int = 0,
    total: int = 1,
    reuse: bool | str | None = None,
) -> BaseTowerContext:
    """The context in which a tower function is called.

    Examples:
        ``with TowerContext("", is_training=True): ...`` builds a single training
        tower at the top level; multi-tower trainers use
        ``TowerContext(f"tower{i}", True, index=i, total=n)`` (shared variables) or
        add ``vs_name=f"tower{i}"`` (one copy of the variables per tower).

    Args:
        tower_name: the tower's name scope, re-entered as a top-level scope
            (``""`` opens none). Inference tower names are free, e.g. ``"InferenceTower"``.
        is_training: build a training tower or an inference tower.
        vs_name: a variable scope for the tower's variables (``""`` keeps the current one).
        index: 0-based index of the tower among the `total` towers built together;
            training tower 0 is the main training tower.
        total: how many towers of this kind are built together.
        reuse: ``None`` (default policy of `tower_reuse`), ``True``, ``False`` or ``"auto"``.

    Returns:
        A `TrainTowerContext` or `PredictTowerContext`, to use in a ``with`` statement.

    Raises:
        ValueError: `index`, `total` or `reuse` are out of range.
        TypeError: a name is not a string.
    """
    if is_training:
        return TrainTowerContext(tower_name, vs_name, index=index, total=total, reuse=reuse)
    return PredictTowerContext(tower_name, vs_name, index=index, total=total, reuse=reuse)
