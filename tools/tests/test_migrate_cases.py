"""towerkit-migrate on what tensorpack users write: ordinary TensorFlow 1 calls, imports that
stay on tensorpack, modules imported as modules, the logger, and the faults a user meets
(file names, encodings, symlinks, output directories); each with its exit status."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import towerkit.tools._migrate_cst as migrate_cst
from towerkit.tools import migrate
from towerkit.tools._migrate_cst import migrate_source
from towerkit.tools._migrate_syntax import keywords_for_positions
from towerkit.tools._migrate_tf import load_rules

INSTALL = "pip install tensorpack==0.11"


def run_migrate(capsys, *args):
    """Run the command in this process: (status, stdout, stderr)."""
    status = migrate.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def assert_lines(text: str, *lines: str) -> None:
    """Each of `lines` is in `text` (a report or a converted source), named when missing."""
    missing = [line for line in lines if line not in text]
    assert not missing, f"missing {missing} in:\n{text}"


def run_program(directory: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run a converted program in a fresh interpreter, in its directory, TensorFlow quiet."""
    return subprocess.run(
        [sys.executable, script],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        check=False,
    )


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


ORDINARY_CALLS = """\
import tensorflow as tf


def tower(x, w, ids, cost):
    a = tf.argmax(x, 1)
    b = tf.reduce_mean(x, 1)
    c = tf.pad(x, [[0, 0], [1, 1]])
    d = tf.transpose(x, [1, 0])
    e = tf.nn.embedding_lookup(w, ids)
    g = tf.gradients(cost, [w])
    return a, b, c, d, e, g
"""


class TestCalls:
    """The reorder table's fixed positions (None) keep their arguments positional."""

    def test_ordinary_calls_unchanged(self, tmp_path, capsys):
        source = write(tmp_path / "src" / "tower.py", ORDINARY_CALLS)
        status, report, err = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert (status, err) == (0, "")
        assert report.rstrip().endswith("1 file(s), 0 change(s), 0 left by hand")
        assert (tmp_path / "out" / "tower.py").read_text() == ORDINARY_CALLS

    def test_moved_positions_become_keywords(self):
        done = migrate_source(
            "import tensorflow as tf\n"
            "y = tf.nn.conv2d(x, w, [1, 1, 1, 1], 'SAME')\n"
            "i = tf.argmax(x, 1, 'am', None)\n",
            "prog",
        )
        assert "tf.nn.conv2d(x, filters=w, strides=[1, 1, 1, 1], padding='SAME')" in done.source
        assert "tf.argmax(x, 1, name='am', axis=None)" in done.source, "then renamed"

    def test_renamed_prefix_is_one_change(self):
        """tf.distributions.Normal: the whole name moves; tf.distributions is not a 2nd change."""
        done = migrate_source(
            "import tensorflow as tf\nd = tf.distributions.Normal(loc=0.0, scale=1.0)\n", "prog"
        )
        assert "d = tf.compat.v1.distributions.Normal(loc=0.0, scale=1.0)" in done.source
        assert [n.text.split(" (")[0] for n in done.notes] == [
            "tf.distributions.Normal -> tf.compat.v1.distributions.Normal"
        ]

    def test_cell_of_a_cell_module_is_one_change(self):
        """tf.nn.rnn_cell.LSTMCell: one change, not one more for tf.nn.rnn_cell."""
        done = migrate_source("import tensorflow as tf\nc = tf.nn.rnn_cell.LSTMCell(4)\n", "p")
        assert "c = rnn.LSTMCell(4)" in done.source
        assert [n.text for n in done.notes] == [
            "tf.nn.rnn_cell.LSTMCell -> rnn.LSTMCell (from towerkit.layers)"
        ]

    @pytest.mark.parametrize("module", ["tf.contrib.rnn", "tf.nn.rnn_cell"])
    def test_rnn_module_alias_removed(self, module, tmp_path):
        """``rnn = tf.contrib.rnn`` (CTC-TIMIT) goes: the added import binds ``rnn``; the
        cells built through it run. Another name for the module is kept, pointing at rnn."""
        source = (
            f"import tensorflow as tf\n\nrnn = {module}\ncells = {module}\n\n\n"
            "def build(x):\n"
            "    cell = rnn.MultiRNNCell([rnn.LSTMCell(3), cells.GRUCell(2)])\n"
            "    return tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)[0]\n"
        )
        done = migrate_source(source, "p")
        assert done.source.startswith(
            "import tensorflow as tf\nfrom towerkit.layers import rnn\ncells = rnn\n"
        )
        assert [n.text for n in done.notes if n.line == 3] == [
            f"{module} alias removed: rnn is imported"
        ]
        assert not [n for n in done.notes if n.manual]
        assert migrate_source(done.source, "p").source == done.source
        import tensorflow as tf

        namespace: dict[str, object] = {}
        exec(compile(done.source, str(tmp_path / "p.py"), "exec"), namespace)
        with tf.Graph().as_default():
            x = tf.compat.v1.placeholder(tf.float32, [2, 5, 3])
            y = namespace["build"](x)  # type: ignore[operator]
        assert y.shape.as_list() == [2, 5, 2]

    def test_a_variable_named_rnn_is_kept(self):
        """Only the alias of a cell module goes; ``rnn = build()`` stays."""
        source = "import tensorflow as tf\nrnn = tf.nn.relu\nout = rnn(1.0)\n"
        assert migrate_source(source, "p").source == source

    @pytest.mark.parametrize(
        ("call", "converted"),
        [
            # TensorFlow 2's space_to_batch is TensorFlow 1's space_to_batch_nd, and
            # TensorFlow 1 has a space_to_batch of its own with other arguments
            ("tf.space_to_batch_nd(x, [2, 2], p)", "tf.space_to_batch_nd(x, [2, 2], p)"),
            ("tf.batch_to_space_nd(x, [2, 2], c)", "tf.compat.v1.batch_to_space_nd(x, [2, 2], c)"),
            ("tf.arg_max(x, 1)", "tf.compat.v1.arg_max(x, 1)"),
            (
                "tf.nn.softmax_cross_entropy_with_logits_v2(labels=y, logits=z)",
                "tf.compat.v1.nn.softmax_cross_entropy_with_logits_v2(labels=y, logits=z)",
            ),
        ],
    )
    def test_renames_onto_tf1_names_stay_unambiguous(self, call, converted):
        """A rename onto a name TensorFlow 1 also has (with other arguments) would be
        converted again by a second run: such calls keep a name that means one thing."""
        once = migrate_source(f"import tensorflow as tf\ny = {call}\n", "prog")
        assert f"y = {converted}" in once.source
        twice = migrate_source(once.source, "prog")
        assert twice.source == once.source
        assert not twice.notes

    @given(st.data())
    def test_every_table_row(self, data):
        """For every row of TensorFlow's table: the fixed leading positions stay, the rest
        are named in order."""
        rules = load_rules()
        name = data.draw(st.sampled_from(sorted(rules.reorders)))
        row = rules.reorders[name]
        n = data.draw(st.integers(0, len(row)))
        named = keywords_for_positions(row, n)
        if named is None:
            assert n < 2 or all(k is None for k in row[:n])
            return
        assert list(named) == list(row[:n])
        fixed = [k is None for k in named]
        assert fixed == sorted(fixed, reverse=True), "fixed positions lead"


