"""towerkit-migrate moves TensorFlow 1's recurrent cells and loops to towerkit.layers.rnn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.layers import rnn, tf_layers
from towerkit.tools._migrate_cst import migrate_source
from towerkit.tools._migrate_rnn import (
    LOOP_MODULES,
    RNN_CELLS,
    RNN_LOOPS,
    RNN_MODULES,
    TF_LAYERS,
    RnnMove,
    rnn_move,
)

PROGRAM = """\
import tensorflow as tf


def build(x, lengths):
    cells = [tf.contrib.rnn.LSTMCell(4) for _ in range(2)]
    cell = tf.nn.rnn_cell.MultiRNNCell(cells)
    gru = tf.compat.v1.nn.rnn_cell.GRUCell(3)
    out, state = tf.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
    steps, _ = tf.contrib.rnn.static_rnn(gru, tf.unstack(x, axis=1), dtype=tf.float32)
    fw, bw = tf.nn.rnn_cell.GRUCell(2), tf.nn.rnn_cell.GRUCell(2)
    both, _ = tf.nn.bidirectional_dynamic_rnn(fw, bw, x, dtype=tf.float32, scope="bi")
    init = tf.contrib.rnn.LSTMStateTuple(state[0].c, state[0].h)
    return out, steps, both, init
"""


def test_the_layers_functions_table_is_tf_layers():
    """The command's list of tf.layers functions is what towerkit.layers.tf_layers holds."""
    assert set(TF_LAYERS) == set(tf_layers.__all__)
    assert all(callable(getattr(tf_layers, name)) for name in TF_LAYERS)


class TestRnnMove:
    """The pure table: rnn_move."""

    @given(st.sampled_from(RNN_MODULES), st.sampled_from(sorted(RNN_CELLS)))
    def test_cells(self, module, name):
        """Every cell of every cell module moves to rnn.<name>, which exists."""
        move = rnn_move(f"{module}.{name}")
        assert move == RnnMove(
            new=f"rnn.{name}", note=f"{module}.{name} -> rnn.{name} (from towerkit.layers)"
        )
        assert hasattr(rnn, name)

    @given(st.sampled_from(LOOP_MODULES), st.sampled_from(sorted(RNN_LOOPS)))
    def test_loops(self, module, name):
        """Every loop moves to rnn.<name>, which exists."""
        move = rnn_move(f"{module}.{name}")
        assert move is not None
        assert move.new == f"rnn.{name}"
        assert not move.manual
        assert hasattr(rnn, name)

    @given(st.from_regex(r"[A-Z][A-Za-z]{0,12}", fullmatch=True))
    def test_unknown(self, name):
        """A contrib name towerkit lacks stays and is flagged; an rnn_cell one goes to tf.compat.v1."""
        if name in RNN_CELLS:
            return
        contrib = rnn_move(f"tf.contrib.rnn.{name}")
        assert contrib is not None
        assert contrib.manual
        assert contrib.new == f"tf.contrib.rnn.{name}"
        cell = rnn_move(f"tf.nn.rnn_cell.{name}")
        assert cell is not None
        assert cell.manual
        assert cell.new == f"tf.compat.v1.nn.rnn_cell.{name}"
        assert not cell.needs_rnn

    @pytest.mark.parametrize(
        "name", ["tf.nn.relu", "tf.contrib", "tf.nn", "tf.compat.v1.nn.conv2d"]
    )
    def test_others(self, name):
        """Names outside the recurrent modules are left to the other rules."""
        assert rnn_move(name) is None

    def test_modules(self):
        """The cell modules themselves become the rnn module."""
        for module in RNN_MODULES:
            move = rnn_move(module)
            assert move is not None
            assert move.new == "rnn"


