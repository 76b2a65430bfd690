"""The experiment trackers' monitors: their pure decisions, and the shell's promise to training.

The pure functions (`end_status`, the parameters, the run ids file) are checked with
hypothesis. The shell (`TrackerMonitor`: one sender thread, one warning, a bounded wait
at the end, the run id recorded in the logdir and reused by a resumed run) is driven
by this lib's training loop with a tracker of the test's own that keeps what it gets,
fails, or hangs. The real trackers (MLflow, W&B, TensorBoard's HParams) are tested
against their real servers and files in ``tests/test_trackers_*.py``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import Callback, Monitors
from towerkit.callbacks._tracking import TrackerMonitor, read_runs_file
from towerkit.callbacks._tracking_core import (
    MAX_PARAM_CHARS,
    TRACKER_RUNS_FILE,
    end_status,
    flat_params,
    flat_values,
    param_value,
    plain_value,
    read_tracker_runs,
    resumes_tracker_run,
    run_values,
    tracker_runs_text,
)
from towerkit.towers.compat import tf1

# -- the pure functions -------------------------------------------------------------------

failures = st.one_of(
    st.none(),
    st.sampled_from([KeyboardInterrupt(), ValueError("x"), RuntimeError("y"), MemoryError()]),
)


@given(st.booleans(), failures)
def test_end_status(preempted, failure):
    status = end_status(preempted=preempted, failure=failure)
    if preempted or isinstance(failure, KeyboardInterrupt):
        assert status == "KILLED"
    elif failure is not None:
        assert status == "FAILED"
    else:
        assert status == "FINISHED"


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=2 * MAX_PARAM_CHARS),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=5),
    st.builds(object),
    st.sampled_from([np.float32(0.25), np.int64(7), np.bool_(True)]),
)


@given(values)
def test_plain_value_is_a_scalar_and_short(value):
    out = plain_value(value)
    assert out is None or isinstance(out, bool | int | float | str)
    if isinstance(out, str):
        assert len(out) <= MAX_PARAM_CHARS
    if isinstance(value, bool | int) and not isinstance(value, np.generic):
        assert out == value
        assert type(out) is type(value)
    if isinstance(value, np.generic):
        assert out == value.item()
    text = param_value(out)
    assert text is not None
    assert len(text) <= MAX_PARAM_CHARS


@given(st.floats(allow_nan=False))
def test_float_text_reads_back(x):
    assert float(param_value(x)) == x


names = st.text(alphabet="abcxyz_0", min_size=1, max_size=4)
trees = st.recursive(
    st.dictionaries(names, scalars, max_size=3),
    lambda inner: st.dictionaries(names, st.one_of(scalars, inner), max_size=3),
    max_leaves=12,
)


def leaves(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(leaves(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


@given(trees)
def test_flat_values_keeps_every_leaf_under_its_path(tree):
    flat = flat_values(tree)
    expected = leaves(tree)
    assert set(flat) == set(expected)
    for k, v in expected.items():
        got = flat[k]
        if isinstance(v, float) and math.isnan(v):
            assert math.isnan(got)
        elif isinstance(v, str):
            assert got == (v if len(v) <= MAX_PARAM_CHARS else got)
            assert len(got) <= MAX_PARAM_CHARS
        else:
            assert got == v
    texts = flat_params(tree)
    assert set(texts) == set(flat)
    assert all(isinstance(t, str) for t in texts.values())


@pytest.mark.parametrize("bad", [{"": 1}, {3: 1}, {"a": {"": 2}}])
def test_flat_values_names_a_bad_name(bad):
    with pytest.raises(TypeError, match="parameter's name must be a non-empty str"):
        flat_values(bad)


@given(
    st.one_of(st.none(), st.text(max_size=5)),
    st.integers(1, 5),
    st.integers(0, 3),
    st.integers(0, 50),
)
def test_resumes_tracker_run(stored, epoch, steps, gstep):
    got = resumes_tracker_run(stored, starting_epoch=epoch, resumed_steps=steps, global_step=gstep)
    assert got == (bool(stored) and (epoch > 1 or steps > 0 or gstep > 0))


run_ids = st.text(alphabet="abcdef0123456789", min_size=1, max_size=12)
runs = st.dictionaries(
    st.sampled_from(["mlflow", "wandb", "hparams"]),
    st.fixed_dictionaries({"run_id": run_ids}, optional={"tracking_uri": st.text(max_size=10)}),
)


@given(runs)
def test_runs_file_round_trip(recorded):
    assert read_tracker_runs(tracker_runs_text(recorded)) == recorded


@given(st.text(max_size=40))
def test_damaged_runs_file_means_no_run(text):
    got = read_tracker_runs(text)
    assert isinstance(got, dict)
    assert all(isinstance(v["run_id"], str) and v["run_id"] for v in got.values())


def test_run_values_from_a_trainer_and_a_config():
    class Opt:
        pass

    class Net:
        def __init__(self):
            self._optimizer = Opt()

        def build_graph(self):
            pass

        def get_optimizer(self):
            return self._optimizer

    class Trainer:
        steps_per_epoch, starting_epoch, max_epoch, steps_per_execution = 5, 2, 9, 1
        precision = type("Precision", (), {"name": "mixed_bfloat16"})()
        tower_func = type("TF", (), {"tower_fn": Net().build_graph})()

    class Config:
        steps_per_epoch, logdir_action, data = 5, "keep", [1, 2]

    got = run_values(Trainer(), Config(), {"lr": 0.1, "max_epoch": 10})
    assert got == {
        "trainer": "Trainer",
        "steps_per_epoch": 5,
        "starting_epoch": 2,
        "max_epoch": 10,
        "steps_per_execution": 1,
        "precision": "mixed_bfloat16",
        "logdir_action": "keep",
        "data": "list",
        "model": "Net",
        "optimizer": "Opt",
        "lr": 0.1,
    }


# -- the shell, driven by a loop ----------------------------------------------------------


class Tracker(TrackerMonitor):
    """A tracker of the test's own: keeps every call; fails or hangs where told."""

    TRACKER = "test"

    def __init__(self, fail_at=None, hang_at=None, **kwargs):
        super().__init__(**kwargs)
        self.calls = []
        self.fail_at, self.hang_at = fail_at, hang_at
        self.release = threading.Event()
        self.thread_names = set()

    def _call(self, what, *args):
        self.thread_names.add(threading.current_thread().name)
        self.calls.append((what, *args))
        if what == self.fail_at:
            raise ConnectionError(f"{what}: connection refused")
        if what == self.hang_at:
            self.release.wait(60)

    def _open_run(self, params, resume_id):
        self._call("open", resume_id)
        self.params = params
        return resume_id or "run-1"

    def _send_metrics(self, rows):
        self._call("metrics", [(n, v, s) for n, v, s, _ in rows])

    def _send_file(self, path):
        self._call("file", path)

    def _end_run(self, status):
        self._call("end", status)


