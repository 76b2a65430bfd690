"""The main job: the digits demo runs as a user runs it, and writes what it says it writes."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
from example_modules import example_path, load_example

# The tests of this module share its runs: one worker runs them all.
pytestmark = [
    pytest.mark.xdist_group("test_demo"),
    pytest.mark.timeout(600),
]  # timeout: the module fixture trains the demo, up to 600 s on a loaded machine


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], str]:
    """One short run of ``examples/digits/train.py`` (2 epochs) in a fresh process."""
    logdir = str(tmp_path_factory.mktemp("demo") / "digits")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, str(example_path("digits")), "--logdir", logdir, "--epochs", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    return done, logdir


def run_demo_importtime(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the demo with `args` under ``python -X importtime`` (each import listed on stderr)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-X", "importtime", str(example_path("digits")), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def imported_tensorflow(importtime_stderr: str) -> bool:
    """Whether ``-X importtime``'s lines show TensorFlow imported."""
    return bool(re.search(r"^import time:.*\| tensorflow$", importtime_stderr, re.M))


@pytest.mark.procs
def test_bad_logdir_refused_before_tensorflow(tmp_path):
    """A --logdir that is a file is one error line, status 2, before TensorFlow loads."""
    path = tmp_path / "notes.txt"
    path.write_text("x")
    done = run_demo_importtime("--logdir", str(path))
    assert done.returncode == 2
    assert f"train.py: error: --logdir {path} is a file, not a folder" in done.stderr
    assert not imported_tensorflow(done.stderr)
    again = run_demo_importtime("--epochs", "0")
    assert "train.py: error: --epochs must be >= 1; got 0" in again.stderr
    assert not imported_tensorflow(again.stderr)


