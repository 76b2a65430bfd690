"""towerkit-migrate on programs written in tensorpack's style, then trained for 2 short epochs.

The programs under ``tensorpack_programs/`` are kept in their tensorpack form; their
DataFlows are classes of their own (``reset_state``, ``__iter__``, ``__len__``), so
neither the programs nor their migrated copies need tensorpack installed.
"""

from __future__ import annotations

import filecmp
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import prefork
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.tools import migrate
from towerkit.tools._migrate_cst import migrate_source
from towerkit.tools._migrate_names import _LIB_NAMES, LIB_OF, home_of

# The tests of this module share its runs: one worker runs them all.
pytestmark = pytest.mark.xdist_group("test_migrate")

PROGRAMS = Path(__file__).parent / "tensorpack_programs"


def run_migrate(capsys, *args):
    """Run the command in this process: (status, stdout, stderr)."""
    status = migrate.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """Every program migrated once by the installed command, in its own process."""
    out = tmp_path_factory.mktemp("migrated") / "programs"
    done = subprocess.run(
        [sys.executable, "-m", "towerkit.tools.migrate", str(PROGRAMS), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out, done


def train(directory: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    return prefork.run([sys.executable, script, *args], cwd=directory, timeout=300, env=env)


def epochs_recorded(logdir: Path) -> list[int]:
    return [rec["epoch_num"] for rec in json.loads((logdir / "stats.json").read_text())]


def image_tags(logdir: Path) -> set[str]:
    """The tags of the image summaries in the run's event files."""
    tags = set()
    for path in logdir.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags.update(v.tag for v in event.summary.value if v.HasField("image"))
    return tags


@pytest.mark.procs
class TestPrograms:
    """Each program converts with nothing left by hand and trains 2 epochs unchanged."""

    def test_report(self, migrated):
        out, done = migrated
        assert done.returncode == 0, done.stderr[-3000:]
        report = done.stdout
        assert report.rstrip().endswith("29 file(s), 405 change(s), 0 left by hand"), report[-500:]
        train_py = PROGRAMS / "convnet" / "train.py"
        expected = [
            f"{train_py}:9: changed: tensorpack.input_source.QueueInput -> towerkit.trainers.IterableInput",
            f"{train_py}:25: changed: tf.nn.in_top_k: positional arguments named (predictions, targets, k)",
            f"{train_py}:35: changed: TrainConfig(...): logdir='train_log/train'",
            f"{PROGRAMS / 'gan.py'}:7: changed: from tensorpack import * -> the names it used",
            f"{PROGRAMS / 'resnet.py'}:64: changed: TrainConfig(...): logdir='train_log/resnet', "
            "logdir_action='keep'",
            f"{PROGRAMS / 'summaries.py'}:26: changed: tf.summary.scalar -> tf.compat.v1.summary.scalar",
            f"{PROGRAMS / 'convnet' / 'nets.py'}:5: changed: tensorpack.models.Dropout -> "
            "towerkit.layers.Dropout",
            f"{PROGRAMS / 'summaries.py'}:36: changed: tp.TrainConfig(...): "
            "logdir='train_log/summaries:summaries'",
            f"{PROGRAMS / 'gan_zoo' / 'info_wgan.py'}:52: changed: tf.distributions.Categorical -> "
            "tf.compat.v1.distributions.Categorical (TensorFlow's tf_upgrade_v2 rename)",
        ]
        ctc = PROGRAMS / "ctc_phonemes.py"
        expected += [
            f"{ctc}:13: changed: tf.contrib.rnn alias removed: rnn is imported",
            f"{ctc}:81: changed: tf.nn.rnn_cell.LSTMCell -> rnn.LSTMCell (from towerkit.layers)",
            f"{ctc}:91: changed: tf.nn.ctc_loss -> tf.compat.v1.nn.ctc_loss (TensorFlow's "
            "tf_upgrade_v2 rename)",
        ]
        det = PROGRAMS / "detection"
        expected += [
            f"{det / 'train.py'}:37: changed: tf.py_func -> tf.compat.v1.py_func (TensorFlow's "
            "tf_upgrade_v2 rename)",
            f"{det / 'train.py'}:96: changed: TrainConfig(...): logdir=args.logdir, "
            "logdir_action='overwrite'",
            f"{det / 'model.py'}:11: changed: tensorpack.tfutils.scope_utils.under_name_scope -> "
            "towerkit.towers.under_name_scope",
        ]
        for line in expected:
            assert line in report, line
        assert f"{ctc}:81: changed: tf.nn.rnn_cell -> rnn" not in report  # part of LSTMCell's
        assert "\nrnn = " not in (out / "ctc_phonemes.py").read_text()
        # a renamed prefix (tf.distributions) is part of the whole name's change, not its own
        assert (
            f"{PROGRAMS / 'gan_zoo' / 'info_wgan.py'}:52: changed: tf.distributions ->"
            not in report
        )
        # tf.space_to_batch is TensorFlow 1's too (other arguments): the _nd name stays
        assert "tf.space_to_batch_nd(a, [2, 2]" in (out / "stn_embeddings.py").read_text()
        for path in out.rglob("*.py"):
            lines = path.read_text().splitlines()
            assert not [x for x in lines if x.startswith(("import tensorpack", "from tensorpack"))]

    def test_convnet_tree(self, migrated):
        """A shuffling validation DataFlow, self.training, helper modules converted with it."""
        out, _ = migrated
        done = train(out / "convnet", "train.py")
        assert done.returncode == 0, done.stderr[-3000:]
        logdir = out / "convnet" / "train_log" / "train"
        assert epochs_recorded(logdir) == [1, 2]
        assert "validation_error" in (logdir / "stats.json").read_text()
        assert (
            "from towerkit.layers import Dropout, FullyConnected"
            in (out / "convnet" / "nets.py").read_text()
        )

    def test_gan(self, migrated):
        """A star import, a trainer of its own at the top level, a SimpleDatasetPredictor."""
        out, _ = migrated
        done = train(out, "gan.py")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "samples (300, 2)" in done.stdout
        assert epochs_recorded(out / "train_log" / "gan") == [1, 2]

    @pytest.mark.parametrize(
        "args", [["--towers", "2"], ["--separate"]], ids=["towers", "separate"]
    )
    def test_gan_zoo_tree(self, migrated, args):
        """GAN.py beside the program (a TowerTrainer on several towers through
        DataParallelBuilder, one alternating at a ratio), ``from GAN import ...``, tfutils
        modules imported as modules, a balance variable under control_dependencies, a
        scheduled learning-rate variable, argscope'd BatchNorm and Dropout, LinearWrap."""
        out, _ = migrated
        tree = out / "gan_zoo"
        logdir = tree / "train_log" / "cond_gan"
        shutil.rmtree(logdir, ignore_errors=True)
        done = train(tree, "cond_gan.py", *args)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "samples (6, 8, 8, 1) range True True" in done.stdout
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["epoch_num"] for rec in stats] == [1, 2]
        assert [rec["learning_rate"] for rec in stats] == pytest.approx([2e-3, 1e-3])
        assert 0 < stats[0]["balance/kt"] < stats[1]["balance/kt"]
        assert "d_loss_balanced" in stats[1]
        assert "GAN_loss/discrim/accuracy_real" in stats[1]
        assert sorted(p.name for p in logdir.glob("model-*.index")) == [
            f"model-{stats[0]['global_step']}.index",
            f"model-{stats[1]['global_step']}.index",
        ]

    def test_imagenet_style_tree(self, migrated):
        """tfv1 as tf, star imports of tensorpack.callbacks and tensorpack.models, a layer
        of the program's own (layer_register), under_name_scope, argscope over several
        layers, LinearWrap's .tf calls, the top-k errors of a shared ImageNetModel, two
        towers, and --flops printing describe_trainable_vars' table."""
        out, _ = migrated
        tree = out / "imagenet_style"
        done = train(tree, "shufflenet.py")
        assert done.returncode == 0, done.stderr[-3000:]
        logdir = tree / "train_log" / "shufflenet-g2"
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["epoch_num"] for rec in stats] == [1, 2]
        assert [rec["learning_rate"] for rec in stats] == pytest.approx([0.05, 0.01])
        for key in (
            "val-error-top1",
            "val-error-top2",
            "train-error-top1",
            "xentropy-loss",
            "validation_xentropy-loss",
            "param-summary/group1/block0/dconv/W-rms",
        ):
            assert key in stats[1], key
        assert not [k for k in stats[1] if k.startswith("tower") or k.endswith("-summary")]
        flops = train(tree, "shufflenet.py", "--flops")
        assert flops.returncode == 0, flops.stderr[-3000:]
        assert "group1/block1/dconv/W" in flops.stderr
        assert "23 trainable variables, 548 parameters" in flops.stderr

    def test_resnet_on_two_towers(self, migrated):
        out, _ = migrated
        done = train(out, "resnet.py")
        assert done.returncode == 0, done.stderr[-3000:]
        stats = (out / "train_log" / "resnet" / "stats.json").read_text()
        assert "wd_cost" in stats
        assert epochs_recorded(out / "train_log" / "resnet") == [1, 2]

    def test_summaries_in_build_graph(self, migrated):
        out, _ = migrated
        done = train(out, "summaries.py")
        assert done.returncode == 0, done.stderr[-3000:]
        stats = (out / "train_log" / "summaries:summaries" / "stats.json").read_text()
        assert "cost_in_graph" in stats
        assert "validation_cost" in stats

    def test_boilerplate_load_set_after_the_config(self, migrated, tmp_path):
        """get_config(), then ``config.session_init = SmartInit(args.load)`` as --load asks."""
        out, _ = migrated
        done = train(out, "boilerplate.py")
        assert done.returncode == 0, done.stderr[-3000:]
        logdir = out / "train_log" / "boilerplate"
        assert epochs_recorded(logdir) == [1, 2]
        assert (logdir / "min-validation_cost.tfmodel.index").exists()
        first = shutil.copytree(logdir, tmp_path / "first")
        ckpt = str(first / "model-16")
        want = float(np.sum(tf.train.load_variable(ckpt, "fc/W")))
        assert f"weights before training: {want:.6f}" not in done.stdout
        done = train(out, "boilerplate.py", "--load", ckpt, "--epochs", "1")
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"weights before training: {want:.6f}" in done.stdout
        assert epochs_recorded(logdir) == [1]  # action='d': a new run in a new directory

    def test_hed(self, migrated):
        """Side outputs, float 0/1 edge maps into an int32 input, scaled gradients."""
        out, _ = migrated
        done = train(out, "hed.py")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "edge map (4, 16, 16, 1)" in done.stdout
        last = json.loads((out / "train_log" / "hed" / "stats.json").read_text())[-1]
        assert {"xentropy1", "xentropy3", "wd_cost", "train_error"} <= set(last), last

    def test_dorefa_digits(self, migrated):
        """tf.custom_gradient quantizers, remap_variables, LinearWrap.apply, the tower
        context, add_param_summary, conv weights and activations as image summaries."""
        out, _ = migrated
        done = train(out, "dorefa_digits.py")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Quantizing weight conv1/W" in done.stderr
        assert "Quantizing weight conv0/W" not in done.stderr
        logdir = out / "train_log" / "dorefa_digits"
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["epoch_num"] for rec in stats] == [1, 2]
        assert [rec["lr"] for rec in stats] == pytest.approx([1e-2, 5e-3])
        for key in ("validation_error", "train_error", "param-summary/conv1/W-rms", "wd_cost"):
            assert key in stats[1], key
        tags = image_tags(logdir)
        assert [t for t in tags if "weights_conv0" in t], tags
        assert [t for t in tags if "activations_conv0" in t], tags

    def test_stn_embeddings(self, migrated):
        """A layer of its own over a list of inputs, a reused embedding, tf.scatter_sub,
        freeze_variables, tf.losses' Reduction, a registered gradient, extra_callbacks."""
        out, _ = migrated
        done = train(out, "stn_embeddings.py")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "embeddings (12, 3) saliency (12, 8, 8, 1) True" in done.stdout
        logdir = out / "train_log" / "stn_embeddings"
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["learning_rate"] for rec in stats] == pytest.approx([5e-3, 1e-3])
        for key in (
            "loss/contrastive",
            "loss/pair_accuracy",
            "center_loss",
            "perceptual_loss",
            "STN/fc/W-grad-rms",
        ):
            assert key in stats[1], key
        assert "features/conv/W-grad-rms" not in stats[1]  # frozen: no gradient to summarize
        ckpt = tf.train.latest_checkpoint(str(logdir))
        assert np.any(tf.train.load_variable(ckpt, "centers") != 0)  # moved by tf.scatter_sub

    @pytest.mark.parametrize("critic", ["clip", "penalty"])
    def test_info_wgan(self, migrated, critic):
        """tf.distributions codes, a critic clipped by a callback of its own or penalized
        through tf.gradients, a VariableAssignmentOptimizer, a piecewise-constant rate,
        SeparateGANTrainer(g_period=2), auto_set_dir(name=...)."""
        out, _ = migrated
        tree = out / "gan_zoo"
        done = train(tree, "info_wgan.py", "--critic", critic)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "samples (4, 8, 8, 1) range True True" in done.stdout
        logdir = tree / "train_log" / f"info_wgan:{critic}"
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["lr"] for rec in stats] == pytest.approx([2e-3, 1e-3])
        assert "mutual_information/mutual_information" in stats[1]
        assert ("wgan/gradient_penalty" in stats[1]) == (critic == "penalty")
        ckpt = tf.train.latest_checkpoint(str(logdir))
        if critic == "clip":
            assert np.abs(tf.train.load_variable(ckpt, "discrim/conv1/W")).max() <= 0.05 + 1e-7
        else:
            assert "Clip discrim/ln1/gamma" in done.stderr
            assert tf.train.load_variable(ckpt, "discrim/ln1/gamma").min() >= 0.0

    def test_image2image(self, migrated):
        """A U-Net of ConcatWith and Conv2DTranspose, InstanceNorm, reflect padding, an
        LSGAN with cycle losses, and a callback putting a predictor's images to the monitors."""
        out, _ = migrated
        tree = out / "gan_zoo"
        done = train(tree, "image2image.py", "--test-batches", "1")
        assert done.returncode == 0, done.stderr[-3000:]
        logdir = tree / "train_log" / "image2image"
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["learning_rate"] for rec in stats] == pytest.approx([2e-3, 1e-3])
        assert {"recon_loss", "LossA/d_loss", "LossB/g_loss", "G_loss_total"} <= set(stats[1])
        tags = image_tags(logdir)
        assert {"A_recon/A-AB-ABA/image", "testA-0/0", "testB-0/3"} <= tags, tags
        assert not [t for t in tags if t.startswith("testA-1")]

    def test_ctc_phonemes(self, migrated):
        """Sparse labels as three inputs into a tf.SparseTensor, a bidirectional LSTM of
        TensorFlow 1 cells (``rnn = tf.contrib.rnn``), CTC loss, greedy and beam-search
        decoding, an edit-distance error as an inference stat, GlobalNormClip."""
        out, _ = migrated
        done = train(out, "ctc_phonemes.py")
        assert done.returncode == 0, done.stderr[-3000:]
        logdir = out / "train_log" / "ctc_phonemes"
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["epoch_num"] for rec in stats] == [1, 2]
        assert [rec["learning_rate"] for rec in stats] == pytest.approx([2e-2, 2e-2])
        for key in ("error", "cost", "birnn/fw/lstm_cell/kernel-grad-rms", "fc/W-grad-rms"):
            assert key in stats[1], key
        assert 0 <= stats[1]["validation_error"] < stats[0]["validation_error"] <= 1
        assert stats[1]["cost"] < stats[0]["cost"]
        assert tf.train.latest_checkpoint(str(logdir)).endswith("model-80")

    def test_dqn_tree(self, migrated):
        """An experience replay that is the DataFlow and a Callback (its player asks the
        trainer's predictor from the feeding thread), a target network refreshed by RunOp
        every 10 steps, exploration annealed through ObjAttrParam, tf.losses.huber_loss,
        an evaluator callback; then --task play through an OfflinePredictor."""
        out, _ = migrated
        tree = out / "dqn"
        done = train(tree, "DQN.py")
        assert done.returncode == 0, done.stderr[-3000:]
        # before training (RunOp's run_before), then at steps 10, 20, 30, 40 and 50
        assert done.stderr.count("running RunOp/update_target_network") == 6
        assert "Target Network Update: target/fct/W:0 <- fct/W:0" in done.stderr
        logdir = tree / "train_log" / "DQN-Double"
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["exploration"] for rec in stats] == pytest.approx([0.6, 0.2])
        for key in ("expreplay/mean_score", "mean_score", "predict_reward", "huber_loss/value"):
            assert key in stats[1], key
        assert "param-summary/fct/W-rms" in stats[1]
        # the target refreshed at step 50 (so equal in the last checkpoint), not at 25
        for step, same in ((25, False), (50, True)):
            ckpt = str(logdir / f"model-{step}")
            online = tf.train.load_variable(ckpt, "fct/W")
            assert np.array_equal(online, tf.train.load_variable(ckpt, "target/fct/W")) == same
        played = train(tree, "DQN.py", "--task", "play", "--load", str(logdir))
        assert played.returncode == 0, played.stderr[-3000:]
        assert "played 5 episodes, best score" in played.stdout

    def test_dynamic_filter(self, migrated):
        """A layer of its own over a fixed batch (tf.unstack, one conv per image), the same
        filtering by tf.extract_image_patches, ``nl=``, images put to the monitors."""
        out, _ = migrated
        done = train(out, "dynamic_filter.py")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "filtered (4, 12, 12, 1) same as patches True" in done.stdout
        logdir = out / "train_log" / "dynamic_filter"
        stats = json.loads((logdir / "stats.json").read_text())
        assert stats[1]["cost"] < stats[0]["cost"]
        tags = image_tags(logdir)
        assert {"filter_export", "pred_gt_filters/image/0", "pred_gt_images/image/1"} <= tags

    def test_mixup(self, migrated):
        """Soft one-hot labels mixed by np.random.beta, softmax cross-entropy on them,
        ClassificationError on the argmax, BNReLU activations, the tfv1 alias."""
        out, _ = migrated
        done = train(out, "mixup.py", "--mixup")
        assert done.returncode == 0, done.stderr[-3000:]
        stats = json.loads((out / "train_log" / "mixup-mixup" / "stats.json").read_text())
        assert [rec["learning_rate"] for rec in stats] == pytest.approx([0.05, 0.05])
        for key in ("train_error", "cross_entropy_loss", "validation_cost", "validation_error"):
            assert key in stats[1], key
        assert stats[1]["validation_error"] < 0.5

    def test_detection_tree(self, migrated):
        """FasterRCNN's idioms: a config module the others import, anchors labelled in
        numpy through tf.py_func, proposals by tf.nn.top_k and non_max_suppression, RoI
        features by crop_and_resize, a recall of its own from an Inferencer; then a run
        that starts from an npz of the first (at learning rate 0, so it keeps it)."""
        out, _ = migrated
        tree = out / "detection"
        assert "from config import config as cfg" in (tree / "model.py").read_text()
        done = train(tree, "train.py")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "detected (8, 4) (8,) gt" in done.stdout
        logdir = tree / "train_log" / "detection"
        stats = json.loads((logdir / "stats.json").read_text())
        assert [rec["epoch_num"] for rec in stats] == [1, 2]
        for key in ("recall", "total_cost", "rpn_losses/num_pos", "fastrcnn_label_loss"):
            assert key in stats[1], key
        assert all(0 <= rec["recall"] <= 1 for rec in stats)
        checkpoint = tf.train.latest_checkpoint(str(logdir))
        assert checkpoint.endswith("model-10")
        npz = dict(np.load(logdir / "model.npz"))
        layers = ("conv0", "conv1", "rpn/conv0", "rpn/class", "rpn/box", "fastrcnn/fc")
        layers += ("fastrcnn/class", "fastrcnn/box")
        assert set(npz) == {f"{layer}/{v}" for layer in layers for v in "Wb"}
        for name, value in npz.items():
            assert np.array_equal(tf.train.load_variable(checkpoint, name), value), name
        loaded = train(
            tree,
            "train.py",
            "--load",
            str(logdir / "model.npz"),
            "--lr",
            "0",
            "--logdir",
            "train_log/loaded",
        )
        assert loaded.returncode == 0, loaded.stderr[-3000:]
        second = tf.train.latest_checkpoint(str(tree / "train_log" / "loaded"))
        assert second.endswith("model-10")
        for name, value in npz.items():
            assert np.array_equal(tf.train.load_variable(second, name), value), name

    def test_detection_memoized_stays_on_tensorpack(self, tmp_path, capsys):
        """FasterRCNN memoizes its anchors with tensorpack.utils.argtools.memoized: the
        command keeps that import on tensorpack and says so (the program above uses
        functools.lru_cache, as tensorpack is not installed here)."""
        source = tmp_path / "anchors.py"
        kept = "from tensorpack.utils.argtools import memoized"
        model = (PROGRAMS / "detection" / "model.py").read_text()
        model = model.replace("import functools", kept)
        source.write_text(model.replace("@functools.lru_cache(maxsize=None)", "@memoized"))
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 1
        assert source.read_text().splitlines()[2] == kept
        note = "by hand: tensorpack.utils.argtools stay on tensorpack: install it"
        assert f"{source}:3: {note}" in report, report
        migrated_text = (tmp_path / "out" / "anchors.py").read_text()
        assert kept in migrated_text
        assert "from towerkit.layers import Conv2D, FullyConnected" in migrated_text

    def test_idempotent(self, migrated, tmp_path, capsys):
        """Migrating the migrated programs changes nothing."""
        out, _ = migrated
        status, report, _ = run_migrate(capsys, out, "--out", tmp_path / "again")
        assert status == 0
        assert report.rstrip().endswith("0 change(s), 0 left by hand"), report
        for path in out.rglob("*.py"):
            assert filecmp.cmp(path, tmp_path / "again" / path.relative_to(out), shallow=False)


