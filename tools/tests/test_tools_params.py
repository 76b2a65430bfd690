"""Tests of dump-params and load-params: real checkpoints to npz files and back."""

from __future__ import annotations

import numpy as np
import pytest

from towerkit.tools import dump_params, load_params


def _read_npz(path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _read_checkpoint(prefix) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


class TestDumpParams:
    """Checkpoint -> npz."""

    def test_all_variables(self, checkpoint, values, tmp_path, capsys):
        """Every variable is copied with its exact values and dtype."""
        out = tmp_path / "all.npz"
        assert dump_params.main([str(checkpoint), str(out)]) == 0
        got = _read_npz(out)
        assert sorted(got) == sorted(values)
        for name, value in values.items():
            assert got[name].dtype == value.dtype
            np.testing.assert_array_equal(got[name], value)
        assert "wrote 5 variables" in capsys.readouterr().out

    def test_include_exclude(self, checkpoint, tmp_path):
        """--include keeps matches of any pattern; --exclude then drops matches."""
        out = tmp_path / "sel.npz"
        args = [
            str(checkpoint),
            str(out),
            "--include",
            "^conv0/",
            "--include",
            "^fc/",
            "--exclude",
            "/b$",
        ]
        assert dump_params.main(args) == 0
        assert sorted(_read_npz(out)) == ["conv0/W", "fc/W"]

    def test_dry_run_writes_nothing(self, checkpoint, tmp_path, capsys):
        """--dry-run lists what would be written and leaves no file."""
        out = tmp_path / "dry.npz"
        assert dump_params.main([str(checkpoint), str(out), "--dry-run", "--include", "W$"]) == 0
        text = capsys.readouterr().out
        assert not out.exists()
        assert "would write 2 variables" in text
        assert "conv0/W  float32 (3, 3, 1, 4)" in text

    def test_refuses_to_overwrite(self, checkpoint, tmp_path, capsys):
        """An existing output is kept unless --overwrite is given."""
        out = tmp_path / "x.npz"
        out.write_bytes(b"keep me")
        assert dump_params.main([str(checkpoint), str(out)]) == 2
        assert "exists: pass --overwrite" in capsys.readouterr().err
        assert out.read_bytes() == b"keep me"
        assert dump_params.main([str(checkpoint), str(out), "--overwrite"]) == 0
        assert len(_read_npz(out)) == 5

    @pytest.mark.parametrize(
        ("target", "message"),
        [("out.txt", "must end with '.npz'"), ("missing/out.npz", "does not exist")],
    )
    def test_bad_output(self, checkpoint, tmp_path, capsys, target, message):
        """A wrong output name or a missing output directory is refused before reading."""
        assert dump_params.main([str(checkpoint), str(tmp_path / target)]) == 2
        assert message in capsys.readouterr().err

    def test_empty_selection(self, checkpoint, tmp_path, capsys):
        """A selection that keeps nothing is an error that lists what the checkpoint holds."""
        assert (
            dump_params.main([str(checkpoint), str(tmp_path / "e.npz"), "--include", "nothing"])
            == 2
        )
        assert "are left after --include/--exclude; it holds ['conv0/W'" in capsys.readouterr().err

    def test_missing_checkpoint(self, tmp_path, capsys):
        """A missing checkpoint is named."""
        assert dump_params.main([str(tmp_path / "model-9"), str(tmp_path / "o.npz")]) == 2
        assert "model-9" in capsys.readouterr().err


class TestLoadParams:
    """npz -> checkpoint."""

    def test_round_trip(self, npz_file, values, tmp_path):
        """npz -> checkpoint -> npz gives back the same arrays."""
        prefix = tmp_path / "ck" / "model-0"
        back = tmp_path / "back.npz"
        assert load_params.main([str(npz_file), str(prefix)]) == 0
        assert dump_params.main([str(prefix), str(back)]) == 0
        got = _read_npz(back)
        assert sorted(got) == sorted(values)
        for name, value in values.items():
            np.testing.assert_array_equal(got[name], value)

    def test_restores_into_a_graph(self, npz_file, values, tmp_path):
        """The checkpoint written restores with a plain Saver and with SaverRestore."""
        import tensorflow as tf

        from towerkit.sessinit import SaverRestore

        tf1 = tf.compat.v1
        prefix = tmp_path / "ck" / "model-0"
        assert load_params.main([str(npz_file), str(prefix), "--exclude", "global_step"]) == 0
        graph = tf.Graph()
        with graph.as_default():
            w = tf1.get_variable("fc/W", shape=(36, 10))
            b = tf1.get_variable("conv0/b", shape=(4,))
            with tf1.Session(graph=graph) as sess:
                SaverRestore(str(prefix)).init(sess)
                got_w, got_b = sess.run([w, b])
        np.testing.assert_array_equal(got_w, values["fc/W"])
        np.testing.assert_array_equal(got_b, values["conv0/b"])
        assert sorted(_read_checkpoint(prefix)) == ["conv0/W", "conv0/b", "fc/W", "fc/b"]

    def test_set_latest(self, npz_file, tmp_path):
        """--set-latest writes the directory's state file, so the directory names the checkpoint."""
        prefix = tmp_path / "ck" / "model-7"
        assert load_params.main([str(npz_file), str(prefix), "--set-latest"]) == 0
        assert 'model_checkpoint_path: "model-7"' in (tmp_path / "ck" / "checkpoint").read_text()
        assert sorted(_read_checkpoint(tf_latest(tmp_path / "ck"))) == sorted(_read_npz(npz_file))

    def test_dry_run(self, npz_file, tmp_path, capsys):
        """--dry-run writes no checkpoint files."""
        prefix = tmp_path / "ck" / "model-0"
        assert load_params.main([str(npz_file), str(prefix), "--dry-run"]) == 0
        assert "would write 5 variables" in capsys.readouterr().out
        assert not (tmp_path / "ck").exists()

    @pytest.mark.parametrize(
        ("target", "message"),
        [("out.npz", "ends with '.npz'"), ("", "is a directory")],
    )
    def test_bad_prefix(self, npz_file, tmp_path, capsys, target, message):
        """An npz name or a directory is not a checkpoint prefix."""
        assert load_params.main([str(npz_file), str(tmp_path / target)]) == 2
        assert message in capsys.readouterr().err

    def test_refuses_to_overwrite(self, npz_file, checkpoint, capsys):
        """An existing checkpoint is kept unless --overwrite is given."""
        before = _read_checkpoint(checkpoint)
        assert load_params.main([str(npz_file), str(checkpoint), "--include", "fc/b"]) == 2
        assert "exists: pass --overwrite" in capsys.readouterr().err
        assert sorted(_read_checkpoint(checkpoint)) == sorted(before)
        assert (
            load_params.main([str(npz_file), str(checkpoint), "--include", "fc/b", "--overwrite"])
            == 0
        )
        assert sorted(_read_checkpoint(checkpoint)) == ["fc/b"]


def tf_latest(directory) -> str:
    """The latest checkpoint of a directory, as TensorFlow itself reads the state file."""
    import tensorflow as tf

    return tf.train.latest_checkpoint(str(directory))
