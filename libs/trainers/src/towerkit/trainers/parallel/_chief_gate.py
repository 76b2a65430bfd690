"""Chief-only callbacks that can move: built on every process, run by the logdir's owner only.

In an elastic job the process that owns the log directory can be lost; another one then
takes the directory over and must run the chief-only callbacks (savers, writers) from
there on. Their ops are built before the graph is finalized, so every process builds
them (`ChiefGate`, `GatedMonitor`); a gate forwards the callback's phases only while its
process owns the logdir. A callback whose process takes over mid-run starts at its
first phase there: ``before_train`` first (it reads the directory as a resumed run
would), then ``before_epoch`` when the takeover falls inside an epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from towerkit.callbacks import Callback, MonitorBase, ProxyCallback

__all__ = ["ChiefGate", "GatedMonitor", "gate_chief_only"]


class ChiefGate(ProxyCallback):
    """A chief-only callback on every process, run only where ``owns()`` is true.

    Args:
        cb: the chief-only callback.
        owns: whether this process owns the logdir now (asked at every phase).
    """

    def __init__(self, cb: Callback, owns: Callable[[], bool]) -> None:
        super().__init__(cb)
        self._chief_only = False  # registered everywhere; the gate decides
        self._owns = owns
        self._started = False
        self._in_epoch = False

    @property
    def gated(self) -> Callback:
        """The callback behind the gate."""
        return self.cb

    @property
    def started(self) -> bool:
        """Whether the wrapped callback's ``before_train`` has run in this process."""
        return self._started

    def has_hook(self, method: str) -> bool:
        # the wrapped callback's hooks only: a gate adds no cost to a phase it lacks
        return self.cb.has_hook(method)

    def _open(self) -> bool:
        """Whether to forward now; starts the callback at its first forwarded phase."""
        if not self._owns():
            return False
        if not self._started:
            self._started = True
            self.cb.before_train()
            if self._in_epoch:
                self.cb.before_epoch()
        return True

    def _before_train(self) -> None:
        self._open()

    def _after_train(self) -> None:
        if self._started:
            self.cb.after_train()

    def _before_epoch(self) -> None:
        self._in_epoch = False
        if self._open():
            self.cb.before_epoch()
        self._in_epoch = True

    def _after_epoch(self) -> None:
        if self._open():
            self.cb.after_epoch()

    def _before_run(self, run_context: Any) -> Any:
        return self.cb.before_run(run_context) if self._open() else None

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        if self._open():
            self.cb.after_run(run_context, run_values)

    def _trigger_step(self) -> None:
        if self._open():
            self.cb.trigger_step()

    def _trigger_epoch(self) -> None:
        if self._open():
            self.cb.trigger_epoch()
        self._in_epoch = False

    def _trigger(self) -> None:
        if self._open():
            self.cb.trigger()

    def __str__(self) -> str:
        return str(self.cb)


class GatedMonitor(ChiefGate, MonitorBase):
    """`ChiefGate` for a chief-only monitor: its statistics too reach it only where ``owns()``."""

    cb: MonitorBase

    def __init__(self, monitor: MonitorBase, owns: Callable[[], bool]) -> None:
        super().__init__(monitor, owns)

    def processes(self, method: str) -> bool:
        return self.cb.processes(method)

    def process_scalar(self, name: str, val: float) -> None:
        if self._open():
            self.cb.process_scalar(name, val)

    def process_image(self, name: str, val: Any) -> None:
        if self._open():
            self.cb.process_image(name, val)

    def process_summary(self, summary: Any) -> None:
        if self._open():
            self.cb.process_summary(summary)

    def process_event(self, evt: Any) -> None:
        if self._open():
            self.cb.process_event(evt)


def gate_chief_only(cb: Callback, owns: Callable[[], bool]) -> Callback:
    """`cb` itself when it is not chief-only, else it behind a gate (a monitor's own kind).

    Examples:
        >>> from towerkit.callbacks import ModelSaver
        >>> saver = ModelSaver()
        >>> gated = gate_chief_only(saver, lambda: False)
        >>> (type(gated).__name__, gated.cb is saver, gated.chief_only, str(gated))
        ('ChiefGate', True, False, 'ModelSaver')
    """
    if not cb.chief_only:
        return cb
    if isinstance(cb, MonitorBase):
        return GatedMonitor(cb, owns)
    return ChiefGate(cb, owns)
