"""Atomic writes of files, directories and checkpoints, including writers killed mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.sessinit import (
    SmartInit,
    atomic_checkpoint_prefix,
    atomic_path,
    atomic_save_checkpoint,
    atomic_write_bytes,
    atomic_write_text,
    get_all_checkpoints,
    load_checkpoint_vars,
    load_npz,
    remove_stale_temporaries,
    save_checkpoint_vars,
)
from towerkit.sessinit._atomic import parse_temp_name, temp_name

tf1 = tf.compat.v1


def hidden(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


def write_then_fail(context, suffix: str | None, error: Exception | None) -> None:
    """Inside `context`, write a file at its path plus `suffix` (unless None), then raise `error`.

    A suffix starting with ``/`` makes the path a directory holding that file.
    """
    with context as tmp:
        if suffix is not None:
            path = tmp + suffix
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("partial")
        if error is not None:
            raise error


class TestAtomicPath:
    """`atomic_path` publishes a file or directory only when the body succeeds."""

    def test_file_replaced(self, tmp_path):
        """A new file replaces the old one; no temporary entry remains."""
        target = tmp_path / "stats.json"
        atomic_write_text(target, "old")
        atomic_write_bytes(target, b"new")
        assert target.read_bytes() == b"new"
        assert hidden(tmp_path) == []

    def test_failure_keeps_old(self, tmp_path):
        """A body that raises leaves the old file and removes the temporary one."""
        target = tmp_path / "a.txt"
        target.write_text("old")
        with pytest.raises(RuntimeError, match="boom"):
            write_then_fail(atomic_path(target), "", RuntimeError("boom"))
        assert target.read_text() == "old"
        assert hidden(tmp_path) == []

    def test_keeps_suffix(self, tmp_path):
        """The temporary path keeps the final suffix and sits in the same directory."""
        with atomic_path(tmp_path / "params.npz", fsync=False) as tmp:
            assert os.path.dirname(tmp) == str(tmp_path)
            assert tmp.endswith(".npz")
            assert os.path.basename(tmp).startswith(".params.")
            np.savez(tmp, a=np.arange(2))
        assert load_npz(tmp_path / "params.npz")["a"].tolist() == [0, 1]

    def test_directory(self, tmp_path):
        """A directory is published whole, replacing an older one."""
        target = tmp_path / "export"
        for version in ("v1", "v2"):
            with atomic_path(target) as tmp:
                os.makedirs(os.path.join(tmp, "variables"))
                with open(os.path.join(tmp, "variables", "version"), "w") as f:
                    f.write(version)
        assert (target / "variables" / "version").read_text() == "v2"
        assert hidden(tmp_path) == []

    def test_directory_failure(self, tmp_path):
        """A failed directory write leaves the old directory untouched."""
        target = tmp_path / "export"
        target.mkdir()
        (target / "keep").write_text("1")
        with pytest.raises(ValueError, match="bad"):
            write_then_fail(atomic_path(target), "/inner", ValueError("bad"))
        assert os.listdir(target) == ["keep"]
        assert hidden(tmp_path) == []

    def test_fail(self, tmp_path):
        """A body that writes nothing is an error and publishes nothing."""
        with pytest.raises(FileNotFoundError, match=r"nothing was written to the temporary path"):
            write_then_fail(atomic_path(tmp_path / "x"), None, None)
        assert os.listdir(tmp_path) == []


class TestAtomicCheckpointPrefix:
    """`atomic_checkpoint_prefix` publishes a multi-file checkpoint index-last."""

    def test_overwrite(self, tmp_path):
        """Rewriting a checkpoint replaces every file and leaves no stale shard."""
        prefix = str(tmp_path / "model-1")
        save_checkpoint_vars({"a": np.zeros(3, np.float32)}, prefix)
        (tmp_path / "model-1.data-00001-of-00002").write_bytes(b"stale")
        save_checkpoint_vars({"b": np.ones(2, np.int64)}, prefix)
        assert sorted(os.listdir(tmp_path)) == ["model-1.data-00000-of-00001", "model-1.index"]
        assert load_checkpoint_vars(prefix)["b"].tolist() == [1, 1]

    def test_failure_publishes_nothing(self, tmp_path):
        """A failing save leaves no file under the final or the temporary name."""
        with pytest.raises(OSError, match="disk"):
            write_then_fail(
                atomic_checkpoint_prefix(tmp_path / "m-1"), ".data-00000-of-00001", OSError("disk")
            )
        assert os.listdir(tmp_path) == []

    def test_fail(self, tmp_path):
        """Writing no index is an error."""
        with pytest.raises(FileNotFoundError, match=r"no checkpoint was written"):
            write_then_fail(
                atomic_checkpoint_prefix(tmp_path / "m-1"), ".data-00000-of-00001", None
            )
        assert os.listdir(tmp_path) == []


class TestAtomicSaveCheckpoint:
    """`atomic_save_checkpoint` saves with a Saver and keeps its bookkeeping right."""

    def test_max_to_keep(self, graph, sess, tmp_path):
        """Old checkpoints are deleted by the saver, the state file names the latest."""
        v = tf1.get_variable("v", initializer=0.0)
        saver = tf1.train.Saver([v], max_to_keep=2)
        sess.run(v.initializer)
        base = str(tmp_path / "model")
        for step in range(1, 5):
            sess.run(v.assign(float(step)))
            path = atomic_save_checkpoint(saver, sess, base, global_step=step)
            assert path == f"{base}-{step}"
        assert [s for _, s in get_all_checkpoints(tmp_path)] == [3, 4]
        assert saver.last_checkpoints == [f"{base}-3", f"{base}-4"]
        state = tf1.train.get_checkpoint_state(str(tmp_path))
        assert state.model_checkpoint_path == f"{base}-4"
        assert hidden(tmp_path) == []
        assert os.path.exists(f"{base}-4.meta")
        sess.run(v.assign(-1.0))
        SmartInit(str(tmp_path)).init(sess)
        assert sess.run(v) == 4.0

    def test_tensor_step(self, graph, sess, tmp_path):
        """A global-step variable is evaluated for the name."""
        step = tf1.train.get_or_create_global_step()
        saver = tf1.train.Saver()
        sess.run(tf1.global_variables_initializer())
        sess.run(step.assign(12))
        path = atomic_save_checkpoint(saver, sess, tmp_path / "model", step, write_meta_graph=False)
        assert path.endswith("model-12")
        assert load_checkpoint_vars(path)["global_step"] == 12


WRITER = """
import sys
import numpy as np
from towerkit.sessinit import save_checkpoint_vars
big = {{f"w{{i}}": np.full(4_000_000, i, np.float32) for i in range(25)}}
print("ready", flush=True)
save_checkpoint_vars(big, {target!r})
print("finished", flush=True)
"""


def _kill_mid_write(directory, target: str, temp_start: str) -> None:
    """Start a writer of ~400 MB to `target`; SIGKILL it once its temporary file holds data."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER.format(target=target))],
        stdout=subprocess.PIPE,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        seen = False
        while time.monotonic() < deadline and proc.poll() is None:
            sizes = [
                os.path.getsize(os.path.join(directory, n))
                for n in os.listdir(directory)
                if n.startswith(temp_start) and os.path.isfile(os.path.join(directory, n))
            ]
            if sum(sizes) > 2**20:
                seen = True
                break
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
        assert seen, "the writer was not caught while writing its temporary file"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.procs
