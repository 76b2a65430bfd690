"""Trainers with a hand-written loop, correct or with one deliberate defect each.

`HandLoopTrainer` drives the callbacks itself from the public pieces of a trainer
(``callbacks``, ``sess``, ``hooked_sess``, ``run_step``), the way a user writing
their own loop would. Each subclass breaks one documented semantic; the suite must
fail each of them with a message naming that semantic. `IgnoresPrecision` keeps the
stock loop and breaks the mixed-precision policy instead. `HalfSteps` applies half of
each SGD step, as a trainer with its own update would: declared (``plain_sgd=False``)
its numerics are skipped, undeclared they fail.
"""

from __future__ import annotations

from towerkit.callbacks import Callbacks, StopTraining
from towerkit.conformance import Capabilities, TrainerEntry
from towerkit.towers.compat import tf1
from towerkit.trainers import SimpleTrainer


class HandLoopTrainer(SimpleTrainer):
    """A `SimpleTrainer` whose loop and counters are written by hand (correctly)."""

    SKIP_TRIGGER_STEP = False
    LOCAL_STEP_OFFSET = 0
    GLOBAL_STEP_COUNTS_STEPS = False
    AFTER_TRAIN_AFTER_STOP = True

    def __init__(self) -> None:
        super().__init__()
        self._epoch = 0
        self._local = -1
        self._steps_done = 0
        self._loop_params = (0, 1, 0)
        self._restored = 0

    @property
    def epoch_num(self) -> int:
        return self._epoch

    @property
    def local_step(self) -> int:
        return self._local + self.LOCAL_STEP_OFFSET

    @property
    def global_step(self) -> int:
        if self.GLOBAL_STEP_COUNTS_STEPS:
            return self._restored + self._steps_done
        return super().global_step

    @property
    def steps_per_epoch(self) -> int:
        return self._loop_params[0]

    @property
    def starting_epoch(self) -> int:
        return self._loop_params[1]

    @property
    def max_epoch(self) -> int:
        return self._loop_params[2]

    def main_loop(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> None:
        self._loop_params = (steps_per_epoch, starting_epoch, max_epoch)
        self._epoch, self._local = starting_epoch - 1, -1
        self._restored = super().global_step
        cbs = Callbacks(self.callbacks)
        stopped = False
        with self.sess.as_default():
            try:
                cbs.before_train()
                for epoch in range(starting_epoch, max_epoch + 1):
                    self._epoch, self._local = epoch, -1
                    cbs.before_epoch()
                    for step in range(steps_per_epoch):
                        self._local = step
                        self.run_step()
                        self._steps_done += 1
                        if not self.SKIP_TRIGGER_STEP:
                            cbs.trigger_step()
                    self._end_epoch(cbs)
            except StopTraining:
                stopped = True
            finally:
                if self.AFTER_TRAIN_AFTER_STOP or not stopped:
                    cbs.after_train()
                self.sess.close()

    @staticmethod
    def _end_epoch(cbs: Callbacks) -> None:
        """after_epoch, then trigger_epoch even when after_epoch asked to stop (spec 003)."""
        try:
            cbs.after_epoch()
        except StopTraining:
            cbs.trigger_epoch()
            raise
        cbs.trigger_epoch()


class SkipsTriggerStep(HandLoopTrainer):
    """Never calls the callbacks' ``trigger_step``."""

    SKIP_TRIGGER_STEP = True


class LocalStepOffByOne(HandLoopTrainer):
    """Counts ``local_step`` from 1."""

    LOCAL_STEP_OFFSET = 1


class GlobalStepCountsSteps(HandLoopTrainer):
    """Counts ``global_step`` in steps, not in ``hooked_sess.run`` calls."""

    GLOBAL_STEP_COUNTS_STEPS = True


class NoAfterTrainAfterStop(HandLoopTrainer):
    """Skips ``after_train`` when a callback raised ``StopTraining``."""

    AFTER_TRAIN_AFTER_STOP = False


class IgnoresPrecision(SimpleTrainer):
    """Takes ``setup_graph(..., precision=...)`` and builds in float32 all the same."""

    def setup_graph(self, *args, precision="float32", **kwargs):
        return super().setup_graph(*args, **kwargs)


class HalfSteps(SimpleTrainer):
    """Trains with half the model's learning rate: an update that is not plain SGD."""

    def setup_graph(self, input_signature, input, get_cost_fn, get_opt_fn, **kwargs):
        def half_rate():  # the suite's model trains with plain SGD at 0.1
            return tf1.train.GradientDescentOptimizer(0.05)

        return super().setup_graph(input_signature, input, get_cost_fn, half_rate, **kwargs)


ENTRIES = [
    # The hand-written loop calls run_step once per step: one step per session call.
    TrainerEntry(
        name=cls.__name__,
        factory=f"broken:{cls.__name__}",
        capabilities=Capabilities(steps_per_execution=False),
    )
    for cls in (
        HandLoopTrainer,
        SkipsTriggerStep,
        LocalStepOffByOne,
        GlobalStepCountsSteps,
        NoAfterTrainAfterStop,
    )
] + [
    TrainerEntry(name="IgnoresPrecision", factory="broken:IgnoresPrecision"),
    TrainerEntry(
        name="HalfStepsDeclared",
        factory="broken:HalfSteps",
        capabilities=Capabilities(plain_sgd=False),
    ),
    TrainerEntry(name="HalfSteps", factory="broken:HalfSteps"),
]
"""One row per trainer above (the factory is the class: it takes no argument)."""

EXPECTED = {
    "SkipsTriggerStep": (
        "test_order_of_callback_methods[SkipsTriggerStep]",
        r"probe 'loop' \(the first callback\): trigger_step is never called \(expected 9 calls\)",
    ),
    "LocalStepOffByOne": (
        "test_local_step_in_every_method[LocalStepOffByOne]",
        r"local_step in before_train: expected -1, before the epoch's first step \(-1\), got 0",
    ),
    "GlobalStepCountsSteps": (
        "test_global_step_with_zero_or_several_runs_per_step[GlobalStepCountsSteps-0-runs]",
        r"global_step in trigger_step: expected the hooked_sess.run calls so far \(0\), got 1",
    ),
    "NoAfterTrainAfterStop": (
        "test_stop_training_from_each_method[NoAfterTrainAfterStop-trigger_step]",
        r"after_train is never called \(expected 1 call\)",
    ),
    "IgnoresPrecision": (
        "test_mixed_bfloat16_steps_near_the_single_tower_reference[IgnoresPrecision]",
        r"every variable equals the float32 reference within float32's rounding .*: the "
        r"towers did not compute in the policy's low precision",
    ),
    "HalfSteps": (
        "test_steps_equal_the_single_tower_reference[HalfSteps-1-step]",
        r"the single-tower reference \(quadratic cost, SGD lr 0\.1, .*a trainer whose update "
        r"is not plain SGD on purpose declares plain_sgd=False",
    ),
}
"""For each defect: a check that must fail, and a pattern its message must match."""
