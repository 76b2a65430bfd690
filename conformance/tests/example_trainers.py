"""Trainers composed from towerkit's primitives, as the README shows them to the suite."""

from __future__ import annotations

from towerkit.conformance import Capabilities
from towerkit.towers import TowerContext
from towerkit.trainers import GlobalNormClip, SingleCostTrainer, Trainer, apply_grad_processors


class ClippedTrainer(SingleCostTrainer):
    """One tower on the default device; gradients clipped to a global norm, then applied."""

    def __init__(self, clip_norm: float) -> None:
        super().__init__()
        self.clip_norm = clip_norm

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):
        with TowerContext("", is_training=True):
            cost = get_cost_fn(*input.get_input_tensors())
        opt = apply_grad_processors(get_opt_fn(), [GlobalNormClip(self.clip_norm)])
        self.train_op = opt.minimize(cost, name="train_op")
        return []


def make_trainer():
    """The suite builds the graph with ``trainer.setup_graph(...)``: no argument."""
    return ClippedTrainer(clip_norm=1e6)


make_trainer.capabilities = Capabilities()


def make_plain_trainer(model):
    """A bare `Trainer` whose graph the factory builds from the suite's model."""
    trainer = Trainer()
    source = model.make_input()
    source.setup(model.input_signature)
    cost = model.build_cost(*source.get_input_tensors())
    trainer.train_op = model.make_optimizer().minimize(cost, name="train_op")
    trainer.register_callback(source.get_callbacks())
    return trainer


make_plain_trainer.towers = False
