"""Programs in the users' style for the idioms of tensorpack's own examples and of programs
published on it: tensorpack 0.8-0.10's ModelDesc, TowerFuncWrapper, PrintData, decay=0,
string numbers, tf.layers, contrib's regularizers and block cells, a three-argument
name_scope, readers through TensorFlow 1's queue runners. Each converts with nothing by hand and trains 2 epochs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import prefork
import pytest
import tensorflow as tf

pytestmark = pytest.mark.xdist_group("test_migrate_idioms")

PROGRAMS = Path(__file__).parent / "tensorpack_programs"
SCRIPTS = ("old_release_gan.py", "tflayers_rnn.py", "queue_reader.py")


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """The programs migrated once by the command, in its own process."""
    out = tmp_path_factory.mktemp("idioms")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "towerkit.tools.migrate",
            *(str(PROGRAMS / s) for s in SCRIPTS),
            "--out",
            str(out / "programs"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return out / "programs", done


def train(directory: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return prefork.run([sys.executable, script, *args], cwd=directory, timeout=300, env=env)


def epochs_recorded(logdir: Path) -> list[int]:
    return [rec["epoch_num"] for rec in json.loads((logdir / "stats.json").read_text())]


@pytest.mark.procs
class TestIdioms:
    """Each program converts with nothing left by hand and trains 2 epochs."""

    def test_report(self, migrated):
        """The report names each new idiom's change at its line of the original."""
        _, done = migrated
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        gan, tfl = PROGRAMS / SCRIPTS[0], PROGRAMS / SCRIPTS[1]
        for line in [
            f"{gan}:10: changed: tensorpack.tfutils.tower.TowerFuncWrapper -> "
            "towerkit.towers.TowerFunc",
            f"{gan}:34: changed: tensorpack 0.8-0.10's ModelDesc._get_inputs -> inputs",
            f"{gan}:45: changed: tensorpack 0.8-0.10's ModelDesc._build_graph -> build_graph "
            "(its inputs come as *inputs); return self.cost added",
            f"{gan}:47: changed: self.training = ...is_training removed",
            f"{gan}:65: changed: tensorpack 0.8-0.10's ModelDesc._get_optimizer -> optimizer",
            f"{gan}:73: changed: get_inputs_desc() -> get_input_signature()",
            f"{gan}:91: changed: PrintData(df, ...) -> df",
            f"{tfl}:10: changed: tensorflow.contrib.rnn -> rnn (from towerkit.layers)",
            f"{tfl}:20: changed: tf.name_scope -> tf.compat.v1.name_scope",
            f"{tfl}:33: changed: tf.contrib.layers.l2_regularizer -> l2_regularizer",
            f"{tfl}:34: changed: tf.layers.conv2d -> tf_layers.conv2d (from towerkit.layers, no Keras)",
        ]:
            assert line in done.stdout, f"{line}\nnot in\n{done.stdout}"
        assert done.stdout.rstrip().endswith("0 left by hand")

    def test_old_release_gan(self, migrated):
        """tensorpack 0.9's GAN (TowerFuncWrapper, decay=0, PrintData) trains 2 epochs."""
        out, _ = migrated
        text = (out / SCRIPTS[0]).read_text()
        assert "from towerkit.towers import TowerContext, TowerFunc as TowerFuncWrapper" in text
        assert "def build_graph(self, *inputs):" in text
        assert "PrintData(" not in text
        done = train(out, SCRIPTS[0])
        assert done.returncode == 0, done.stderr[-3000:]
        assert "input names ['row']" in done.stdout
        logdir = out / "train_log" / "old_release_gan"
        assert epochs_recorded(logdir) == [1, 2]
        stats = json.loads((logdir / "stats.json").read_text())
        assert stats[-1]["learning_rate"] == pytest.approx(1e-3)  # ('1', '1e-3')
        assert {"d_loss", "g_loss"} <= set(stats[-1])

    def test_tflayers_rnn(self, migrated):
        """tf.layers, contrib's l2 and block cells, string bounds: TensorFlow 1's variable names."""
        out, _ = migrated
        done = train(out, SCRIPTS[1], "--epochs", "2", "--steps", "5")
        assert done.returncode == 0, done.stderr[-3000:]
        logdir = out / "train_log" / "tflayers_rnn"
        assert epochs_recorded(logdir) == [1, 2]
        stats = json.loads((logdir / "stats.json").read_text())
        assert stats[-1]["global_step"] == 10
        assert stats[-1]["learning_rate"] == pytest.approx(0.02)
        names = {n for n, _ in tf.train.list_variables(str(logdir))}
        assert {
            "conv0/kernel",
            "conv0/bias",
            "bn0/moving_mean",
            "bn0/gamma",
            "fc0/kernel",
            "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel",
            "rnn/multi_rnn_cell/cell_1/lstm_cell/bias",
        } <= names

    def test_queue_reader(self, migrated):
        """PTB-LSTM's reader: range_input_producer and train.batch queues feed training and
        inference (the trainer starts the graph's queue runners); 2 epochs, in order."""
        out, _ = migrated
        text = (out / SCRIPTS[2]).read_text()
        assert "tf.compat.v1.train.range_input_producer(" in text
        assert "tf.compat.v1.train.batch(" in text
        done = train(out, SCRIPTS[2])
        assert done.returncode == 0, done.stderr[-3000:]
        logdir = out / "train_log" / "queue_reader"
        assert epochs_recorded(logdir) == [1, 2]
        stats = json.loads((logdir / "stats.json").read_text())
        assert stats[-1]["global_step"] == 12
        assert {"cost", "validation_cost", "batch/fraction_of_16_full"} <= set(stats[-1])
