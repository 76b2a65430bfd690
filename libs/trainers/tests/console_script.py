"""A training job whose standard error may be unwritable (the full-disk tests run it).

Usage: python console_script.py LOGDIR

It trains the MLP of `resume_script` for 3 epochs of 4 steps with the default callbacks
and monitors (the table of variables and one line per epoch go to standard error) and
logging left unconfigured, then prints on standard output ``DONE <global step>`` and
``CONSOLE <the console stream's first failure, or None>``.
"""

from __future__ import annotations

import sys

import numpy as np
import tensorflow as tf
from resume_script import Model

from towerkit.callbacks.plumbing import CONSOLE
from towerkit.trainers import NumpyInput, SimpleTrainer, TrainConfig, launch_train_with_config


def main() -> int:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    config = TrainConfig(
        model=Model(),
        data=NumpyInput([x, y], batch_size=16, seed=0),
        max_epoch=3,
        logdir=sys.argv[1],
    )
    trainer = SimpleTrainer()
    with tf.Graph().as_default():
        launch_train_with_config(config, trainer)
    print("DONE", trainer.global_step, flush=True)
    print("CONSOLE", CONSOLE.failure, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
