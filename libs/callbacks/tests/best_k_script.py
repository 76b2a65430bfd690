"""A run keeping the best 3 checkpoints by a statistic, resumable, for the crash tests of `MinSaver(top_k=3)`.

``python best_k_script.py DIR EPOCHS [KILL]``: trains 2 steps per epoch (``w += 1`` per
step, so a checkpoint's ``w`` is its global step, beside a few MB of other variables)
with ModelSaver and MinSaver("score", top_k=3), resuming from the newest checkpoint
of DIR when there is one. The score of epoch e is `score(e)` (ties included).
``KILL`` = ``<what>:<n>`` sends this process SIGKILL right after the n-th call of one
step of a save: ``copy`` (a file copied into the hidden temporary), ``publish`` (a copy
published, the record not yet written), ``record`` (the record written, the displaced
copy not yet deleted).
"""

import os
import signal
import sys

import numpy as np
import tensorflow as tf
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    MinSaver,
    ModelSaver,
    _best_savers,  # fault injection only: the seams a save goes through
)
from towerkit.sessinit import SaverRestore, checkpoint_step
from towerkit.towers.compat import tf1

SPE = 2
K = 3


def score(epoch):
    """The statistic of an epoch: a fixed pseudo-random series on a coarse grid (ties happen)."""
    return float(np.random.default_rng(epoch).integers(0, 8)) / 2


class PutScore(Callback):
    def _trigger(self):
        self.trainer.monitors.put_scalar("score", score(self.trainer.epoch_num))


def kill_after(module, attr, what, nth):
    real = getattr(module, attr)
    calls = [0]

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    setattr(module, attr, wrapped)


def main():
    logdir, epochs = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        what, nth = sys.argv[3].split(":")
        seams = {
            "copy": (_best_savers.shutil, "copyfile"),
            "publish": (_best_savers, "_publish_copy"),
            "record": (_best_savers, "atomic_write_text"),
        }
        kill_after(*seams[what], what, int(nth))
    latest = tf1.train.latest_checkpoint(logdir) if os.path.isdir(logdir) else None
    start = 1 if latest is None else checkpoint_step(os.path.basename(latest)) // SPE + 1
    if start > epochs:
        return
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("w", initializer=0.0)
        tf1.get_variable("ballast", initializer=tf.zeros([1 << 20]))
        LoopTrainer(
            g,
            tf1.assign_add(w, 1.0),
            [ModelSaver(max_to_keep=2), PutScore(), MinSaver("score", top_k=K)],
            steps_per_epoch=SPE,
            max_epoch=epochs,
            starting_epoch=start,
            logdir=logdir,
            session_init=None if latest is None else SaverRestore(latest),
        ).train()


if __name__ == "__main__":
    main()
