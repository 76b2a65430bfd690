"""Monitors: the trainer's statistics hub and the monitors that write them out."""

import json
import logging
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    CallbackError,
    CometMLMonitor,
    JSONWriter,
    MissingStatError,
    MonitorBase,
    Monitors,
    ScalarPrinter,
    SendMonitorData,
    SendStat,
    StatsFileError,
    StopTraining,
    TFEventWriter,
)
from towerkit.callbacks._senders import check_timeout, fill_command
from towerkit.towers.compat import tf1


def make_train_op():
    """A one-variable model: each step adds 1 to `w`."""
    w = tf1.get_variable("w", initializer=0.0)
    return tf1.assign_add(w, 1.0)


class Recorder(MonitorBase):
    """Keeps what it processes, with the global step it saw it at."""

    def __init__(self):
        self.scalars, self.images, self.summaries, self.events = [], [], [], []
        self.phases = []

    def process_scalar(self, name, val):
        self.scalars.append((self.trainer.global_step, name, val))

    def process_image(self, name, val):
        self.images.append((name, val.shape))

    def process_summary(self, summary):
        self.summaries.append(summary)

    def process_event(self, evt):
        self.events.append(evt)

    def _before_train(self):
        self.phases.append("before_train")

    def _trigger_epoch(self):
        self.phases.append(("trigger_epoch", self.trainer.epoch_num))

    def _after_train(self):
        self.phases.append("after_train")


class PutEveryEpoch(Callback):
    """Puts `epoch * 10` as 'val' and the step count as 'steps' each epoch."""

    def _trigger(self):
        self.trainer.monitors.put_scalar("val", np.float32(self.trainer.epoch_num * 10))
        self.trainer.monitors.put_scalar("steps", np.int64(self.trainer.global_step))


class ScalarOnly(MonitorBase):
    """Processes scalars only."""

    def __init__(self):
        self.names = []

    def process_scalar(self, name, val):
        self.names.append(name)


