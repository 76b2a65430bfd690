"""Checkpoint names and paths: steps, listings, state files and path resolution on real files."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.sessinit import (
    CheckpointNotFoundError,
    NotACheckpointError,
    checkpoint_step,
    get_all_checkpoints,
    resolve_checkpoint,
    state_entry_inside,
    write_checkpoint_state,
)
from towerkit.sessinit._paths import parse_checkpoint_state, sort_checkpoints

SUFFIXES = st.sampled_from([".index", ".meta", ".data-00000-of-00001", ""])


class TestCheckpointStep:
    """`checkpoint_step` reads the step out of a checkpoint name."""

    def test_examples(self):
        """Only ``<prefix>-<digits>`` names with checkpoint suffixes have a step."""
        assert checkpoint_step("model-7.meta") == 7
        assert checkpoint_step("best-3", prefix="best") == 3
        assert checkpoint_step("model-7.index.tmp") is None
        assert checkpoint_step("model-x.index") is None
        assert checkpoint_step("mymodel-7.index") is None

    @given(
        step=st.integers(0, 10**12),
        suffix=SUFFIXES,
        prefix=st.sampled_from(["model", "a.b", "x-y"]),
    )
    def test_roundtrip(self, step, suffix, prefix):
        """The step written into a name is the step read back."""
        assert checkpoint_step(f"{prefix}-{step}{suffix}", prefix) == step


class TestSortCheckpoints:
    """`sort_checkpoints` lists complete checkpoints by step."""

    @given(steps=st.lists(st.integers(0, 10**6), unique=True), junk=st.lists(st.text(max_size=8)))
    def test_sorted_complete(self, steps, junk):
        """Every indexed step appears once, in order; data files alone do not count."""
        names = [f"model-{s}.index" for s in steps] + [
            f"model-{s}.data-00000-of-00001" for s in steps
        ]
        names += ["model-99999999.data-00000-of-00001", *junk]
        found = sort_checkpoints(names)
        assert [s for _, s in found] == sorted(steps)
        assert all(n == f"model-{s}" for n, s in found)


class TestCheckpointState:
    """The ``checkpoint`` state file, parsed and written."""

    def test_parse(self):
        """The latest path is read, escapes included."""
        assert parse_checkpoint_state('model_checkpoint_path: "a\\"b"\n') == 'a"b'

    def test_written_state_readable_by_tensorflow(self, tmp_path):
        """TensorFlow reads the state file this lib writes."""
        import tensorflow as tf

        for step in (10, 20):
            (tmp_path / f"model-{step}.index").write_bytes(b"")
        write_checkpoint_state(
            tmp_path,
            str(tmp_path / "model-20"),
            [str(tmp_path / "model-10")],
            timestamps=[1.0, 2.0],
        )
        state = tf.compat.v1.train.get_checkpoint_state(str(tmp_path))
        assert state.model_checkpoint_path == str(tmp_path / "model-20")
        assert list(state.all_model_checkpoint_paths) == [
            str(tmp_path / "model-10"),
            str(tmp_path / "model-20"),
        ]
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


class TestGetAllCheckpoints:
    """`get_all_checkpoints` lists a directory's checkpoints by step."""

    def test_real_checkpoints(self, tmp_path, write_checkpoint):
        """Real checkpoints are found by step, with paths usable as checkpoint handles."""
        for step in (200, 3, 40):
            write_checkpoint({"v": np.full((2,), step, np.float32)}, f"model-{step}")
        write_checkpoint({"v": np.zeros(2, np.float32)}, "other-5")
        found = get_all_checkpoints(tmp_path)
        assert found == [(str(tmp_path / f"model-{s}"), s) for s in (3, 40, 200)]
        assert get_all_checkpoints(str(tmp_path), prefix="other") == [
            (str(tmp_path / "other-5"), 5)
        ]

    def test_fail(self, tmp_path):
        """A missing directory is reported."""
        with pytest.raises(
            CheckpointNotFoundError, match=r"checkpoint directory '.*nope' does not exist"
        ):
            get_all_checkpoints(tmp_path / "nope")


