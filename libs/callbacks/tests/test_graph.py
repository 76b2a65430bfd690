"""RunOp, RunUpdateOps, CheckNumerics, ProcessTensors, DumpTensors, DumpTensorAsImage, PNG encoding."""

import logging
import os
import stat

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    CallbackError,
    CheckNumerics,
    DumpTensorAsImage,
    DumpTensors,
    ProcessTensors,
    RunOp,
    RunUpdateOps,
)
from towerkit.callbacks._graph import numerics_report, tensor_names, to_images
from towerkit.callbacks._png import encode_png
from towerkit.towers.compat import tf1


def counter(name="count", dtype=tf.float32):
    return tf1.get_variable(name, initializer=tf.constant(0, dtype), trainable=False)


def train_op():
    """A step: increments the variable `steps` (float)."""
    steps = counter("steps")
    return tf1.assign_add(steps, 1.0).op


class Probe(Callback):
    """Reads tensors in after_train (the loop closes its session afterwards)."""

    _chief_only = False

    def __init__(self, *tensors):
        self.tensors = tensors
        self.values = None

    def _after_train(self):
        self.values = self.trainer.sess.run(list(self.tensors))


class TestRunOp:
    """RunOp runs its op before training, on triggers and/or with each step."""

    def test_before_and_trigger(self, graph):
        """Default: once before training and once per epoch."""
        c = counter()
        probe = Probe(c)
        LoopTrainer(
            graph, train_op(), [RunOp(tf1.assign_add(c, 1.0).op), probe], max_epoch=3
        ).train()
        assert probe.values == [4.0]

    def test_every_step_in_the_same_call(self, graph):
        """run_step fetches the op with each hooked run; no extra session call."""
        c = counter()
        cb = RunOp(
            lambda: tf1.assign_add(c, 1.0), run_before=False, run_as_trigger=False, run_step=True
        )
        probe = Probe(c)
        t = LoopTrainer(graph, train_op(), [cb, probe], steps_per_epoch=4, max_epoch=2)
        t.train()
        assert probe.values == [8.0]
        assert t.hooked_sess.run_calls == 8
        assert cb.op.name.startswith("RunOp/"), (
            "a function op is built in the callback's name scope"
        )

    def test_no_hooks_when_not_stepping(self, graph):
        """Without run_step the callback is not called around session runs."""
        c = counter()
        cb = RunOp(tf1.assign_add(c, 1.0).op, run_before=False)
        t = LoopTrainer(graph, train_op(), [cb], max_epoch=1)
        t.train()
        assert cb not in t.hooked_sess._before
        assert not cb.has_hook("_before_train")
        assert cb.has_hook("_trigger_epoch")

    def test_verbose(self, graph, caplog):
        """verbose logs each run of the op."""
        c = counter()
        op = tf.group(tf1.assign_add(c, 1.0), name="bump")
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            LoopTrainer(graph, train_op(), [RunOp(op, verbose=True)], max_epoch=2).train()
        assert sum("running bump" in r.getMessage() for r in caplog.records) == 3

    def test_fail(self, graph):
        """Bad ops and a callback that would never run are refused."""
        with pytest.raises(TypeError, match=r"'op' must be a tf.Operation"):
            RunOp(3)
        with pytest.raises(ValueError, match=r"would never run.*got False, False, False"):
            RunOp(tf.no_op(), run_before=False, run_as_trigger=False)
        with pytest.raises(
            TypeError, match=r"must return a tf.Operation or a tensor; it returned int"
        ):
            LoopTrainer(graph, train_op(), [RunOp(lambda: 1)]).train()


