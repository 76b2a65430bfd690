"""The bad-input corpus: every case gets its own error type, a message naming the fault, and
leaves nothing half-written on disk.

Each case is one row: an id, a ``prepare(tmp)`` that lays out what the case needs on disk
(a checkpoint, a damaged file, a logdir), an ``act(tmp, made)`` doing the bad thing, the
error type and a regex the message must match. The test snapshots the directory after
``prepare`` and checks it is byte-identical after the failure. Tool cases run the tool's
``main`` and check for exactly one ``<tool>: error: ...`` line and exit status 2.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import zipfile
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest
import tensorflow as tf

from towerkit import callbacks as C
from towerkit import sessinit as S
from towerkit import trainers as T

pytestmark = pytest.mark.procs

tf1 = tf.compat.v1


@attrs.frozen
class Case:
    """One bad input: what to lay out, what to do, what must be raised."""

    id: str
    error: type[BaseException] | tuple[type[BaseException], ...]
    match: str
    act: Callable[[Any, Any], Any]
    prepare: Callable[[Any], Any] = lambda tmp: None


def tree(path) -> dict[str, bytes | None]:
    """``{relative path: bytes}`` of every file under `path` (directories as None)."""
    out: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path)] = None
        for f in files:
            full = os.path.join(root, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


# -- what the cases build on --------------------------------------------------------------


class Lin(T.ModelDesc):
    """A linear model on (x: float32 [None, 4]); variants break one of its methods."""

    def __init__(self, broken: str = ""):
        self.broken = broken

    def inputs(self):
        if self.broken == "inputs":
            return ["x"]
        return [tf.TensorSpec([None, 4], tf.float32, "x")]

    def build_graph(self, x):
        w = tf1.get_variable("w", [4, 1])
        cost = tf.reduce_mean(tf.matmul(x, w), name="cost")
        if self.broken == "none":
            return None
        if self.broken == "vector":
            return tf.matmul(x, w)
        if self.broken == "int":
            return 3
        return cost

    def optimizer(self):
        if self.broken == "optimizer":
            return "sgd"
        return tf1.train.GradientDescentOptimizer(0.1)


def data(n=8):
    return T.NumpyInput([np.ones((n, 4), np.float32)], batch_size=4)


def launch(tmp, **kw):
    """Train Lin for one epoch with launch_train_with_config into ``tmp/log`` (fresh graph)."""
    opts = {
        "model": Lin(),
        "data": data(),
        "max_epoch": 1,
        "logdir": os.path.join(tmp, "log"),
        "extra_callbacks": [],
    }
    opts.update(kw)
    with tf.Graph().as_default():
        config = T.TrainConfig(**opts)
        T.launch_train_with_config(config, T.SimpleTrainer())


def checkpoint(tmp, name="ckpt/model-1", **arrays):
    """Write ``{name: array}`` (w: float32 [4, 1] by default) as a checkpoint under `tmp`."""
    arrays = arrays or {"w": np.ones((4, 1), np.float32)}
    os.makedirs(os.path.join(tmp, os.path.dirname(name)), exist_ok=True)
    prefix = os.path.join(tmp, name)
    S.save_checkpoint_vars(arrays, prefix)
    return prefix


def damaged(how):
    """A prepare step writing a checkpoint and damaging its data file."""

    def prepare(tmp):
        prefix = checkpoint(tmp, w=np.arange(400, dtype=np.float32).reshape(4, 100))
        data_file = prefix + ".data-00000-of-00001"
        if how == "zero":
            size = os.path.getsize(data_file)
            with open(data_file, "r+b") as f:
                f.write(b"\0" * size)
        elif how == "cut":
            os.truncate(data_file, 10)
        elif how == "drop":
            os.remove(data_file)
        elif how == "index":
            with open(prefix + ".index", "rb") as f:
                body = bytearray(f.read())
            body[30] ^= 0xFF
            with open(prefix + ".index", "wb") as f:
                f.write(bytes(body))
        return prefix

    return prepare


def restore_into_w(shape=(4, 1), dtype=tf.float32):
    """An act restoring the prepared checkpoint into a fresh graph's variable w."""

    def act(tmp, prefix):
        with tf.Graph().as_default():
            tf1.get_variable("w", shape, dtype=dtype)
            init = S.SmartInit(prefix)
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                init.init(sess)

    return act


def text_file(name, body):
    def prepare(tmp):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(body)
        return path

    return prepare


def forged_npz(header: str, data: bytes = b"", member: str = "w.npy"):
    """A prepare step writing ``params.npz`` with one member whose ``.npy`` header is forged."""

    def prepare(tmp):
        raw = header.encode("latin1")
        raw += b" " * (-(10 + len(raw) + 1) % 64) + b"\n"
        npy = b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + data
        path = os.path.join(tmp, "params.npz")
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(member, npy)
        return path

    return prepare


HUGE = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }"
NEGATIVE = "{'descr': '<f4', 'fortran_order': False, 'shape': (-3, 2), }"
ONE = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }"


def non_empty_logdir(tmp):
    os.makedirs(os.path.join(tmp, "log"))
    with open(os.path.join(tmp, "log", "stats.json"), "w") as f:
        json.dump([{"epoch_num": 1, "global_step": 2}], f)


class Boom(C.Callback):
    def _before_train(self):
        raise RuntimeError("boom in before_train")