@pytest.mark.procs
@pytest.mark.slow
class TestDigitsDemo:
    """A 2-epoch run of the demo."""

    def test_succeeds_with_accuracy(self, demo_run):
        """The run exits 0 (test accuracy >= 95%, both exports agree) and prints both accuracies."""
        done, _ = demo_run
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        for split in ("validation", "test"):
            match = re.search(
                rf"^{split} accuracy: (0\.\d+|1\.0+) \((\d+)/360; [^)]*\)$", done.stdout, re.M
            )
            assert match is not None, (split, done.stdout[-2000:])
            assert float(match.group(1)) >= 0.95
            assert int(match.group(2)) == round(float(match.group(1)) * 360)
        assert "compact graph gives the same probabilities: True" in done.stdout

    def test_terminal_clean(self, demo_run):
        """stderr holds towerkit's own log lines and the progress bars, none of TensorFlow's."""
        done, _ = demo_run
        assert "absl::InitializeLog" not in done.stderr
        assert "oneDNN" not in done.stderr
        for noise in ("match no graph variable", "collection 'update_ops' is empty"):
            assert noise not in done.stderr

    def test_output_explains_itself(self, demo_run):
        """The image count from the shift augmentation, the chosen epoch, what the unused
        entries of the restored checkpoint are, one line per epoch and the variable table."""
        done, _ = demo_run
        assert re.search(
            r"^training on 5385 images: the 1077 training images and their copies shifted by one "
            r"pixel up, down, left and right \(5 x 1077\); 168 steps of 32 images per epoch$",
            done.stdout,
            re.M,
        ), done.stdout[:2000]
        assert re.search(r"^best validation error 0\.\d+, at epoch [12] of 2: ", done.stdout, re.M)
        assert re.search(r"chose the checkpoint: epoch [12]\)$", done.stdout, re.M)
        assert (
            "6 restored, 24 unused in the source (14 optimizer slots, 8 moving averages, "
            "2 others: global_step, learning_rate)"
        ) in done.stderr
        epochs = re.findall(r"\] epoch (\d)/2  \d+\.\d s  cross_entropy_loss ", done.stderr)
        assert epochs == ["1", "2"]
        assert "6 trainable variables, 29,066 parameters (113.5 KiB)" in done.stderr
        assert "\r" not in done.stderr, "no progress-bar frames in a pipe"

    def test_existing_logdir_names_the_flag(self, demo_run):
        """A second run without --overwrite fails at once (TensorFlow never imported) with the
        folder and the script's flags."""
        _, logdir = demo_run
        done = run_demo_importtime("--logdir", logdir, "--epochs", "1")
        assert done.returncode == 2
        assert f"train.py: error: {logdir} already holds a run: pass --overwrite" in done.stderr
        assert "--logdir DIR" in done.stderr
        assert not imported_tensorflow(done.stderr)
        assert done.stdout == ""

    def test_says_what_it_does(self, demo_run):
        """The first line comes before TensorFlow loads; each later stage is announced."""
        done, _ = demo_run
        lines = done.stdout.splitlines()
        assert lines[0] == "loading TensorFlow (10 to 40 s) ..."
        for stage in ("exporting the best model", "reloading the SavedModel", "plotting"):
            assert any(line.startswith(stage) for line in lines), stage

    def test_epoch_line_shows_total_cost(self, demo_run):
        """The epoch line shows total_cost, the cost the progress bar shows and training minimizes."""
        done, _ = demo_run
        assert len(re.findall(r"\] epoch \d/2  .* total_cost \d", done.stderr)) == 2

    def test_predictions_printed(self, demo_run):
        """Ten labels and ten predictions are printed, mostly equal."""
        done, _ = demo_run
        labels = re.search(r"label: +([\d ]+)$", done.stdout, re.M)
        predicted = re.search(r"predicted: +([\d ]+)$", done.stdout, re.M)
        assert labels is not None
        assert predicted is not None
        a, b = labels.group(1).split(), predicted.group(1).split()
        assert len(a) == len(b) == 10
        assert sum(x == y for x, y in zip(a, b)) >= 8

    def test_files_written(self, demo_run):
        """Checkpoints, the best model, statistics, events, both exports and the plot exist."""
        _, logdir = demo_run
        names = set(os.listdir(logdir))
        expected = {
            "checkpoint",
            "stats.json",
            "training_curves.png",
            "min-validation_error.tfmodel.index",
            "export",
        }
        assert expected <= names
        assert any(n.startswith("events.out.tfevents.") for n in names)
        assert os.path.isfile(os.path.join(logdir, "export", "digits.pb"))
        assert os.path.isfile(os.path.join(logdir, "export", "saved_model", "saved_model.pb"))

    def test_every_written_file_listed(self, demo_run):
        """The paths printed are the files on disk."""
        done, logdir = demo_run
        listed = set(re.findall(r"^  (\S+)  \(\d+ bytes\)$", done.stdout, re.M))
        on_disk = {
            os.path.relpath(os.path.join(root, f), logdir)
            for root, _, files in os.walk(logdir)
            for f in files
        }
        assert listed == on_disk

    def test_stats_and_plot(self, demo_run):
        """stats.json has one record per epoch with the statistics plotted in a valid PNG."""
        import json

        _, logdir = demo_run
        with open(os.path.join(logdir, "stats.json")) as f:
            records = json.load(f)
        assert [r["epoch_num"] for r in records] == [1, 2]
        for key in ("cross_entropy_loss", "train_error", "validation_error"):
            assert all(np.isfinite(r[key]) for r in records), key
        with open(os.path.join(logdir, "training_curves.png"), "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", head[16:24]) == (800, 600), "4 panels, 2x2, no empty cell"

    def test_saved_model_reloads_here(self, demo_run):
        """The SavedModel reloads in this process and classifies the validation split."""
        import tensorflow as tf

        _, logdir = demo_run
        demo = load_example("digits")
        _, _, (x_test, y_test) = demo.load_data()
        loaded = tf.saved_model.load(os.path.join(logdir, "export", "saved_model"))
        prob = loaded.signatures["prediction_pipeline"](image=tf.constant(x_test))["prob"].numpy()
        assert prob.shape == (360, 10)
        np.testing.assert_allclose(prob.sum(axis=1), 1.0, rtol=1e-5)
        assert (prob.argmax(axis=1) == y_test).mean() >= 0.95