class TestRunUpdateOps:
    """RunUpdateOps runs a collection's ops with every step."""

    def test_update_ops(self, graph):
        """The UPDATE_OPS run once per step, in the step's call."""
        c = counter()
        tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, tf1.assign_add(c, 2.0))
        probe = Probe(c)
        t = LoopTrainer(graph, train_op(), [RunUpdateOps(), probe], steps_per_epoch=3, max_epoch=2)
        t.train()
        assert probe.values == [12.0]
        assert t.hooked_sess.run_calls == 6

    def test_every_worker(self, graph):
        """On a worker that is not the chief, the updates and a RunOp still run (model state);
        CheckNumerics, which only checks, is left to the chief (a NaN goes unreported here)."""
        tf1.get_variable("nan", initializer=np.float32(np.nan))
        c, d = counter("c"), counter("d")
        tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, tf1.assign_add(c, 1.0))
        run_op = RunOp(tf1.assign_add(d, 1.0).op)
        cbs = [RunUpdateOps(), run_op, CheckNumerics(), Probe(c, d)]
        assert [cb.chief_only for cb in cbs] == [False, False, True, False]
        t = LoopTrainer(graph, train_op(), cbs, steps_per_epoch=3, max_epoch=2, is_chief=False)
        t.train()
        assert cbs[-1].values == [6.0, 3.0]

    def test_other_collection(self, graph):
        """A named collection is run instead of UPDATE_OPS."""
        a, b = counter("a"), counter("b")
        tf1.add_to_collection("mine", tf1.assign_add(a, 1.0))
        tf1.add_to_collection(tf1.GraphKeys.UPDATE_OPS, tf1.assign_add(b, 1.0))
        probe = Probe(a, b)
        LoopTrainer(graph, train_op(), [RunUpdateOps("mine"), probe], max_epoch=1).train()
        assert probe.values == [3.0, 0.0]

    def test_empty_collection_adds_nothing(self, graph, caplog):
        """With nothing to update the callback takes no part in session runs, and says nothing."""
        cb = RunUpdateOps()
        t = LoopTrainer(graph, train_op(), [cb], max_epoch=1)
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            t.train()
        assert not [r for r in caplog.records if "RunUpdateOps" in r.getMessage()]
        assert cb.op is None
        assert not cb.has_hook("_before_run")
        assert cb not in t.hooked_sess._before
        assert not t.hooked_sess._hooked

    def test_fail(self):
        """A collection must be a name."""
        with pytest.raises(
            TypeError, match=r"'collection' must be a collection name or None; got int"
        ):
            RunUpdateOps(3)


class TestCheckNumerics:
    """CheckNumerics names every variable holding NaN or Inf."""

    def model(self):
        good = tf1.get_variable("good", initializer=1.0)
        bad = tf1.get_variable("bad", initializer=1.0)
        inf = tf1.get_variable("inf", initializer=[1.0, 2.0])
        steps = counter("steps")
        # From the second step on, `bad` becomes NaN and `inf` gets an Inf entry.
        broken = steps >= 1.0
        ops = [
            tf1.assign(bad, tf1.where(broken, np.nan, 1.0)),
            tf1.assign(inf, tf1.where(broken, [np.inf, 2.0], [1.0, 2.0])),
        ]
        with tf.control_dependencies(ops):
            step = tf1.assign_add(steps, 1.0).op
        return good, step

    def test_trigger(self, graph):
        """On trigger, the error lists each variable at fault with what it holds."""
        _, step = self.model()
        with pytest.raises(
            FloatingPointError,
            match=r"2 variable\(s\).*at global step 3: 'bad:0' \(NaN\), 'inf:0' \(Inf\)$",
        ):
            LoopTrainer(graph, step, [CheckNumerics()], steps_per_epoch=3).train()

    def test_run_step(self, graph):
        """With run_step, the check runs in each step's call and fails as soon as it sees NaN."""
        _, step = self.model()
        cb = CheckNumerics(run_as_trigger=False, run_step=True)
        t = LoopTrainer(graph, step, [cb], steps_per_epoch=5)
        # The check reads the variables in the same call as the step that breaks them, in
        # no fixed order with the step's assignments: it sees at least one of the broken
        # values in the second call, all of them by the third, and never the good one.
        with pytest.raises(FloatingPointError, match=r"'(bad:0' \(NaN|inf:0' \(Inf)\)") as err:
            t.train()
        message = str(err.value)
        assert "at global step 2" in message or "at global step 3" in message
        assert "good" not in message
        if "at global step 3" in message:
            assert "'bad:0' (NaN), 'inf:0' (Inf)" in message

    def test_clean(self, graph):
        """Finite variables pass, every epoch."""
        tf1.get_variable("w", initializer=[1.0, -2.0])
        LoopTrainer(graph, train_op(), [CheckNumerics(run_step=True)], max_epoch=2).train()

    def test_no_float_variables(self, graph):
        """Without floating-point variables there is nothing to check."""
        n = counter("n", tf.int32)
        cb = CheckNumerics(run_step=True)
        LoopTrainer(graph, tf1.assign_add(n, 1).op, [cb], max_epoch=1).train()
        assert cb.op is None
        assert not cb.has_hook("_before_run")

    def test_report(self):
        """numerics_report lists every entry at fault, in order."""
        assert numerics_report(["a", "b"], [[False, True], [True, False]]) == [
            "'a' (Inf)",
            "'b' (NaN)",
        ]

    @given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=8))
    def test_report_property(self, flags):
        """An entry is reported exactly when it holds NaN or Inf."""
        names = [f"v{i}:0" for i in range(len(flags))]
        out = numerics_report(names, flags)
        assert len(out) == sum(a or b for a, b in flags)
        assert all(
            ("NaN" in line) == a and ("Inf" in line) == b
            for line, (a, b) in zip(out, [f for f in flags if any(f)])
        )