class TestMigrateProgram:
    """A program of TensorFlow 1's recurrent API, migrated, runs on towerkit.layers.rnn."""

    def test_source(self):
        """Every recurrent name is rewritten, one import added, nothing left by hand."""
        done = migrate_source(PROGRAM, "prog")
        assert "from towerkit.layers import rnn" in done.source
        assert "tf.contrib" not in done.source
        assert "rnn_cell" not in done.source
        assert "rnn.MultiRNNCell(cells)" in done.source
        assert "rnn.dynamic_rnn(cell, x, sequence_length=lengths" in done.source
        assert [n.text for n in done.notes if n.manual] == []

    def test_runs(self, tmp_path):
        """The migrated program builds its graph with the expected variable names."""
        import tensorflow as tf

        tf1 = tf.compat.v1
        done = migrate_source(PROGRAM, "prog")
        namespace: dict[str, object] = {}
        exec(compile(done.source, str(tmp_path / "prog.py"), "exec"), namespace)
        with tf.Graph().as_default():
            x = tf1.placeholder(tf.float32, [2, 5, 3])
            out, steps, _, init = namespace["build"](x, [5, 2])
            names = {v.op.name for v in tf1.global_variables()}
        assert "rnn/multi_rnn_cell/cell_1/lstm_cell/kernel" in names
        assert "bi/fw/gru_cell/gates/kernel" in names
        assert out.shape.as_list() == [2, 5, 4]
        assert len(steps) == 5
        assert isinstance(init, rnn.LSTMStateTuple)

    def test_unknown_flagged(self):
        """A tf.contrib.rnn name towerkit lacks is kept and flagged for a hand edit."""
        src = "import tensorflow as tf\ncell = tf.contrib.rnn.AttentionCellWrapper(c, 3)\n"
        done = migrate_source(src, "prog")
        assert "tf.contrib.rnn.AttentionCellWrapper(c, 3)" in done.source
        manual = [n.text for n in done.notes if n.manual]
        assert manual == [
            "tf.contrib.rnn.AttentionCellWrapper: towerkit.layers.rnn has no "
            "AttentionCellWrapper; rewrite it with its cells"
        ]


CHAR_RNN = Path(__file__).parent / "rnn_programs" / "char_rnn.py"

PTB_LM = CHAR_RNN.with_name("ptb_lm.py")

NO_KERAS = (
    "import sys, runpy; sys.modules['tf_keras'] = None; sys.modules['keras'] = None; "
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)
"""Run the program named by the first argument with tf-keras and Keras unimportable (a
fresh interpreter: the blocks must be in place before TensorFlow is imported)."""


def migrate_and_train(program: Path, out: Path) -> str:
    """Convert `program` into `out` (nothing left by hand) and train it without Keras; its source."""
    done = subprocess.run(
        [sys.executable, "-m", "towerkit.tools.migrate", str(program), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("0 left by hand"), done.stdout[-500:]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_USE_LEGACY_KERAS", None)
    trained = subprocess.run(
        [sys.executable, "-c", NO_KERAS, program.name],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "WARNING:tensorflow" not in trained.stderr, trained.stderr[-3000:]
    return (out / program.name).read_text()


@pytest.mark.procs
@pytest.mark.timeout(300)  # migration and 2 epochs of a while-loop LSTM on a shared CPU
def test_char_rnn_migrates_and_trains_without_keras(tmp_path):
    """tensorpack's char-rnn form converts with nothing by hand and trains 2 epochs, no Keras."""
    out = tmp_path / "out"
    source = migrate_and_train(CHAR_RNN, out)
    assert "from towerkit.layers import" in source
    assert "tf.contrib" not in source
    stats = json.loads((out / "train_log" / "char_rnn:char_rnn" / "stats.json").read_text())
    assert [s["epoch_num"] for s in stats] == [1, 2]
    assert stats[-1]["validation_cost"] < stats[0]["validation_cost"]


@pytest.mark.procs
@pytest.mark.timeout(300)  # migration and 3 epochs of a static LSTM, two inference runs each
def test_ptb_lm_migrates_and_trains_without_keras(tmp_path):
    """tensorpack's PTB form: self.training, a carried state, two InferenceRunners, no Keras.

    The state variables are assigned the last state at each step (so the saved ones are
    not zero), RunOp resets them around the inference runs, each runner has its tower
    and its statistics, and the learning rate follows HyperParamSetterWithFunc.
    """
    import numpy as np
    import tensorflow as tf

    out = tmp_path / "out"
    source = migrate_and_train(PTB_LM, out)
    assert "tf.contrib" not in source
    stats = json.loads((out / "train_log" / "ptb_lm:ptb_lm" / "stats.json").read_text())
    assert [s["epoch_num"] for s in stats] == [1, 2, 3]
    assert [round(s["learning_rate"], 6) for s in stats] == [0.5, 0.4, 0.32]
    for record in stats:
        for name in ("validation", "test"):
            expected = np.exp(record[f"{name}_cost"] / 10)
            assert record[f"{name}_perplexity"] == pytest.approx(expected, rel=1e-5)
    assert stats[-1]["validation_cost"] < stats[0]["validation_cost"]
    assert stats[0]["test_cost"] != stats[0]["validation_cost"]
    reader = tf.train.load_checkpoint(str(out / "train_log" / "ptb_lm:ptb_lm"))
    shapes = reader.get_variable_to_shape_map()
    kernel = "LSTM/rnn/multi_rnn_cell/cell_1/basic_lstm_cell/kernel"
    assert shapes[kernel] == [48, 96]
    for k in range(2):
        for part in ("c", "h"):
            assert shapes[f"{part}{k}"] == [8, 24]
    assert np.abs(reader.get_tensor("h1")).max() > 0, "the state is carried across steps"