class TestExitStatus:
    """0 nothing by hand, 1 by hand, 2 usage or unreadable source, 3 internal error."""

    def test_internal_error_names_the_file(self, tmp_path, capsys, monkeypatch):
        """A fault of the command itself: status 3, the file named, nothing written."""
        source = write(tmp_path / "src" / "train.py", "import tensorflow as tf\n")

        def broken(text, stem):
            raise KeyError("no rule")

        monkeypatch.setattr(migrate_cst, "migrate_source", broken)
        status, out, err = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == migrate.INTERNAL_ERROR == 3
        assert err.startswith(
            f"towerkit-migrate: internal error: converting {source} failed: KeyError"
        )
        assert len(err.strip().splitlines()) == 1
        assert out == ""
        assert not (tmp_path / "out").exists()

    def test_undecodable_source(self, tmp_path, capsys):
        tree = tmp_path / "src"
        write(tree / "a.py", "x = 1\n")
        (tree / "b.py").write_bytes("s = 'caf\u00e9'\n".encode("latin-1"))
        status, _, err = run_migrate(capsys, tree, "--out", tmp_path / "out")
        assert status == 2
        assert err.startswith(f"towerkit-migrate: error: {tree / 'b.py'}: cannot decode")
        assert len(err.strip().splitlines()) == 1
        assert not (tmp_path / "out").exists()

    def test_failure_leaves_an_existing_out_unchanged(self, tmp_path, capsys):
        tree = tmp_path / "src"
        write(tree / "a.py", "from tensorpack import ModelDesc\n")
        write(tree / "b.py", "def f(:\n")
        out = tmp_path / "out"
        write(out / "a.py", "mine\n")
        status, _, _ = run_migrate(capsys, tree, "--out", out, "--overwrite")
        assert status == 2
        assert tree_bytes(out) == {"a.py": b"mine\n"}


class TestKeptOnTensorpack:
    """Imports from tensorpack's DataFlows and utilities stay, reported with the install line."""

    PROGRAM = """\
    from tensorpack import *
    from tensorpack.utils.argtools import memoized
    from tensorpack.utils.gpu import get_num_gpu
    from tensorpack.utils import viz
    from tensorpack.utils.stats import RatioCounter
    from tensorpack.dataflow import (
        BatchData,
        dataset,
    )


    @memoized
    def gpus():
        return get_num_gpu()


    USED = [ModelDesc, viz, RatioCounter, BatchData, dataset]
    """

    def test_kept_and_reported(self, tmp_path, capsys):
        source = write(tmp_path / "src" / "train.py", self.PROGRAM)
        helper = write(tmp_path / "src" / "data.py", "from tensorpack.dataflow import *\n")
        status, report, _ = run_migrate(capsys, tmp_path / "src", "--out", tmp_path / "out")
        assert status == 1
        text = (tmp_path / "out" / "train.py").read_text()
        for line in (
            "from tensorpack.utils.argtools import memoized",
            "from tensorpack.utils.gpu import get_num_gpu",
            "from tensorpack.utils import viz",
            "from tensorpack.utils.stats import RatioCounter",
            "from tensorpack.dataflow import (\n    BatchData,\n    dataset,\n)",
            "from towerkit.trainers import ModelDesc",
        ):
            assert line in text, line
        assert (tmp_path / "out" / "data.py").read_text() == "from tensorpack.dataflow import *\n"
        assert f"{helper}:1: by hand: tensorpack.dataflow stay on tensorpack" in report
        assert (
            f"{source}:2: by hand: tensorpack.dataflow, tensorpack.utils, tensorpack.utils.argtools, "
            f"tensorpack.utils.gpu, tensorpack.utils.stats stay on tensorpack: install it ({INSTALL})"
        ) in report
        assert text.count("BatchData") == 2, "imported once"
        assert report.count(INSTALL) == 3, "each file once, and the summary"
        assert (
            f"2 file(s) still import tensorpack's DataFlows or utilities "
            f"(tensorpack.dataflow, tensorpack.utils): {INSTALL}"
        ) in report
        assert report.rstrip().endswith("2 left by hand")


