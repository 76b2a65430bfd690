"""HookedSession: callbacks' before_run/after_run around session calls."""

import threading

import numpy as np
import pytest
import tensorflow as tf

from towerkit.callbacks import Callback, HookedSession
from towerkit.towers.compat import tf1


class Recorder(Callback):
    """Fetches `fetches` (when not None) every call and records the results."""

    def __init__(self, fetches, feed=None):
        self.args = tf1.train.SessionRunArgs(fetches, feed_dict=feed)
        self.results = []
        self.before = 0

    def _before_run(self, ctx):
        self.before += 1
        return self.args

    def _after_run(self, ctx, values):
        self.results.append(values.results)


@pytest.fixture
def model(graph, sess):
    x = tf1.get_variable("x", initializer=0.0)
    inc = tf1.assign_add(x, 1.0)
    gs = tf1.get_variable("gs", initializer=np.int64(0), trainable=False, use_resource=True)
    step = tf1.assign_add(gs, 1)
    ph = tf1.placeholder(tf.float32, [], name="ph")
    sess.run(tf1.global_variables_initializer())
    return {"x": x, "inc": inc, "gs": gs, "step": step, "ph": ph}


class TestHookedSession:
    """One session call per run, hooks around it, results in their structure."""

    def test_no_hooks(self, sess, model):
        """Without hooks, run returns the fetches and runs the step op each call."""
        hs = HookedSession(sess, [], step_op=model["step"])
        for _ in range(3):
            hs.run(model["inc"])
        assert hs.run_calls == 3
        assert sess.run(model["gs"]) == 3
        out = hs.run([model["x"], {"y": model["x"] * 2}])
        assert isinstance(out, list)
        assert out[0] == pytest.approx(out[1]["y"] / 2)

    def test_hooks_get_their_structure(self, sess, model):
        """Each hook's after_run gets what its before_run asked for, in the same structure."""
        r1 = Recorder({"x": model["x"], "gs": model["gs"]})
        r2 = Recorder(model["ph"] * 3.0, feed={model["ph"]: 2.0})
        r3 = Recorder(model["step"])
        hs = HookedSession(sess, [r1, r2, Callback(), r3], step_op=model["step"])
        hs.run(model["inc"])
        hs.run(model["inc"])
        assert set(r1.results[0]) == {"x", "gs"}
        assert r2.results == [6.0, 6.0]
        assert isinstance(r2.results[0], np.float32)
        assert r1.before == r2.before == 2
        assert sess.run(model["gs"]) == 2, "an op fetched twice in one call runs once"
        assert r3.results == [1, 2]
        assert len(hs._by_structure) == 1, "the second call reuses the first call's callable"
        r4 = Recorder(model["step"].op)
        HookedSession(sess, [r4]).run(model["inc"])
        assert r4.results == [None], "an operation's value is None"

    def test_after_run_without_fetches_gets_none(self, sess, model):
        """A hook whose before_run returns None still gets after_run, with None results."""

        class Sometimes(Callback):
            def __init__(self):
                self.n = 0
                self.seen = []
                self.args = tf1.train.SessionRunArgs([model["x"]])

            def _before_run(self, ctx):
                self.n += 1
                return self.args if self.n % 2 == 0 else None

            def _after_run(self, ctx, values):
                self.seen.append(values.results)

        cb = Sometimes()
        hs = HookedSession(sess, [cb])
        for _ in range(4):
            hs.run(model["inc"])
        assert cb.seen[0] is None
        assert cb.seen[2] is None
        assert isinstance(cb.seen[1], list)
        assert isinstance(cb.seen[3], list)
        assert len(hs._by_structure) == 2

    def test_request_stop(self, sess, model):
        """A hook calling request_stop makes should_stop() true after the call."""

        class Stopper(Callback):
            def _after_run(self, ctx, values):
                ctx.request_stop()

        hs = HookedSession(sess, [Stopper()])
        assert not hs.should_stop()
        hs.run(model["inc"])
        assert hs.should_stop()

    def test_request_stop_from_another_thread(self, sess, model):
        """request_stop() called from another thread makes should_stop() true; runs still work."""
        hs = HookedSession(sess, [])
        hs.run(model["inc"])
        assert not hs.should_stop()
        worker = threading.Thread(target=hs.request_stop)
        worker.start()
        worker.join()
        assert hs.should_stop()
        hs.run(model["inc"])
        assert hs.should_stop()

    def test_feeds_and_names(self, sess, model):
        """Feeds by tensor or by name, fetches by name, are accepted."""
        hs = HookedSession(sess, [])
        assert hs.run("ph:0", feed_dict={"ph:0": 1.5}) == 1.5
        assert hs.run(model["ph"] + 1.0, feed_dict={model["ph"]: 1}) == 2.0

    def test_run_options_and_metadata(self, sess, model):
        """A hook asking for a full trace gets run metadata with step stats."""

        class Tracer(Callback):
            def __init__(self):
                self.meta = None

            def _before_run(self, ctx):
                return tf1.train.SessionRunArgs(
                    None, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
                )

            def _after_run(self, ctx, values):
                self.meta = values.run_metadata

        t = Tracer()
        HookedSession(sess, [t]).run(model["inc"])
        assert t.meta is not None
        assert len(t.meta.step_stats.dev_stats) > 0

    def test_bad_fetch(self, sess, model):
        """Fetching something that is not in the graph names it."""
        hs = HookedSession(sess, [])
        with pytest.raises(TypeError, match="cannot fetch or feed"):
            hs.run(object())


class TestCallbackScope:
    """Callbacks build their ops under a valid name scope whatever their class name."""

    def test_private_class_name(self, graph):
        """A class named with a leading underscore still gets a usable root scope."""
        from loop import LoopTrainer

        class _Private(Callback):
            def _setup_graph(self):
                self.op = tf.constant(1.0, name="c")

        cb = _Private()
        with graph.as_default():
            train_op = tf.no_op()
        LoopTrainer(graph, train_op, [cb], steps_per_epoch=1, max_epoch=1).train()
        assert cb.op.name == "Private/c:0"