class TestMonitors:
    """`Monitors` dispatches, keeps the history and drives its monitors."""

    def test_history_in_a_loop(self, graph):
        """Scalars put by a callback each epoch are in the history with their global step."""
        rec = Recorder()
        mons = Monitors([rec])
        LoopTrainer(
            graph, make_train_op(), [PutEveryEpoch()], mons, steps_per_epoch=3, max_epoch=3
        ).train()
        assert mons.get_history("val") == [(3, 10.0), (6, 20.0), (9, 30.0)]
        assert mons.get_latest("steps") == 9
        assert isinstance(mons.get_latest("steps"), int)
        assert isinstance(mons.get_latest("val"), float)
        assert [s[:2] for s in rec.scalars] == [
            (3, "val"),
            (3, "steps"),
            (6, "val"),
            (6, "steps"),
            (9, "val"),
            (9, "steps"),
        ]
        assert len(rec.summaries) == 6
        assert rec.summaries[0].value[0].tag == "val"
        assert rec.summaries[0].value[0].simple_value == 10.0
        assert rec.phases == [
            "before_train",
            ("trigger_epoch", 1),
            ("trigger_epoch", 2),
            ("trigger_epoch", 3),
            "after_train",
        ]
        assert mons.stat_names == ["steps", "val"]

    def test_missing_stat(self, graph):
        """Asking for a stat never put names the stats that exist."""
        mons = Monitors([])
        LoopTrainer(graph, make_train_op(), [PutEveryEpoch()], mons, max_epoch=1).train()
        with pytest.raises(
            MissingStatError, match=r"no statistic named 'loss' .* \['steps', 'val'\]"
        ):
            mons.get_latest("loss")
        with pytest.raises(KeyError, match="'loss'"):
            mons.get_history("loss")

    def test_summary_image_event(self, graph):
        """Summaries from summary ops feed the scalar history; images and events are dispatched."""
        x = tf1.constant(2.5)
        summary_op = tf1.summary.merge(
            [tf1.summary.scalar("x", x), tf1.summary.histogram("h", tf1.constant([1.0, 2.0]))]
        )
        rec, only = Recorder(), ScalarOnly()
        mons = Monitors([rec, only])

        class PutAll(Callback):
            def _setup_graph(self):
                self.op = summary_op

            def _trigger(self):
                m = self.trainer.monitors
                m.put_summary(self.trainer.sess.run(self.op))
                m.put_image("img", np.zeros((4, 5, 3)))
                m.put_image("many", np.full((2, 4, 5, 1), 255.0))
                m.put_event(tf1.Event(file_version="x"))

        LoopTrainer(
            graph, make_train_op(), [PutAll()], mons, steps_per_epoch=2, max_epoch=1
        ).train()
        assert mons.get_history("x") == [(2, 2.5)]
        assert only.names == ["x"]
        assert rec.images == [("img", (1, 4, 5, 3)), ("many", (2, 4, 5, 1))]
        tags = [[v.tag for v in s.value] for s in rec.summaries]
        assert tags == [["x", "h"], ["img"], ["many/0", "many/1"]]
        img = rec.summaries[1].value[0].image
        assert (img.height, img.width, img.colorspace) == (4, 5, 3)
        assert rec.events[0].step == 2
        assert rec.events[0].wall_time > 0

    def test_png_round_trip(self):
        """Images are encoded as real PNG files that TensorFlow decodes back."""
        import tensorflow as tf

        from towerkit.callbacks._png import encode_png

        rng = np.random.default_rng(0)
        for c in (1, 2, 3, 4):
            img = rng.integers(0, 256, size=(7, 5, c)).astype(np.float32)
            png = encode_png(img)
            with tf.Graph().as_default() as g, tf1.Session(graph=g) as s:
                back = s.run(tf1.image.decode_png(png, channels=0))
            np.testing.assert_array_equal(back, img.astype(np.uint8))

    def test_fail(self, graph):
        """Wrong kinds and shapes are rejected with the entry at fault."""
        with pytest.raises(
            TypeError, match=r"'monitors' must hold MonitorBase instances; got #1: Callback"
        ):
            Monitors([Recorder(), Callback()])

        class Hooking(MonitorBase):
            def _before_run(self, ctx):
                return None

        with pytest.raises(TypeError, match=r"monitors \['Hooking'\] define before_run/after_run"):
            Monitors([Hooking()])
        mons = Monitors([])
        with pytest.raises(CallbackError, match="only after setup_graph"):
            mons.put_scalar("a", 1.0)
        LoopTrainer(graph, make_train_op(), [], mons, max_epoch=1).train()
        with pytest.raises(TypeError, match="statistic 'a' must be a real number; got str"):
            mons.put_scalar("a", "1.0")
        with pytest.raises(ValueError, match=r"image 'im' must be a 2-D .* got shape \(3,\)"):
            mons.put_image("im", np.zeros(3))
        with pytest.raises(
            ValueError, match=r"image 'im' must have 1, 2, 3 or 4 channels .* \(2, 2, 7\)"
        ):
            mons.put_image("im", np.zeros((2, 2, 7)))
        with pytest.raises(TypeError, match=r"'summary' must be a tf\.compat\.v1\.Summary"):
            mons.put_summary("x")

    def test_has_hook(self):
        """Monitors hooks exactly the phases its monitors hook, and never session runs."""
        mons = Monitors([ScalarOnly()])
        assert not mons.has_hook("_trigger_epoch")
        assert not mons.has_hook("_before_run")
        assert Monitors([Recorder()]).has_hook("_trigger_epoch")


def events_in(logdir):
    """Every event of every event file under `logdir`, in file order."""
    files = sorted(p for p in os.listdir(logdir) if p.startswith("events.out.tfevents"))
    return files, [e for f in files for e in tf1.train.summary_iterator(os.path.join(logdir, f))]


def scalars_in(events):
    return [
        (e.step, v.tag, round(v.simple_value, 6))
        for e in events
        for v in e.summary.value
        if v.WhichOneof("value") == "simple_value"
    ]