class PutLoss(Callback):
    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar("loss", 1.0 / self.trainer.epoch_num)


def train(graph, tracker, logdir, **options):
    w = tf1.get_variable("w", initializer=0.0)
    op = tf1.assign_add(w, 1.0)
    LoopTrainer(
        graph,
        op,
        [PutLoss()],
        Monitors([tracker]),
        steps_per_epoch=2,
        max_epoch=3,
        logdir=logdir,
        **options,
    ).train()


def tracker_warnings(caplog):
    return [
        r.getMessage() for r in caplog.records if "training goes on without it" in r.getMessage()
    ]


def test_every_call_in_order_on_one_thread(graph, tmp_path, caplog):
    tracker = Tracker(params={"lr": 0.5})
    train(graph, tracker, tmp_path)
    assert tracker.calls == [
        ("open", None),
        ("metrics", [("loss", 1.0, 2), ("epoch", 1.0, 2)]),
        ("metrics", [("loss", 0.5, 4), ("epoch", 2.0, 4)]),
        ("metrics", [("loss", pytest.approx(1 / 3), 6), ("epoch", 3.0, 6)]),
        ("end", "FINISHED"),
    ]
    assert tracker.thread_names == {"towerkit-Tracker"}
    assert tracker.params["lr"] == 0.5
    assert tracker.params["max_epoch"] == 3
    assert read_runs_file(str(tmp_path)) == {"test": {"run_id": "run-1"}}
    assert json.loads((tmp_path / TRACKER_RUNS_FILE).read_text()) == {"test": {"run_id": "run-1"}}
    assert not tracker_warnings(caplog)


def test_a_failing_tracker_warns_once_and_training_goes_on(graph, tmp_path, caplog):
    caplog.set_level(logging.WARNING, "towerkit.callbacks")
    tracker = Tracker(fail_at="metrics")
    train(graph, tracker, tmp_path)
    assert [c[0] for c in tracker.calls] == ["open", "metrics"]  # then quiet
    (line,) = tracker_warnings(caplog)
    assert line == (
        "Tracker: the tracker failed: ConnectionError: metrics: connection refused; "
        "training goes on without it"
    )


def test_a_hanging_tracker_is_waited_for_timeout_seconds(graph, tmp_path, caplog):
    caplog.set_level(logging.WARNING, "towerkit.callbacks")
    tracker = Tracker(hang_at="end", timeout=0.5)
    try:
        train(graph, tracker, tmp_path)
        (line,) = tracker_warnings(caplog)
        assert "did not answer within 0.5 s at the end of training" in line
    finally:
        tracker.release.set()


