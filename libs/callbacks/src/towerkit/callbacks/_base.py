"""The callback base class, the proxy and factory callbacks, and the group the trainer drives."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from towerkit.callbacks._errors import StopTraining
from towerkit.callbacks._types import TrainerView
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")

HOOK_METHODS = (
    "_setup_graph",
    "_before_train",
    "_after_train",
    "_before_epoch",
    "_after_epoch",
    "_before_run",
    "_after_run",
    "_trigger_step",
    "_trigger_epoch",
    "_trigger",
)
"""The methods a callback overrides; the public method of each drops the underscore."""


def scope_name(name: str) -> str:
    """``name`` made a valid root name scope (TensorFlow rejects e.g. a leading ``_``).

    Examples:
        >>> scope_name("_KeepW")
        'KeepW'
        >>> scope_name("my callback!")
        'my_callback_'
        >>> scope_name("___")
        'Callback'
    """
    cleaned = re.sub(r"[^A-Za-z0-9_.\\/>-]", "_", name)
    return re.sub(r"^[^A-Za-z0-9.]+", "", cleaned) or "Callback"


class Callback:
    """Base class of everything the training loop calls back.

    The trainer calls the public methods (``setup_graph``, ``before_train``,
    ``before_epoch``, ``before_run``/``after_run`` around each ``hooked_sess.run``,
    ``trigger_step`` after each step, ``after_epoch``, ``trigger_epoch``,
    ``after_train``); a subclass overrides their underscore twins. By default
    ``trigger_epoch`` calls ``trigger``, which triggers such as
    :class:`PeriodicTrigger` call at other times. The read-only properties
    ``epoch_num``, ``global_step`` and ``local_step`` give the trainer's counters.

    Attributes:
        trainer: the :class:`TrainerView` driving this callback, from ``setup_graph`` on.
        graph: the trainer's graph, from ``setup_graph`` on.
        name_scope: name scope of the ops built in ``_setup_graph``; the class name when empty.
    """

    _chief_only: bool = True
    name_scope: str = ""
    trainer: TrainerView
    graph: Any

    # -- the phases -----------------------------------------------------------------

    def setup_graph(self, trainer: TrainerView) -> None:
        """Attach to ``trainer`` and build this callback's ops (before the graph is finalized)."""
        self.trainer = trainer
        self.graph = trainer.graph
        with (
            self.graph.as_default(),
            tf1.name_scope(scope_name(self.name_scope or type(self).__name__)),
        ):
            self._setup_graph()

    def before_train(self) -> None:
        """Called once the session exists and is initialized, right before the first step."""
        self._before_train()

    def after_train(self) -> None:
        """Called once when training ends, normally or by :class:`StopTraining`."""
        self._after_train()

    def before_epoch(self) -> None:
        """Called right before each epoch."""
        self._before_epoch()

    def after_epoch(self) -> None:
        """Called right after the last step of each epoch."""
        self._after_epoch()

    def before_run(self, run_context: Any) -> Any:
        """Called before each ``hooked_sess.run``; may return ``SessionRunArgs`` to fetch along."""
        return self._before_run(run_context)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Called after each ``hooked_sess.run`` with the values asked for in ``before_run``."""
        self._after_run(run_context, run_values)

    def trigger_step(self) -> None:
        """Called after each step (one ``run_step``)."""
        self._trigger_step()

    def trigger_epoch(self) -> None:
        """Called after each epoch, after ``after_epoch``; calls ``trigger`` by default."""
        self._trigger_epoch()

    def trigger(self) -> None:
        """The callback's periodic action: every epoch by default, or as a trigger schedules it."""
        self._trigger()

    # -- what subclasses override ------------------------------------------------------

    def _setup_graph(self) -> None:
        pass

    def _before_train(self) -> None:
        pass

    def _after_train(self) -> None:
        pass

    def _before_epoch(self) -> None:
        pass

    def _after_epoch(self) -> None:
        pass

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        return None

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context, run_values

    def _trigger_step(self) -> None:
        pass

    def _trigger_epoch(self) -> None:
        self.trigger()

    def _trigger(self) -> None:
        pass

    # -- introspection -----------------------------------------------------------------

    accepts_coarse_steps: bool = False
    """Whether the per-step hooks may run once per session call of several steps.

    With ``steps_per_execution=K`` > 1 a trainer calls ``before_run``/``after_run``/
    ``trigger_step`` once per call, at the last step of its K; a callback that has
    such hooks and does not set this is refused at setup. Set it in a subclass whose
    per-step work reads only what a call's end shows (counters, fetches of tensors
    outside the training loop).

    .. versionadded:: 0.2
    """

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        """Why this callback cannot run with ``steps_per_execution`` steps per call; empty if it can.

        Call it once set up (``has_hook`` may depend on the graph).

        .. versionadded:: 0.2
        """
        if steps_per_execution == 1 or self.accepts_coarse_steps:
            return []
        hooks = [m[1:] for m in ("_before_run", "_after_run", "_trigger_step") if self.has_hook(m)]
        if not hooks:
            return []
        return [
            f"{self} has per-step hooks ({', '.join(hooks)}) that would run once per "
            f"{steps_per_execution} steps; a callback that accepts that sets "
            "'accepts_coarse_steps = True'"
        ]

    def has_hook(self, method: str) -> bool:
        """Whether this callback does something in ``method`` (an entry of ``HOOK_METHODS``).

        The loop skips callbacks that do not, so a callback that does nothing in a
        phase costs nothing there.
        """
        if method not in HOOK_METHODS:
            msg = f"'method' must be one of {HOOK_METHODS}; got {method!r}"
            raise ValueError(msg)
        if method == "_trigger_epoch" and self.has_hook("_trigger"):
            return True
        return getattr(type(self), method) is not getattr(Callback, method)

    # -- the trainer's counters, read-only ------------------------------------------------

    @property
    def epoch_num(self) -> int:
        """The trainer's running epoch (1-based): ``self.trainer.epoch_num``."""
        return self._trainer_for("epoch_num").epoch_num

    @property
    def global_step(self) -> int:
        """The trainer's global step: ``self.trainer.global_step``."""
        return self._trainer_for("global_step").global_step

    @property
    def local_step(self) -> int:
        """The 0-based index of the current step in its epoch: ``self.trainer.local_step``."""
        return self._trainer_for("local_step").local_step

    def _trainer_for(self, what: str) -> TrainerView:
        try:
            return self.trainer
        except AttributeError:
            msg = (
                f"{self}.{what} reads the trainer's counter, but the callback is not set up "
                "yet: read it from setup_graph on (once a trainer drives the callback)"
            )
            raise AttributeError(msg) from None

    @property
    def chief_only(self) -> bool:
        """Whether only the chief process runs this callback."""
        return self._chief_only

    @chief_only.setter
    def chief_only(self, value: bool) -> None:
        self._chief_only = bool(value)

    def set_chief_only(self, v: bool = True) -> Callback:
        """Set :attr:`chief_only` and return the callback itself."""
        self.chief_only = v
        return self

    def get_tensors_maybe_in_tower(self, names: Sequence[str]) -> list[Any]:
        """Tensors named ``names`` in the graph, else in the first training tower.

        Args:
            names: tensor names, with or without ``:0``, without a tower prefix.

        Raises:
            KeyError: a name is in neither place; the message lists every missing name.
        """
        towers = getattr(self.trainer, "towers", None)
        first_tower = None
        if towers is not None:
            training = towers.training()
            first_tower = training[0] if len(training) else None
        found, missing = [], []
        for name in [names] if isinstance(names, str) else names:
            full = name if ":" in name else f"{name}:0"
            try:
                found.append(self.graph.get_tensor_by_name(full))
                continue
            except KeyError:
                pass
            if first_tower is not None:
                try:
                    found.append(first_tower.get_tensor(name))
                    continue
                except KeyError:
                    pass
            missing.append(name)
        if missing:
            msg = f"{self}: no tensor named {missing} in the graph" + (
                " nor in the first training tower" if first_tower is not None else ""
            )
            raise KeyError(msg)
        return found

    def __str__(self) -> str:
        return type(self).__name__