class TestTFEventWriter:
    """Real event files, read back with summary_iterator."""

    def test_scalars_images_graph(self, graph, tmp_path):
        """Scalars land at their global step, images as PNG, the graph once."""

        class Put(Callback):
            def _before_train(self):
                self.trainer.monitors.put_scalar("early", 1.0)

            def _trigger(self):
                self.trainer.monitors.put_scalar("val", self.trainer.epoch_num * 1.5)
                self.trainer.monitors.put_image("img", np.full((3, 4), 128))

        LoopTrainer(
            graph,
            make_train_op(),
            [Put()],
            Monitors([TFEventWriter()]),
            steps_per_epoch=2,
            max_epoch=2,
            logdir=tmp_path,
        ).train()
        files, events = events_in(tmp_path)
        assert len(files) == 1
        assert scalars_in(events) == [(0, "early", 1.0), (2, "val", 1.5), (4, "val", 3.0)]
        images = [
            v.image for e in events for v in e.summary.value if v.WhichOneof("value") == "image"
        ]
        assert [(i.height, i.width, i.colorspace) for i in images] == [(3, 4, 1)] * 2
        assert sum(e.HasField("graph_def") for e in events) == 1

    def test_split_files(self, graph, tmp_path):
        """With split_files, each epoch starts a new event file."""
        LoopTrainer(
            graph,
            make_train_op(),
            [PutEveryEpoch()],
            Monitors([TFEventWriter(logdir=tmp_path / "ev", split_files=True)]),
            max_epoch=3,
        ).train()
        files, events = events_in(tmp_path / "ev")
        assert len(files) == 4  # one per epoch, and the one opened after the last
        assert [s[:2] for s in scalars_in(events) if s[1] == "val"] == [
            (3, "val"),
            (6, "val"),
            (9, "val"),
        ]

    def test_events(self, graph, tmp_path):
        """put_event writes the event with the step filled in."""

        class PutEvent(Callback):
            def _trigger(self):
                self.trainer.monitors.put_event(tf1.Event(log_message=tf1.LogMessage(message="hi")))

        LoopTrainer(
            graph,
            make_train_op(),
            [PutEvent()],
            Monitors([TFEventWriter()]),
            max_epoch=1,
            logdir=tmp_path,
        ).train()
        _, events = events_in(tmp_path)
        assert [(e.step, e.log_message.message) for e in events if e.HasField("log_message")] == [
            (3, "hi")
        ]

    def test_fail(self, graph):
        """No logdir is an error naming the monitor; bad options fail at construction."""
        with pytest.raises(
            CallbackError,
            match="TFEventWriter writes files and needs a directory: the trainer has no logdir",
        ):
            LoopTrainer(graph, make_train_op(), [], Monitors([TFEventWriter()])).train()
        with pytest.raises(ValueError, match="'max_queue' must be an int >= 1; got 0"):
            TFEventWriter(max_queue=0)
        with pytest.raises(ValueError, match="'flush_secs' must be a number > 0"):
            TFEventWriter(flush_secs=-1)


class StopAtStep(Callback):
    """Raises StopTraining after global step `step`."""

    def __init__(self, step):
        self.step = step

    def _trigger_step(self):
        if self.trainer.global_step == self.step:
            raise StopTraining


def train_json(logdir, callbacks=(), **kw):
    g = tf.Graph()
    with g.as_default():
        mons = Monitors([JSONWriter()])
        LoopTrainer(
            g, make_train_op(), [*callbacks, PutEveryEpoch()], mons, logdir=logdir, **kw
        ).train()
    return mons


