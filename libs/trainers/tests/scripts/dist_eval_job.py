"""One process of a TensorFlow-cluster evaluation-only job (``steps_per_epoch=0``); a report.

Usage: ``dist_eval_job.py ROLE TASK --ports PS,W0,W1 --logdir-base DIR``. ROLE is ``ps`` or
``worker``. Each worker evaluates its own shard (`hvd_eval_job.shard`: uneven batches, a
different number on each worker) with an `InferenceRunner` given ``reduce=True`` under
`DistributedTrainerReplicated`, and prints ``DIST-EVAL-REPORT {json}`` with the statistics
it put.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from dp_model import SIG, cost_fn, data
from hvd_eval_job import Report, shard

from towerkit.callbacks import ClassificationError, InferenceRunner, JSONWriter, ScalarStats
from towerkit.towers import resolve_devices, session_config_for_devices
from towerkit.towers.compat import tf1
from towerkit.trainers import DistributedTrainerReplicated, NumpyInput, serve_parameters


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["ps", "worker"])
    parser.add_argument("task", type=int)
    parser.add_argument("--ports", required=True)
    parser.add_argument("--logdir-base", required=True)
    args = parser.parse_args(argv)
    ps_address, *workers = [f"127.0.0.1:{p}" for p in args.ports.split(",")]
    cluster = tf1.train.ClusterSpec({"ps": [ps_address], "worker": workers})
    if args.role == "ps":
        no_gpu = tf1.ConfigProto(device_count={"GPU": 0})
        server = tf1.train.Server(cluster, job_name="ps", task_index=args.task, config=no_gpu)
        print(
            "DIST-EVAL-REPORT "
            + json.dumps({"role": "ps", "done": serve_parameters(server, timeout=300)})
        )
        return 0
    config = session_config_for_devices(resolve_devices(1))
    server = tf1.train.Server(cluster, job_name="worker", task_index=args.task, config=config)
    with tf.Graph().as_default():
        trainer = DistributedTrainerReplicated(1, server)
        source = NumpyInput(data(32, seed=1), batch_size=8)
        trainer.setup_graph(SIG, source, cost_fn, lambda: tf1.train.GradientDescentOptimizer(0.1))
        runner = InferenceRunner(
            shard(args.task),
            [ScalarStats("cost"), ClassificationError("incorrect_vector")],
            reduce=True,
        )
        report = Report()
        trainer.train_with_defaults(
            callbacks=[runner, report],
            monitors=[JSONWriter()],
            extra_callbacks=[],
            steps_per_epoch=0,
            max_epoch=1,
            logdir=os.path.join(args.logdir_base, f"worker{args.task}"),
        )
    out = {
        "role": "worker",
        "task": args.task,
        "is_chief": trainer.is_chief,
        "stats": report.stats,
        "global_step": report.step,
    }
    print("DIST-EVAL-REPORT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
