"""Glob characters in checkpoint paths, checkpoints moved aside and back, backups, vanished reads."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.sessinit import (
    GLOB_CHARACTERS,
    CheckpointVanishedError,
    GlobPathError,
    SmartInit,
    back_up_file,
    backup_name,
    glob_characters,
    is_aside_name,
    list_checkpoint_vars,
    load_checkpoint_vars,
    move_checkpoints_aside,
    put_back_aside,
    require_globless,
    resolve_checkpoint,
    save_checkpoint_vars,
    write_checkpoint_state,
)
from towerkit.sessinit._varmanip import check_data_files, corrupt_checkpoint_error


class TestGlobCharacters:
    """`glob_characters` and `require_globless`."""

    @given(st.text(max_size=30))
    def test_properties(self, path):
        """Exactly the glob characters of the path, in order of first appearance, once each."""
        found = glob_characters(path)
        assert set(found) == set(path) & set(GLOB_CHARACTERS)
        assert len(found) == len(set(found))
        assert list(found) == sorted(found, key=path.index)

    @pytest.mark.parametrize("name", ["a[1]", "x*", "q?", "back\\slash", "only]"])
    def test_refused(self, tmp_path, name):
        """The message names the argument, the path and the characters."""
        with pytest.raises(GlobPathError, match=r"'logdir' .* holds '.*': TensorFlow reads"):
            require_globless(tmp_path / name, "logdir")

    def test_reader_refuses(self, tmp_path):
        """A checkpoint written under a glob path is refused by name, not by TensorFlow's error."""
        prefix = str(tmp_path / "lr[0.1]" / "model-1")
        os.makedirs(os.path.dirname(prefix))
        save_checkpoint_vars({"w": np.ones(3, np.float32)}, prefix)
        for read in (resolve_checkpoint, list_checkpoint_vars, load_checkpoint_vars, SmartInit):
            with pytest.raises(GlobPathError, match=r"holds '\[', '\]'.*move or rename"):
                read(prefix)


def ckpt(d, step, value=1.0):
    prefix = str(d / f"model-{step}")
    save_checkpoint_vars({"w": np.full(3, value, np.float32)}, prefix)
    return prefix


class TestMoveAside:
    """`move_checkpoints_aside` and `put_back_aside` on real checkpoints."""

    def test_round_trip(self, tmp_path):
        """Moved whole with the state file, loadable there; put back byte for byte."""
        for s in (10, 20, 30):
            ckpt(tmp_path, s, float(s))
        write_checkpoint_state(tmp_path, str(tmp_path / "model-30"), [str(tmp_path / "model-20")])
        before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}
        folder = move_checkpoints_aside(str(tmp_path), ["model-20", "model-30"])
        assert is_aside_name(os.path.basename(folder))
        assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".index")) == ["model-10.index"]
        assert load_checkpoint_vars(folder)["w"][0] == 30.0
        back = put_back_aside(str(tmp_path), folder)
        assert not os.path.exists(folder)
        assert "checkpoint" in back
        assert {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)} == before

    def test_nothing_to_move(self, tmp_path):
        """No file of the names: no folder."""
        assert move_checkpoints_aside(str(tmp_path), ["model-7"]) is None
        assert os.listdir(tmp_path) == []


class TestBackups:
    """`backup_name` and `back_up_file`: a backup is never overwritten."""

    @given(st.sets(st.integers(2, 8)), st.booleans())
    def test_free_name(self, taken_n, plain):
        """The name is free, and is .bak when that is."""
        taken = {f"stats.json.bak-{n}" for n in taken_n} | ({"stats.json.bak"} if plain else set())
        name = backup_name(taken, "stats.json")
        assert name not in taken
        assert name == "stats.json.bak" or plain

    def test_two_backups(self, tmp_path):
        """Two backups of a changing file keep both contents."""
        path = tmp_path / "stats.json"
        path.write_text("[1]")
        back_up_file(str(path))
        path.write_text("[2]")
        back_up_file(str(path))
        assert (tmp_path / "stats.json.bak").read_text() == "[1]"
        assert (tmp_path / "stats.json.bak-2").read_text() == "[2]"


class TestVanished:
    """A checkpoint pruned while it is read is reported as such, not as corrupt."""

    def test_pruned_between_listing_and_checking(self, tmp_path):
        """Its files deleted after it was listed (as a saver prunes): CheckpointVanishedError."""
        prefix = ckpt(tmp_path, 5)
        infos = list_checkpoint_vars(prefix)
        for name in sorted(os.listdir(tmp_path), key=lambda n: not n.endswith(".index")):
            os.remove(tmp_path / name)  # .index first, as ModelSaver deletes
        with pytest.raises(CheckpointVanishedError, match="deleted or moved while it was being"):
            check_data_files(prefix, infos)
        err = corrupt_checkpoint_error(prefix, ["w"], OSError("gone"))
        assert isinstance(err, CheckpointVanishedError)
        assert "restore" not in str(err).lower()

    def test_still_corrupt_when_index_present(self, tmp_path):
        """A missing data file with the index still there stays a corrupt checkpoint."""
        prefix = ckpt(tmp_path, 5)
        infos = list_checkpoint_vars(prefix)
        os.remove(prefix + ".data-00000-of-00001")
        with pytest.raises(ValueError, match="is incomplete"):
            check_data_files(prefix, infos)