@pytest.mark.procs
class TestJSONWriter:
    """stats.json: one record per finished epoch, atomic, consistent across resumes."""

    def test_records(self, tmp_path):
        """Each epoch appends epoch_num, global_step and the scalars put during it."""
        train_json(tmp_path, steps_per_epoch=3, max_epoch=2)
        data = json.loads((tmp_path / "stats.json").read_text())
        assert data == [
            {"epoch_num": 1, "global_step": 3, "val": 10.0, "steps": 3},
            {"epoch_num": 2, "global_step": 6, "val": 20.0, "steps": 6},
        ]
        assert JSONWriter.load_existing_json(tmp_path) == data
        assert JSONWriter.load_existing_epoch_number(tmp_path) == 2
        assert sorted(os.listdir(tmp_path)) == ["stats.json"]

    def test_load_existing_default_dir(self, tmp_path):
        """On a set-up writer, the directory defaults to its trainer's logdir."""
        mons = train_json(tmp_path, steps_per_epoch=3, max_epoch=2)
        (writer,) = mons.monitors
        assert writer.load_existing_epoch_number() == 2
        assert writer.load_existing_json() == JSONWriter.load_existing_json(str(tmp_path))
        assert writer.load_existing_json(tmp_path / "elsewhere") is None

    def test_load_existing_fail(self):
        """Without a dir and without a trainer's logdir, the error says what to pass."""
        with pytest.raises(
            TypeError,
            match=r"JSONWriter.load_existing_json\(\) needs 'dir' \(the log directory\): "
            r"called on the class, and there is no global log directory to default to",
        ):
            JSONWriter.load_existing_json()
        with pytest.raises(TypeError, match=r"this JSONWriter has no trainer with a logdir yet"):
            JSONWriter().load_existing_epoch_number()

    def test_resume_appends_and_drops_rerun_epochs(self, tmp_path):
        """A resumed run keeps the records before its starting epoch and replaces the rest."""
        train_json(tmp_path, steps_per_epoch=3, max_epoch=4)
        assert JSONWriter.load_existing_epoch_number(tmp_path) == 4
        # resume from a checkpoint at the end of epoch 2 (records 3 and 4 were written after it)
        train_json(
            tmp_path, steps_per_epoch=3, starting_epoch=3, max_epoch=5, session_init=SetStep(6)
        )
        data = JSONWriter.load_existing_json(tmp_path)
        assert [(r["epoch_num"], r["global_step"]) for r in data] == [
            (1, 3),
            (2, 6),
            (3, 9),
            (4, 12),
            (5, 15),
        ]

    def test_unfinished_epoch_not_written(self, tmp_path):
        """Scalars of an epoch stopped in the middle are not written; the last record is a finished epoch."""

        class PutEveryStep(Callback):
            def _trigger_step(self):
                self.trainer.monitors.put_scalar("loss", 0.5)

        train_json(tmp_path, [PutEveryStep(), StopAtStep(5)], steps_per_epoch=3, max_epoch=3)
        data = JSONWriter.load_existing_json(tmp_path)
        assert [(r["epoch_num"], r["loss"]) for r in data] == [(1, 0.5)]
        assert JSONWriter.load_existing_epoch_number(tmp_path) == 1

    def test_stale_temporaries_removed(self, tmp_path, caplog):
        """Temporaries of stats.json left by a killed run are removed at the next run, logged."""
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        stale = [f".stats.tmp-{proc.pid}-0123abcd.json", f".stats.json.tmp-{proc.pid}-0123abcd.bak"]
        other = f".model-3.tmp-{proc.pid}-0123abcd.index"
        for name in (*stale, other):
            (tmp_path / name).write_text("partial")
        with caplog.at_level("WARNING", logger="towerkit.sessinit"):
            train_json(tmp_path, steps_per_epoch=3, max_epoch=1)
        assert sorted(os.listdir(tmp_path)) == [other, "stats.json"]
        assert "removed 2 stale temporary file(s) of stats.json files" in caplog.text

    def test_no_file(self, tmp_path):
        """Without a file, the loaders return None."""
        assert JSONWriter.load_existing_json(tmp_path) is None
        assert JSONWriter.load_existing_epoch_number(tmp_path) is None

    def test_non_finite_values_strict_json(self, tmp_path):
        """NaN and infinities are written as strings a strict parser reads, and read back as floats."""

        class PutOdd(Callback):
            def _trigger_epoch(self):
                e = self.trainer.epoch_num
                self.trainer.monitors.put_scalar("cost", [math.nan, math.inf, -math.inf][e - 1])
                self.trainer.monitors.put_scalar("zero", -0.0)

        train_json(tmp_path, [PutOdd()], steps_per_epoch=1, max_epoch=3)
        text = (tmp_path / "stats.json").read_text()

        def refuse(token):
            raise AssertionError(f"bare {token} in stats.json")

        strict = json.loads(text, parse_constant=refuse)
        assert [r["cost"] for r in strict] == ["NaN", "Infinity", "-Infinity"]
        loaded = JSONWriter.load_existing_json(tmp_path)
        assert math.isnan(loaded[0]["cost"])
        assert [r["cost"] for r in loaded[1:]] == [math.inf, -math.inf]
        assert math.copysign(1.0, loaded[0]["zero"]) == -1.0
        # a resumed run keeps the earlier records as they were
        train_json(
            tmp_path,
            [PutOdd()],
            steps_per_epoch=1,
            starting_epoch=3,
            max_epoch=3,
            session_init=SetStep(2),
        )
        assert json.loads((tmp_path / "stats.json").read_text(), parse_constant=refuse) == strict

    def test_damaged_file_fails_run(self, tmp_path):
        """A damaged stats.json stops the run at before_train with its path and position."""
        (tmp_path / "stats.json").write_bytes(b'[{"epoch_num": 1, "global_step": 3, "val\xfe": 1}]')
        with pytest.raises(
            StatsFileError,
            match=r"stats\.json' is not UTF-8 text: byte 0xfe at byte offset 40 \(line 1, column 41\)",
        ):
            train_json(tmp_path, steps_per_epoch=3, starting_epoch=2, max_epoch=2)
        assert (tmp_path / "stats.json").read_bytes().endswith(b'\xfe": 1}]')

    def test_fail(self, tmp_path, graph):
        """A corrupt file and a missing logdir are clear errors."""
        (tmp_path / "stats.json").write_text("[{")
        with pytest.raises(ValueError, match=r"stats\.json' is not valid JSON"):
            JSONWriter.load_existing_json(tmp_path)
        (tmp_path / "stats.json").write_text('{"a": 1}')
        with pytest.raises(ValueError, match="must hold a JSON list of records"):
            JSONWriter.load_existing_json(tmp_path)
        with pytest.raises(CallbackError, match="JSONWriter writes files and needs a directory"):
            LoopTrainer(graph, make_train_op(), [], Monitors([JSONWriter()])).train()


