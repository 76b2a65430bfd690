"""The single-tower trainers: `SimpleTrainer` and `NoOpTrainer`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from towerkit.callbacks import Callback
from towerkit.towers import TowerContext, TowerFunc
from towerkit.trainers._seams import OptimizerFactory
from towerkit.trainers._tower import SingleCostTrainer

if TYPE_CHECKING:
    from towerkit.trainers.inputs._base import InputSource

logger = logging.getLogger("towerkit.trainers")


class SimpleTrainer(SingleCostTrainer):
    """One tower on the default device: one batch per step, gradients applied directly.

    ``setup_graph`` builds the tower under ``TowerContext('', is_training=True)`` and
    sets ``train_op`` to the optimizer's ``apply_gradients`` (the global step is
    incremented by the hooked session, not by the optimizer).
    """

    def _setup_graph(
        self,
        input: InputSource,
        get_cost_fn: TowerFunc,
        get_opt_fn: OptimizerFactory,
    ) -> list[Callback]:
        with TowerContext("", is_training=True):
            grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
            opt = get_opt_fn()
            self.train_op = opt.apply_gradients(grads, name="train_op")
        return []


class NoOpTrainer(SimpleTrainer):
    """Builds the model (when given a tower function) but trains nothing: only callbacks run.

    Each step is one ``hooked_sess.run`` with nothing to fetch, so the global step
    counts, the callbacks' ``before_run``/``after_run`` run (and fetch what they ask
    for), and ``steps_per_epoch``/``max_epoch`` mean what they mean for other trainers.
    """

    _NOTHING: tuple[()] = ()
    SUPPORTS_STEPS_PER_EXECUTION = False

    def _k_refusal(self) -> str:
        return "it has no training op to run K times in a loop"

    def _setup_graph(
        self,
        input: InputSource,
        get_cost_fn: TowerFunc,
        get_opt_fn: OptimizerFactory,
    ) -> list[Callback]:
        del get_opt_fn
        with TowerContext("", is_training=True):
            get_cost_fn(*input.get_input_tensors())
        return []

    def run_step(self) -> None:
        """One ``hooked_sess.run`` with no fetches of its own."""
        self.hooked_sess.run(self._NOTHING)
