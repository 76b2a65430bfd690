"""What a user sees: tracebacks of their errors without towerkit's frames, no TensorFlow chatter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import traceback

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers._tf_lines import verbose, without_tensorflow_noise
from towerkit.trainers._traceback import (
    NOTE,
    filter_traceback,
    hides_frames,
    is_towerkit_module,
    kept_frames,
)

CPP = "I0000 00:00:1795808314.462806   17192 mlir_graph_optimization_pass.cc:437] MLIR V1 optimization pass is not enabled"
CANCELLED = (
    "W0000 00:00:1795808490.768623   17708 local_rendezvous.cc:412] Local rendezvous is aborting "
    "with status: CANCELLED: Enqueue operation was cancelled"
)
CUINIT = (
    "E0000 00:00:1795808490.7 17708 cuda_executor.cc:1309] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
)
BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"

plain_lines = st.text(alphabet=st.characters(exclude_categories=("Cc", "Cs")), max_size=40).filter(
    lambda s: not s[:1].isupper() and not s.startswith(("To enable", "\t [["))
)
"""Lines that are neither TensorFlow's log lines nor their continuations."""


class TestWithoutTensorflowNoise:
    """`without_tensorflow_noise` drops TensorFlow's chatter and keeps the rest in order."""

    def test_known_lines(self):
        """The MLIR, CPU, cuInit, CANCELLED and banner lines go, with their continuation lines."""
        lines = [
            BANNER,
            CPP,
            "To enable the following instructions: AVX2 FMA, in other operations, rebuild",
            CUINIT,
            "trainable variables:",
            CANCELLED,
            "\t [[{{node IterableInput/enqueue}}]]",
            "  w     3x1        3",
        ]
        assert without_tensorflow_noise(lines) == ["trainable variables:", "  w     3x1        3"]

    def test_real_warnings_kept(self):
        """A warning or error of TensorFlow that is not known chatter stays, with its details."""
        line = "W0000 00:00:1.5 1 op_kernel.cc:1840] OP_REQUIRES failed: Not found: x.index"
        assert without_tensorflow_noise([line, "\t [[{{node save/Restore}}]]"]) == [
            line,
            "\t [[{{node save/Restore}}]]",
        ]

    @given(st.lists(plain_lines, max_size=20), st.lists(st.booleans(), max_size=20))
    def test_other_lines_kept(self, plain, noise_before):
        """Interleaved with chatter, every other line comes out, in its order."""
        mixed = []
        for i, line in enumerate(plain):
            if i < len(noise_before) and noise_before[i]:
                mixed += [CPP, CANCELLED, "\t [[{{node IterableInput/enqueue}}]]"]
            mixed.append(line)
        assert without_tensorflow_noise(mixed) == plain

    def test_verbose_switch(self):
        """TOWERKIT_VERBOSE=1 asks for the lines; unset or 0 does not."""
        assert verbose({"TOWERKIT_VERBOSE": "1"})
        assert not verbose({"TOWERKIT_VERBOSE": "0"})
        assert not verbose({})


class TestFrames:
    """Which frames a user's error keeps."""

    @given(
        st.lists(
            st.sampled_from(["__main__", "towerkit.trainers._base", "tensorflow.x", "towerkit"])
        )
    )
    def test_kept_frames(self, modules):
        """Exactly the frames outside towerkit's modules are kept, in order."""
        kept = kept_frames(modules)
        assert [modules[i] for i in kept] == [m for m in modules if not is_towerkit_module(m)]
        assert kept == sorted(kept)

    def test_switch(self):
        """TOWERKIT_TRACEBACK=full keeps every frame; bugs (RuntimeError) are never filtered."""
        assert hides_frames(FileExistsError("x"), {})
        assert not hides_frames(FileExistsError("x"), {"TOWERKIT_TRACEBACK": "full"})
        assert not hides_frames(RuntimeError("x"), {})

    def test_error_unchanged(self, monkeypatch):
        """The error raised is the same object, message and cause, with the note added once."""
        monkeypatch.delenv("TOWERKIT_TRACEBACK", raising=False)
        cause = KeyError("k")

        @filter_traceback
        @filter_traceback
        def entry():
            raise ValueError("bad value") from cause

        with pytest.raises(ValueError, match="bad value") as info:
            entry()
        assert info.value.__cause__ is cause
        assert info.value.__notes__ == [NOTE]


SCRIPT = textwrap.dedent(
    """\
    import os, sys
    import numpy as np
    import tensorflow as tf
    from towerkit.trainers import IterableInput, ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

    tf1 = tf.compat.v1

    class Linear(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None,), tf.float32, "y")]

        def build_graph(self, x, y):
            w = tf1.get_variable("w", [3, 1], initializer=tf1.zeros_initializer())
            return tf.reduce_mean(tf.square(tf.squeeze(tf.matmul(x, w), 1) - y), name="cost")

        def optimizer(self):
            return tf1.train.GradientDescentOptimizer(0.5)

    x = np.random.default_rng(0).random((32, 3), dtype=np.float32)
    config = TrainConfig(model=Linear(), data=IterableInput([[x, x.sum(1)]] * 10, prefetch=2),
                         max_epoch=2, logdir=sys.argv[1])
    launch_train_with_config(config, SimpleTrainer())
    print("trained")
    """
)
"""A run with IterableInput whose queue is full when it ends (a cancelled enqueue)."""


def run_script(tmp_path, logdir, **env):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TOWERKIT_", "TF_CPP"))}
    return subprocess.run(
        [sys.executable, str(script), str(logdir)],
        capture_output=True,
        text=True,
        env={**environ, **env},
        timeout=300,
        check=False,
    )


