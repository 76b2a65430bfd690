"""CallbackToHook, HookToCallback and TFLocalCLIDebugHook with real sessions and hooks."""

import io
import sys

import pytest
from loop import LoopTrainer

from towerkit.callbacks import Callback, CallbackToHook, HookToCallback, TFLocalCLIDebugHook
from towerkit.towers.compat import tf1


class RecordingHook(tf1.train.SessionRunHook):
    """A hook that fetches a tensor and records every call."""

    def __init__(self, name):
        self.name = name
        self.calls = []
        self.values = []

    def begin(self):
        self.tensor = tf1.get_default_graph().get_tensor_by_name(self.name)
        self.calls.append("begin")

    def after_create_session(self, session, coord):
        self.calls.append(("after_create_session", coord))

    def before_run(self, run_context):
        self.calls.append("before_run")
        return tf1.train.SessionRunArgs(self.tensor)

    def after_run(self, run_context, run_values):
        self.values.append(run_values.results)

    def end(self, session):
        self.calls.append("end")


def step_model():
    steps = tf1.get_variable("steps", initializer=0.0, trainable=False)
    return tf1.assign_add(steps, 1.0).op


class TestHookToCallback:
    """A SessionRunHook driven by the loop."""

    def test_phases(self, graph):
        """begin, after_create_session (coord None), runs and end are called in order."""
        hook = RecordingHook("steps/Read/ReadVariableOp:0")
        t = LoopTrainer(graph, step_model(), [HookToCallback(hook)], steps_per_epoch=2, max_epoch=2)
        t.train()
        assert hook.calls[:2] == ["begin", ("after_create_session", None)]
        assert hook.calls[2:] == ["before_run"] * 4 + ["end"]
        assert len(hook.values) == 4

    def test_tensorflow_hook(self, graph):
        """TensorFlow's StopAtStepHook ends training at its step through request_stop."""
        cb = HookToCallback(tf1.train.StopAtStepHook(last_step=5))
        t = LoopTrainer(graph, step_model(), [cb], steps_per_epoch=4, max_epoch=5)
        t.train()
        assert t.global_step == 5

    def test_fail(self):
        """Only hooks are accepted."""
        with pytest.raises(
            TypeError, match=r"'hook' must be a tf.compat.v1.train.SessionRunHook; got int"
        ):
            HookToCallback(3)


class Fetcher(Callback):
    """A callback fetching a tensor with every run."""

    def __init__(self, tensor):
        self.args = tf1.train.SessionRunArgs(tensor)
        self.values = []
        self.steps = 0

    def _before_run(self, ctx):
        return self.args

    def _after_run(self, ctx, values):
        self.values.append(values.results)

    def _trigger_step(self):
        self.steps += 1


class TestCallbackToHook:
    """A callback's before_run/after_run under TensorFlow's MonitoredSession."""

    def test_monitored_session(self, graph):
        """The callback's fetches run with the session's; other methods are not called."""
        step = step_model()
        cb = Fetcher(graph.get_tensor_by_name("steps/Read/ReadVariableOp:0"))
        hook = CallbackToHook(cb)
        with tf1.train.SingularMonitoredSession(hooks=[hook]) as sess:
            for _ in range(3):
                sess.run(step)
        assert len(cb.values) == 3
        assert cb.steps == 0
        assert hook.callback is cb

    def test_fail(self):
        """Only callbacks are accepted."""
        with pytest.raises(TypeError, match=r"'cb' must be a Callback; got str"):
            CallbackToHook("x")


class TestTFLocalCLIDebugHook:
    """tfdbg's command-line debugger, driven through its standard input."""

    def test_construct(self):
        """It wraps TensorFlow's LocalCLIDebugHook."""
        from tensorflow.python.debug.wrappers.hooks import LocalCLIDebugHook

        cb = TFLocalCLIDebugHook(ui_type="readline")
        assert isinstance(cb, HookToCallback)
        assert isinstance(cb.hook, LocalCLIDebugHook)

    def test_cli_session(self, graph, tmp_path, monkeypatch, capsys):
        """Each step stops at the debugger's prompt; `run` goes on and shows the dumped tensors."""
        monkeypatch.setattr(sys, "stdin", io.StringIO("run\n" * 4))
        v = tf1.get_variable("v", initializer=1.0)
        cb = TFLocalCLIDebugHook(ui_type="readline", dump_root=str(tmp_path / "dumps"))
        cb.add_tensor_filter("always", lambda datum, tensor: True)
        t = LoopTrainer(graph, tf1.assign_add(v, 1.0).op, [cb], steps_per_epoch=2, max_epoch=1)
        t.train()
        out = capsys.readouterr().out
        assert t.global_step == 2
        assert "run-end: run #1" in out
        assert "run-end: run #2" in out
        assert "v:0" in out, "the dumped tensors are listed"
        assert "always" in out, "the added filter is registered"
