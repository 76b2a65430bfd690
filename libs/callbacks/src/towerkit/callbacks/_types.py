"""What a callback may use from the trainer that drives it, as a protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from towerkit.callbacks._monitor_hub import Monitors


@runtime_checkable
class TrainerView(Protocol):
    """The trainer as callbacks see it.

    Any trainer that drives towerkit callbacks provides these attributes. Counters
    follow the loop semantics of :class:`~towerkit.callbacks.LoopPosition`.
    """

    @property
    def epoch_num(self) -> int:
        """The running epoch (1-based)."""

    @property
    def global_step(self) -> int:
        """``hooked_sess.run`` calls so far, restored ones included."""

    @property
    def local_step(self) -> int:
        """0-based index of the current step in its epoch."""

    @property
    def steps_per_epoch(self) -> int:
        """Steps in each epoch."""

    @property
    def starting_epoch(self) -> int:
        """The first epoch of this run."""

    @property
    def max_epoch(self) -> int:
        """The last epoch of this run, inclusive."""

    @property
    def is_chief(self) -> bool:
        """Whether this process is the chief worker."""

    @property
    def sess(self) -> Any:
        """The ``tf.compat.v1.Session``; available from ``before_train`` on."""

    @property
    def hooked_sess(self) -> Any:
        """The session whose ``run`` calls every callback's before_run/after_run."""

    @property
    def graph(self) -> Any:
        """The ``tf.Graph`` being trained."""

    @property
    def monitors(self) -> Monitors:
        """Where statistics go."""

    @property
    def logdir(self) -> str | None:
        """The directory the run writes to, or None when it writes nothing."""

    @property
    def tower_func(self) -> Any:
        """The :class:`~towerkit.towers.TowerFunc` of the model, or None."""

    @property
    def towers(self) -> Any:
        """The :class:`~towerkit.towers.TowerTensorHandles` built so far."""
