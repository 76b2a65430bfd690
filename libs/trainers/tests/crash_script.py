"""A training job that the crash test kills with SIGKILL and runs again (real processes).

Usage: python crash_script.py LOGDIR SCHEDULE [--kill-after N --phase PHASE [--delay-ms D]]
[--keep] [--max-epoch E] [--hold] [--k K]

It trains the MLP of `resume_script` with `AutoResumeTrainConfig` for `MAX_EPOCH` epochs
of `STEPS_PER_EPOCH` steps from seeded initial values on data read in the same order
every epoch (so a run resumed at an epoch boundary computes what an uninterrupted one
computes), with a
moving average of the cost summarized into ``stats.json``. SCHEDULE picks the saves:

- ``epoch``: `ModelSaver(max_to_keep=1)` at the end of every epoch;
- ``step``: `ModelSaver(max_to_keep=2)` after every step;
- ``k3``: `ModelSaver(max_to_keep=3)` every 3 steps;
- ``background``: `ModelSaver(max_to_keep=2, background=True)` after every step (a kill
  lands in a write on the saver's thread as often as not).

With ``--kill-after N`` the process sends itself SIGKILL N steps after its first step:
``run`` right after the session call of that step (before any callback sees it),
``save`` after the saver's turn in that step (possibly right after a save, before the
statistics of an epoch are written), ``timer`` from a thread ``--delay-ms`` after the
session call (anywhere: in a save, in the statistics write, between two steps), ``write``
(schedule ``background``) while the saver's thread has that step's checkpoint on disk
under a temporary name (printing ``KILLED IN WRITE``, or ``MISSED`` when the write ended
before it was seen).

With ``--keep`` it trains afresh with a plain `TrainConfig` and ``logdir_action="keep"``
(no resuming), for ``--max-epoch`` epochs. With ``--hold`` it prints ``HOLDING <pid>``
at ``before_train`` and waits there until killed (the logdir lock tests). With ``--k K``
each session call runs K steps (``steps_per_execution``; K divides `STEPS_PER_EPOCH`, and the
kill points are counted in global steps, so N must be a multiple of K).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

import numpy as np
import tensorflow as tf
from resume_script import Model

from towerkit.callbacks import (
    Callback,
    JSONWriter,
    MergeAllSummaries,
    ModelSaver,
    MovingAverageSummary,
    PeriodicTrigger,
)
from towerkit.towers import add_moving_summary
from towerkit.trainers import (
    AutoResumeTrainConfig,
    NumpyInput,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)

STEPS_PER_EPOCH = 5
MAX_EPOCH = 4
SCHEDULES = ("epoch", "step", "k3", "background")


class AveragedModel(Model):
    """The MLP of `resume_script`, with a moving average of its cost."""

    def build_graph(self, x, y):
        cost = super().build_graph(x, y)
        add_moving_summary(cost, decay=0.5)
        return cost


class Kill(Callback):
    """SIGKILLs this process `after` steps into the run, at the given phase."""

    _chief_only = False
    accepts_coarse_steps = True  # counts global steps: a multiple of K with K steps per call

    def __init__(self, after: int | None, phase: str, delay_ms: float, saver_turn: bool) -> None:
        self.after, self.phase, self.delay_ms, self.saver_turn = after, phase, delay_ms, saver_turn
        self.start: int | None = None

    def _before_train(self):
        self.start = self.trainer.global_step

    def _due(self) -> bool:
        return self.after is not None and self.trainer.global_step - self.start == self.after

    def _after_run(self, ctx, values):
        if not self.saver_turn and self._due():
            if self.phase == "run":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.phase == "timer":
                delay = self.delay_ms / 1000

                def later():
                    time.sleep(delay)
                    os.kill(os.getpid(), signal.SIGKILL)

                threading.Thread(target=later, daemon=True).start()

    def _trigger_step(self):
        if self.saver_turn and self.phase == "save" and self._due():
            os.kill(os.getpid(), signal.SIGKILL)
        if self.saver_turn and self.phase == "write" and self._due():
            self._kill_in_write()

    def _kill_in_write(self):
        """SIGKILL while the saver's thread has a checkpoint under a temporary name on disk
        (its write is in flight), printing that name; or, when the write ended before one
        was seen, print MISSED and SIGKILL anyway."""
        logdir = self.trainer.logdir
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            temps = [n for n in os.listdir(logdir) if n.startswith(".model-")]
            if temps:
                print(f"KILLED IN WRITE {temps}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if os.path.isfile(os.path.join(logdir, f"model-{self.trainer.global_step}.index")):
                break
        print("MISSED", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    def _trigger_epoch(self):
        # an epoch-end saver saves in trigger_epoch: "save" then lands between the
        # checkpoint and the statistics record of the epoch
        if self.saver_turn and self.phase == "save" and self._due():
            os.kill(os.getpid(), signal.SIGKILL)


class Hold(Callback):
    """Prints HOLDING and waits forever at before_train: a run that holds its logdir."""

    def _before_train(self):
        print(f"HOLDING {os.getpid()}", flush=True)
        while True:
            time.sleep(1)


def saver_for(schedule: str) -> Callback:
    """The ModelSaver of a schedule."""
    if schedule == "epoch":
        return ModelSaver(max_to_keep=1)
    if schedule == "step":
        return PeriodicTrigger(ModelSaver(max_to_keep=2), every_k_steps=1)
    if schedule == "background":
        return PeriodicTrigger(ModelSaver(max_to_keep=2, background=True), every_k_steps=1)
    return PeriodicTrigger(ModelSaver(max_to_keep=3), every_k_steps=3)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("schedule", choices=SCHEDULES)
    parser.add_argument("--kill-after", type=int)
    parser.add_argument("--phase", choices=("run", "save", "timer", "write"), default="run")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--max-epoch", type=int, default=MAX_EPOCH)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--k", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS_PER_EPOCH * 8, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    kill = dict(after=args.kill_after, phase=args.phase, delay_ms=args.delay_ms)
    kind = TrainConfig if args.keep else AutoResumeTrainConfig
    config = kind(
        model=AveragedModel(),
        data=NumpyInput([x, y], batch_size=8, shuffle=False),
        callbacks=[
            Kill(**kill, saver_turn=False),
            saver_for(args.schedule),
            Kill(**kill, saver_turn=True),
            *([Hold()] if args.hold else []),
        ],
        extra_callbacks=[MovingAverageSummary(), MergeAllSummaries()],
        monitors=[JSONWriter()],
        steps_per_epoch=STEPS_PER_EPOCH,
        max_epoch=args.max_epoch,
        logdir=args.logdir,
        logdir_action="keep",
        steps_per_execution=args.k,
    )
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)  # the same initial variables in every run
        trainer = SimpleTrainer()
        launch_train_with_config(config, trainer)
    print(f"finished at global step {trainer.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