class TestProcessTensors:
    """ProcessTensors calls a function on tensors fetched with each step."""

    def test_values(self, graph):
        """The function gets one value per name, after each step."""
        steps = counter("steps")
        # one read of the variable for both fetches: the step's increment runs in the
        # same call, and two separate reads could fall on either side of it
        snap = tf.identity(steps, name="snap")
        tf.multiply(snap, 2.0, name="double")
        op = tf1.assign_add(steps, 1.0).op
        seen = []
        cb = ProcessTensors(["snap", "double:0"], lambda a, b: seen.append((a, b)))
        LoopTrainer(graph, op, [cb], steps_per_epoch=2, max_epoch=2).train()
        assert len(seen) == 4
        for k, (a, b) in enumerate(seen, start=1):
            assert a in (k - 1, k)
            assert b == 2 * a

    def test_fail(self, graph):
        """Names must be strings; the function callable; missing tensors are listed."""
        with pytest.raises(
            TypeError, match=r"'names' must hold strings; entries at fault: #1: int"
        ):
            ProcessTensors(["a", 1], print)
        with pytest.raises(ValueError, match=r"'names' is empty"):
            ProcessTensors([], print)
        with pytest.raises(TypeError, match=r"'fn' must be callable; got int"):
            ProcessTensors("a", 3)
        with pytest.raises(KeyError, match=r"no tensor named \['nope', 'nada'\]"):
            LoopTrainer(
                graph, train_op(), [ProcessTensors(["steps", "nope", "nada"], print)]
            ).train()

    def test_tensor_names(self):
        """tensor_names takes one name or a sequence."""
        assert tensor_names("x") == ("x",)
        with pytest.raises(TypeError, match=r"got int"):
            tensor_names(3)

    @given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5))
    def test_tensor_names_property(self, names):
        """Any non-empty list of names comes back as a tuple, in order."""
        assert tensor_names(names) == tuple(names)
        assert tensor_names(names[0]) == (names[0],)


class TestDumpTensors:
    """DumpTensors writes one complete npz per step under the logdir."""

    def test_files(self, graph, tmp_path):
        """Each file holds the step's values under the names given."""
        steps = counter("steps")
        snap = tf.identity(steps, name="snap")  # one read for both fetched tensors
        tf.stack([snap, -snap], name="pair")
        op = tf1.assign_add(steps, 1.0).op
        LoopTrainer(
            graph, op, [DumpTensors(["snap", "pair"])], logdir=tmp_path, max_epoch=2
        ).train()
        files = sorted(os.listdir(tmp_path))
        assert files == sorted(f"DumpTensors-{k}.npz" for k in range(1, 7))
        for k in range(1, 7):
            data = dict(np.load(tmp_path / f"DumpTensors-{k}.npz").items())
            assert set(data) == {"snap", "pair"}
            # Fetched in the same call as the increment: the value before or after it.
            assert data["snap"] in (k - 1, k)
            np.testing.assert_array_equal(data["pair"], [data["snap"], -data["snap"]])

    def test_stale_temporaries_removed(self, graph, tmp_path, caplog):
        """Temporaries a killed run left mid-write are removed at the next run; others stay."""
        gone = 999_999_999  # above any pid_max: no process has it
        stale = [
            f".DumpTensors-3.tmp-{gone}-0123abcd.npz",
            f".images-ep001-step2-0.tmp-{gone}-0123abcd.png",
        ]
        foreign = f".notes.tmp-{gone}-0123abcd.txt"
        for name in (*stale, foreign):
            (tmp_path / name).write_text("partial")
        tf.constant(np.zeros((1, 2, 2, 1), np.float32), name="images")
        callbacks = [DumpTensors("images"), DumpTensorAsImage("images")]
        with caplog.at_level("WARNING", logger="towerkit.sessinit"):
            LoopTrainer(
                graph, train_op(), callbacks, logdir=tmp_path, max_epoch=1, steps_per_epoch=1
            ).train()
        assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == [foreign]
        assert "of DumpTensors files" in caplog.text
        assert "of image files" in caplog.text

    def test_needs_logdir(self, graph):
        """Without a logdir there is nowhere to write."""
        with pytest.raises(
            CallbackError, match=r"DumpTensors writes files under the trainer's logdir"
        ):
            LoopTrainer(graph, train_op(), [DumpTensors("steps")]).train()


def decode_png(data):
    return tf.io.decode_png(data).numpy()


