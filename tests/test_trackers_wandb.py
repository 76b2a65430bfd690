"""`WandbMonitor` in W&B's offline mode: the run's files read back from the logdir.

Real training processes (`trackers_train.py`) with ``WANDB_MODE=offline``. Each
process's run is a ``run-<id>.wandb`` file: W&B's records (its own protobuf messages,
``wandb.proto.wandb_internal_pb2.Record``) in LevelDB's log framing behind a 7-byte
header, read here record by record.
"""

from __future__ import annotations

import glob
import json
import os
import struct
from pathlib import Path

import pytest
from trackers_support import need, run_id_of, train

pytestmark = [pytest.mark.procs, pytest.mark.timeout(600)]

_BLOCK = 32768


def wandb_records(path: str) -> list:
    """The records of a ``.wandb`` file, as ``wandb_internal_pb2.Record`` messages."""
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", data[:7]
    out, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, size, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + size]
        pos += 7 + size
        if kind == 1:  # a whole record
            out.append(wandb_internal_pb2.Record.FromString(chunk))
        elif kind == 2:  # first part
            pending = chunk
        elif kind == 3:  # middle part
            pending += chunk
        elif kind == 4:  # last part
            out.append(wandb_internal_pb2.Record.FromString(pending + chunk))
    return out


def of_kind(records, kind):
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


def history(records) -> list[dict]:
    rows = []
    for h in of_kind(records, "history"):
        row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in h.item}
        rows.append({k: v for k, v in row.items() if not k.startswith("_") or k == "_step"})
    return rows


def test_offline_run_preempted_and_resumed(tmp_path):
    """Epoch 1 then SIGTERM (preempting, exit 143); the rerun continues the same W&B run id."""
    need("wandb")
    logdir = tmp_path / "run"
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    first = train(logdir, "wandb", "--term-at", "6", env=env)
    assert first.returncode == 143, first.stdout + first.stderr
    run_id = run_id_of(first)
    second = train(logdir, "wandb", env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert run_id_of(second) == run_id
    assert "training goes on without it" not in first.stdout + second.stdout
    assert json.loads((logdir / "tracker_runs.json").read_text())["wandb"]["run_id"] == run_id

    runs = sorted(glob.glob(str(logdir / "wandb" / f"offline-run-*-{run_id}")))
    assert len(runs) == 2, os.listdir(logdir / "wandb")
    one, two = (wandb_records(os.path.join(r, f"run-{run_id}.wandb")) for r in runs)

    (run,) = of_kind(one, "run")
    assert (run.run_id, run.project) == (run_id, "towerkit-tests")
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert config["trainer"] == "SimpleTrainer"
    assert (config["model"], config["optimizer"]) == ("Model", "MomentumOptimizer")
    assert (config["steps_per_epoch"], config["max_epoch"], config["batch"]) == (4, 3, 8)

    rows = history(one)
    assert [(r["_step"], r["epoch"], r["lr"]) for r in rows] == [(4, 1, 0.1)]
    assert "cost" in rows[0]
    assert of_kind(one, "preempting"), "the preempted run is marked preempting"
    assert [e.exit_code for e in of_kind(one, "exit")] == [143]

    rows = history(two)
    assert [(r["_step"], r["epoch"]) for r in rows] == [(8, 2), (12, 3)]
    assert rows[-1]["lr"] == pytest.approx(0.1 / 3)
    assert not of_kind(two, "preempting")
    assert [e.exit_code for e in of_kind(two, "exit")] == [0]
    saved = [f.path for files in of_kind(two, "files") for f in files.files]
    assert "stats.json" in saved
    copy = os.path.join(runs[1], "files", "stats.json")
    assert json.loads(Path(copy).read_text()) == json.loads((logdir / "stats.json").read_text())