@pytest.mark.procs
class TestDemoPieces:
    """The demo's data handling, without training."""

    def test_split_is_fixed_and_stratified(self):
        """The split is the same every time, 60/20/20, every digit in each part."""
        demo = load_example("digits")
        first, second = demo.load_data(), demo.load_data()
        for (xa, ya), (xb, yb) in zip(first, second):
            np.testing.assert_array_equal(xa, xb)
            np.testing.assert_array_equal(ya, yb)
        (x_train, y_train), (x_val, y_val), (x_test, y_test) = first
        assert (len(x_train), len(x_val), len(x_test)) == (1077, 360, 360)
        assert x_train.dtype == np.float32
        assert x_train.shape[1:] == (8, 8, 1)
        assert set(y_train) == set(y_val) == set(y_test) == set(range(10))
        assert x_train.min() >= 0.0
        assert x_train.max() <= 1.0

    def test_split_is_a_partition(self):
        """Train, validation and test together are the dataset, each image in exactly one part."""
        from sklearn.datasets import load_digits

        demo = load_example("digits")
        parts = demo.load_data()
        rows = sorted(x.tobytes() + bytes([int(y)]) for xs, ys in parts for x, y in zip(xs, ys))
        digits = load_digits()
        images = (digits.images / 16.0).astype(np.float32)[..., None]
        expected = sorted(x.tobytes() + bytes([int(y)]) for x, y in zip(images, digits.target))
        assert rows == expected

    def test_augment_shifts(self):
        """Augmentation adds four one-pixel shifts of every image, labels repeated."""
        demo = load_example("digits")
        x = np.random.default_rng(0).random((3, 8, 8, 1)).astype(np.float32)
        y = np.array([1, 2, 3])
        ax, ay = demo.augment(x, y)
        assert ax.shape == (15, 8, 8, 1)
        assert ay.tolist() == [1, 2, 3] * 5
        np.testing.assert_array_equal(ax[:3], x)
        np.testing.assert_array_equal(ax[3:6, 1:], x[:, :-1])
        assert not ax[3:6, 0].any()

    def test_bad_epochs(self, capsys):
        """--epochs 0 is refused before anything runs."""
        demo = load_example("digits")
        with pytest.raises(SystemExit) as exc:
            demo.main(["--epochs", "0"])
        assert exc.value.code == 2
        assert "--epochs must be >= 1" in capsys.readouterr().err


def test_nox_demo_keeps_overwrite():
    """`nox -s demo -- -v` adds -v to the defaults: --overwrite stays, so every run works."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "noxfile", example_path("digits").parents[2] / "noxfile.py"
    )
    noxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noxfile)
    assert noxfile.demo_args(["-v"]) == ["--logdir", "train_log/digits", "--overwrite", "-v"]
    assert noxfile.demo_args([]) == ["--logdir", "train_log/digits", "--overwrite"]


def _test_accuracy(precision: str, logdir: str) -> float:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, str(example_path("digits")), "--logdir", logdir, "--precision", precision],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    match = re.search(r"^test accuracy: (0\.\d+|1\.0+) ", done.stdout, re.M)
    assert match is not None, done.stdout[-2000:]
    return float(match.group(1))


@pytest.mark.procs
@pytest.mark.slow
def test_mixed_bfloat16_reaches_the_float32_accuracy(tmp_path):
    """``--precision mixed_bfloat16`` (the default 12 epochs) ends within 0.5 points of float32."""
    plain = _test_accuracy("float32", str(tmp_path / "f32"))
    mixed = _test_accuracy("mixed_bfloat16", str(tmp_path / "bf16"))
    assert mixed >= plain - 0.005, (mixed, plain)