def test_a_resumed_run_continues_the_recorded_run(graph, tmp_path):
    (tmp_path / TRACKER_RUNS_FILE).write_text(tracker_runs_text({"test": {"run_id": "old-7"}}))
    tracker = Tracker()
    train(graph, tracker, tmp_path, starting_epoch=2)
    assert tracker.calls[0] == ("open", "old-7")
    assert [c[1][-1][1] for c in tracker.calls if c[0] == "metrics"] == [2.0, 3.0]


def test_a_fresh_run_in_the_logdir_starts_a_new_run(graph, tmp_path):
    (tmp_path / TRACKER_RUNS_FILE).write_text(tracker_runs_text({"test": {"run_id": "old-7"}}))
    tracker = Tracker()
    train(graph, tracker, tmp_path)
    assert tracker.calls[0] == ("open", None)


def test_stats_json_and_artifacts_are_sent(graph, tmp_path):
    (tmp_path / "stats.json").write_text("[]")
    (tmp_path / "plot-a.png").write_bytes(b"x")
    (tmp_path / "plot-b.png").write_bytes(b"y")
    tracker = Tracker(artifacts=["*.png"])
    train(graph, tracker, tmp_path)
    files = [c[1] for c in tracker.calls if c[0] == "file"]
    stats = str(tmp_path / "stats.json")
    assert files == [
        stats,
        stats,
        stats,
        stats,
        str(tmp_path / "plot-a.png"),
        str(tmp_path / "plot-b.png"),
    ]
    assert tracker.calls[-1] == ("end", "FINISHED")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"params": [1]}, TypeError, "'params' must be a mapping"),
        ({"artifacts": [3]}, TypeError, "'artifacts' must be file names"),
        ({"timeout": 0}, ValueError, "'timeout' must be a number of seconds > 0"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Tracker(**kwargs)


@pytest.mark.parametrize(
    ("name", "module"), [("MLflowMonitor", "mlflow"), ("WandbMonitor", "wandb")]
)
def test_missing_package_names_the_extra(name, module):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    import towerkit.callbacks as cbs

    with pytest.raises(ImportError, match=rf"pip install 'towerkit-callbacks\[{module}\]'"):
        getattr(cbs, name)()


def test_trackers_are_chief_only():
    from towerkit.callbacks import HParamsMonitor

    assert Tracker().chief_only
    assert HParamsMonitor().chief_only


class FailAtEpoch(Callback):
    def _trigger_epoch(self):
        if self.trainer.epoch_num == 2:
            raise RuntimeError("diverged")


def hparams_data(logdir):
    import glob

    from towerkit.callbacks._hparams import plugin_messages

    data_cls = plugin_messages()["HParamsPluginData"]
    out = []
    for path in sorted(glob.glob(str(logdir / "*.hparams"))):
        for event in tf1.train.summary_iterator(path):
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "hparams"
                out.append((value.tag, data_cls.FromString(value.metadata.plugin_data.content)))
    return out


@pytest.mark.parametrize(("fail", "status"), [(False, 1), (True, 2)])
def test_hparams_session_start_and_end(graph, tmp_path, fail, status):
    """The session's hyper-parameters (numbers as numbers), and STATUS_SUCCESS or STATUS_FAILURE."""
    from towerkit.callbacks import HParamsMonitor

    logdir = tmp_path / "lr-0.5"
    logdir.mkdir()
    w = tf1.get_variable("w", initializer=0.0)
    loop = LoopTrainer(
        graph,
        tf1.assign_add(w, 1.0),
        [FailAtEpoch()] if fail else [],
        Monitors([HParamsMonitor(params={"lr": 0.5, "net": {"depth": 3, "kind": "mlp"}})]),
        steps_per_epoch=2,
        max_epoch=3,
        logdir=logdir,
    )
    if fail:
        with pytest.raises(RuntimeError, match="diverged"):
            loop.train()
    else:
        loop.train()
    (start_tag, start), (end_tag, end) = hparams_data(logdir)
    assert (start_tag, end_tag) == ("_hparams_/session_start_info", "_hparams_/session_end_info")
    info = start.session_start_info
    assert info.group_name == "lr-0.5"
    assert info.hparams["lr"].number_value == 0.5
    assert info.hparams["net/depth"].number_value == 3
    assert info.hparams["net/kind"].string_value == "mlp"
    assert info.hparams["max_epoch"].number_value == 3
    assert end.session_end_info.status == status
    assert end.session_end_info.end_time_secs >= info.start_time_secs > 0


def test_hparams_needs_a_logdir(graph):
    from towerkit.callbacks import CallbackError, HParamsMonitor

    w = tf1.get_variable("w", initializer=0.0)
    loop = LoopTrainer(graph, tf1.assign_add(w, 1.0), [], Monitors([HParamsMonitor()]))
    with pytest.raises(CallbackError, match="HParamsMonitor writes files and needs a directory"):
        loop.train()