def trained_logdir(tmp):
    """A logdir of one finished run (a checkpoint and stats)."""
    launch(tmp, callbacks=[C.ModelSaver()], monitors=[C.JSONWriter()])


HOLDER = """
import sys
from towerkit.trainers import LogdirLock
lock = LogdirLock(sys.argv[1])
lock.acquire()
print("ready", flush=True)
sys.stdin.read()  # held until the test's end closes this pipe
"""
"""A run of another process holding a logdir's (kernel) lock."""


def locked_logdir(tmp):
    """A logdir whose lock another live process of this host holds; that process."""
    os.makedirs(os.path.join(tmp, "log"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, os.path.join(tmp, "log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "ready"
    return holder


def glob_checkpoint(tmp):
    """A checkpoint written under a directory whose name TensorFlow would glob."""
    return checkpoint(tmp, name="lr[0.1]/model-1")


# -- the corpus -----------------------------------------------------------------------------

CONFIGS = [
    Case(
        "config-unknown-option",
        TypeError,
        r"TrainConfig got unknown options \['lr'\]",
        lambda tmp, _: T.TrainConfig(lr=0.1),
    ),
    Case(
        "config-data-and-dataflow",
        ValueError,
        r"takes 'dataflow' or 'data', not both",
        lambda tmp, _: T.TrainConfig(data=data(), dataflow=[1]),
    ),
    Case(
        "config-data-kind",
        TypeError,
        r"'data' must be an InputSource",
        lambda tmp, _: T.TrainConfig(data=5),
    ),
    Case(
        "config-model-kind",
        TypeError,
        r"'model' must be a ModelDesc; got object",
        lambda tmp, _: T.TrainConfig(model=object()),
    ),
    Case(
        "config-creator-and-config",
        ValueError,
        r"'session_creator' or 'session_config', not both",
        lambda tmp, _: T.TrainConfig(
            session_creator=T.NewSessionCreator(), session_config=tf1.ConfigProto()
        ),
    ),
    Case(
        "config-creator-kind",
        TypeError,
        r"'session_creator' must have a create_session\(\) method; got int",
        lambda tmp, _: T.TrainConfig(session_creator=3),
    ),
    Case(
        "config-init-kind",
        TypeError,
        r"'session_init' must have an init\(sess\) method or be None; got str",
        lambda tmp, _: T.TrainConfig(session_init="model-1"),
    ),
    Case(
        "config-starting-epoch",
        ValueError,
        r"'starting_epoch' must be an int >= 1 \(1-based\); got 0",
        lambda tmp, _: T.TrainConfig(starting_epoch=0),
    ),
    Case(
        "config-max-epoch-kind",
        TypeError,
        r"'max_epoch' must be an int; got 'ten'",
        lambda tmp, _: T.TrainConfig(max_epoch="ten"),  # "10" is 10, as tensorpack's int() took it
    ),
    Case(
        "config-max-before-start",
        ValueError,
        r"'max_epoch' must be >= 'starting_epoch' - 1 .*max_epoch=1, starting_epoch=5",
        lambda tmp, _: T.TrainConfig(starting_epoch=5, max_epoch=1),
    ),
    Case(
        "config-steps-per-epoch",
        ValueError,
        r"'steps_per_epoch' must be an int >= 0 \(0: epochs of no step, an evaluation\); got -1",
        lambda tmp, _: T.TrainConfig(steps_per_epoch=-1),
    ),
    Case(
        "config-logdir-action",
        ValueError,
        r"'logdir_action' must be one of .*; got 'delete'",
        lambda tmp, _: T.TrainConfig(logdir_action="delete"),
    ),
    Case(
        "config-logdir-kind",
        TypeError,
        r"'logdir' must be a path or None; got int",
        lambda tmp, _: T.TrainConfig(logdir=3),
    ),
    Case(
        "config-callback-kind",
        TypeError,
        r"'callbacks' must hold Callback instances; entries at fault: #1: int",
        lambda tmp, _: T.TrainConfig(callbacks=[C.Callback(), 5]),
    ),
    Case(
        "config-monitor-as-callback",
        TypeError,
        r"'callbacks' holds monitors \(#0: JSONWriter\)",
        lambda tmp, _: T.TrainConfig(callbacks=[C.JSONWriter()]),
    ),
    Case(
        "autoresume-no-logdir",
        ValueError,
        r"AutoResumeTrainConfig needs 'logdir'",
        lambda tmp, _: T.AutoResumeTrainConfig(model=Lin()),
    ),
    Case(
        "autoresume-overwrite",
        ValueError,
        r"'logdir_action' must be 'keep'; got 'overwrite'",
        lambda tmp, _: T.AutoResumeTrainConfig(
            logdir=os.path.join(tmp, "log"), logdir_action="overwrite"
        ),
    ),
    Case(
        "autoresume-bad-stats",
        ValueError,
        r"stats.json' is not valid JSON .*cannot resume from it",
        # The logdir is read when the run launches (plan_resume), not at construction.
        lambda tmp, _: T.AutoResumeTrainConfig(
            model=Lin(), logdir=os.path.join(tmp, "log")
        ).plan_resume(4),
        prepare=lambda tmp: (
            os.makedirs(os.path.join(tmp, "log")),
            text_file("log/stats.json", "[{")(tmp),
        ),
    ),
    Case(
        "launch-trainer-kind",
        TypeError,
        r"'trainer' must be a SingleCostTrainer",
        lambda tmp, _: T.launch_train_with_config(
            T.TrainConfig(model=Lin(), data=data()), T.Trainer()
        ),
    ),
    Case(
        "launch-no-model",
        ValueError,
        r"launch_train_with_config needs a config with model",
        lambda tmp, _: T.launch_train_with_config(T.TrainConfig(data=data()), T.SimpleTrainer()),
    ),
    Case(
        "logdir-not-empty",
        T.LogdirNotEmptyError,
        r"the logdir '.*' is not empty \(it holds 'stats.json'\)",
        lambda tmp, _: launch(tmp),
        prepare=non_empty_logdir,
    ),
    Case(
        "logdir-is-a-file",
        NotADirectoryError,
        r"'logdir' .* exists and is not a directory",
        lambda tmp, _: launch(tmp),
        prepare=text_file("log", "x"),
    ),
    Case(
        "failed-run-before-train",
        RuntimeError,
        r"boom in before_train",
        lambda tmp, _: launch(
            tmp, callbacks=[Boom(), C.ModelSaver()], monitors=[C.TFEventWriter(), C.JSONWriter()]
        ),
    ),
    Case(
        "failed-resume-before-train",
        RuntimeError,
        r"boom in before_train",
        lambda tmp, _: launch(
            tmp,
            callbacks=[Boom(), C.ModelSaver()],
            monitors=[C.JSONWriter()],
            logdir_action="keep",
            max_epoch=2,
        ),
        prepare=trained_logdir,
    ),
]

SCHEDULES = [
    Case(
        "schedule-unsorted",
        ValueError,
        r"must be strictly increasing; entries out of order: #1 \(1, 0.2\) after #0 \(3, 0.1\)",
        lambda tmp, _: C.ScheduledHyperParamSetter("learning_rate", [(3, 0.1), (1, 0.2)]),
    ),
    Case(
        "schedule-negative",
        ValueError,
        r"must be >= 0; negative entries: #0 \(-1, 0.1\)",
        lambda tmp, _: C.ScheduledHyperParamSetter("learning_rate", [(-1, 0.1)]),
    ),
    Case(
        "schedule-interp",
        ValueError,
        r"'interp' must be one of \(None, 'linear'\); got 'cubic'",
        lambda tmp, _: C.ScheduledHyperParamSetter("learning_rate", [(1, 0.1)], interp="cubic"),
    ),
    Case(
        "schedule-empty",
        ValueError,
        r"'schedule' must hold at least one \(point, value\) pair",
        lambda tmp, _: C.ScheduledHyperParamSetter("learning_rate", []),
    ),
    Case(
        "schedule-value-kind",
        TypeError,
        r"wrong entries: #0 \(1, 'a'\): value 'a' is not a real number",
        lambda tmp, _: C.ScheduledHyperParamSetter("learning_rate", [(1, "a")]),
    ),
    Case(
        "schedule-func-kind",
        TypeError,
        r"'func' must be a callable",
        lambda tmp, _: C.HyperParamSetterWithFunc("learning_rate", 5),
    ),
    Case(
        "statmonitor-last-k",
        ValueError,
        r"'last_k' must be an int >= 1; got 0",
        lambda tmp, _: C.StatMonitorParamSetter(
            "learning_rate", "val", lambda x: x, threshold=0, last_k=0
        ),
    ),
]

TRIGGERS = [
    Case(
        "trigger-zero-steps",
        ValueError,
        r"EveryK: 'steps' must be > 0; got 0",
        lambda tmp, _: C.PeriodicTrigger(C.Callback(), every_k_steps=0),
    ),
    Case(
        "trigger-nothing-set",
        ValueError,
        r"EveryK: set at least one of 'steps', 'epochs' or 'before_train'",
        lambda tmp, _: C.PeriodicTrigger(C.Callback()),
    ),
    Case(
        "trigger-float-epochs",
        TypeError,
        r"EveryK: 'epochs' must be an int > 0 or None; got float 1.5",
        lambda tmp, _: C.PeriodicTrigger(C.Callback(), every_k_epochs=1.5),
    ),
    Case(
        "trigger-callback-kind",
        TypeError,
        r"'cb' must be a Callback; got int",
        lambda tmp, _: C.PeriodicTrigger(5, every_k_steps=1),
    ),
    Case(
        "periodic-callback-zero",
        ValueError,
        r"EpochMultiple: 'k' must be > 0; got 0",
        lambda tmp, _: C.PeriodicCallback(C.Callback(), every_k_epochs=0),
    ),
    Case(
        "enable-if-pred",
        TypeError,
        r"'pred' must be a callable pred\(self\) -> bool or a trigger record; got int",
        lambda tmp, _: C.EnableCallbackIf(C.Callback(), 5),
    ),
]

RESTORES = [
    Case(
        "restore-missing",
        S.CheckpointNotFoundError,
        r"checkpoint '.*/nothing/model-1' does not exist",
        lambda tmp, _: S.SmartInit(os.path.join(tmp, "nothing", "model-1")),
    ),
    Case(
        "restore-not-a-checkpoint",
        S.NotACheckpointError,
        r"notes\.txt",
        lambda tmp, path: S.SmartInit(path),
        prepare=text_file("notes.txt", "hello"),
    ),
    Case(
        "restore-shape",
        S.RestoreMismatchError,
        r"'w'.*\(4, 1\).*\(4, 2\)|'w'.*\(4, 2\).*\(4, 1\)",
        restore_into_w(shape=(4, 2)),
        prepare=checkpoint,
    ),
    Case(
        "restore-dtype",
        S.RestoreMismatchError,
        r"'w'.*float32.*int32|'w'.*int32.*float32",
        restore_into_w(dtype=tf.int32),
        prepare=checkpoint,
    ),
    Case(
        "restore-zeroed-data",
        S.CorruptCheckpointError,
        r"is corrupt: its data file '.*model-1\.data-00000-of-00001'.*'w' \(checksum mismatch",
        restore_into_w(shape=(4, 100)),
        prepare=damaged("zero"),
    ),
    Case(
        "restore-truncated-data",
        S.CorruptCheckpointError,
        r"is truncated: its data file '.*model-1\.data-00000-of-00001' holds 10 bytes but its index describes at least 1600",
        restore_into_w(shape=(4, 100)),
        prepare=damaged("cut"),
    ),
    Case(
        "restore-missing-data",
        S.CorruptCheckpointError,
        r"is incomplete: .*'.*model-1\.data-00000-of-00001' does not exist",
        restore_into_w(shape=(4, 100)),
        prepare=damaged("drop"),
    ),
    Case(
        "restore-damaged-index",
        S.NotACheckpointError,
        r"model-1' is not a readable TensorFlow checkpoint: .*checksum mismatch",
        restore_into_w(shape=(4, 100)),
        prepare=damaged("index"),
    ),
    Case(
        "restore-dict-kind",
        TypeError,
        r"'variable_dict' is a int: expected a mapping",
        lambda tmp, _: S.DictRestore(5),
    ),
    Case(
        "restore-dict-keys",
        TypeError,
        r"'variable_dict' has keys that are not strings: \[1\]",
        lambda tmp, _: S.DictRestore({1: np.ones(2)}),
    ),
    Case(
        "restore-npz-garbage",
        S.NotACheckpointError,
        r"params\.npz",
        lambda tmp, path: S.SmartInit(path),
        prepare=text_file("params.npz", "not a zip"),
    ),
    Case(
        "restore-npz-huge-shape",
        S.NotACheckpointError,
        r"params\.npz' is not an npz file of arrays: member 'w\.npy' declares shape "
        r"\(1000000000000,\) of float32 \(4000000000000 bytes of values\) but holds 4 bytes",
        lambda tmp, path: S.SmartInit(path),
        prepare=forged_npz(HUGE, b"1234"),
    ),
    Case(
        "restore-npz-negative-shape",
        S.NotACheckpointError,
        r"member 'w\.npy' declares shape \(-3, 2\): negative sizes \[-3\]",
        lambda tmp, path: S.SmartInit(path),
        prepare=forged_npz(NEGATIVE),
    ),
    Case(
        "restore-npz-empty-name",
        S.NotACheckpointError,
        r"params\.npz' .*member '\.npy' has an empty name",
        lambda tmp, path: S.SmartInit(path),
        prepare=forged_npz(ONE, b"1234", member=".npy"),
    ),
    Case(
        "restore-in-training",
        S.RestoreMismatchError,
        r"'w'",
        lambda tmp, prefix: launch(tmp, session_init=S.SmartInit(prefix), model=Lin()),
        prepare=lambda tmp: checkpoint(tmp, w=np.ones((3, 3), np.float32)),
    ),
    Case(
        "restore-corrupt-in-training",
        S.CorruptCheckpointError,
        r"is corrupt: .*'w' \(checksum mismatch",
        lambda tmp, prefix: launch(tmp, session_init=S.SmartInit(prefix), model=Lin()),
        prepare=lambda tmp: _zero(checkpoint(tmp)),
    ),
]


def _zero(prefix):
    data_file = prefix + ".data-00000-of-00001"
    size = os.path.getsize(data_file)
    with open(data_file, "r+b") as f:
        f.write(b"\0" * size)
    return prefix


INPUTS = [
    Case(
        "numpy-batch-size",
        ValueError,
        r"'batch_size' must be >= 1; got 0",
        lambda tmp, _: T.NumpyInput([np.ones((4, 2))], batch_size=0),
    ),
    Case(
        "numpy-lengths",
        ValueError,
        r"'arrays' must all have the same first dimension; got #0: 4, #1: 3",
        lambda tmp, _: T.NumpyInput([np.ones((4, 2)), np.ones((3,))], batch_size=2),
    ),
    Case(
        "numpy-kind",
        TypeError,
        r"'arrays' must be a list of arrays or a dict of arrays; got int",
        lambda tmp, _: T.NumpyInput(5, batch_size=2),
    ),
    Case(
        "numpy-empty",
        ValueError,
        r"'arrays' hold no datapoint \(first dimension 0\)",
        lambda tmp, _: T.NumpyInput([np.ones((0, 2))], batch_size=2),
    ),
    Case(
        "dataset-kind",
        TypeError,
        r"'dataset' must be a tf.data.Dataset or a function returning one; got int",
        lambda tmp, _: T.TFDatasetInput(5),
    ),
    Case(
        "numpy-signature-mismatch",
        T.InputSignatureError,
        r"arrays do not match the input signature: 'x': datapoint shape \(3,\) vs signature \(None, 4\)",
        lambda tmp, _: launch(tmp, data=T.NumpyInput([np.ones((8, 3), np.float32)], batch_size=4)),
    ),
    Case(
        "dataset-empty",
        ValueError,
        r"TFDatasetInput: the dataset is empty \(its cardinality is 0\): there is nothing to train on",
        lambda tmp, _: launch(
            tmp,
            data=T.TFDatasetInput(
                lambda: tf.data.Dataset.from_tensor_slices(np.ones((0, 4), np.float32)).batch(2)
            ),
        ),
    ),
    Case(
        "dataset-filtered-empty",
        T.InputDataError,
        r"TFDatasetInput: the dataset ran out of data: a whole pass over it gave no element .* "
        r"\[at epoch 1, step 0 of 2 \(0-based\), global step 0\]",
        lambda tmp, _: launch(
            tmp,
            data=T.TFDatasetInput(
                lambda: (
                    tf.data.Dataset.from_tensor_slices(np.ones((4, 4), np.float32))
                    .filter(lambda x: x[0] < 0)
                    .batch(2)
                )
            ),
            steps_per_epoch=2,
        ),
    ),
    Case(
        "dataflow-empty",
        T.InputDataError,
        r"IterableInput\(list\): pass 1 over the iterable yielded no datapoint.* "
        r"\[at epoch 1, step 0 of 2 \(0-based\), global step 0\]",
        lambda tmp, _: launch(tmp, data=T.IterableInput([]), steps_per_epoch=2),
    ),
    Case(
        "feed-empty",
        T.InputDataError,
        r"FeedInput\(list\): the iterable yielded no datapoint in a whole pass",
        lambda tmp, _: launch(tmp, data=T.FeedInput([]), steps_per_epoch=2),
    ),
    Case(
        "iterable-timeout",
        ValueError,
        r"'timeout' of IterableInput must be a number of seconds > 0 or None; got 0",
        lambda tmp, _: T.IterableInput([[np.ones((2, 4), np.float32)]], timeout=0),
    ),
    Case(
        "inference-infinite-dataset",
        ValueError,
        r"InferenceRunner\(InferenceTower\): the input dataset .* is infinite .*take\(n\), or pass size=n",
        lambda tmp, _: launch(
            tmp,
            callbacks=[
                C.InferenceRunner(
                    lambda: (
                        tf.data.Dataset.from_tensor_slices(np.ones((4, 4), np.float32))
                        .batch(2)
                        .repeat()
                    ),
                    C.ScalarStats("cost"),
                )
            ],
        ),
    ),
    Case(
        "send-timeout",
        ValueError,
        r"'timeout' must be a number of seconds > 0 or None; got -1",
        lambda tmp, _: C.SendMonitorData("notify {val}", "val", timeout=-1),
    ),
]

MODELS = [
    Case(
        "model-cost-none",
        TypeError,
        r"the cost function must return a scalar tf.Tensor; got NoneType",
        lambda tmp, _: launch(tmp, model=Lin("none")),
    ),
    Case(
        "model-cost-vector",
        TypeError,
        r"the cost must be a scalar floating tensor; got .* shape \(4, 1\)",
        lambda tmp, _: launch(tmp, model=Lin("vector")),
    ),
    Case(
        "model-cost-int",
        TypeError,
        r"the cost function must return a scalar tf.Tensor; got int",
        lambda tmp, _: launch(tmp, model=Lin("int")),
    ),
    Case(
        "model-inputs",
        TypeError,
        r"'input_signature' entries must be tf.TensorSpec; entries at fault: 0: str",
        lambda tmp, _: launch(tmp, model=Lin("inputs")),
    ),
    Case(
        "model-optimizer",
        TypeError,
        r"Lin.optimizer\(\) must return a tf.compat.v1.train.Optimizer; got str 'sgd'",
        lambda tmp, _: launch(tmp, model=Lin("optimizer")),
    ),
]

LOGDIRS = [
    Case(
        "logdir-glob-characters",
        S.GlobPathError,
        r"'logdir' '.*lr\[0\.1\]' holds '\[', '\]': TensorFlow reads checkpoint paths as glob",
        lambda tmp, _: launch(tmp, logdir=os.path.join(tmp, "lr[0.1]")),
    ),
    Case(
        "logdir-backslash",
        S.GlobPathError,
        r"holds '\\\\'",
        lambda tmp, _: launch(tmp, logdir=os.path.join(tmp, "a\\b")),
    ),
    Case(
        "saver-dir-glob-characters",
        S.GlobPathError,
        r"'checkpoint_dir' '.*ck\*' holds '\*'",
        lambda tmp, _: launch(
            tmp, callbacks=[C.ModelSaver(checkpoint_dir=os.path.join(tmp, "ck*"))]
        ),
    ),
    Case(
        "logdir-locked",
        T.LogdirLockedError,
        rf"log directory '.*log' is in use by another run \(pid \d+ on host "
        rf"'{re.escape(socket.gethostname())}'",
        lambda tmp, _: launch(tmp, logdir_action="keep"),
        locked_logdir,
    ),
    Case(
        "restore-glob-path",
        S.GlobPathError,
        r"'checkpoint' '.*lr\[0\.1\]/model-1' holds '\[', '\]'.*move or rename",
        restore_into_w(),
        glob_checkpoint,
    ),
]

CALLBACKS = [
    Case(
        "saver-max-to-keep",
        ValueError,
        r"'max_to_keep' must be an int >= 0; got -1",
        lambda tmp, _: C.ModelSaver(max_to_keep=-1),
    ),
    Case(
        "saver-hours",
        ValueError,
        r"'keep_checkpoint_every_n_hours' must be a number > 0; got 0",
        lambda tmp, _: C.ModelSaver(keep_checkpoint_every_n_hours=0),
    ),
    Case(
        "minsaver-stat",
        TypeError,
        r"'monitor_stat' must be a statistic's name; got ''",
        lambda tmp, _: C.MinSaver(""),
    ),
    Case(
        "minsaver-filename",
        ValueError,
        r"'filename' must be a file name without directories; got 'a/b'",
        lambda tmp, _: C.MinSaver("val", filename="a/b"),
    ),
    Case(
        "event-writer-queue",
        ValueError,
        r"'max_queue' must be an int >= 1; got 0",
        lambda tmp, _: C.TFEventWriter(max_queue=0),
    ),
    Case(
        "event-writer-flush",
        ValueError,
        r"'flush_secs' must be a number > 0; got -1",
        lambda tmp, _: C.TFEventWriter(flush_secs=-1),
    ),
    Case(
        "printer-regex",
        ValueError,
        r"'whitelist' must hold regular expressions; invalid: '\('",
        lambda tmp, _: C.ScalarPrinter(whitelist=["("]),
    ),
    Case(
        "send-template-spec",
        ValueError,
        r"\{val:d\}: Unknown format code 'd'",
        lambda tmp, _: C.SendMonitorData("notify {val:d}", "val"),
    ),
    Case(
        "send-template-field",
        ValueError,
        r"uses fields \['loss'\] that are not in 'names' \['val'\]",
        lambda tmp, _: C.SendMonitorData("notify {loss}", "val"),
    ),
    Case(
        "send-template-conversion",
        ValueError,
        r"\{val!z\}: unknown conversion 'z'",
        lambda tmp, _: C.SendStat("notify {val!z}", "val"),
    ),
    Case(
        "monitors-kind",
        TypeError,
        r"'monitors' must hold MonitorBase instances; got #0: Callback",
        lambda tmp, _: C.Monitors([C.Callback()]),
    ),
    Case(
        "two-savers",
        ValueError,
        r"callbacks would write the same files: '.*/log/model-\*' \(ModelSaver, ModelSaver\)",
        lambda tmp, _: launch(
            tmp, callbacks=[C.ModelSaver(), C.PeriodicTrigger(C.ModelSaver(), every_k_steps=1)]
        ),
    ),
    Case(
        "two-json-writers",
        ValueError,
        r"'.*/log/stats.json' \(JSONWriter, JSONWriter\)",
        lambda tmp, _: launch(tmp, monitors=[C.JSONWriter(), C.JSONWriter()]),
    ),
    Case(
        "writer-without-logdir",
        C.CallbackError,
        r"writes files and needs a directory",
        lambda tmp, _: launch(tmp, logdir=None, monitors=[C.JSONWriter()]),
    ),
    Case(
        "scalar-stats-kind",
        TypeError,
        r"'names' must be a tensor name or a sequence of names; got int",
        lambda tmp, _: C.ScalarStats(5),
    ),
]

# A damaged stats.json: what each kind of damage looks like on disk (the logdir of a finished run).
DAMAGED_STATS = {
    "undecodable": b'[{"epoch_num": 1, "global_step": 2, "cost\xff": 1.0}]',
    "invalid": b'[{"epoch_num": 1, "global_step": 2},\n {"epoch_num": 2,',
    "wrong-structure": b'[{"epoch_num": 1, "global_step": 2},\n "epoch 2"]',
    "deep": b'[{"epoch_num": 1, "global_step": 2},\n ' + b"[" * 100_000 + b"]" * 100_000 + b"]",
    "huge-int": b'[{"epoch_num": 1, "global_step": ' + b"9" * 5000 + b"}]",
    "huge-float": b'[{"epoch_num": 1, "global_step": 2, "cost": 1e999}]',
}
DAMAGE_MESSAGES = {
    "undecodable": r"is not UTF-8 text: byte 0xff at byte offset 41 \(line 1, column 42\)",
    "invalid": r"is not valid JSON at line 2, column 18 \(char 54\): Expecting property name",
    "wrong-structure": r"record #1 at line 2, column 2 \(char 38\) is str",
    "deep": r"nests values too deeply .* opens at line 2, column 3 \(char 39\)",
    "huge-int": r"holds a number a float cannot hold \(9{20}\.\.\., 5000 characters\) at line 1, "
    r"column 34 \(char 33\)",
    "huge-float": r"holds a number a float cannot hold \(1e999, 5 characters\) at line 1, column 45",
}


def stats_logdir(damage):
    """A prepare step writing ``log/stats.json`` damaged as `damage` says."""

    def prepare(tmp):
        os.makedirs(os.path.join(tmp, "log"))
        with open(os.path.join(tmp, "log", "stats.json"), "wb") as f:
            f.write(DAMAGED_STATS[damage])

    return prepare


STATS = [
    *[
        Case(
            f"autoresume-stats-{damage}",
            C.StatsFileError,
            r"log/stats\.json' .*" + DAMAGE_MESSAGES[damage] + r".*cannot resume from it",
            lambda tmp, _: T.AutoResumeTrainConfig(
                model=Lin(), logdir=os.path.join(tmp, "log")
            ).plan_resume(4),
            prepare=stats_logdir(damage),
        )
        for damage in DAMAGED_STATS
    ],
    Case(
        "jsonwriter-damaged-stats",
        C.StatsFileError,
        r"log/stats\.json' " + DAMAGE_MESSAGES["undecodable"],
        lambda tmp, _: launch(tmp, logdir_action="keep", monitors=[C.JSONWriter()]),
        prepare=stats_logdir("undecodable"),
    ),
    Case(
        "json-load-existing-deep",
        C.StatsFileError,
        r"log/stats\.json' " + DAMAGE_MESSAGES["deep"],
        lambda tmp, _: C.JSONWriter.load_existing_json(os.path.join(tmp, "log")),
        prepare=stats_logdir("deep"),
    ),
    Case(
        "minsaver-filename-outside",
        ValueError,
        r"'filename' must be a file name without directories; got '\.\./best\.tfmodel': it "
        r"holds a path separator",
        lambda tmp, _: C.MinSaver("cost", filename="../best.tfmodel"),
    ),
    Case(
        "maxsaver-filename-parent",
        ValueError,
        r"'filename' must be a file name without directories; got '\.\.': it is '\.\.', a directory",
        lambda tmp, _: C.MaxSaver("cost", filename=".."),
    ),
    Case(
        "image-prefix-outside",
        ValueError,
        r"'prefix' must be a file name without directories; got '/tmp/img': it holds a path separator",
        lambda tmp, _: C.DumpTensorAsImage("x", prefix="/tmp/img"),
    ),
]

CASES = CONFIGS + SCHEDULES + TRIGGERS + RESTORES + INPUTS + MODELS + CALLBACKS + LOGDIRS + STATS


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(tmp_path, case):
    """The case raises its error with a message naming the fault; the disk is as before."""
    made = case.prepare(str(tmp_path))
    before = tree(tmp_path)
    with tf.Graph().as_default(), pytest.raises(case.error, match=case.match):
        case.act(str(tmp_path), made)
    assert tree(tmp_path) == before, "nothing is left half-written, nothing is changed"


# -- the tools ------------------------------------------------------------------------------

TOOL_CASES = [
    ("ls-glob-path", "ls_checkpoint", ["{prefix}"], glob_checkpoint, r"holds '\[', '\]'"),
    (
        "load-target-glob-path",
        "load_params",
        ["{prefix}", "{tmp}/out[1]/model-2"],
        checkpoint,
        r"'output' '.*out\[1\]/model-2' holds '\[', '\]'",
    ),
    (
        "dump-glob-path",
        "dump_params",
        ["{prefix}", "{tmp}/out.npz"],
        glob_checkpoint,
        r"holds '\[', '\]'",
    ),
    ("ls-missing", "ls_checkpoint", ["{tmp}/none/model-1"], None, r"does not exist"),
    (
        "ls-not-a-checkpoint",
        "ls_checkpoint",
        ["{tmp}/notes.txt"],
        text_file("notes.txt", "x"),
        r"notes\.txt",
    ),
    (
        "ls-bad-regex",
        "ls_checkpoint",
        ["{prefix}", "--include", "("],
        checkpoint,
        r"--include has invalid regular expressions",
    ),
    ("ls-truncated", "ls_checkpoint", ["{prefix}"], damaged("cut"), r"is truncated: its data file"),
    (
        "ls-verify-zeroed",
        "ls_checkpoint",
        ["--verify", "{prefix}"],
        damaged("zero"),
        r"is corrupt: .*'w' \(checksum mismatch",
    ),
    (
        "ls-damaged-index",
        "ls_checkpoint",
        ["{prefix}"],
        damaged("index"),
        r"not a readable TensorFlow checkpoint",
    ),
    (
        "dump-zeroed",
        "dump_params",
        ["{prefix}", "{tmp}/out.npz"],
        damaged("zero"),
        r"is corrupt: .*'w' \(checksum mismatch",
    ),
    (
        "dump-truncated",
        "dump_params",
        ["{prefix}", "{tmp}/out.npz"],
        damaged("cut"),
        r"is truncated",
    ),
    (
        "dump-missing-data",
        "dump_params",
        ["{prefix}", "{tmp}/out.npz"],
        damaged("drop"),
        r"is incomplete",
    ),
    (
        "dump-target-suffix",
        "dump_params",
        ["{prefix}", "{tmp}/out.bin"],
        checkpoint,
        r"output '.*out\.bin' must end with '\.npz'",
    ),
    (
        "dump-target-exists",
        "dump_params",
        ["{prefix}", "{tmp}/notes.txt.npz"],
        lambda tmp: (text_file("notes.txt.npz", "x")(tmp), checkpoint(tmp))[1],
        r"exists: pass --overwrite",
    ),
    (
        "dump-nothing-selected",
        "dump_params",
        ["{prefix}", "{tmp}/out.npz", "--include", "^zz"],
        checkpoint,
        r"no variables of .* are left after --include/--exclude",
    ),
    (
        "load-zeroed",
        "load_params",
        ["{prefix}", "{tmp}/out/model-2"],
        damaged("zero"),
        r"is corrupt",
    ),
    (
        "load-target-npz",
        "load_params",
        ["{prefix}", "{tmp}/out.npz"],
        checkpoint,
        r"ends with '\.npz': expected a checkpoint prefix",
    ),
    (
        "ls-npz-huge-shape",
        "ls_checkpoint",
        ["{prefix}"],
        forged_npz(HUGE, b"1234"),
        r"params\.npz' is not an npz file of arrays: member 'w\.npy' declares shape \(1000000000000,\)",
    ),
    (
        "ls-npz-negative-shape",
        "ls_checkpoint",
        ["{prefix}"],
        forged_npz(NEGATIVE),
        r"member 'w\.npy' declares shape \(-3, 2\): negative sizes",
    ),
    (
        "ls-npz-empty-name",
        "ls_checkpoint",
        ["{prefix}"],
        forged_npz(ONE, b"1234", member=".npy"),
        r"member '\.npy' has an empty name",
    ),
    (
        "dump-npz-huge-shape",
        "dump_params",
        ["{prefix}", "{tmp}/out.npz"],
        forged_npz(HUGE, b"1234"),
        r"member 'w\.npy' declares shape \(1000000000000,\)",
    ),
    (
        "load-npz-negative-shape",
        "load_params",
        ["{prefix}", "{tmp}/out/model-2"],
        forged_npz(NEGATIVE),
        r"member 'w\.npy' declares shape \(-3, 2\)",
    ),
    (
        "load-npz-empty-name",
        "load_params",
        ["{prefix}", "{tmp}/out/model-2"],
        forged_npz(ONE, b"1234", member=".npy"),
        r"member '\.npy' has an empty name",
    ),
    (
        "load-garbage-npz",
        "load_params",
        ["{tmp}/params.npz", "{tmp}/out/model-2"],
        text_file("params.npz", "not a zip"),
        r"params\.npz",
    ),
]


def checkpoint_and_dir(name):
    """A prepare step writing a checkpoint and a directory `name` (an output that is a directory)."""

    def prepare(tmp):
        os.makedirs(os.path.join(tmp, name))
        return checkpoint(tmp)

    return prepare


def good_stats_logdir(tmp):
    """A logdir whose ``stats.json`` is sound (4 statistics: 4 panels, 2 rows of 3)."""
    os.makedirs(os.path.join(tmp, "log"))
    records = [
        {"epoch_num": e, "global_step": 10 * e, "a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
        for e in (1, 2)
    ]
    with open(os.path.join(tmp, "log", "stats.json"), "w") as f:
        json.dump(records, f)


OUTPUT_TOOL_CASES = [
    (
        "dump-overwrite-onto-directory",
        "dump_params",
        ["{prefix}", "{tmp}/out.npz", "--overwrite"],
        checkpoint_and_dir("out.npz"),
        r"output '.*/out\.npz' is a directory: expected a file path such as '.*/out\.npz/params\.npz'",
    ),
    (
        "plot-stats-out-directory",
        "plot_stats",
        ["{tmp}/log", "--out", "{tmp}/log"],
        good_stats_logdir,
        r"output '.*/log' is a directory: expected a file path such as '.*/log/stats\.png'",
    ),
    (
        "plot-stats-huge-dpi",
        "plot_stats",
        ["{tmp}/log", "--dpi", "20000"],
        good_stats_logdir,
        r"dpi 20000 makes a 160000x120000-pixel image of 4 panels; the most is 16384 pixels a "
        r"side: use a dpi of 2048 or less",
    ),
    (
        "plot-stats-huge-dpi-dry-run",
        "plot_stats",
        ["{tmp}/log", "--dpi", "20000", "--dry-run"],
        good_stats_logdir,
        r"dpi 20000 makes a 160000x120000-pixel image",
    ),
]


STATS_TOOL_CASES = [
    (
        f"plot-stats-{damage}",
        "plot_stats",
        ["{tmp}/log"],
        stats_logdir(damage),
        r"log/stats\.json' .*" + DAMAGE_MESSAGES[damage],
    )
    for damage in DAMAGED_STATS
]


@pytest.mark.parametrize(
    ("tool", "argv", "prepare", "match"),
    [c[1:] for c in TOOL_CASES + STATS_TOOL_CASES + OUTPUT_TOOL_CASES],
    ids=[c[0] for c in TOOL_CASES + STATS_TOOL_CASES + OUTPUT_TOOL_CASES],
)
def test_tool_bad_input(tmp_path, capsys, tool, argv, prepare, match):
    """One ``<tool>: error: ...`` line naming the fault, exit status 2, nothing written."""
    import importlib

    made = prepare(str(tmp_path)) if prepare else None
    before = tree(tmp_path)
    args = [a.format(tmp=tmp_path, prefix=made) for a in argv]
    main = importlib.import_module(f"towerkit.tools.{tool}").main
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    name = tool.replace("_", "-")
    assert len(err) == 1, err
    assert err[0].startswith(f"{name}: error: ")
    assert re.search(match, err[0]), err[0]
    assert tree(tmp_path) == before


def test_corpus_size():
    """The corpus holds at least 60 cases across its kinds."""
    assert len(CASES) + len(TOOL_CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)
