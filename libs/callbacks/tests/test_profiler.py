"""GraphProfiler: chrome traces, run metadata and events from real traced runs."""

import json
import os

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import CallbackError, GraphProfiler, MonitorBase, Monitors
from towerkit.callbacks._profiler import profile_file_names
from towerkit.towers.compat import tf1


def model():
    w = tf1.get_variable("w", initializer=tf.ones([8, 8]))
    loss = tf.reduce_sum(tf.matmul(w, w), name="loss")
    return tf1.train.GradientDescentOptimizer(0.001).minimize(loss)


class EventRecorder(MonitorBase):
    """Keeps the events it receives."""

    def __init__(self):
        self.events = []

    def process_event(self, evt):
        self.events.append(evt)


class TestGraphProfiler:
    """Every hooked run is traced; files appear under the logdir."""

    def test_all_outputs(self, graph, tmp_path):
        """Chrome traces load as JSON, metadata parses, events reach the monitors."""
        rec = EventRecorder()
        cb = GraphProfiler(dump_metadata=True, dump_tracing=True, dump_event=True)
        LoopTrainer(
            graph, model(), [cb], Monitors([rec]), logdir=tmp_path, steps_per_epoch=2, max_epoch=1
        ).train()
        files = sorted(os.listdir(tmp_path))
        assert files == [
            "chrome-trace-1.json",
            "chrome-trace-2.json",
            "runmetadata-1.pb",
            "runmetadata-2.pb",
        ]
        trace = json.loads((tmp_path / "chrome-trace-2.json").read_text())
        names = {e.get("args", {}).get("name") for e in trace["traceEvents"]}
        assert any(n and "MatMul" in n for n in names), "the trace shows the model's ops"
        meta = tf1.RunMetadata.FromString((tmp_path / "runmetadata-1.pb").read_bytes())
        assert meta.step_stats.dev_stats
        assert [e.tagged_run_metadata.tag for e in rec.events] == ["trace-1", "trace-2"]
        assert [e.step for e in rec.events] == [1, 2]

    def test_tracing_only(self, graph, tmp_path):
        """By default only chrome traces are written."""
        LoopTrainer(
            graph, model(), [GraphProfiler()], logdir=tmp_path, steps_per_epoch=3, max_epoch=1
        ).train()
        assert sorted(os.listdir(tmp_path)) == [f"chrome-trace-{k}.json" for k in (1, 2, 3)]

    def test_stale_temporaries_removed(self, graph, tmp_path, caplog):
        """Trace files a killed run left half-written are removed at the next run."""
        gone = 999_999_999  # above any pid_max: no process has it
        stale = f".chrome-trace-7.tmp-{gone}-0123abcd.json"
        (tmp_path / stale).write_text("{")
        with caplog.at_level("WARNING", logger="towerkit.sessinit"):
            LoopTrainer(
                graph, model(), [GraphProfiler()], logdir=tmp_path, steps_per_epoch=1, max_epoch=1
            ).train()
        assert sorted(os.listdir(tmp_path)) == ["chrome-trace-1.json"]
        assert stale in caplog.text

    def test_fail(self, graph):
        """Nothing to write, or nowhere to write it, is refused."""
        with pytest.raises(ValueError, match=r"GraphProfiler would write nothing"):
            GraphProfiler(dump_tracing=False)
        with pytest.raises(CallbackError, match=r"writes files under the trainer's logdir"):
            LoopTrainer(graph, model(), [GraphProfiler()]).train()

    @given(st.integers(0, 10**9))
    def test_names(self, step):
        """File names carry the global step and differ between steps."""
        names = profile_file_names(step)
        assert names["tracing"] == f"chrome-trace-{step}.json"
        assert names["metadata"] == f"runmetadata-{step}.pb"
        assert profile_file_names(step + 1)["tracing"] != names["tracing"]
