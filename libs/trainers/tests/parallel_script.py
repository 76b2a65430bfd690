"""A training job reading an `IterableInput(workers=N)`, run as a real process by the tests.

Usage: python parallel_script.py LOGDIR WORKERS [--source indexed|raises|blocks]
[--max-epoch E] [--kill-after N] [--step-sleep S] [--timeout T] [--resume]
[--start-method M]

It trains a one-weight model on datapoints ``x = i`` (i = 0 .. STEPS_PER_EPOCH - 1,
the same every epoch) and prints ``SEEN <x>`` for the datapoint of each step,
``PIDS <pid> <pid> ...`` of the workers once they run (first step), and
``FINAL <w>`` at the end. ``--kill-after N`` SIGKILLs the process itself right after
step N's session call; ``--resume`` uses `AutoResumeTrainConfig` with a save at each
epoch's end; ``--step-sleep`` slows each step (the signal tests).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf
from parallel_sources import Blocks, Indexed, RaisesAt

from towerkit.callbacks import Callback, ModelSaver
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AutoResumeTrainConfig,
    IterableInput,
    ModelDesc,
    SimpleTrainer,
    TrainConfig,
    launch_train_with_config,
)

STEPS_PER_EPOCH = 6


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([1, 1], tf.float32, "x")]

    def build_graph(self, x):
        w = tf1.get_variable("w", [1, 1], initializer=tf1.constant_initializer(0.5))
        tf.identity(x, name="seen")
        return tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0), name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.001)


class Report(Callback):
    """Prints each step's datapoint and the workers' pids; kills or slows on request."""

    _chief_only = False

    def __init__(self, source: IterableInput, kill_after: int | None, sleep: float) -> None:
        self.source, self.kill_after, self.sleep = source, kill_after, sleep
        self.steps = 0

    def _setup_graph(self):
        self.seen = self.trainer.graph.get_tensor_by_name("seen:0")

    def _before_run(self, ctx):
        return tf1.train.SessionRunArgs(fetches=self.seen)

    def _after_run(self, ctx, values):
        print(f"SEEN {int(values.results[0, 0])}", flush=True)
        self.steps += 1
        if self.steps == 1:
            print("PIDS " + " ".join(map(str, self.source.iterable.pids)), flush=True)
        if self.kill_after is not None and self.steps == self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.sleep:
            time.sleep(self.sleep)

    def _after_train(self):
        w = self.trainer.sess.run(tf1.get_collection(tf1.GraphKeys.TRAINABLE_VARIABLES)[0])
        print(f"FINAL {float(np.ravel(w)[0])!r}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("workers", type=int)
    parser.add_argument("--source", choices=["indexed", "raises", "blocks"], default="indexed")
    parser.add_argument("--max-epoch", type=int, default=2)
    parser.add_argument("--kill-after", type=int)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--timeout", type=float)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--start-method", default=None)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    np.random.seed(0)
    tf1.set_random_seed(0)
    data = {
        "indexed": lambda: Indexed(STEPS_PER_EPOCH),
        "raises": lambda: RaisesAt(STEPS_PER_EPOCH, bad=3),
        "blocks": lambda: Blocks(),
    }[args.source]()
    source = IterableInput(
        data, workers=args.workers, prefetch=2, timeout=args.timeout, start_method=args.start_method
    )
    config_cls = AutoResumeTrainConfig if args.resume else TrainConfig
    callbacks = [Report(source, args.kill_after, args.step_sleep)]
    if args.resume:
        callbacks.append(ModelSaver(max_to_keep=1))
    config = config_cls(
        model=Model(),
        data=source,
        callbacks=callbacks,
        max_epoch=args.max_epoch,
        steps_per_epoch=STEPS_PER_EPOCH,
        logdir=args.logdir,
        **({} if args.resume else {"logdir_action": "keep"}),
    )
    launch_train_with_config(config, SimpleTrainer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