class TestDumpTensorAsImage:
    """DumpTensorAsImage writes PNG files on each trigger."""

    def test_images(self, graph, tmp_path):
        """A 4-d value gives one file per image, scaled, clipped and readable by TensorFlow."""
        base = np.linspace(0.0, 1.2, 2 * 3 * 4).reshape(2, 3, 4, 1).astype(np.float32)
        tf.constant(base, name="images")
        LoopTrainer(
            graph,
            train_op(),
            [DumpTensorAsImage("images")],
            logdir=tmp_path,
            max_epoch=2,
            steps_per_epoch=2,
        ).train()
        names = sorted(p for p in os.listdir(tmp_path) if p.endswith(".png"))
        assert names == [
            "images-ep001-step2-0.png",
            "images-ep001-step2-1.png",
            "images-ep002-step4-0.png",
            "images-ep002-step4-1.png",
        ]
        expected = np.clip(np.rint(base * 255), 0, 255).astype(np.uint8)
        with tf.Graph().as_default(), tf1.Session() as s:
            for i in (0, 1):
                data = (tmp_path / f"images-ep002-step4-{i}.png").read_bytes()
                np.testing.assert_array_equal(s.run(tf.io.decode_png(data)), expected[i])

    def test_png_mode_follows_umask(self, graph, tmp_path):
        """Image files get the mode the umask gives new files (0644 under 022), not 0600."""
        tf.constant(np.zeros((1, 2, 2, 1), np.float32), name="images")
        previous = os.umask(0o022)
        try:
            LoopTrainer(
                graph,
                train_op(),
                [DumpTensorAsImage("images")],
                logdir=tmp_path,
                max_epoch=1,
                steps_per_epoch=1,
            ).train()
        finally:
            os.umask(previous)
        (png,) = tmp_path.glob("*.png")
        assert stat.S_IMODE(png.stat().st_mode) == 0o644

    def test_map_func_and_prefix(self, graph, tmp_path):
        """map_func and scale shape the pixels; prefix names the files."""
        tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3), name="ramp")
        cb = DumpTensorAsImage("ramp", prefix="r", map_func=lambda v: [v, v.T], scale=10)
        LoopTrainer(
            graph, train_op(), [cb], logdir=tmp_path, max_epoch=1, steps_per_epoch=1
        ).train()
        with tf.Graph().as_default(), tf1.Session() as s:
            a = s.run(tf.io.decode_png((tmp_path / "r-ep001-step1-0.png").read_bytes()))
            b = s.run(tf.io.decode_png((tmp_path / "r-ep001-step1-1.png").read_bytes()))
        np.testing.assert_array_equal(a[:, :, 0], [[0, 10, 20], [30, 40, 50]])
        assert b.shape == (3, 2, 1)

    def test_fail(self):
        """Bad arguments are refused at construction."""
        with pytest.raises(TypeError, match=r"'map_func' must be callable or None; got int"):
            DumpTensorAsImage("x", map_func=1)
        with pytest.raises(TypeError, match=r"'prefix' must be a string or None"):
            DumpTensorAsImage("x", prefix=1)
        with pytest.raises(ValueError, match=r"got shape \(5,\)"):
            to_images(np.zeros(5))
        with pytest.raises(ValueError, match=r"image #1 must have shape .* got \(2, 2, 5\)"):
            to_images([np.zeros((2, 2)), np.zeros((2, 2, 5))])


class TestPng:
    """The images DumpTensorAsImage writes decode, with TensorFlow, to the same pixels."""

    @settings(max_examples=40, deadline=None)
    @given(
        hnp.arrays(
            np.uint8,
            st.tuples(st.integers(1, 9), st.integers(1, 9), st.sampled_from([1, 2, 3, 4])),
        )
    )
    def test_roundtrip(self, image):
        """Every shape and channel count round-trips exactly."""
        (pixels,) = to_images(image, scale=1)
        np.testing.assert_array_equal(decode_png(encode_png(pixels)), pixels)
        np.testing.assert_array_equal(pixels.reshape(image.shape), image)

    @given(
        hnp.arrays(
            np.float64,
            st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4)),
            elements=st.floats(-2, 2),
        ),
        st.floats(0.5, 300),
    )
    def test_to_images(self, value, scale):
        """Pixels are value * scale, rounded and clipped to [0, 255]."""
        (image,) = to_images(value, scale)
        assert image.dtype == np.uint8
        np.testing.assert_array_equal(image, np.clip(np.rint(value * scale), 0, 255))
        (flat,) = to_images(value[:, :, 0], scale)
        assert flat.shape == (*value.shape[:2], 1)
