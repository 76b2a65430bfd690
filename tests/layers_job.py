"""The layers example trained by a trainer that runs in several processes; prints a JSON report.

One process of a TensorFlow cluster (1 parameter server, 2 workers of 2 towers each)::

    layers_job.py dist-ps|dist-replicated ps|worker TASK --ports PS,W0,W1 --logdir DIR

or one horovod rank (run by horovod's launcher, one tower per rank)::

    layers_job.py horovod --logdir DIR

The example trained is ``examples/layers`` (first convolution frozen) unless
``--example NAME --kwargs JSON`` name another example and the keyword arguments of
its ``train`` (e.g. ``--example tp_style --kwargs '{"model": "gan"}'``).

Workers print ``LAYERS-REPORT {json}``, and ranks write it to ``--report-dir``'s
``report-RANK.json``: the `tower_facts` of their graph, the values of the variables at
the end, and the last checkpoint (the chief's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from example_modules import load_example

from towerkit.callbacks import Callback
from towerkit.towers import resolve_devices, session_config_for_devices
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    DistributedTrainerParameterServer,
    DistributedTrainerReplicated,
    HorovodTrainer,
    serve_parameters,
)

EPOCHS, STEPS = 1, 40
TOWERS = 2
"""Towers per cluster worker."""

TOWER_PREFIX = re.compile(r"tower\d+/")


def tower_facts(trainer: Any) -> dict[str, Any]:
    """What the tower rules decide in `trainer`'s graph, by variable and op name.

    ``updates``: the ops in ``UPDATE_OPS``; ``trainable``: the trainable variables;
    ``replicas``: the variables (global or local) under a ``tower<k>/`` prefix.
    """
    with trainer.graph.as_default():
        variables = tf1.global_variables() + tf1.local_variables()
        return {
            "updates": [op.name for op in tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)],
            "trainable": [v.op.name for v in tf1.trainable_variables()],
            "replicas": sorted(v.op.name for v in variables if TOWER_PREFIX.match(v.op.name)),
        }


class Snapshot(Callback):
    """The value of every model variable and tower copy at the end of training (every process)."""

    _chief_only = False

    def __init__(self) -> None:
        self.values: dict[str, list] = {}

    def _after_train(self) -> None:
        keys = (tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.LOCAL_VARIABLES)
        wanted = [
            v
            for k in keys
            for v in self.graph.get_collection(k)
            if "Adam" not in v.op.name and "power" not in v.op.name
        ]
        got = self.trainer.sess.run(wanted)
        self.values = {v.op.name: val.tolist() for v, val in zip(wanted, got)}


DEFAULT_KWARGS = '{"freeze_first": true}'
"""The layers example's ``train`` arguments: the first convolution frozen."""


def train(
    make_trainer: Any, logdir: str, example_name: str = "layers", kwargs: str = DEFAULT_KWARGS
) -> dict[str, Any]:
    """Train an example's model (by default the layers one, first convolution frozen); report on it."""
    example = load_example(example_name)
    train_kwargs = json.loads(kwargs)
    if not isinstance(train_kwargs, dict):
        msg = f"'--kwargs' must be a JSON object; got {kwargs!r}"
        raise ValueError(msg)
    snapshot = Snapshot()
    made: list[Any] = []

    def make() -> Any:
        trainer = make_trainer()
        trainer.register_callback(snapshot)
        made.append(trainer)
        return trainer

    trainer, checkpoint = example.train(logdir, make, EPOCHS, STEPS, **train_kwargs)
    return {
        **tower_facts(trainer),
        "is_chief": trainer.is_chief,
        "rank": getattr(trainer, "rank", None),
        "checkpoint": checkpoint if trainer.is_chief else None,
        "values": snapshot.values,
    }


def write_report(directory: str | None, report: dict[str, Any]) -> None:
    """A horovod rank's report: into ``report-RANK.json`` of `directory`, or printed.

    horovod's launcher forwards each rank's stdout and stderr through one pipe, where
    a line larger than the pipe's buffer can be cut by another rank's output: a
    report of a model's variables goes to a file of its own.
    """
    if directory is None:
        print("LAYERS-REPORT " + json.dumps(report), flush=True)
        return
    path = os.path.join(directory, f"report-{report['rank']}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(path + ".tmp", path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("trainer", choices=["dist-ps", "dist-replicated", "horovod"])
    parser.add_argument("role", nargs="?", choices=["ps", "worker"])
    parser.add_argument("task", nargs="?", type=int, default=0)
    parser.add_argument("--ports", default="")
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--example", default="layers", help="the example under examples/")
    parser.add_argument("--kwargs", default=DEFAULT_KWARGS, help="JSON: its train's arguments")
    parser.add_argument("--report-dir", help="horovod: write report-RANK.json there")
    args = parser.parse_args(argv)
    if args.trainer == "horovod":
        report = train(HorovodTrainer, args.logdir, args.example, args.kwargs)
        write_report(args.report_dir, report)
        return 0
    ps_port, *worker_ports = args.ports.split(",")
    cluster = tf1.train.ClusterSpec(
        {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{p}" for p in worker_ports]}
    )
    if args.role == "ps":
        no_gpu = tf1.ConfigProto(device_count={"GPU": 0})
        server = tf1.train.Server(cluster, job_name="ps", task_index=args.task, config=no_gpu)
        serve_parameters(server, timeout=300)
        return 0
    config = session_config_for_devices(resolve_devices(TOWERS))
    config.gpu_options.allow_growth = True
    server = tf1.train.Server(cluster, job_name="worker", task_index=args.task, config=config)
    kind = {"dist-ps": DistributedTrainerParameterServer}.get(
        args.trainer, DistributedTrainerReplicated
    )
    logdir = os.path.join(args.logdir, f"worker{args.task}")
    report = train(lambda: kind(TOWERS, server), logdir, args.example, args.kwargs)
    report["task"] = args.task
    print("LAYERS-REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