class ProxyCallback(Callback):
    """A callback that forwards every method to another one; the base of callback wrappers.

    Args:
        cb: the callback forwarded to.
    """

    def __init__(self, cb: Callback) -> None:
        if not isinstance(cb, Callback):
            msg = f"'cb' must be a Callback; got {type(cb).__name__}"
            raise TypeError(msg)
        self.cb = cb
        self._chief_only = cb.chief_only

    def has_hook(self, method: str) -> bool:
        if getattr(type(self), method) is not getattr(ProxyCallback, method):
            return True
        return self.cb.has_hook(method)

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        # A wrapper forwards the per-step hooks: the wrapped callback decides.
        return self.cb.coarse_steps_faults(steps_per_execution)

    def setup_graph(self, trainer: TrainerView) -> None:
        self.trainer = trainer
        self.graph = trainer.graph
        self.cb.setup_graph(trainer)
        with (
            self.graph.as_default(),
            tf1.name_scope(scope_name(self.name_scope or type(self).__name__)),
        ):
            self._setup_graph()

    def _before_train(self) -> None:
        self.cb.before_train()

    def _after_train(self) -> None:
        self.cb.after_train()

    def _before_epoch(self) -> None:
        self.cb.before_epoch()

    def _after_epoch(self) -> None:
        self.cb.after_epoch()

    def _before_run(self, run_context: Any) -> Any:
        return self.cb.before_run(run_context)

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        self.cb.after_run(run_context, run_values)

    def _trigger_step(self) -> None:
        self.cb.trigger_step()

    def _trigger_epoch(self) -> None:
        self.cb.trigger_epoch()

    def _trigger(self) -> None:
        self.cb.trigger()

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.cb})"


