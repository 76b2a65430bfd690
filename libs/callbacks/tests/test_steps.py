"""ProgressBar, TensorPrinter and SessionRunTimeout in a real loop."""

import logging

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import ProgressBar, SessionRunTimeout, TensorPrinter
from towerkit.callbacks._steps import display_name, format_value
from towerkit.towers.compat import tf1


def stream_model():
    """`loss` takes the values 1, 2, 3, ... in successive session calls."""
    ds = tf.data.Dataset.range(1, 1000).map(lambda v: tf.cast(v, tf.float32))
    loss = tf.identity(tf1.data.make_one_shot_iterator(ds).get_next(), name="loss")
    total = tf1.get_variable("total", initializer=0.0, trainable=False)
    return tf1.assign_add(total, loss).op


class CountingBar(ProgressBar):
    """Counts the steps whose call fetched the shown tensors."""

    fetched = 0

    def _after_run(self, run_context, run_values):
        if run_values.results is not None:
            self.fetched += 1
        super()._after_run(run_context, run_values)


class TestProgressBar:
    """A tqdm bar per epoch."""

    def test_bar_per_epoch(self, graph, capsys):
        """Each epoch draws its bar to completion, with the shown tensors."""
        cb = ProgressBar(["loss"])
        cb.mininterval = 0.0
        cb.terminal = True
        LoopTrainer(graph, stream_model(), [cb], steps_per_epoch=3, max_epoch=2).train()
        err = capsys.readouterr().err
        assert "epoch 1/2" in err
        assert "epoch 2/2" in err
        assert "3/3" in err
        assert "loss=6" in err

    def test_no_terminal_no_bar(self, graph, capsys):
        """Without a terminal, no frame is drawn and nothing is fetched."""
        cb = CountingBar(["loss"])
        cb.mininterval = 0.0
        LoopTrainer(graph, stream_model(), [cb], steps_per_epoch=3, max_epoch=2).train()
        assert capsys.readouterr().err == ""
        assert cb.fetched == 0
        assert not cb.has_hook("_before_run")

    def test_fetches_only_when_redrawn(self, graph, capsys):
        """Tensors are fetched at the first step of an epoch and then at most every mininterval."""
        cb = CountingBar(["loss"])
        cb.mininterval = 60.0
        cb.terminal = True
        LoopTrainer(graph, stream_model(), [cb], steps_per_epoch=4, max_epoch=2).train()
        assert cb.fetched == 2
        assert "epoch 2/2" in capsys.readouterr().err

    def test_no_names_no_hook(self, graph, capsys):
        """Without names the bar takes no part in session runs; it runs on every worker."""
        cb = ProgressBar()
        cb.terminal = True
        t = LoopTrainer(graph, stream_model(), [cb], max_epoch=1, is_chief=False).train()
        assert not t.hooked_sess._hooked
        assert not cb.chief_only
        err = capsys.readouterr().err
        assert "0/3" in err
        assert err.endswith("\r"), "the bar is cleared when its epoch ends"

    def test_fail(self):
        """Names must be strings."""
        with pytest.raises(
            TypeError, match=r"'names' must hold strings; entries at fault: #0: int"
        ):
            ProgressBar([1])

    def test_format(self):
        """Shown names drop ':0'; numbers keep 4 significant digits."""
        assert display_name("a/b:0") == "a/b"
        assert format_value(1234567.0) == "1.235e+06"

    @given(st.from_regex(r"[a-z/_]{1,10}", fullmatch=True), st.integers(0, 3))
    def test_display_name(self, op, index):
        """Only the ':0' output index is dropped."""
        shown = display_name(f"{op}:{index}")
        assert shown == (op if index == 0 else f"{op}:{index}")

    @given(st.floats(-1e300, 1e300))
    def test_format_value(self, x):
        """A formatted number reads back within 4 significant digits."""
        assert float(format_value(x)) == pytest.approx(x, rel=1e-3, abs=1e-300)


class TestTensorPrinter:
    """TensorPrinter logs tensors after each step."""

    def test_logs(self, graph, caplog):
        """One record per tensor per step."""
        op = stream_model()
        tf.multiply(graph.get_tensor_by_name("loss:0"), 10.0, name="big")
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            LoopTrainer(
                graph, op, [TensorPrinter(["loss", "big"])], steps_per_epoch=2, max_epoch=1
            ).train()
        lines = [r.getMessage() for r in caplog.records]
        assert lines == ["loss: 1.0", "big: 10.0", "loss: 2.0", "big: 20.0"]

    def test_fail(self):
        """At least one name."""
        with pytest.raises(ValueError, match=r"'names' is empty"):
            TensorPrinter([])


class TestSessionRunTimeout:
    """SessionRunTimeout gives each hooked run a deadline."""

    def test_deadline(self, graph):
        """A step blocked on an empty queue fails with DeadlineExceededError."""
        queue = tf1.FIFOQueue(1, tf.float32)
        with pytest.raises(tf.errors.DeadlineExceededError):
            LoopTrainer(graph, queue.dequeue().op, [SessionRunTimeout(200)]).train()

    def test_fast_steps_pass(self, graph):
        """Steps within the deadline run; the arguments object is the same every step."""
        cb = SessionRunTimeout(60_000)
        args = cb.before_run(None)
        t = LoopTrainer(graph, stream_model(), [cb], max_epoch=2).train()
        assert t.global_step == 6
        assert cb.before_run(None) is args
        assert args.options.timeout_in_ms == 60_000

    def test_fail(self):
        """The deadline is a positive int of milliseconds."""
        with pytest.raises(
            ValueError, match=r"'timeout_in_ms' must be > 0 \(milliseconds\); got 0"
        ):
            SessionRunTimeout(0)
        with pytest.raises(TypeError, match=r"'timeout_in_ms' must be an int; got float"):
            SessionRunTimeout(1.5)
