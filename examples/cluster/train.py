"""A TensorFlow-cluster job that takes its place from its scheduler: ``TF_CONFIG`` or SLURM.

Every process of the job runs this same script, unchanged: `cluster_placement` reads
where it runs (Kubernetes' TFJob, Vertex AI and SageMaker write ``TF_CONFIG``; under
SLURM, ``srun`` sets ``SLURM_PROCID`` and the step's nodes), a parameter server serves
the variables (`serve_parameters`) and a worker trains (worker 0, the chief, writes the
log directory). The run resumes from its log directory (`AutoResumeTrainConfig`), so a
preempted job (status 143, saved at its step) started again goes on at that step.
Usage::

    python examples/cluster/train.py --logdir DIR [--trainer replicated|ps|horovod] [--towers 1]
        [--max-epoch 3] [--steps-per-epoch 10]

``examples/cluster/tfjob.yaml`` (Kubernetes) and ``examples/cluster/slurm.sbatch``
(SLURM) run it; ``docs/cluster.md`` says how.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from towerkit.tools import import_tensorflow_quietly

import_tensorflow_quietly(verbose=False)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from towerkit.callbacks import ModelSaver  # noqa: E402
from towerkit.towers import add_moving_summary  # noqa: E402
from towerkit.trainers import (  # noqa: E402
    AutoResumeTrainConfig,
    DistributedTrainerParameterServer,
    DistributedTrainerReplicated,
    HorovodTrainer,
    ModelDesc,
    NumpyInput,
    cluster_placement,
    launch_train_with_config,
    serve_parameters,
)

tf1 = tf.compat.v1
DIM, CLASSES = 8, 3


def blobs(n: int, seed: int) -> list[np.ndarray]:
    """`n` points of three Gaussian blobs: [features (n, DIM) float32, labels (n,) int32]."""
    centers = np.random.default_rng(99).normal(size=(CLASSES, DIM)).astype(np.float32) * 2.5
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=n).astype(np.int32)
    return [centers[labels] + rng.normal(size=(n, DIM)).astype(np.float32), labels]


class Model(ModelDesc):
    """A one-hidden-layer MLP with seeded initial values."""

    def inputs(self) -> list[tf.TensorSpec]:
        return [tf.TensorSpec([None, DIM], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]

    def build_graph(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        init = tf1.glorot_uniform_initializer(seed=1)
        hidden = tf.nn.relu(tf.matmul(x, tf1.get_variable("fc0/W", [DIM, 16], initializer=init)))
        logits = tf.matmul(hidden, tf1.get_variable("fc1/W", [16, CLASSES], initializer=init))
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        cost = tf.reduce_mean(loss, name="cost")
        add_moving_summary(cost)  # in stats.json, its average kept in the checkpoints
        return cost

    def optimizer(self) -> tf1.train.Optimizer:
        return tf1.train.GradientDescentOptimizer(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--trainer", choices=("replicated", "ps", "horovod"), default="replicated")
    parser.add_argument("--towers", type=int, default=1, help="towers on each worker")
    parser.add_argument("--max-epoch", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=10)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if args.trainer == "horovod":
        # under srun, each task is a rank of its step (join_slurm_step); under horovodrun
        # or mpirun, the launcher's rank
        trainer = HorovodTrainer()
        shard = trainer.rank
    else:
        placement = cluster_placement()
        print(
            f"cluster: {placement.origin} is job {placement.job!r} task {placement.task}",
            flush=True,
        )
        if placement.job == "ps":
            # SLURM's warning signal goes to every task of the step: a parameter server
            # outlives it, and ends once every worker has checked in (preempted or not)
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
            serve_parameters()
            return 0
        kind = (
            DistributedTrainerReplicated
            if args.trainer == "replicated"
            else DistributedTrainerParameterServer
        )
        trainer = kind(args.towers)  # its server: where cluster_placement() puts this process
        shard = placement.task
    config = AutoResumeTrainConfig(
        model=Model(),
        data=NumpyInput(blobs(400, seed=shard), batch_size=16, shuffle=True, seed=3),
        callbacks=[ModelSaver(max_to_keep=2)],
        steps_per_epoch=args.steps_per_epoch,
        max_epoch=args.max_epoch,
        logdir=args.logdir,
    )
    with tf.Graph().as_default():
        launch_train_with_config(config, trainer)
    print(f"finished at global step {trainer.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
