"""One process of a TensorFlow-runtime distributed job (127.0.0.1 or given hosts); a JSON report.

Usage: ``dist_job.py ROLE TASK --ports PS,W0,W1 [--hosts PS,W0,W1] --trainer ps|replicated
--logdir-base DIR --max-epoch E [--timeouts CHECK,DEAD,CLOSE[,START[,OPERATION]]]
[--pause-at-epoch-end SECONDS] [--hold-at PHASE [--hold SECONDS] [--release FILE]]
[--check-in-ms MS]``.
ROLE is ``ps`` or ``worker``. A worker prints ``DIST-TRAINING`` after its first step (and
``DIST-PAUSED`` when it pauses after epoch 2); each process prints ``DIST-REPORT {json}``
at the end.

With ``--hold-at PHASE`` a worker prints ``DIST-AT PHASE`` at that point of its run and
waits there, making no session call, until FILE exists or SECONDS (300) have passed, then
prints ``DIST-RELEASED PHASE`` and goes on. The phases (`PHASES`): ``starting`` (its
server up, its graph built, before ``train_with_defaults``: no session yet),
``first-step`` (the session created, before the first step: ``before_train``),
``training`` (after its third step), ``saving`` (at the end of epoch 1, before the
chief's ``ModelSaver`` saves), ``ending`` (after the loop, in ``after_train``, before
``ModelSaver``'s last save and the session's close).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from dp_model import SIG, CostLog, Snapshot, cost_fn, data, error_rate, initial_weights

from towerkit.callbacks import Callback, JSONWriter, ModelSaver
from towerkit.towers import resolve_devices, session_config_for_devices
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    ClusterTimeouts,
    DistributedTrainerParameterServer,
    DistributedTrainerReplicated,
    NumpyInput,
    serve_parameters,
)

STEPS_PER_EPOCH = 5
TOWERS = 2


def report(**values) -> None:
    print("DIST-REPORT " + json.dumps(values), flush=True)


class Announce(Callback):
    """Print ``DIST-TRAINING`` once, after the first step."""

    _chief_only = False

    def __init__(self) -> None:
        self._said = False

    def _trigger_step(self) -> None:
        if not self._said:
            self._said = True
            print("DIST-TRAINING", flush=True)


class PauseAtEpochEnd(Callback):
    """At the end of epoch 2, print ``DIST-PAUSED`` and wait `seconds` (no session call)."""

    _chief_only = False

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    def _trigger_epoch(self) -> None:
        if self.trainer.epoch_num == 2:
            print("DIST-PAUSED", flush=True)
            time.sleep(self._seconds)


PHASES = ("starting", "first-step", "training", "saving", "ending")


def hold(phase: str, seconds: float, release: str | None) -> None:
    """Print ``DIST-AT phase``; wait until `release` exists or `seconds` have passed."""
    print(f"DIST-AT {phase}", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (release and os.path.exists(release)):
        time.sleep(0.1)
    print(f"DIST-RELEASED {phase}", flush=True)


class HoldAt(Callback):
    """Hold (`hold`) at one phase of the loop: listed before `ModelSaver`, so before its save."""

    _chief_only = False

    def __init__(self, phase: str, seconds: float, release: str | None) -> None:
        self._phase, self._seconds, self._release = phase, seconds, release
        self._steps = 0

    def _at(self, phase: str) -> None:
        if phase == self._phase:
            hold(phase, self._seconds, self._release)

    def _before_train(self) -> None:
        self._at("first-step")

    def _trigger_step(self) -> None:
        self._steps += 1
        if self._steps == 3:
            self._at("training")

    def _trigger_epoch(self) -> None:
        if self.trainer.epoch_num == 1:
            self._at("saving")

    def _after_train(self) -> None:
        self._at("ending")


def print_watches(signum, frame) -> None:
    """Print what each cluster health watch of this process has seen, and when (now)."""
    import gc

    from towerkit.trainers.parallel._health import ClusterWatch

    for watch in [o for o in gc.get_objects() if isinstance(o, ClusterWatch)]:
        state = watch._state
        print(
            f"WATCH {watch._thread.name} at {time.monotonic():.1f}: since {state.since:.1f}, "
            f"tasks {[str(t) for t in watch._tasks]}, "
            f"health {[(str(t), h) for t, h in state.healths]}, lost {watch.lost}",
            flush=True,
        )


def main(argv: list[str]) -> int:
    # SIGUSR2 prints every thread's stack and each health watch's view of the cluster (the
    # fault tests ask for it before failing)
    signal.signal(signal.SIGUSR2, print_watches)
    faulthandler.register(signal.SIGUSR2, all_threads=True, chain=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["ps", "worker"])
    parser.add_argument("task", type=int)
    parser.add_argument("--ports", required=True)
    parser.add_argument("--hosts", default=None, help="PS,W0,W1 addresses (default 127.0.0.1)")
    parser.add_argument("--trainer", choices=["ps", "replicated"], required=True)
    parser.add_argument("--logdir-base", required=True)
    parser.add_argument("--max-epoch", type=int, default=3)
    parser.add_argument("--pause-at-epoch-end", type=float, default=None)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--hold-at", choices=PHASES, default=None)
    parser.add_argument("--check-in-ms", type=int, default=None, help="CHECK_IN_TIMEOUT_MS")
    parser.add_argument("--hold", type=float, default=300.0, help="seconds a hold lasts at most")
    parser.add_argument("--release", default=None, help="a hold ends once this file exists")
    parser.add_argument("--log-info", action="store_true", help="print towerkit's INFO lines")
    parser.add_argument(
        "--timeouts",
        help="check_every,dead_after,close_seconds[,start_within[,operation_seconds]]",
    )
    args = parser.parse_args(argv)
    if args.log_info:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    timeouts = None
    if args.timeouts:
        check, dead, close, *rest = map(float, args.timeouts.split(","))
        timeouts = ClusterTimeouts(
            check_every=check,
            dead_after=dead,
            close_seconds=close,
            start_within=rest[0] if rest else 600,
            operation_seconds=rest[1] if len(rest) > 1 else 300,
        )
    ports = args.ports.split(",")
    hosts = args.hosts.split(",") if args.hosts else ["127.0.0.1"] * len(ports)
    (ps_address, *workers) = [f"{h}:{p}" for h, p in zip(hosts, ports)]
    cluster = tf1.train.ClusterSpec({"ps": [ps_address], "worker": workers})
    if args.role == "ps":
        no_gpu = tf1.ConfigProto(device_count={"GPU": 0})
        server = tf1.train.Server(cluster, job_name="ps", task_index=args.task, config=no_gpu)
        done = serve_parameters(server, timeout=300, timeouts=timeouts)
        report(role="ps", done=done)
        return 0

    config = session_config_for_devices(resolve_devices(TOWERS))
    config.gpu_options.allow_growth = True
    server = tf1.train.Server(cluster, job_name="worker", task_index=args.task, config=config)
    graph = tf.Graph()
    with graph.as_default():
        if args.trainer == "ps":
            trainer = DistributedTrainerParameterServer(TOWERS, server, timeouts=timeouts)
        else:
            trainer = DistributedTrainerReplicated(TOWERS, server, timeouts=timeouts)
        if args.check_in_ms is not None:
            trainer.CHECK_IN_TIMEOUT_MS = args.check_in_ms
        source = NumpyInput(data(240, seed=20 + args.task), batch_size=12, seed=args.task)
        opt = lambda: tf1.train.MomentumOptimizer(0.05, 0.9)  # noqa: E731
        trainer.setup_graph(SIG, source, cost_fn, opt, precision=args.precision)
        costs, snap = CostLog(), Snapshot()
        pause = (
            [] if args.pause_at_epoch_end is None else [PauseAtEpochEnd(args.pause_at_epoch_end)]
        )
        holds = [] if args.hold_at is None else [HoldAt(args.hold_at, args.hold, args.release)]
        logdir = os.path.join(args.logdir_base, f"worker{args.task}")
        if args.hold_at == "starting":
            hold("starting", args.hold, args.release)
        trainer.train_with_defaults(
            callbacks=[costs, snap, *holds, ModelSaver(), Announce(), *pause],
            monitors=[JSONWriter()],
            extra_callbacks=[],
            steps_per_epoch=STEPS_PER_EPOCH,
            max_epoch=args.max_epoch,
            logdir=logdir,
        )
    weights = {k: snap.values[k] for k in initial_weights()}
    x, y = data(300, seed=77)
    copies = sorted(k for k in snap.values if k.startswith("tower"))
    same = all(
        np.array_equal(snap.values[k], snap.values[f"tower0/{k.split('/', 1)[1]}"])
        for k in copies
        if args.trainer == "replicated" and not k.startswith("tower0/")
    )
    report(
        role="worker",
        task=args.task,
        is_chief=trainer.is_chief,
        devices=list(trainer.devices),
        costs=costs.values,
        error=error_rate(weights, x, y),
        initial_error=error_rate(initial_weights(), x, y),
        global_step=int(snap.values["global_step"]),
        trainer_global_step=trainer.global_step,
        local_copies=copies,
        copies_equal=bool(same),
        files=sorted(os.listdir(logdir)) if os.path.isdir(logdir) else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