@pytest.mark.procs
@pytest.mark.slow
@pytest.mark.timeout(600)  # two TensorFlow programs per test on 2 shared cores
class TestProgramOutput:
    """A real training program's standard error, as the user reads it."""

    def test_quiet_run_then_user_error(self, tmp_path):
        """No MLIR or CANCELLED line in a normal run; run again, the error is 2 frames and short."""
        logdir = tmp_path / "log"
        done = run_script(tmp_path, logdir)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "trained" in done.stdout
        assert "MLIR" not in done.stderr
        assert "CANCELLED" not in done.stderr
        assert "epoch 2/2" in done.stderr
        again = run_script(tmp_path, logdir)
        assert again.returncode == 1
        tail = again.stderr[again.stderr.index("Traceback") :].splitlines()
        assert tail[1].endswith(", in <module>"), tail
        assert "launch_train_with_config(config, SimpleTrainer())" in tail[2]
        assert tail[3].startswith(f"towerkit.trainers.LogdirNotEmptyError: the logdir '{logdir}'")
        assert "logdir_action='overwrite'" in tail[3]
        assert tail[4:] == [NOTE]
        assert "towerkit/trainers" not in again.stderr

    def test_switches(self, tmp_path):
        """TOWERKIT_TRACEBACK=full shows towerkit's frames; TOWERKIT_VERBOSE=1 TensorFlow's lines."""
        logdir = tmp_path / "log"
        logdir.mkdir()
        (logdir / "stats.json").write_text("[]")
        done = run_script(tmp_path, logdir, TOWERKIT_TRACEBACK="full")
        assert done.returncode == 1
        assert "towerkit/trainers/_launch.py" in done.stderr
        assert NOTE not in done.stderr
        loud = run_script(tmp_path, tmp_path / "fresh", TOWERKIT_VERBOSE="1")
        assert loud.returncode == 0, loud.stderr[-3000:]
        assert "CANCELLED" in loud.stderr or "MLIR" in loud.stderr


@pytest.mark.slow
def test_restore_mismatch_traceback(tmp_path, monkeypatch):
    """A checkpoint that does not fit the model: the error keeps only the caller's frames."""
    import numpy as np
    import tensorflow as tf

    from towerkit.sessinit import RestoreMismatchError, SmartInit
    from towerkit.trainers import (
        ModelDesc,
        NumpyInput,
        SimpleTrainer,
        TrainConfig,
        launch_train_with_config,
    )

    monkeypatch.delenv("TOWERKIT_TRACEBACK", raising=False)
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        tf1.get_variable("w", [2, 1])
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            prefix = tf1.train.Saver().save(sess, str(tmp_path / "ckpt" / "model"), 5)

    class Linear(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 3), tf.float32, "x")]

        def build_graph(self, x):
            w = tf1.get_variable("w", [3, 1])
            return tf.reduce_mean(tf.matmul(x, w), name="cost")

        def optimizer(self):
            return tf1.train.GradientDescentOptimizer(0.1)

    config = TrainConfig(
        model=Linear(),
        data=NumpyInput([np.zeros((8, 3), np.float32)], batch_size=4),
        session_init=SmartInit(prefix),
        max_epoch=1,
        logdir=str(tmp_path / "log"),
    )
    with tf.Graph().as_default(), pytest.raises(RestoreMismatchError) as info:
        launch_train_with_config(config, SimpleTrainer())
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f.name for f in frames] == ["test_restore_mismatch_traceback"]
    assert info.value.__notes__ == [NOTE]
    assert "'w'" in str(info.value)


HELD_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from towerkit.trainers._tf_lines import release_standard_error, tensorflow_lines_hidden

    release = sys.argv[1]
    with tensorflow_lines_hidden():
        os.write(2, (sys.argv[2] + "\\n").encode())  # as TensorFlow's C++ code writes
        print("a task is dead", file=sys.stderr, flush=True)
        print("IN-BLOCK", flush=True)
        while not os.path.exists(release):
            time.sleep(0.05)
        print("the process exits now", file=sys.stderr, flush=True)
        release_standard_error()  # what every os._exit path of the trainers does first
        os._exit(3)
    """
)
"""A program that writes inside the block, waits, and leaves by ``os._exit`` from inside it."""


@pytest.mark.procs
@pytest.mark.timeout(120)
def test_lines_pass_while_the_block_runs_and_at_a_hurried_exit(tmp_path):
    """Kept lines reach standard error while the block still runs; none is lost at ``os._exit``.

    A worker blocked in a session start that finds a task dead logs it and exits with
    ``os._exit``: its lines were held until the block ended, so they never came out.
    """
    script, release, err = tmp_path / "held.py", tmp_path / "release", tmp_path / "err.txt"
    script.write_text(HELD_SCRIPT)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TOWERKIT_", "TF_CPP"))}
    with open(err, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(release), CPP],
            stdout=subprocess.PIPE,
            stderr=sink,
            env=environ,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"IN-BLOCK\n"
            for _ in range(200):  # the block is still running: the line must be out already
                if b"a task is dead" in err.read_bytes():
                    break
                time.sleep(0.05)
            assert err.read_text().endswith("a task is dead\n")  # TensorFlow's line hidden
            release.touch()
            assert proc.wait(60) == 3
        finally:
            proc.kill()
    text = err.read_text()
    assert text.endswith("a task is dead\nthe process exits now\n"), text
    assert "MLIR" not in text
