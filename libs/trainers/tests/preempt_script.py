"""A training job that the preemption tests stop with SIGTERM and run again (real processes).

Usage: python preempt_script.py LOGDIR [--term-at STEP] [--twice] [--delay-ms D] [--k K]
[--grace S] [--slow-end S] [--early-stop] [--batch B] [--steps-per-epoch S]

It trains the MLP of `crash_script` (with a moving average of its cost) with
`AutoResumeTrainConfig` for `MAX_EPOCH` epochs of `STEPS_PER_EPOCH` steps, on seeded
shuffled arrays whose pass (7 batches) is not an epoch (10 steps), so a resumed run that
did not continue the data exactly would train on other batches. Its callbacks: a
`ModelSaver` at every epoch end, a `ScheduledHyperParamSetter` of the learning rate, an
`InferenceRunner` of the validation cost and a `MinSaver` of it, and a `StepLog` that
appends each global step this process ran to ``<LOGDIR>.steps`` (so the test sees that no
step ran twice across the processes).

With ``--term-at N`` the process sends itself SIGTERM after the session call that ends
at global step N (``--twice``: two SIGTERMs; ``--delay-ms D``: from a thread D ms after
that call, so it may land in a save, the statistics write or the validation); with
``--slow-end S`` ``after_train`` takes S seconds (``--grace``: the preemption grace).
``--batch`` and ``--steps-per-epoch`` change the run's batch size and epoch length
(a rerun that contradicts what the positions recorded); ``--background`` makes the
`ModelSaver` write on its thread (``background=True``). With ``--early-stop`` an `EarlyStopping` of the validation cost (``mode="max"``,
patience 0: the cost falls, so it stops at the end of epoch `EARLY_STOP_EPOCH`).
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
from crash_script import AveragedModel

from towerkit.callbacks import (
    Callback,
    EarlyStopping,
    InferenceRunner,
    JSONWriter,
    MergeAllSummaries,
    MinSaver,
    ModelSaver,
    MovingAverageSummary,
    ScalarStats,
    ScheduledHyperParamSetter,
)
from towerkit.trainers import (
    AutoResumeTrainConfig,
    NumpyInput,
    SimpleTrainer,
    launch_train_with_config,
)

STEPS_PER_EPOCH = 10
MAX_EPOCH = 4
BATCH = 8
PASS = 7
EARLY_STOP_EPOCH = 2
"""Batches in one pass over the training arrays (an epoch is 10 steps: passes straddle epochs)."""


class StepLog(Callback):
    """Appends each global step this process ran (all K of a session call) to a file."""

    _chief_only = False
    accepts_coarse_steps = True

    def __init__(self, path: str) -> None:
        self.path = path

    def _trigger_step(self):
        t = self.trainer
        k = t.steps_per_execution
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(f"{s}\n" for s in range(t.global_step - k + 1, t.global_step + 1)))


class TermAt(Callback):
    """Sends SIGTERM to this process once the session call ending at global step `at` is done."""

    _chief_only = False
    accepts_coarse_steps = True

    def __init__(self, at: int | None, twice: bool, delay_ms: float | None) -> None:
        self.at, self.twice, self.delay_ms = at, twice, delay_ms

    def _trigger_step(self):
        if self.at is None or self.trainer.global_step != self.at:
            return
        if self.delay_ms is None:
            self._send()
            return

        def later():
            time.sleep(self.delay_ms / 1000)
            self._send()

        threading.Thread(target=later, daemon=True).start()

    def _send(self):
        os.kill(os.getpid(), signal.SIGTERM)
        if self.twice:
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)


class SlowEnd(Callback):
    """Takes `seconds` in after_train (a run that cannot finish within a short grace)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def _after_train(self):
        time.sleep(self.seconds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("--term-at", type=int)
    parser.add_argument("--twice", action="store_true")
    parser.add_argument("--delay-ms", type=float)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--slow-end", type=float, default=0.0)
    parser.add_argument("--early-stop", action="store_true")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--steps-per-epoch", type=int, default=STEPS_PER_EPOCH)
    parser.add_argument("--background", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(PASS * BATCH, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    vx = rng.normal(size=(3 * BATCH, 8)).astype(np.float32)
    vy = (vx[:, 0] > 0).astype(np.int32) + (vx[:, 1] > 0).astype(np.int32)
    config = AutoResumeTrainConfig(
        model=AveragedModel(),
        data=NumpyInput([x, y], batch_size=args.batch, shuffle=True, seed=3),
        callbacks=[
            StepLog(args.logdir.rstrip("/") + ".steps"),
            TermAt(args.term_at, args.twice, args.delay_ms),
            ModelSaver(max_to_keep=2, background=args.background),
            ScheduledHyperParamSetter("learning_rate", [(0, 0.1), (2, 0.05), (3, 0.02)]),
            InferenceRunner(
                NumpyInput([vx, vy], batch_size=BATCH, shuffle=False), [ScalarStats("cost")]
            ),
            MinSaver("validation_cost"),
            *(
                [EarlyStopping("validation_cost", mode="max", patience=0)]
                if args.early_stop
                else []
            ),
            *([SlowEnd(args.slow_end)] if args.slow_end else []),
        ],
        extra_callbacks=[MovingAverageSummary(), MergeAllSummaries()],
        monitors=[JSONWriter()],
        steps_per_epoch=args.steps_per_epoch,
        max_epoch=MAX_EPOCH,
        logdir=args.logdir,
        steps_per_execution=args.k,
    )
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)  # the same initial variables in every run
        trainer = SimpleTrainer()
        trainer.set_preemption(grace_s=args.grace)
        launch_train_with_config(config, trainer)
    print(f"finished at global step {trainer.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