class SetStep:
    """A session init that sets the global step, as a restored checkpoint would."""

    def __init__(self, step):
        self.step = step

    def init(self, sess):
        tf1.train.get_global_step(sess.graph).load(self.step, sess)


@pytest.mark.procs
class TestScalarPrinter:
    """Scalars logged through `towerkit.callbacks`, filtered by regular expressions."""

    def test_epoch(self, graph, caplog):
        """After each epoch, each allowed scalar is logged once."""
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            LoopTrainer(
                graph,
                make_train_op(),
                [PutEveryEpoch()],
                Monitors([ScalarPrinter(blacklist=["^ste"], one_line=False, variables=False)]),
                max_epoch=2,
            ).train()
        assert [r.getMessage() for r in caplog.records] == ["val: 10", "val: 20"]

    def test_one_line_per_epoch(self, graph, caplog):
        """By default an epoch ends with one line: epoch, wall time, scalars sorted by name."""
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            LoopTrainer(
                graph,
                make_train_op(),
                [PutEveryEpoch()],
                Monitors([ScalarPrinter()]),
                max_epoch=2,
            ).train()
        lines = [r.getMessage() for r in caplog.records]
        assert lines[:3] == [
            "trainable variables:",
            "  name  shape   count",
            "  w     scalar      1",
        ]
        assert lines[3] == "1 trainable variable, 1 parameter (4 bytes)"
        assert len(lines) == 6
        for epoch, line in zip((1, 2), lines[4:]):
            assert re.fullmatch(
                rf"epoch {epoch}/2  \d+\.\d s  steps {epoch * 3}  val {epoch * 10}", line
            ), line

    def test_step_and_whitelist(self, graph, caplog):
        """With enable_step, scalars put in a step are logged after it."""

        class PutEveryStep(Callback):
            def _trigger_step(self):
                self.trainer.monitors.put_scalar("loss", self.trainer.global_step / 4)
                self.trainer.monitors.put_scalar("other", 1)

        printer = ScalarPrinter(
            enable_step=True,
            enable_epoch=False,
            whitelist=["loss"],
            one_line=False,
            variables=False,
        )
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            LoopTrainer(
                graph,
                make_train_op(),
                [PutEveryStep()],
                Monitors([printer]),
                steps_per_epoch=2,
                max_epoch=1,
            ).train()
        assert [r.getMessage() for r in caplog.records] == ["loss: 0.25", "loss: 0.5"]
        assert printer.allows("val-loss")
        assert not printer.allows("other")

    @pytest.mark.parametrize(
        ("setup", "stdout", "stderr"),
        [
            ("", "", "val: 10\nval: 20\n"),
            (
                "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')",
                "val: 10\nval: 20\n",
                "",
            ),
            ("logging.basicConfig(level=logging.WARNING)", "", ""),
        ],
        ids=["no-logging-setup", "logging-at-info", "logging-at-warning"],
    )
    def test_terminal(self, tmp_path, setup, stdout, stderr):
        """Without logging set up, epoch statistics go to stderr; else logging decides."""
        script = tmp_path / "run.py"
        script.write_text(
            "import logging, sys\n"
            f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
            f"{setup}\n"
            "import tensorflow as tf\n"
            "from loop import SmallLoop\n"
            "from towerkit.callbacks import Callback, Monitors, ScalarPrinter\n"
            "from towerkit.towers.compat import tf1\n"
            "class Put(Callback):\n"
            "    def _trigger(self):\n"
            "        self.trainer.monitors.put_scalar('val', float(self.epoch_num * 10))\n"
            "g = tf.Graph()\n"
            "with g.as_default():\n"
            "    w = tf1.get_variable('w', initializer=0.0)\n"
            "    SmallLoop(g, tf1.assign_add(w, 1.0), [Put()],\n"
            "              Monitors([ScalarPrinter(one_line=False, variables=False)]),\n"
            "              max_epoch=2).train()\n"
        )
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout == stdout
        err = "".join(
            line for line in done.stderr.splitlines(keepends=True) if line.startswith("val")
        )
        assert err == stderr

    def test_one_line_per_step(self, graph, caplog):
        """With enable_step, a step's scalars share one line with its global step."""

        class PutEveryStep(Callback):
            def _trigger_step(self):
                self.trainer.monitors.put_scalar("loss", self.trainer.global_step / 4)

        printer = ScalarPrinter(enable_step=True, enable_epoch=False, variables=False)
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            LoopTrainer(
                graph,
                make_train_op(),
                [PutEveryStep()],
                Monitors([printer]),
                steps_per_epoch=2,
                max_epoch=1,
            ).train()
        assert [r.getMessage() for r in caplog.records] == ["step 1  loss 0.25", "step 2  loss 0.5"]

    def test_has_hook(self):
        """Steps cost nothing unless enable_step."""
        assert not ScalarPrinter().has_hook("_trigger_step")
        assert ScalarPrinter(enable_step=True).has_hook("_trigger_step")

    def test_fail(self):
        """Invalid regular expressions are all listed; printing nothing is refused."""
        with pytest.raises(
            ValueError, match=r"'whitelist' must hold regular expressions; invalid: '\(' .*, '\[' "
        ):
            ScalarPrinter(whitelist=["(", "ok", "["])
        with pytest.raises(ValueError, match="would print nothing"):
            ScalarPrinter(enable_epoch=False)