class CallbackFactory(Callback):
    """A callback made of plain functions, each taking the callback as its only argument.

    Args:
        setup_graph: called in ``setup_graph``.
        before_train: called in ``before_train``.
        trigger: called in ``trigger`` (every epoch unless scheduled otherwise).
        after_train: called in ``after_train``.
    """

    def __init__(
        self,
        setup_graph: Callable[[Callback], None] | None = None,
        before_train: Callable[[Callback], None] | None = None,
        trigger: Callable[[Callback], None] | None = None,
        after_train: Callable[[Callback], None] | None = None,
    ) -> None:
        fns = {
            "setup_graph": setup_graph,
            "before_train": before_train,
            "trigger": trigger,
            "after_train": after_train,
        }
        bad = [
            f"{k}={type(v).__name__}" for k, v in fns.items() if v is not None and not callable(v)
        ]
        if bad:
            msg = f"CallbackFactory arguments must be callables or None; got {', '.join(bad)}"
            raise TypeError(msg)
        self._fns = {k: v for k, v in fns.items() if v is not None}

    def has_hook(self, method: str) -> bool:
        name = method.lstrip("_")
        if name == "trigger_epoch":
            return "trigger" in self._fns
        return name in self._fns

    def _setup_graph(self) -> None:
        if "setup_graph" in self._fns:
            self._fns["setup_graph"](self)

    def _before_train(self) -> None:
        if "before_train" in self._fns:
            self._fns["before_train"](self)

    def _trigger(self) -> None:
        if "trigger" in self._fns:
            self._fns["trigger"](self)

    def _after_train(self) -> None:
        if "after_train" in self._fns:
            self._fns["after_train"](self)


def _run_whole(cbs: Sequence[Callback], method: str) -> None:
    """Call `method` on each of `cbs`; a `StopTraining` is raised only once all have run.

    The first one raised is kept (its ``stopped_by`` set to the callback, unless a
    nested group already named one); other exceptions propagate at once.
    """
    stop: StopTraining | None = None
    for cb in cbs:
        try:
            getattr(cb, method)()
        except StopTraining as err:
            if err.stopped_by is None:
                err.stopped_by = str(cb)
            stop = stop or err
    if stop is not None:
        raise stop


class Callbacks(Callback):
    """The callbacks of a run as one, called in the order given.

    Each phase calls only the callbacks that do something in it. Exceptions in
    ``after_train`` do not stop the other callbacks' ``after_train``: the first is
    raised once all have run. `StopTraining` in ``after_epoch`` or ``trigger_epoch``
    does not stop the others' either (the epoch stays whole: its statistics are
    written, monitors and savers see it): the first is raised once all have run, its
    ``stopped_by`` naming the callback that raised it.

    Args:
        cbs: the callbacks.
    """

    def __init__(self, cbs: Iterable[Callback]) -> None:
        cbs = list(cbs)
        bad = [
            f"#{i}: {type(cb).__name__}" for i, cb in enumerate(cbs) if not isinstance(cb, Callback)
        ]
        if bad:
            msg = f"'cbs' must hold Callback instances; got {', '.join(bad)}"
            raise TypeError(msg)
        self.cbs: tuple[Callback, ...] = tuple(cbs)
        self._chief_only = False
        self._with: dict[str, tuple[Callback, ...]] = {}

    def with_hook(self, method: str) -> tuple[Callback, ...]:
        """The callbacks that do something in ``method``, in order (computed once)."""
        found = self._with.get(method)
        if found is None:
            found = self._with[method] = tuple(cb for cb in self.cbs if cb.has_hook(method))
        return found

    def has_hook(self, method: str) -> bool:
        return bool(self.with_hook(method))

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        return [f for cb in self.cbs for f in cb.coarse_steps_faults(steps_per_execution)]

    def setup_graph(self, trainer: TrainerView) -> None:
        self.trainer = trainer
        self.graph = trainer.graph
        with self.graph.as_default():
            for cb in self.cbs:
                cb.setup_graph(trainer)
        self._with.clear()

    def _before_train(self) -> None:
        for cb in self.with_hook("_before_train"):
            cb.before_train()

    def _after_train(self) -> None:
        first: BaseException | None = None
        for cb in self.with_hook("_after_train"):
            try:
                cb.after_train()
            except Exception as err:
                logger.exception("after_train of %s failed", cb)
                first = first or err
        if first is not None:
            raise first

    def _before_epoch(self) -> None:
        for cb in self.with_hook("_before_epoch"):
            cb.before_epoch()

    def _after_epoch(self) -> None:
        _run_whole(self.with_hook("_after_epoch"), "after_epoch")

    def _trigger_step(self) -> None:
        for cb in self.with_hook("_trigger_step"):
            cb.trigger_step()

    def _trigger_epoch(self) -> None:
        _run_whole(self.with_hook("_trigger_epoch"), "trigger_epoch")

    def _trigger(self) -> None:
        for cb in self.cbs:
            cb.trigger()

    def __iter__(self) -> Iterator[Callback]:
        return iter(self.cbs)

    def __len__(self) -> int:
        return len(self.cbs)