TENSORPACK_STAR = [
    "AsyncMultiGPUTrainer",
    "AugmentImageComponent",
    "AugmentImageComponents",
    "AugmentImageCoordinates",
    "AutoResumeTrainConfig",
    "AvgPooling",
    "BNReLU",
    "BatchData",
    "BatchDataByShape",
    "BatchNorm",
    "BatchQueueInput",
    "BatchRenorm",
    "BinaryClassificationStats",
    "BytePSTrainer",
    "CacheData",
    "CaffeLMDB",
    "Callback",
    "CallbackFactory",
    "CallbackToHook",
    "Callbacks",
    "ChainInit",
    "CheckNumerics",
    "ClassificationError",
    "CometMLMonitor",
    "ConcatData",
    "ConcatWith",
    "Conv2D",
    "Conv2DTranspose",
    "DEFAULT_CALLBACKS",
    "DEFAULT_MONITORS",
    "DataFlow",
    "DataFlowTerminated",
    "DataFromGenerator",
    "DataFromIterable",
    "DataFromList",
    "DataFromQueue",
    "DataParallelInferenceRunner",
    "DataParallelOfflinePredictor",
    "DatasetPredictorBase",
    "Deconv2D",
    "DictRestore",
    "DistributedTrainerParameterServer",
    "DistributedTrainerReplicated",
    "Dropout",
    "DummyConstantInput",
    "DumpParamAsImage",
    "DumpTensor",
    "DumpTensorAsImage",
    "DumpTensors",
    "EnableCallbackIf",
    "EstimatedTimeLeft",
    "FakeData",
    "FeedInput",
    "FeedfreeInput",
    "FeedfreePredictor",
    "FixedSizeData",
    "FixedUnPooling",
    "FullyConnected",
    "GPUMemoryTracker",
    "GPUUtilizationTracker",
    "GlobalAvgPooling",
    "GraphProfiler",
    "GraphVarParam",
    "HDF5Data",
    "HDF5Serializer",
    "HookToCallback",
    "HorovodTrainer",
    "HostMemoryTracker",
    "HumanHyperParamSetter",
    "HyperParam",
    "HyperParamSetter",
    "HyperParamSetterWithFunc",
    "ImageFromFile",
    "InferenceRunner",
    "InferenceRunnerBase",
    "Inferencer",
    "InjectShell",
    "InputSource",
    "InstanceNorm",
    "JSONWriter",
    "JoinData",
    "JustCurrentSession",
    "LMDBData",
    "LMDBDataDecoder",
    "LMDBSerializer",
    "LayerNorm",
    "LinearWrap",
    "LocallyShuffleData",
    "MapData",
    "MapDataComponent",
    "MaxPooling",
    "MaxSaver",
    "Maxout",
    "MergeAllSummaries",
    "MinSaver",
    "ModelDesc",
    "ModelDescBase",
    "ModelSaver",
    "MonitorBase",
    "Monitors",
    "MovingAverageSummary",
    "MultiProcessDatasetPredictor",
    "MultiProcessMapAndBatchData",
    "MultiProcessMapAndBatchDataZMQ",
    "MultiProcessMapData",
    "MultiProcessMapDataZMQ",
    "MultiProcessPrefetchData",
    "MultiProcessRunner",
    "MultiProcessRunnerZMQ",
    "MultiThreadAsyncPredictor",
    "MultiThreadMapData",
    "MultiThreadPrefetchData",
    "MultiThreadRunner",
    "MultiTowerOfflinePredictor",
    "NoOpTrainer",
    "NumpySerializer",
    "ObjAttrParam",
    "OfflinePredictor",
    "OnlinePredictor",
    "PReLU",
    "PeakMemoryTracker",
    "PeriodicCallback",
    "PeriodicTrigger",
    "PlaceholderInput",
    "PredictConfig",
    "PredictorBase",
    "PrefetchData",
    "PrefetchDataZMQ",
    "PrintData",
    "ProcessTensors",
    "ProgressBar",
    "ProxyCallback",
    "ProxyDataFlow",
    "QueueInput",
    "QueueInputTrainer",
    "RNGDataFlow",
    "RandomChooseData",
    "RandomMixData",
    "RemoteDataZMQ",
    "RepeatedData",
    "RepeatedDataPoint",
    "RunOp",
    "RunUpdateOps",
    "STATICA_HACK",
    "SVMLightData",
    "SaverRestore",
    "SaverRestoreRelaxed",
    "ScalarPrinter",
    "ScalarStats",
    "ScheduledHyperParamSetter",
    "SelectComponent",
    "SendMonitorData",
    "SendStat",
    "SessionInit",
    "SessionRunTimeout",
    "SimpleDatasetPredictor",
    "SimpleMovingAverage",
    "SimpleTrainer",
    "SingleCostTrainer",
    "SmartInit",
    "StagingInput",
    "StartProcOrThread",
    "StatMonitorParamSetter",
    "StopTraining",
    "SyncMultiGPUTrainer",
    "SyncMultiGPUTrainerParameterServer",
    "SyncMultiGPUTrainerReplicated",
    "TFDatasetInput",
    "TFEventWriter",
    "TFLocalCLIDebugHook",
    "TFRecordSerializer",
    "TensorInput",
    "TensorPrinter",
    "TestDataSpeed",
    "ThroughputTracker",
    "TowerContext",
    "TowerTrainer",
    "TrainConfig",
    "Trainer",
    "VariableHolder",
    "ZMQInput",
    "argscope",
    "callbacks",
    "change_env",
    "collect_env_info",
    "compat",
    "dataflow",
    "dataset",
    "disable_layer_logging",
    "enable_argscope_for_function",
    "enable_argscope_for_module",
    "execute_only_once",
    "fix_rng_seed",
    "get_arg_scope",
    "get_current_tower_context",
    "get_default_sess_config",
    "get_global_step_value",
    "get_global_step_var",
    "get_model_loader",
    "get_rng",
    "get_tf_version_tuple",
    "get_tqdm",
    "gradproc",
    "graph_builder",
    "humanize_time_delta",
    "imgaug",
    "input_source",
    "l1_regularizer",
    "l2_regularizer",
    "launch_train_with_config",
    "layer_register",
    "libinfo",
    "logger",
    "models",
    "optimizer",
    "predict",
    "regularize_cost",
    "regularize_cost_from_collection",
    "remap_input_source",
    "rename_tflayer_get_variable",
    "send_dataflow_zmq",
    "sesscreate",
    "sessinit",
    "summary",
    "tfutils",
    "tfv1",
    "tower",
    "train",
    "utils",
    "varreplace",
]
"""What ``from tensorpack import *`` binds in tensorpack 0.11 (read from an install of it)."""