def _alive(pid, name="sleep"):
    """Whether process `pid` exists, runs program `name` and is not a zombie.

    Checking the name keeps a pid that the system has already handed to another
    process from counting as the killed one.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            comm, rest = f.read().split(" (", 1)[1].rsplit(")", 1)
    except (FileNotFoundError, ProcessLookupError):
        return False
    return comm == name and rest.split()[0] != "Z"


def _dead_within(pids, seconds):
    """Whether every process of `pids` is gone (or a zombie) within `seconds`."""
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.procs
class TestSendMonitorData:
    """A real shell command runs with the values once all are in."""

    def test_sends(self, graph, tmp_path):
        """The command runs each time every name has a value."""
        out = tmp_path / "sent.txt"
        send = SendMonitorData(f"echo {{val:.1f}} {{steps}} >> {out}", ["val", "steps"])
        LoopTrainer(
            graph, make_train_op(), [PutEveryEpoch()], Monitors([send]), max_epoch=2
        ).train()
        assert out.read_text().split("\n") == ["10.0 3", "20.0 6", ""]

    def test_failing_command_is_logged(self, graph, caplog):
        """A failing command is logged and training goes on."""
        send = SendMonitorData("exit 3", "val")
        with caplog.at_level(logging.ERROR, logger="towerkit.callbacks"):
            LoopTrainer(
                graph, make_train_op(), [PutEveryEpoch()], Monitors([send]), max_epoch=1
            ).train()
        assert "command exited with status 3: exit 3" in caplog.text

    def test_blocked_command_is_killed_and_logged(self, graph, tmp_path, caplog):
        """A command still running at its timeout is killed, its children too, in one logged line."""
        command = f"sleep 60 & echo $! > {tmp_path}/{{val:.0f}}.pid; wait"
        send = SendMonitorData(command, "val", timeout=0.5)
        start = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="towerkit.callbacks"):
            LoopTrainer(
                graph, make_train_op(), [PutEveryEpoch()], Monitors([send]), max_epoch=2
            ).train()
        assert time.monotonic() - start < 20
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2, lines
        assert all(
            line.startswith("SendMonitorData(")
            and "still running after 0.5 s (timeout): killed" in line
            and f"sleep 60 & echo $! > {tmp_path}/" in line
            for line in lines
        )
        pids = [int(p.read_text()) for p in sorted(tmp_path.glob("*.pid"))]
        assert len(pids) == 2
        # SIGKILL is delivered asynchronously: a killed process can take a moment to die.
        assert _dead_within(pids, seconds=10), [p for p in pids if _alive(p)]

    @pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf")])
    def test_bad_timeout(self, timeout):
        """A timeout that is not a positive finite number of seconds is refused at construction."""
        with pytest.raises(ValueError, match=r"'timeout' must be a number of seconds > 0 or None"):
            SendMonitorData("echo {val}", "val", timeout=timeout)
        with pytest.raises(TypeError, match=r"'timeout' must be a number .* got str"):
            SendStat("echo {val}", "val", timeout="5")

    @given(st.one_of(st.none(), st.floats(), st.integers(), st.booleans(), st.text(max_size=3)))
    def test_check_timeout(self, value):
        """check_timeout accepts exactly the finite numbers > 0 (as floats) and None."""
        ok = value is None or (
            not isinstance(value, (bool, str)) and math.isfinite(value) and value > 0
        )
        if ok:
            got = check_timeout(value, "t")
            assert got is None if value is None else got == float(value)
        else:
            with pytest.raises((TypeError, ValueError), match="'t' must be a number of seconds"):
                check_timeout(value, "t")

    def test_fail(self):
        """Fields not among the names, and empty names, are rejected at construction."""
        with pytest.raises(
            ValueError, match=r"'command' uses fields \['loss'\] that are not in 'names' \['val'\]"
        ):
            SendMonitorData("echo {val} {loss}", "val")
        with pytest.raises(TypeError, match="'names' must be a statistic name or a non-empty list"):
            SendMonitorData("echo", [])
        with pytest.raises(ValueError, match="'command' is not a valid format string"):
            SendMonitorData("echo {val", "val")

    @pytest.mark.parametrize(
        ("command", "match"),
        [
            ("echo {val:d}", r"\{val:d\}: Unknown format code 'd' .* use a float format"),
            ("echo {val!z}", r"\{val!z\}: unknown conversion 'z' \(use !r, !s or !a\)"),
            ("echo {val:{n}}", r"\{val:\{n\}\}: nested fields in a format spec"),
            ("echo {val:>>>}", r"\{val:>>>\}: Unknown format code '>'"),
        ],
    )
    def test_malformed_template(self, command, match):
        """A template that could not format a float fails at construction, not at the first send."""
        with pytest.raises(ValueError, match=r"cannot format a statistic: " + match):
            SendMonitorData(command, ["val", "n"])
        with pytest.raises(ValueError, match=match):
            SendStat(command, ["val", "n"])

    @given(st.sampled_from(["", ".3f", "08.2e", "g", "%", ">12", ",.1f", "+.0f"]), st.floats())
    def test_valid_specs_format_any_float(self, spec, value):
        """What the check accepts formats every float (and int) at send time."""
        command = f"echo {{val:{spec}}}"
        SendMonitorData(command, "val")
        assert fill_command(command, {"val": value}).startswith("echo ")
        assert fill_command(command, {"val": 3}).startswith("echo ")


class TestReservedStatNames:
    """Statistics JSONWriter cannot write (its own record keys) are warned about."""

    def test_summary_at_setup_and_put(self, graph, tmp_path, caplog):
        """A scalar summary tagged 'epoch_num' is named at setup; a put 'global_step' at its put."""
        tf1.summary.scalar("epoch_num", tf.constant(1.0))

        class Put(Callback):
            def _trigger_epoch(self):
                self.trainer.monitors.put_scalar("global_step", 5.0)
                self.trainer.monitors.put_scalar("loss", 1.0)

        writer = JSONWriter()
        with caplog.at_level(logging.WARNING, logger="towerkit.callbacks"):
            LoopTrainer(
                graph, make_train_op(), [Put()], [writer], logdir=tmp_path, max_epoch=2
            ).train()
        text = caplog.text
        assert "the graph has a scalar summary named 'epoch_num'" in text
        assert text.count("a statistic named 'global_step' is not written") == 1
        records = json.loads((tmp_path / "stats.json").read_text())
        assert [r["epoch_num"] for r in records] == [1, 2]
        assert all(r["loss"] == 1.0 for r in records)


@pytest.mark.procs
class TestSendStat:
    """A callback sending the latest values of statistics."""

    def test_sends(self, graph, tmp_path):
        """Each trigger runs the command with the latest values, names with '/' included."""
        out = tmp_path / "sent.txt"

        class Put(Callback):
            def _trigger(self):
                self.trainer.monitors.put_scalar("val/error", self.trainer.epoch_num / 10)

        LoopTrainer(
            graph,
            make_train_op(),
            [Put(), SendStat(f"echo {{val/error}} >> {out}", "val/error")],
            max_epoch=2,
        ).train()
        assert out.read_text() == "0.1\n0.2\n"

    def test_missing(self, graph, tmp_path):
        """A statistic never put is an error naming those that exist."""
        with pytest.raises(
            MissingStatError, match=r"no statistic named 'acc' .* \['steps', 'val'\]"
        ):
            LoopTrainer(
                graph,
                make_train_op(),
                [PutEveryEpoch(), SendStat("echo {acc}", "acc")],
                max_epoch=1,
            ).train()


class TestCometMLMonitor:
    """The optional comet_ml monitor."""

    def test_without_comet_ml(self):
        """Without comet_ml installed, construction says how to get it."""
        try:
            import comet_ml  # noqa: F401
        except ImportError:
            pass
        else:
            pytest.skip("comet_ml is installed here; this checks the error raised without it")
        with pytest.raises(
            ImportError, match="CometMLMonitor needs comet_ml: pip install comet_ml"
        ):
            CometMLMonitor(project_name="x")

    def test_dispatch(self, graph, tmp_path, monkeypatch):
        """With an experiment object, scalars, images, epochs and the end reach it."""
        # a stand-in comet_ml module on the path: the real one needs network access
        (tmp_path / "comet_ml.py").write_text(
            "class Experiment:\n"
            "    def __init__(self, **kw):\n"
            "        self.kw, self.calls = kw, []\n"
            "    def __getattr__(self, name):\n"
            "        return lambda *a, **k: self.calls.append((name, a, k))\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "comet_ml", raising=False)
        mon = CometMLMonitor(project_name="p", tags=["t"])
        assert mon.experiment.kw == {"project_name": "p", "auto_output_logging": None}

        class Put(Callback):
            def _trigger(self):
                self.trainer.monitors.put_scalar("val", 2.0)
                self.trainer.monitors.put_image("im", np.zeros((2, 2, 2, 3)))

        LoopTrainer(
            graph, make_train_op(), [Put()], Monitors([mon]), steps_per_epoch=2, max_epoch=1
        ).train()
        names = [c[0] for c in mon.experiment.calls]
        assert names == [
            "add_tags",
            "set_model_graph",
            "log_metric",
            "log_image",
            "log_image",
            "log_epoch_end",
            "end",
        ]
        assert mon.experiment.calls[2] == ("log_metric", ("val", 2.0), {"step": 2})
        with pytest.raises(ValueError, match="an 'experiment' was given"):
            CometMLMonitor(experiment=mon.experiment, tags=["x"])


class TestMonitorBase:
    """The base monitor's generic `process` routes by kind; monitors are driven as callbacks."""

    def test_process_routes(self):
        """Numbers go to process_scalar (as Python numbers), arrays to process_image."""
        rec = ScalarOnly()
        seen = []

        class Images(MonitorBase):
            def process_image(self, name, val):
                seen.append((name, val.shape))

        rec.process("a", np.float32(2.5))
        Images().process("img", np.zeros((1, 2, 2, 3)))
        assert rec.names == ["a"]
        assert seen == [("img", (1, 2, 2, 3))]
        with pytest.raises(TypeError, match="statistic 'b' must be a real number; got list"):
            rec.process("b", [1])

    def test_is_a_callback(self):
        """A monitor is a callback that hooks only what it overrides."""
        assert isinstance(ScalarOnly(), Callback)
        assert not ScalarOnly().has_hook("_trigger_epoch")
        assert Recorder().has_hook("_before_train")