@pytest.mark.slow
class TestKilledWriter:
    """A writer killed mid-write leaves the previous complete version under the final name."""

    def test_npz(self, tmp_path):
        """Killing an npz writer keeps the old npz whole and readable."""
        final = str(tmp_path / "params.npz")
        save_checkpoint_vars({"v": np.arange(5)}, final)
        _kill_mid_write(tmp_path, final, ".params.tmp")
        assert {k: v.tolist() for k, v in load_npz(final).items()} == {"v": [0, 1, 2, 3, 4]}
        assert hidden(tmp_path) != []

    def test_checkpoint(self, tmp_path):
        """Killing a checkpoint writer keeps the old checkpoint whole and readable."""
        final = str(tmp_path / "model-1")
        save_checkpoint_vars({"v": np.arange(5)}, final)
        _kill_mid_write(tmp_path, final, ".model-1.tmp")
        assert {k: v.tolist() for k, v in load_checkpoint_vars(final).items()} == {
            "v": [0, 1, 2, 3, 4]
        }
        assert get_all_checkpoints(tmp_path) == [(final, 1)]


@pytest.mark.procs
class TestRemoveStaleTemporaries:
    """A writer cleans the temporaries of its own kind that a killed writer left behind."""

    @given(
        stem=st.from_regex(r"[a-z][a-z0-9_.-]{0,12}", fullmatch=True),
        ext=st.sampled_from(["", ".json", ".npz", ".tfmodel"]),
        extra=st.sampled_from(
            ["", ".index", ".data-00000-of-00001", ".data-00000-of-00001.tempstate9"]
        ),
    )
    def test_parse_temp_name(self, stem, ext, extra):
        """Every name temp_name makes parses back to its final name and this process id."""
        name = temp_name(stem + ext) + extra
        assert parse_temp_name(name) == (stem + ext + extra, os.getpid())
        assert parse_temp_name(stem + ext + extra) is None

    @pytest.mark.slow
    def test_killed_writers(self, tmp_path):
        """After a checkpoint writer and an npz writer are killed, each kind is cleaned apart."""
        final = str(tmp_path / "model-1")
        save_checkpoint_vars({"v": np.arange(5)}, final)
        _kill_mid_write(tmp_path, final, ".model-1.tmp")
        save_checkpoint_vars({"v": np.arange(5)}, str(tmp_path / "params.npz"))
        _kill_mid_write(tmp_path, str(tmp_path / "params.npz"), ".params.tmp")
        left = hidden(tmp_path)
        assert any(n.startswith(".model-1.tmp-") for n in left)
        assert any(n.startswith(".params.tmp-") for n in left)
        removed = remove_stale_temporaries(
            tmp_path, lambda n: n.startswith("model-"), what="checkpoint"
        )
        assert removed
        assert all(n.startswith(".model-1.tmp-") for n in removed)
        assert all(n.startswith(".params.tmp-") for n in hidden(tmp_path))
        remove_stale_temporaries(tmp_path, lambda n: n == "params.npz", what="npz")
        assert hidden(tmp_path) == []
        assert get_all_checkpoints(tmp_path) == [(final, 1)]

    def test_live_writer_kept(self, tmp_path, caplog):
        """A temporary of a running process stays; one of an ended process goes, with a warning."""
        live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            dead_pid = _ended_pid()
            names = [f".stats.tmp-{live.pid}-0123abcd.json", f".stats.tmp-{dead_pid}-0123abcd.json"]
            for n in names:
                (tmp_path / n).write_text("partial")
            with caplog.at_level("WARNING", logger="towerkit.sessinit"):
                removed = remove_stale_temporaries(
                    tmp_path, lambda n: n == "stats.json", what="statistics"
                )
            assert removed == [names[1]]
            assert hidden(tmp_path) == [names[0]]
            assert "removed 1 stale temporary file(s) of statistics files" in caplog.text
            assert names[1] in caplog.text
        finally:
            live.kill()
            live.wait()

    def test_missing_directory(self, tmp_path):
        """A directory that does not exist has nothing to clean."""
        assert remove_stale_temporaries(tmp_path / "no", lambda n: True, what="any") == []


def _ended_pid() -> int:
    """The id of a process that has ended and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.procs
def test_atomic_writes_need_no_tensorflow():
    """The atomic writes, checkpoint names and npz files import without TensorFlow."""
    code = (
        "import sys\n"
        "from towerkit.sessinit import atomic_path, atomic_write_text, remove_stale_temporaries,"
        " load_npz, get_all_checkpoints, plan_restore\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
        "from towerkit.sessinit import SmartInit\n"
        "assert 'tensorflow' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