class TestResolveCheckpoint:
    """`resolve_checkpoint` turns what users pass into a checkpoint prefix."""

    def test_forms(self, tmp_path, write_checkpoint):
        """A prefix, its files, its directory and its state file all resolve to the prefix."""
        old = write_checkpoint({"v": np.zeros(2, np.float32)}, "model-1")
        prefix = write_checkpoint({"v": np.zeros(2, np.float32)}, "model-2")
        write_checkpoint_state(tmp_path, prefix, [old])
        assert resolve_checkpoint(prefix) == prefix
        assert resolve_checkpoint(prefix + ".index") == prefix
        assert resolve_checkpoint(prefix + ".data-00000-of-00001") == prefix
        assert resolve_checkpoint(tmp_path) == prefix
        assert resolve_checkpoint(tmp_path / "checkpoint") == prefix

    def test_directory_without_state(self, tmp_path, write_checkpoint):
        """Without a state file, a directory resolves to its highest step."""
        write_checkpoint({"v": np.zeros(2, np.float32)}, "model-9")
        latest = write_checkpoint({"v": np.zeros(2, np.float32)}, "model-10")
        assert resolve_checkpoint(tmp_path) == latest

    def test_stale_state(self, tmp_path, write_checkpoint):
        """A state file naming a deleted checkpoint falls back to what exists."""
        only = write_checkpoint({"v": np.zeros(2, np.float32)}, "model-3")
        (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model-99"\n')
        assert resolve_checkpoint(tmp_path) == only

    def test_fail(self, tmp_path, write_checkpoint):
        """Missing paths, empty directories and non-checkpoint files are reported."""
        write_checkpoint({"v": np.zeros(2, np.float32)}, "model-5")
        with pytest.raises(
            CheckpointNotFoundError,
            match=r"checkpoint '.*model-6' does not exist: no file '.*model-6.index'; "
            r"checkpoints in '.*': \['model-5'\]",
        ):
            resolve_checkpoint(tmp_path / "model-6")
        with pytest.raises(
            CheckpointNotFoundError, match=r"directory '.*nodir' does not exist either"
        ):
            resolve_checkpoint(tmp_path / "nodir" / "model-1")
        empty = tmp_path / "empty"
        empty.mkdir()
        with pytest.raises(
            CheckpointNotFoundError, match=r"directory '.*empty' holds no checkpoint"
        ):
            resolve_checkpoint(empty)
        text = tmp_path / "notes.txt"
        text.write_text("hello")
        with pytest.raises(
            NotACheckpointError, match=r"'.*notes.txt' is not a TensorFlow checkpoint"
        ):
            resolve_checkpoint(text)
        with pytest.raises(CheckpointNotFoundError, match=r"checkpoint path '' is empty"):
            resolve_checkpoint("")

    def test_expands_user(self, tmp_path, write_checkpoint, monkeypatch):
        """``~`` is expanded."""
        prefix = write_checkpoint({"v": np.zeros(2, np.float32)}, "model-1")
        monkeypatch.setenv("HOME", str(tmp_path))
        assert resolve_checkpoint("~/model-1") == os.path.join(str(tmp_path), "model-1") == prefix


class TestStateEntryInside:
    """Only state-file entries that name a file directly in the directory are followed."""

    @given(name=st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True))
    def test_inside(self, name):
        """A bare name, or the absolute path of a file in the directory, is kept by base name."""
        root = os.path.abspath("runs/b")
        assert state_entry_inside(root, name) == name
        assert state_entry_inside(root, os.path.join(root, name)) == name

    @given(name=st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True))
    def test_outside(self, name):
        """Paths into another directory, or below or above this one, are refused."""
        root = os.path.abspath("runs/b")
        for entry in (
            os.path.join(os.path.dirname(root), "a", name),
            os.path.join("..", "a", name),
            os.path.join("sub", name),
            os.path.join(root, "sub", name),
        ):
            assert state_entry_inside(root, entry) is None, entry

    def test_copied_directory(self, tmp_path, write_checkpoint, caplog):
        """A copied directory whose state file names the original resolves to its own checkpoint."""
        a = tmp_path / "a"
        a.mkdir()
        b = tmp_path / "b"
        b.mkdir()
        write_checkpoint({"v": np.zeros(2)}, name="a/model-5")
        write_checkpoint({"v": np.ones(2)}, name="b/model-5")
        (b / "checkpoint").write_text(
            f'model_checkpoint_path: "{a / "model-5"}"\n'
            f'all_model_checkpoint_paths: "{a / "model-5"}"\n'
        )
        assert str(a / "model-5") in (b / "checkpoint").read_text()
        with caplog.at_level("WARNING", logger="towerkit.sessinit"):
            assert resolve_checkpoint(b) == str(b / "model-5")
        assert "outside its directory" in caplog.text
