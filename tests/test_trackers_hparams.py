"""`HParamsMonitor`: the HParams plugin's session start and end, read back from the run's event files.

Real training processes (`trackers_train.py`); the summaries are read with TensorFlow's
event file reader and their plugin content decoded from the protobuf wire format here
(and with TensorBoard's own messages where TensorBoard is installed).
"""

from __future__ import annotations

import glob
import importlib.util
import os

import pytest
from trackers_support import run_id_of, train

pytestmark = [pytest.mark.procs, pytest.mark.timeout(600)]


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def wire_fields(buf: bytes) -> list[tuple[int, object]]:
    """The (field number, value) pairs of a protobuf message: ints, bytes or 8-byte floats."""
    import struct

    out: list[tuple[int, object]] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = _varint(buf, i)
            out.append((number, value))
        elif kind == 1:
            out.append((number, struct.unpack("<d", buf[i : i + 8])[0]))
            i += 8
        elif kind == 2:
            size, i = _varint(buf, i)
            out.append((number, buf[i : i + size]))
            i += size
        else:
            raise AssertionError(f"unexpected wire type {kind}")
    return out


def decode_start(content: bytes) -> dict:
    """HParamsPluginData{version=1, session_start_info=3{hparams=1 map, model_uri=2, group_name=4, start_time_secs=5}}."""
    from google.protobuf import struct_pb2

    (start,) = [v for n, v in wire_fields(content) if n == 3]
    info: dict = {"hparams": {}}
    for n, v in wire_fields(start):
        if n == 1:
            entry = dict(wire_fields(v))
            value = struct_pb2.Value.FromString(entry.get(2, b""))
            info["hparams"][entry[1].decode()] = getattr(value, value.WhichOneof("kind"))
        elif n in (2, 4):
            info[{2: "model_uri", 4: "group_name"}[n]] = v.decode()
        elif n == 5:
            info["start_time_secs"] = v
    return info


def decode_end(content: bytes) -> dict:
    """HParamsPluginData{session_end_info=4{status=1, end_time_secs=2}}."""
    (end,) = [v for n, v in wire_fields(content) if n == 4]
    return {{1: "status", 2: "end_time_secs"}[n]: v for n, v in wire_fields(end)}


def hparams_values(logdir) -> list:
    """Every hparams-plugin summary value in the logdir's event files: (tag, content)."""
    import tensorflow as tf

    found = []
    for path in sorted(glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "hparams":
                    found.append((value.tag, value.metadata.plugin_data.content))
    return found


def check_with_tensorboard(values) -> None:
    """Decode with TensorBoard's own messages too, where it is installed (always under ``CI=true``)."""
    if importlib.util.find_spec("tensorboard") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("tensorboard is not installed: the tracker tests run in `nox -s trackers`")
        return
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    for tag, content in values:
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if tag.endswith("session_start_info"):
            assert data.session_start_info.hparams["trainer"].string_value == "SimpleTrainer"
        else:
            assert data.session_end_info.status == api_pb2.STATUS_SUCCESS


def test_session_start_and_end_in_the_event_file(tmp_path):
    logdir = tmp_path / "lr-0.1"
    proc = train(logdir, "hparams")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    values = hparams_values(logdir)
    assert [t for t, _ in values] == ["_hparams_/session_start_info", "_hparams_/session_end_info"]
    start = decode_start(values[0][1])
    assert start["group_name"] == "lr-0.1"
    assert start["model_uri"] == str(logdir)
    hp = start["hparams"]
    assert hp["trainer"] == "SimpleTrainer"
    assert hp["model"] == "Model"
    assert hp["optimizer"] == "MomentumOptimizer"
    assert (hp["steps_per_epoch"], hp["max_epoch"], hp["batch"], hp["lr0"]) == (4.0, 3.0, 8.0, 0.1)
    assert hp["precision"] == "float32"
    end = decode_end(values[1][1])
    assert end["status"] == 1  # STATUS_SUCCESS
    assert end["end_time_secs"] >= start["start_time_secs"] > 0
    check_with_tensorboard(values)
    assert (logdir / "tracker_runs.json").read_text().count(run_id_of(proc)) == 1


def test_preempted_run_resumes_the_same_session(tmp_path):
    """SIGTERM in epoch 2: a start and no end; the resumed run writes the end, not a second start."""
    logdir = tmp_path / "run"
    first = train(logdir, "hparams", "--term-at", "6")
    assert first.returncode == 143, first.stdout + first.stderr
    assert [t for t, _ in hparams_values(logdir)] == ["_hparams_/session_start_info"]
    second = train(logdir, "hparams")
    assert second.returncode == 0, second.stdout + second.stderr
    assert run_id_of(second) == run_id_of(first)
    values = hparams_values(logdir)
    assert [t for t, _ in values] == ["_hparams_/session_start_info", "_hparams_/session_end_info"]
    assert decode_start(values[0][1])["hparams"]["starting_epoch"] == 1.0
    assert decode_end(values[1][1])["status"] == 1
    check_with_tensorboard(values)
