"""A training job whose input blocks forever, run as a real process by the Ctrl-C tests.

Usage: python blocking_script.py LOGDIR {iterable,generator} [--timeout SECONDS]

The input gives 3 batches, then blocks (an ``IterableInput`` whose iterable waits on
an event nobody sets, or a ``TFDatasetInput`` from a generator that does). The script
prints ``BLOCKED`` to stdout once the producer is blocked and the trainer's step has
taken the 3 batches, and writes ``after_train.txt`` in LOGDIR when ``after_train``
runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

import numpy as np
import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    IterableInput,
    ModelDesc,
    SimpleTrainer,
    TFDatasetInput,
    TrainConfig,
    launch_train_with_config,
)

GIVEN = 3


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 4], tf.float32, "x")]

    def build_graph(self, x):
        w = tf1.get_variable("w", [4, 1])
        return tf.reduce_mean(tf.matmul(x, w), name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.1)


class Blocking:
    """GIVEN batches, then a wait that never ends; every pass the same."""

    def __iter__(self):
        for _ in range(GIVEN):
            yield [np.ones((2, 4), np.float32)]
        print("BLOCKED", flush=True)
        threading.Event().wait()


class Marker(Callback):
    def _trigger_step(self):
        print(f"STEP {self.trainer.global_step}", flush=True)

    def _after_train(self):
        with open(os.path.join(self.trainer.logdir, "after_train.txt"), "w") as f:
            f.write(str(self.trainer.global_step))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("logdir")
    parser.add_argument("kind", choices=["iterable", "generator"])
    parser.add_argument("--timeout", type=float)
    args = parser.parse_args(argv)
    # A parent started in the background hands its children SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    if args.kind == "iterable":
        data = IterableInput(Blocking(), prefetch=1, timeout=args.timeout)
    else:

        def dataset():
            return tf.data.Dataset.from_generator(
                lambda: (tuple(dp) for dp in Blocking()),
                output_signature=(tf.TensorSpec([None, 4], tf.float32),),
            )

        data = TFDatasetInput(dataset)
    config = TrainConfig(
        model=Model(),
        data=data,
        callbacks=[Marker()],
        steps_per_epoch=10,
        max_epoch=2,
        logdir=args.logdir,
        extra_callbacks=[],
        monitors=[],
    )
    with tf.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