@pytest.mark.procs
class TestCommand:
    """Usage errors, sources that do not parse, output directories, in-place rewrites."""

    def test_syntax_error(self, tmp_path, capsys):
        tree = tmp_path / "src"
        shutil.copytree(PROGRAMS / "convnet", tree)
        (tree / "broken.py").write_text("from tensorpack import ModelDesc\n\ndef f(:\n    pass\n")
        status, out, err = run_migrate(capsys, tree, "--out", tmp_path / "out")
        assert status == 2
        assert err.startswith(f"towerkit-migrate: error: {tree / 'broken.py'}:3:")
        assert "invalid syntax" in err
        assert not (tmp_path / "out").exists()
        assert out == ""

    @pytest.mark.parametrize("terms", [3000, 100_000])
    def test_too_deep_to_parse(self, tmp_path, terms):
        """A 3,000-term expression (CPython cannot compile it): status 2, one line, no
        traceback, nothing written; a process as the user runs it."""
        tree = tmp_path / "src"
        tree.mkdir()
        (tree / "ok.py").write_text("from tensorpack import ModelDesc\n")
        deep = tree / "deep.py"
        deep.write_text("import tensorflow as tf\nx = " + " + ".join(["1"] * terms) + "\n")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        cmd = [
            sys.executable,
            "-m",
            "towerkit.tools.migrate",
            str(tree),
            "--out",
            str(tmp_path / "out"),
        ]
        proc = prefork.run(cmd, timeout=300, env=env)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        assert (
            f"towerkit-migrate: error: {deep}: cannot be parsed: it nests too deeply" in proc.stderr
        )
        assert not (tmp_path / "out").exists()

    def test_existing_output_refused(self, tmp_path, capsys):
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "keep.txt").write_text("mine")
        source = PROGRAMS / "convnet" / "nets.py"
        status, _, err = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 2
        assert "exists: pass --overwrite" in err
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["keep.txt"]
        status, _, _ = run_migrate(capsys, source, "--out", tmp_path / "out", "--overwrite")
        assert status == 0
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["keep.txt", "nets.py"]

    def test_in_place(self, tmp_path, capsys):
        source = tmp_path / "nets.py"
        shutil.copy(PROGRAMS / "convnet" / "nets.py", source)
        status, report, _ = run_migrate(capsys, source, "--in-place")
        assert status == 0
        assert "3 change(s)" in report
        assert "from towerkit.towers import argscope" in source.read_text()
        assert "# only while training" in source.read_text(), "comments survive"
        status, report, _ = run_migrate(capsys, source, "--in-place")
        assert "0 change(s)" in report

    def test_left_by_hand(self, tmp_path, capsys):
        """What the command cannot convert is reported with file, line and the edit; status 1."""
        source = tmp_path / "prog.py"
        source.write_text(
            "import tensorflow as tf\n"
            "from tensorpack import MultiThreadAsyncPredictor\n"
            "from tensorpack.utils import logger\n"
            "\n"
            "def where():\n"
            "    return logger.get_logger_dir()\n"
            "\n"
            "x = tf.contrib.learn.datasets\n"
            "config = TrainConfig(data=tf.data.Dataset.range(3), max_epoch=1)\n"
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 1
        assert f"{source}:2: by hand: MultiThreadAsyncPredictor (from tensorpack)" in report
        assert f"{source}:6: by hand: logger.get_logger_dir(): use trainer.logdir" in report
        assert f"{source}:8: by hand: tf.contrib.learn: tf.contrib is gone" in report
        assert f"{source}:9: by hand: TrainConfig(data=tf.data.Dataset.range(3)...)" in report
        assert report.rstrip().endswith("4 left by hand")

    def test_usage(self, tmp_path, capsys):
        with pytest.raises(SystemExit) as info:
            migrate.main([str(PROGRAMS)])
        assert info.value.code == 2
        capsys.readouterr()
        status, _, err = run_migrate(capsys, tmp_path / "nothing.py", "--out", tmp_path / "o")
        assert status == 2
        assert "no such file or directory" in err


class TestNames:
    """The table of homes is the libs' public names."""

    @pytest.mark.parametrize("lib", sorted(_LIB_NAMES))
    def test_table_is_the_libs_all(self, lib):
        module = importlib.import_module(f"towerkit.{lib}")
        public = set(module.__all__) - {"__version__"}
        if lib == "trainers":
            public.discard("StopTraining")  # its home is callbacks
        assert set(_LIB_NAMES[lib].split()) == public

    @given(st.sampled_from(sorted(LIB_OF)))
    def test_home_of_towerkit_names(self, name):
        assert home_of(name) == f"towerkit.{LIB_OF[name]}"
        assert home_of(name, "tensorpack.dataflow") == "tensorpack.dataflow"

    @settings(max_examples=40, deadline=None)
    @given(
        st.lists(st.sampled_from(sorted(LIB_OF)), min_size=1, max_size=6, unique=True),
        st.sampled_from(["tensorpack", "tensorpack.callbacks", "tensorpack.tfutils"]),
    )
    def test_imports_migrate_once(self, names, module):
        """Any import of towerkit-held names moves to towerkit; migrating again changes nothing."""
        source = f"from {module} import {', '.join(names)}\n\nUSED = [{', '.join(names)}]\n"
        once = migrate_source(source, "prog")
        assert "tensorpack" not in once.source
        for name in names:
            assert f"from towerkit.{LIB_OF[name]} import " in once.source
        twice = migrate_source(once.source, "prog")
        assert twice.source == once.source
        assert not twice.changed


class TestPlanOutputs:
    """`plan_outputs`: a tree's files keep their relative paths under the output directory."""

    @settings(max_examples=30, deadline=None)
    @given(
        st.lists(
            st.sampled_from(["a.py", "b/c.py", "b/d/e.txt", "f/g.py", "__pycache__/x.pyc"]),
            min_size=1,
            unique=True,
        )
    )
    def test_tree_mirrored(self, files):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "src"
            for name in files:
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                (src / name).write_text("")
            out = Path(tmp) / "out"
            pairs = migrate.plan_outputs([src], out)
            kept = sorted(f for f in files if not f.startswith("__pycache__"))
            assert sorted(str(s.relative_to(src)) for s, _ in pairs) == kept
            assert all(d == out / s.relative_to(src) for s, d in pairs)
            assert all(s == d for s, d in migrate.plan_outputs([src], None))
            two = migrate.plan_outputs([src, src / "b"], out)
            assert all(d.is_relative_to(out / "src") or d.is_relative_to(out / "b") for _, d in two)