class TestNothingVanishes:
    def test_every_star_name_has_a_fate(self):
        """Each name tensorpack's star import gives is mapped, kept on tensorpack, a module
        mapped as a module, reported with what to write, or known to have no counterpart."""
        from towerkit.tools._migrate_names import GONE, STAR_MODULES, STAR_ONLY, home_of

        fates = {}
        for name in TENSORPACK_STAR:
            if name in STAR_MODULES:
                fates[name] = STAR_MODULES[name]
            elif name in GONE or name in STAR_ONLY or name == "logger":
                fates[name] = "reported"
            else:
                fates[name] = home_of(name)
        assert [n for n, fate in fates.items() if fate is None] == []
        assert fates["ImageFromFile"] == fates["DataFromQueue"] == "tensorpack.dataflow"
        assert fates["summary"] == "towerkit.towers"
        assert fates["optimizer"] == fates["sesscreate"] == "towerkit.trainers"

    def test_modules_of_the_star_import(self, tmp_path, capsys):
        """``summary.add_moving_summary`` after ``from tensorpack import *`` (boilerplate,
        the Keras example), ``optimizer.apply_grad_processors`` in a method named
        ``optimizer``: the module comes from its towerkit home; an undefined name is
        reported as undefined, not as a missing counterpart."""
        source = write(
            tmp_path / "prog.py",
            """\
            import tensorflow as tf
            from tensorpack import *


            class Model:
                def optimizer(self):
                    return optimizer.apply_grad_processors(
                        tf.train.AdamOptimizer(1e-3), [gradproc.GlobalNormClip(5)]
                    )


            def build(x, ds):
                c = tf.reduce_mean(x, name="c")
                summary.add_moving_summary(c)
                opt = Model().optimizer()
                return opt, varreplace.freeze_variables, sesscreate.NewSessionCreator


            def data(ds):
                return dataflow.MapData(ds, dp), ImageFromFile(["a.png"])
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 1, report
        text = (tmp_path / "out" / "prog.py").read_text()
        assert_lines(
            text,
            "import towerkit.towers as summary",
            "import towerkit.trainers as optimizer",
            "import towerkit.trainers as gradproc",
            "import towerkit.towers as varreplace",
            "import towerkit.trainers as sesscreate",
            "from tensorpack import dataflow",
            "from tensorpack.dataflow import ImageFromFile",
        )
        assert_lines(
            report,
            f"{source}:2: changed: tensorpack.summary (from the star import) -> towerkit.towers "
            "(as summary)",
            f"{source}:2: by hand: dp (from tensorpack import *): not defined in this module, "
            "and tensorpack's star import does not give it",
            f"{source}:2: by hand: tensorpack.dataflow stay on tensorpack",
        )
        namespace: dict[str, object] = {}
        exec(compile(text.replace("from tensorpack", "# from tensorpack"), "p", "exec"), namespace)
        with __import__("tensorflow").Graph().as_default():
            x = __import__("tensorflow").constant([1.0])
            assert namespace["build"](x, None)[0] is not None  # type: ignore[operator]

    def test_keras_example_reported_with_what_to_do(self, tmp_path, capsys):
        """tensorpack's Keras example: its contrib.keras names have no counterpart; each is
        reported with what to write instead, the rest converts."""
        source = write(
            tmp_path / "mnist_keras.py",
            """\
            import tensorflow as tf
            from tensorflow import keras
            from tensorpack import *
            from tensorpack.contrib.keras import KerasModel, KerasPhaseCallback
            from tensorpack.tfutils.tower import get_current_tower_context


            def model_func(inputs):
                training = get_current_tower_context().is_training
                return keras.layers.Dense(10)(inputs[0], training=training)


            M = KerasModel(model_func, inputs_desc=[], targets_desc=[], input=QueueInput([]))
            CB = KerasPhaseCallback
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 1, report
        assert_lines(
            report,
            f"{source}:4: by hand: KerasModel (from tensorpack.contrib.keras): build the model "
            "in a ModelDesc",
            f"{source}:4: by hand: KerasPhaseCallback (from tensorpack.contrib.keras): a Keras "
            "model called in a tower reads the training phase",
        )
        assert_lines(
            (tmp_path / "out" / "mnist_keras.py").read_text(),
            "from towerkit.towers import get_current_tower_context",
            "from towerkit.trainers import IterableInput",
        )
        assert report.rstrip().endswith("2 left by hand")

    def test_star_names_without_a_home(self, tmp_path, capsys):
        source = write(
            tmp_path / "prog.py",
            """\
            from tensorpack import *


            def build(x):
                return TensorInputLike(x), BatchNorm, len(x), __file__, libinfo.__version__
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 1
        assert (
            f"{source}:1: by hand: libinfo (from tensorpack): "
            "tensorpack's version module: there is towerkit.<lib>.__version__" in report
        )
        assert (
            f"{source}:1: by hand: TensorInputLike (from tensorpack import *): not defined in "
            "this module, and tensorpack's star import does not give it" in report
        )
        assert "len (" not in report
        assert "__file__" not in report
        assert "from towerkit.layers import BatchNorm" in (tmp_path / "out" / "prog.py").read_text()

    def test_another_star_import_may_give_the_name(self, tmp_path, capsys):
        """A program's own star import after tensorpack's keeps winning: no report for its
        names, and the added imports go where tensorpack's star import was."""
        source = write(
            tmp_path / "prog.py",
            """\
            from tensorpack import *
            from mylayers import *

            y = Conv2D("c", x, 3, 3), MyThing
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        lines = (tmp_path / "out" / "prog.py").read_text().splitlines()
        assert lines.index("from towerkit.layers import Conv2D") < lines.index(
            "from mylayers import *"
        )

    @pytest.mark.procs
    def test_logger_prints_info_after_conversion(self, tmp_path, capsys):
        """tensorpack's logger.info lines still print from the converted program."""
        source = write(
            tmp_path / "prog.py",
            """\
            from tensorpack import *


            def work():
                logger.info("working on it")


            if __name__ == "__main__":
                logger.info("started")
                work()
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        text = (tmp_path / "out" / "prog.py").read_text()
        assert "logger = logging.getLogger(__name__)" in text
        assert 'if __name__ == "__main__":\n    logging.basicConfig(level=logging.INFO' in text
        done = subprocess.run(
            [sys.executable, "prog.py"],
            cwd=tmp_path / "out",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "__main__: started" in done.stderr
        assert "__main__: working on it" in done.stderr
        again = migrate_source(text, "prog")
        assert again.source == text, "migrating again changes nothing"

    def test_logger_from_the_top_level(self, tmp_path, capsys):
        """``from tensorpack import logger`` (imagenet-resnet) is tensorpack's logger too."""
        source = write(
            tmp_path / "prog.py",
            """\
            from tensorpack import QueueInput, logger


            def main(df):
                logger.info("input %s", QueueInput(df))
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        assert f"{source}:1: changed: tensorpack's logger -> logging.getLogger(__name__)" in report
        text = (tmp_path / "out" / "prog.py").read_text()
        assert "from tensorpack" not in text
        assert "logger = logging.getLogger(__name__)" in text
        assert text.count("import logging\n") == 1

    @pytest.mark.procs
    def test_describe_trainable_vars_prints_its_table(self, tmp_path, capsys):
        """tensorpack printed describe_trainable_vars' table; the converted program sets
        logging up so it still does, once (a second migration changes nothing)."""
        source = write(
            tmp_path / "flops.py",
            """\
            from tensorpack import tfv1 as tf
            from tensorpack.tfutils import model_utils

            if __name__ == "__main__":
                with tf.Graph().as_default():
                    tf.get_variable("W", [3, 4])
                    model_utils.describe_trainable_vars()
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        assert f"{source}:1: changed: tensorpack.tfv1 -> tensorflow.compat.v1 (as tf)" in report
        text = (tmp_path / "out" / "flops.py").read_text()
        assert text.startswith("import logging\nimport tensorflow.compat.v1 as tf\n"), text
        assert 'if __name__ == "__main__":\n    logging.basicConfig(level=logging.INFO' in text
        assert migrate_source(text, "flops").source == text, "migrating again changes nothing"
        done = run_program(tmp_path / "out", "flops.py")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "1 trainable variable, 12 parameters" in done.stderr, done.stderr[-2000:]

    def test_auto_set_dir_with_an_expression_trainer(self, tmp_path, capsys):
        source = write(
            tmp_path / "gan.py",
            """\
            from tensorpack import *
            from GAN import GANTrainer, Model

            if __name__ == "__main__":
                df = [[1.0]]
                logger.auto_set_dir()
                GANTrainer(QueueInput(df), Model()).train_with_defaults(max_epoch=2)
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        text = (tmp_path / "out" / "gan.py").read_text()
        assert (
            "GANTrainer(IterableInput(df), Model()).train_with_defaults("
            "max_epoch=2, logdir='train_log/gan')" in text
        )
        assert "GANTrainer(...).train_with_defaults(...): logdir='train_log/gan'" in report

    @pytest.mark.parametrize(
        ("name", "logdir"),
        [
            ("name='pairs'", "'train_log/embed:pairs'"),
            ("'d', 'pairs'", "'train_log/embed:pairs'"),
            ("name=''", "'train_log/embed'"),
            ("name=args.algorithm", "os.path.join('train_log', 'embed:' + args.algorithm)"),
        ],
    )
    def test_auto_set_dir_with_a_name(self, tmp_path, capsys, name, logdir):
        """tensorpack names the directory train_log/<script>:<name> (SimilarityLearning)."""
        source = write(
            tmp_path / "embed.py",
            f"""\
            import argparse

            from tensorpack import *

            if __name__ == "__main__":
                args = argparse.Namespace(algorithm="pairs")
                logger.auto_set_dir({name})
                config = TrainConfig(dataflow=[[1.0]], max_epoch=1)
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        assert f"logdir={logdir}" in (tmp_path / "out" / "embed.py").read_text()

    def test_auto_set_dir_with_no_trainer_reported(self, tmp_path, capsys):
        source = write(
            tmp_path / "setup.py",
            """\
            from tensorpack.utils import logger

            logger.auto_set_dir()
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 1
        assert f"{source}:3: by hand: logger's directory 'train_log/setup': no " in report


class TestModules:
    """tensorpack modules imported as modules go to the towerkit module holding their names."""

    @pytest.mark.procs
    def test_tf_layers_without_keras(self, tmp_path, capsys):
        """``tf.layers``'s functions (tensorpack's Caffe loaders, FlowNet, mnist-tflayers)
        become ``towerkit.layers.tf_layers``'s (plain ops, no Keras): converted, nothing by
        hand, and the program trains; a second migration changes nothing."""
        source = write(
            tmp_path / "tflayers.py",
            """\
            import numpy as np
            import tensorflow as tf
            from tensorpack import *


            class Model(ModelDesc):
                def inputs(self):
                    return [tf.placeholder(tf.float32, (None, 8, 8, 1), 'x'),
                            tf.placeholder(tf.int32, (None,), 'y')]

                def build_graph(self, x, y):
                    h = tf.layers.conv2d(x, 4, 3, activation=tf.nn.relu, name='conv0')
                    h = tf.layers.max_pooling2d(h, 2, 2, name='pool0')
                    logits = tf.layers.dense(tf.layers.flatten(h), 3, name='fc')
                    return tf.reduce_mean(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                        name='cost')

                def optimizer(self):
                    return tf.train.GradientDescentOptimizer(0.1)


            class Data(object):
                def reset_state(self):
                    self.rng = np.random.RandomState(0)

                def __len__(self):
                    return 4

                def __iter__(self):
                    for _ in range(4):
                        yield [self.rng.rand(8, 8, 8, 1).astype('float32'),
                               self.rng.randint(3, size=8).astype('int32')]


            if __name__ == '__main__':
                logger.auto_set_dir()
                launch_train_with_config(
                    TrainConfig(model=Model(), dataflow=Data(), max_epoch=2), SimpleTrainer())
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        assert_lines(
            report,
            f"{source}:12: changed: tf.layers.conv2d -> tf_layers.conv2d (from towerkit.layers, "
            "no Keras)",
            f"{source}:14: changed: tf.layers.flatten -> tf_layers.flatten (from towerkit.layers, "
            "no Keras)",
        )
        assert "tf.layers ->" not in report
        text = (tmp_path / "out" / "tflayers.py").read_text()
        assert_lines(text, "from towerkit.layers import tf_layers\n")
        assert "enable_tf_layers" not in text
        assert migrate_source(text, "tflayers").source == text, "migrating again changes nothing"
        done = run_program(tmp_path / "out", "tflayers.py")
        assert done.returncode == 0, done.stderr[-3000:]
        stats = (tmp_path / "out" / "train_log" / "tflayers" / "stats.json").read_text()
        assert '"epoch_num": 2' in stats

    def test_tf_layers_class_through_tf_keras(self):
        """A ``tf.layers`` name towerkit's tf_layers lacks (a Keras layer class) still goes to
        ``tf.compat.v1.layers`` with ``enable_tf_layers()`` after the imports."""
        done = migrate_source(
            "import tensorflow as tf\n\n\ndef f(x):\n    return tf.layers.Dense(3)(x)\n", "prog"
        )
        assert "tf.compat.v1.layers.Dense(3)(x)" in done.source
        assert "enable_tf_layers()\n" in done.source
        assert any("enable_tf_layers() goes after the imports" in n.text for n in done.notes)

    def test_tfutils_modules(self, tmp_path, capsys):
        source = write(
            tmp_path / "prog.py",
            """\
            import tensorflow as tf
            from tensorpack.tfutils import optimizer, gradproc, summary
            from tensorpack.tfutils.compat import tfv1
            from tensorpack import predict


            def opt():
                o = tfv1.train.AdamOptimizer(1e-3)
                summary.add_moving_summary(tf.constant(1.0, name="one"))
                return optimizer.apply_grad_processors(o, [gradproc.GlobalNormClip(5)])


            PREDICTOR = predict.OfflinePredictor
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        text = (tmp_path / "out" / "prog.py").read_text()
        for line in (
            "import towerkit.trainers as optimizer",
            "import towerkit.trainers as gradproc",
            "import towerkit.towers as summary",
            "import tensorflow.compat.v1 as tfv1",
            "import towerkit.export as predict",
        ):
            assert line in text, line
        assert "tensorpack" not in text
        namespace: dict[str, object] = {}
        exec(compile(text, "prog.py", "exec"), namespace)
        with __import__("tensorflow").Graph().as_default():
            assert namespace["opt"]() is not None  # type: ignore[operator]

    def test_a_name_the_module_lacks(self, tmp_path, capsys):
        source = write(
            tmp_path / "prog.py",
            "from tensorpack.tfutils import gradproc\n\nP = gradproc.NoSuchProcessor(1)\n",
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 1
        assert f"{source}:3: by hand: gradproc.NoSuchProcessor: towerkit.trainers has no" in report


class TestFaults:
    """What a user runs into: each ends in one line naming the path and the fix, or works."""

    def test_same_file_name_twice(self, tmp_path, capsys):
        one = write(tmp_path / "a" / "train.py", "x = 1\n")
        two = write(tmp_path / "b" / "train.py", "x = 2\n")
        status, _, err = run_migrate(capsys, one, two, "--out", tmp_path / "out")
        assert status == 2
        assert f"{one} and {two} would both be written to {tmp_path / 'out' / 'train.py'}" in err
        assert not (tmp_path / "out").exists()

    @pytest.mark.parametrize("where", [".", "migrated", "deep/er"])
    def test_out_inside_the_source(self, tmp_path, capsys, where):
        tree = tmp_path / "src"
        write(tree / "train.py", "from tensorpack import ModelDesc\n")
        (tree / "deep").mkdir()
        before = tree_bytes(tree)
        status, _, err = run_migrate(capsys, tree, "--out", tree / where, "--overwrite")
        assert status == 2
        assert "is inside the source" in err
        assert tree_bytes(tree) == before

    def test_out_parent_missing(self, tmp_path, capsys):
        source = write(tmp_path / "train.py", "x = 1\n")
        status, _, err = run_migrate(capsys, source, "--out", tmp_path / "no" / "out")
        assert status == 2
        assert f"the parent of --out {str(tmp_path / 'no' / 'out')!r}" in err
        assert "does not exist" in err
        assert not (tmp_path / "no").exists()

    @pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
    def test_out_parent_read_only(self, tmp_path, capsys):
        source = write(tmp_path / "train.py", "x = 1\n")
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        try:
            status, _, err = run_migrate(capsys, source, "--out", locked / "out")
        finally:
            locked.chmod(0o755)
        assert status == 2
        assert "is not writable" in err

    def test_in_place_keeps_symlink_mode_and_crlf(self, tmp_path, capsys):
        real = tmp_path / "lib" / "train.py"
        real.parent.mkdir()
        real.write_bytes(
            b"#!/usr/bin/env python\r\nfrom tensorpack import ModelDesc\r\n\r\nM = ModelDesc\r\n"
        )
        real.chmod(0o755)
        link = tmp_path / "train.py"
        link.symlink_to(real)
        status, report, _ = run_migrate(capsys, link, "--in-place")
        assert status == 0, report
        assert link.is_symlink()
        assert link.resolve() == real
        data = real.read_bytes()
        assert b"from towerkit.trainers import ModelDesc\r\n" in data
        assert data.count(b"\r\n") == data.count(b"\n"), "every line ends in CRLF"
        assert stat.S_IMODE(real.stat().st_mode) == 0o755

    def test_out_keeps_mode_and_crlf(self, tmp_path, capsys):
        source = tmp_path / "src" / "train.py"
        source.parent.mkdir()
        source.write_bytes(b"from tensorpack import ModelDesc\r\nM = ModelDesc\r\n")
        source.chmod(0o755)
        status, _, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0
        out = tmp_path / "out" / "train.py"
        assert out.read_bytes() == b"from towerkit.trainers import ModelDesc\r\nM = ModelDesc\r\n"
        assert stat.S_IMODE(out.stat().st_mode) == 0o755

    def test_latin1_source_with_a_coding_line(self, tmp_path, capsys):
        text = "# -*- coding: latin-1 -*-\nfrom tensorpack import ModelDesc\nNAME = 'caf\u00e9'\n"
        source = tmp_path / "src" / "train.py"
        source.parent.mkdir()
        source.write_bytes(text.encode("latin-1"))
        status, _, err = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert (status, err) == (0, "")
        data = (tmp_path / "out" / "train.py").read_bytes()
        assert data == text.replace("tensorpack", "towerkit.trainers").encode("latin-1")
        namespace: dict[str, object] = {}
        exec(compile(data, "train.py", "exec"), namespace)
        assert namespace["NAME"] == "caf\u00e9"

    def test_notebook_reported(self, tmp_path, capsys):
        tree = tmp_path / "src"
        write(tree / "train.py", "x = 1\n")
        write(tree / "explore.ipynb", '{"cells": [], "nbformat": 4}\n')
        status, report, _ = run_migrate(capsys, tree, "--out", tmp_path / "out")
        assert status == 1
        assert f"{tree / 'explore.ipynb'}:1: by hand: a notebook is not converted" in report
        assert "jupyter nbconvert --to script" in report
        assert (tmp_path / "out" / "explore.ipynb").read_text() == '{"cells": [], "nbformat": 4}\n'

    def test_symlinks_in_a_tree(self, tmp_path, capsys):
        """Links to data (dangling or not, or to directories) are copied as links."""
        tree = tmp_path / "src"
        write(tree / "train.py", "x = 1\n")
        (tree / "data").symlink_to("/nonexistent/dataset")
        (tree / "loop").symlink_to("loop")
        (tmp_path / "shared").mkdir()
        (tree / "shared").symlink_to(tmp_path / "shared")
        status, _, err = run_migrate(capsys, tree, "--out", tmp_path / "out")
        assert (status, err) == (0, "")
        out = tmp_path / "out"
        assert os.readlink(out / "data") == "/nonexistent/dataset"
        assert os.readlink(out / "loop") == "loop"
        assert os.readlink(out / "shared") == str(tmp_path / "shared")

    @pytest.mark.parametrize("target", ["/nonexistent/train.py", "helper.py"])
    def test_unreadable_python_link(self, tmp_path, capsys, target):
        """A .py link that leads nowhere (dangling, or a loop) cannot be converted: status 2."""
        tree = tmp_path / "src"
        write(tree / "train.py", "x = 1\n")
        (tree / "helper.py").symlink_to(target)
        status, _, err = run_migrate(capsys, tree, "--out", tmp_path / "out")
        assert status == 2
        assert err.startswith(f"towerkit-migrate: error: {tree / 'helper.py'}: cannot read")
        assert not (tmp_path / "out").exists()
        for source in (tree / "helper.py",):
            status, _, err = run_migrate(capsys, source, "--out", tmp_path / "out")
            assert status == 2
            assert f"no such file or directory: {source}" in err


class TestNewNames:
    """Names towerkit now holds, and one it reports."""

    def test_homes(self, tmp_path, capsys):
        source = write(
            tmp_path / "prog.py",
            """\
            from tensorpack import TensorInput
            from tensorpack.tfutils.model_utils import describe_trainable_vars
            from tensorpack.dataflow import PrintData

            USED = [TensorInput, describe_trainable_vars, PrintData]
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        text = (tmp_path / "out" / "prog.py").read_text()
        assert "from towerkit.trainers import TensorInput" in text
        assert "from towerkit.callbacks import describe_trainable_vars" in text
        assert "PrintData" not in text.splitlines()[0] + text.splitlines()[1]
        assert status == 1  # PrintData is used, not called: left by hand
        assert (
            f"{source}:3: changed: PrintData (from tensorpack.dataflow): import dropped" in report
        )
        assert f"{source}:5: by hand: PrintData used other than called: " in report
        assert "fails under NumPy 2" in report

    def test_feedfree_predictor(self, tmp_path, capsys):
        """tensorpack.predict's FeedfreePredictor on a QueueInput: both have a towerkit home."""
        source = write(
            tmp_path / "prog.py",
            """\
            from tensorpack import PredictConfig, QueueInput
            from tensorpack.predict import FeedfreePredictor


            def predictor(config, df):
                return FeedfreePredictor(config, QueueInput(df))
            """,
        )
        status, report, _ = run_migrate(capsys, source, "--out", tmp_path / "out")
        assert status == 0, report
        text = (tmp_path / "out" / "prog.py").read_text()
        assert "from towerkit.export import FeedfreePredictor" in text
        assert "FeedfreePredictor(config, IterableInput(df))" in text
        assert "tensorpack" not in text
        namespace: dict[str, object] = {}
        exec(compile(text, "prog.py", "exec"), namespace)
        assert namespace["FeedfreePredictor"].__module__.startswith("towerkit.export")
