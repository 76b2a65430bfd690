"""SessionInit shells on real graphs, sessions, checkpoints and npz files."""

from __future__ import annotations

import gc
import logging
import os
import weakref

import numpy as np
import pytest
import tensorflow as tf

from towerkit.sessinit import (
    ChainInit,
    CheckpointNotFoundError,
    DictRestore,
    JustCurrentSession,
    NotACheckpointError,
    NothingToRestoreError,
    RestoreMismatchError,
    SaverRestore,
    SaverRestoreRelaxed,
    SessionInit,
    SmartInit,
    dump_session_params,
    get_model_loader,
    load_checkpoint_vars,
    load_npz,
    save_checkpoint_vars,
)

tf1 = tf.compat.v1

VALUES = {
    "block/conv/W": np.arange(12, dtype=np.float32).reshape(3, 4),
    "block/conv/b": np.array([0.5, -0.5], np.float32),
    "block/bn/mean": np.array([1.0, 2.0, 3.0], np.float64),
    "step": np.array(42, np.int64),
}
SHAPES = {name: (v.shape, v.dtype.name) for name, v in VALUES.items()}


def n_ops(graph: tf.Graph) -> int:
    return len(graph.get_operations())


def read(sess, variables) -> dict[str, np.ndarray]:
    names = list(variables)
    return dict(zip(names, sess.run([variables[n] for n in names])))


def assert_values(got, expected) -> None:
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def init_all(sess) -> None:
    sess.run(tf1.global_variables_initializer())


class TestSessionInit:
    """The base class's setup/init contract."""

    def test_setup_after_finalize_fails(self, graph):
        """`setup_graph` on a finalized graph is an error."""
        graph.finalize()
        with pytest.raises(
            RuntimeError,
            match=r"JustCurrentSession.setup_graph\(\) needs a graph that is not finalized",
        ):
            JustCurrentSession().setup_graph()

    def test_just_current_session(self, graph, counting_sess, make_vars):
        """JustCurrentSession leaves every value and runs nothing."""
        v = make_vars({"a": ((2,), "float32")})
        init_all(counting_sess)
        runs = counting_sess.runs
        init = JustCurrentSession()
        init.init(counting_sess)
        assert counting_sess.runs == runs
        assert counting_sess.run(v["a"]).tolist() == [-1, -1]
        assert repr(init) == "JustCurrentSession()"

    def test_subclass_hooks(self, graph, sess):
        """A subclass's `_setup_graph` runs once per graph before `_run_init`."""
        calls = []

        class Recorder(SessionInit):
            def _setup_graph(self):
                calls.append(("setup", tf1.get_default_graph() is graph))

            def _run_init(self, sess):
                calls.append(("run", sess is not None))

        rec = Recorder()
        rec.setup_graph()
        rec.init(sess)
        rec.init(sess)
        assert calls == [("setup", True), ("run", True), ("run", True)]


class TestSaverRestore:
    """SaverRestore restores checkpoints with one op group and one session.run."""

    @pytest.mark.parametrize("use_resource", [True, False])
    def test_restore(self, graph, counting_sess, make_vars, write_checkpoint, use_resource):
        """Variables under scopes get the checkpoint's values in one session.run."""
        prefix = write_checkpoint(VALUES, use_resource=use_resource)
        variables = make_vars(SHAPES, use_resource=use_resource)
        init_all(counting_sess)
        runs = counting_sess.runs
        SaverRestore(prefix).init(counting_sess)
        assert counting_sess.runs == runs + 1
        assert_values(read(counting_sess, variables), VALUES)

    def test_variable_scopes(self, graph, sess, write_checkpoint):
        """Variables built under nested and reused variable scopes restore by their full names."""
        prefix = write_checkpoint(VALUES)

        def block():
            with tf1.variable_scope("conv"):
                w = tf1.get_variable("W", shape=(3, 4))
                b = tf1.get_variable("b", shape=(2,))
            with tf1.variable_scope("bn"):
                m = tf1.get_variable("mean", shape=(3,), dtype=tf.float64)
            return w, b, m

        with tf1.variable_scope("block"):
            w, b, m = block()
        with tf1.variable_scope("block", reuse=True):
            assert block()[0] is w
        with tf1.variable_scope("outer"), tf1.variable_scope("block"):
            w2, _, _ = block()
        step = tf1.get_variable("step", shape=(), dtype=tf.int64)
        init_all(sess)
        SaverRestore(prefix).init(sess)
        SaverRestore(prefix, prefix="outer", ignore=["step"]).init(sess)
        got = sess.run({"W": w, "b": b, "mean": m, "W2": w2, "step": step})
        np.testing.assert_array_equal(got["W"], VALUES["block/conv/W"])
        np.testing.assert_array_equal(got["W2"], VALUES["block/conv/W"])
        np.testing.assert_array_equal(got["mean"], VALUES["block/bn/mean"])
        assert got["step"] == 42

    def test_ops_built_once(self, graph, sess, make_vars, write_checkpoint):
        """Repeated restores, by the same or new instances, add no ops after the first setup."""
        prefix = write_checkpoint(VALUES)
        make_vars(SHAPES)
        init_all(sess)
        before = n_ops(graph)
        init = SaverRestore(prefix)
        init.setup_graph()
        after_setup = n_ops(graph)
        assert after_setup > before
        init.init(sess)
        init.init(sess)
        SaverRestore(prefix).init(sess)
        assert n_ops(graph) == after_setup

    def test_finalized_after_setup(self, graph, counting_sess, make_vars, write_checkpoint):
        """A trainer's order (setup, finalize, init) restores in one run."""
        prefix = write_checkpoint(VALUES)
        variables = make_vars(SHAPES)
        init_all(counting_sess)
        init = SaverRestore(prefix)
        init.setup_graph()
        graph.finalize()
        runs = counting_sess.runs
        init.init(counting_sess)
        assert counting_sess.runs == runs + 1
        assert_values(read(counting_sess, variables), VALUES)

    @pytest.mark.parametrize("use_resource", [True, False])
    def test_finalized_without_setup(
        self, graph, counting_sess, make_vars, write_checkpoint, use_resource
    ):
        """A finalized graph never set up is restored by feeding initializers, in one run."""
        prefix = write_checkpoint(VALUES)
        variables = make_vars(SHAPES, use_resource=use_resource)
        init_all(counting_sess)
        graph.finalize()
        runs = counting_sess.runs
        SaverRestore(prefix).init(counting_sess)
        assert counting_sess.runs == runs + 1
        assert_values(read(counting_sess, variables), VALUES)

    def test_prefix(self, graph, sess, make_vars, write_checkpoint):
        """`prefix` maps checkpoint ``name`` to graph ``prefix/name``."""
        prefix = write_checkpoint(VALUES)
        variables = make_vars({f"tower0/{n}": s for n, s in SHAPES.items()})
        init_all(sess)
        init = SaverRestore(prefix, prefix="tower0")
        init.init(sess)
        assert_values(read(sess, variables), {f"tower0/{n}": v for n, v in VALUES.items()})
        assert (init.prefix, init.ignore, init.model_path) == ("tower0", (), prefix)

    def test_ignore(self, graph, sess, make_vars, write_checkpoint):
        """Ignored names, with or without ``:0``, keep their values."""
        prefix = write_checkpoint(VALUES)
        variables = make_vars(SHAPES)
        init_all(sess)
        SaverRestore(prefix, ignore=["step:0", "block/conv/b"]).init(sess)
        got = read(sess, variables)
        assert got["step"] == -1
        assert got["block/conv/b"].tolist() == [-1, -1]
        np.testing.assert_array_equal(got["block/conv/W"], VALUES["block/conv/W"])

    def test_partial(self, graph, sess, make_vars, write_checkpoint, caplog):
        """Graph variables missing in the checkpoint keep their values and are logged."""
        prefix = write_checkpoint({k: VALUES[k] for k in ("step", "block/conv/W")})
        variables = make_vars(SHAPES)
        init_all(sess)
        with caplog.at_level(logging.INFO, logger="towerkit.sessinit"):
            SaverRestore(prefix).init(sess)
        got = read(sess, variables)
        assert got["step"] == 42
        assert got["block/conv/b"].tolist() == [-1, -1]
        warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        assert "2 graph variables are not in checkpoint" in warning
        assert "'block/bn/mean': float64 (3,)" in warning
        assert "'block/conv/b': float32 (2,)" in warning

    def test_unused(self, graph, sess, make_vars, write_checkpoint, caplog):
        """Checkpoint entries without a graph variable are logged and skipped."""
        prefix = write_checkpoint(VALUES)
        variables = make_vars({"step": SHAPES["step"]})
        init_all(sess)
        with caplog.at_level(logging.DEBUG, logger="towerkit.sessinit"):
            SaverRestore(prefix).init(sess)
        assert read(sess, variables)["step"] == 42
        info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
        assert info == [
            f"Restoring from checkpoint {prefix!r}: 1 restored, 3 unused in the source."
        ]
        debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
        assert any(
            m.startswith(f"3 entries of checkpoint {prefix!r} match no graph") for m in debug
        )

    def test_one_of_each_in_the_singular(self, graph, sess, make_vars, write_checkpoint, caplog):
        """One missing variable and one unused entry are told in the singular."""
        prefix = write_checkpoint({k: VALUES[k] for k in ("step", "block/conv/W")})
        make_vars({k: SHAPES[k] for k in ("step", "block/conv/b")})
        init_all(sess)
        with caplog.at_level(logging.DEBUG, logger="towerkit.sessinit"):
            SaverRestore(prefix).init(sess)
        messages = [r.getMessage().splitlines()[0] for r in caplog.records]
        assert f"1 graph variable is not in checkpoint {prefix!r} and keeps its value:" in messages
        assert f"1 entry of checkpoint {prefix!r} matches no graph variable:" in messages

    def test_mismatch(self, graph, sess, make_vars, write_checkpoint):
        """Shape or dtype mismatches raise at setup, listing every variable with both sides."""
        prefix = write_checkpoint(VALUES)
        variables = make_vars(
            {**SHAPES, "block/conv/W": ((4, 3), "float32"), "block/bn/mean": ((3,), "float32")}
        )
        init_all(sess)
        init = SaverRestore(prefix)
        with pytest.raises(RestoreMismatchError) as info:
            init.init(sess)
        lines = str(info.value).splitlines()
        assert lines[0].startswith("cannot restore 2 variables from checkpoint")
        assert lines[1] == "  'block/bn/mean': source float64 (3,), graph float32 (3,)"
        assert lines[2] == (
            "  'block/conv/W': source float32 (3, 4), graph float32 (4, 3) (fixable by reshape)"
        )
        assert "SaverRestoreRelaxed" in lines[3]
        assert read(sess, variables)["step"] == -1
        with pytest.raises(RestoreMismatchError, match=r"cannot restore 2 variables"):
            init.setup_graph()

    def test_plan(self, graph, make_vars, write_checkpoint):
        """`plan` shows what would happen without a session."""
        prefix = write_checkpoint(VALUES)
        make_vars({"step": SHAPES["step"], "new": ((1,), "float32")})
        plan = SaverRestore(prefix).plan()
        assert [a.target.name for a in plan.restored] == ["step"]
        assert [v.name for v in plan.missing] == ["new"]
        assert len(plan.unused) == 3

    def test_directory_and_index(self, graph, sess, make_vars, write_checkpoint, tmp_path):
        """A directory restores its latest checkpoint; an ``.index`` path its own."""
        write_checkpoint({"step": np.array(1, np.int64)}, "model-1")
        write_checkpoint({"step": np.array(2, np.int64)}, "model-2")
        variables = make_vars({"step": SHAPES["step"]})
        init_all(sess)
        SaverRestore(str(tmp_path)).init(sess)
        assert sess.run(variables["step"]) == 2
        SaverRestore(tmp_path / "model-1.index").init(sess)
        assert sess.run(variables["step"]) == 1

    def test_repr(self, write_checkpoint):
        """The repr shows the resolved path and options."""
        prefix = write_checkpoint(VALUES)
        assert repr(SaverRestore(prefix + ".index", ignore=("x",))) == (
            f"SaverRestore({prefix!r}, prefix=None, ignore=('x',))"
        )

    def test_fail(self, tmp_path, write_checkpoint):
        """Missing paths, non-checkpoints and bad arguments fail at construction."""
        with pytest.raises(CheckpointNotFoundError, match=r"checkpoint '.*model-9' does not exist"):
            SaverRestore(tmp_path / "model-9")
        (tmp_path / "notes.txt").write_text("x")
        with pytest.raises(NotACheckpointError, match=r"is not a TensorFlow checkpoint"):
            SaverRestore(tmp_path / "notes.txt")
        prefix = write_checkpoint(VALUES)
        with pytest.raises(TypeError, match=r"'ignore' is the string 'step'"):
            SaverRestore(prefix, ignore="step")


class TestSaverRestoreRelaxed:
    """SaverRestoreRelaxed upcasts and reshapes what it can and skips the rest."""

    @pytest.mark.parametrize("setup", [True, False])
    def test_fixes_and_skips(
        self, graph, counting_sess, make_vars, write_checkpoint, caplog, setup
    ):
        """float16 -> float32 and reshapes are applied, in graph or by feeding; unfixable ones warn."""
        values = {
            "half": np.array([1.5, 2.25, -3.0], np.float16),
            "flat": np.arange(6, dtype=np.float32),
            "narrow": np.array([1.0, 2.0], np.float64),
            "ok": np.array([7], np.int32),
        }
        prefix = write_checkpoint(values)
        variables = make_vars(
            {
                "half": ((3,), "float32"),
                "flat": ((2, 3), "float32"),
                "narrow": ((2,), "float16"),
                "ok": ((1,), "int32"),
            }
        )
        init_all(counting_sess)
        init = SaverRestoreRelaxed(prefix)
        if setup:
            init.setup_graph()
        graph.finalize()
        runs = counting_sess.runs
        with caplog.at_level(logging.INFO, logger="towerkit.sessinit"):
            init.init(counting_sess)
        assert counting_sess.runs == runs + 1
        got = read(counting_sess, variables)
        assert got["half"].dtype == np.float32
        assert got["half"].tolist() == [1.5, 2.25, -3.0]
        np.testing.assert_array_equal(got["flat"], values["flat"].reshape(2, 3))
        assert got["narrow"].tolist() == [-1, -1]
        assert got["ok"].tolist() == [7]
        assert "'narrow': source float64 (2,), graph float16 (2,)" in caplog.text
        assert "'half': source float16 (3,), graph float32 (3,) (upcast)" in caplog.text

    def test_prefix_reshape(self, graph, sess, make_vars, write_checkpoint):
        """Prefix and reshape combine."""
        prefix = write_checkpoint({"W": np.arange(4, dtype=np.float32)})
        variables = make_vars({"m/W": ((1, 1, 2, 2), "float32")})
        init_all(sess)
        SaverRestoreRelaxed(prefix, prefix="m").init(sess)
        assert sess.run(variables["m/W"]).ravel().tolist() == [0, 1, 2, 3]


class TestDictRestore:
    """DictRestore feeds values into existing ops, in one session.run."""

    def test_restore(self, graph, counting_sess, make_vars):
        """Names with and without ``:0`` restore; no op is added; one run."""
        variables = make_vars(SHAPES)
        init_all(counting_sess)
        runs, ops = counting_sess.runs, n_ops(graph)
        given = {(n + ":0" if i % 2 else n): v for i, (n, v) in enumerate(VALUES.items())}
        DictRestore(given).init(counting_sess)
        assert counting_sess.runs == runs + 1
        assert n_ops(graph) == ops
        assert_values(read(counting_sess, variables), VALUES)

    def test_finalized(self, graph, sess, make_vars):
        """A finalized graph is restored without new ops."""
        variables = make_vars(SHAPES)
        init_all(sess)
        graph.finalize()
        DictRestore(VALUES).init(sess)
        assert_values(read(sess, variables), VALUES)

    def test_mismatch(self, graph, sess, make_vars):
        """Mismatches raise and list both sides; nothing is restored."""
        variables = make_vars(SHAPES)
        init_all(sess)
        bad = {**VALUES, "block/conv/b": np.zeros(3, np.float32), "step": np.array(1, np.int32)}
        with pytest.raises(RestoreMismatchError) as info:
            DictRestore(bad).init(sess)
        assert str(info.value).splitlines()[1:] == [
            "  'block/conv/b': source float32 (3,), graph float32 (2,)",
            "  'step': source int32 (), graph int64 () (fixable by upcast)",
            "Pass ignore_mismatch=True to convert the fixable ones and skip the rest.",
        ]
        assert read(sess, variables)["step"] == -1

    def test_ignore_mismatch(self, graph, sess, make_vars, caplog):
        """With ignore_mismatch, fixable values are converted, others warned about and skipped."""
        variables = make_vars(SHAPES)
        init_all(sess)
        bad = {**VALUES, "block/conv/b": np.zeros(3, np.float32), "step": np.array(1, np.int32)}
        with caplog.at_level(logging.WARNING, logger="towerkit.sessinit"):
            DictRestore(bad, ignore_mismatch=True).init(sess)
        got = read(sess, variables)
        assert got["step"] == 1
        assert got["block/conv/b"].tolist() == [-1, -1]
        np.testing.assert_array_equal(got["block/conv/W"], VALUES["block/conv/W"])
        assert "'block/conv/b': source float32 (3,), graph float32 (2,)" in caplog.text
        assert "They are skipped" in caplog.text

    def test_shared_initial_value(self, graph, counting_sess):
        """Variables initialized from one tensor still get their own values (two runs)."""
        init_value = tf.zeros([2])
        a = tf1.Variable(init_value, name="a")
        b = tf1.Variable(init_value, name="b")
        init_all(counting_sess)
        runs = counting_sess.runs
        DictRestore(
            {"a": np.array([1.0, 2.0], np.float32), "b": np.array([3.0, 4.0], np.float32)}
        ).init(counting_sess)
        assert counting_sess.runs == runs + 2
        assert counting_sess.run(a).tolist() == [1, 2]
        assert counting_sess.run(b).tolist() == [3, 4]

    def test_unfeedable_initializer(self, graph, counting_sess):
        """A variable whose initial value cannot be fed gets one assign op at setup."""
        v = tf1.get_variable("v", initializer=np.zeros(2, np.float32))
        graph.prevent_feeding(v.initializer.inputs[1])
        init_all(counting_sess)
        init = DictRestore({"v": np.array([1.0, 2.0], np.float32)})
        init.setup_graph()
        ops = n_ops(graph)
        graph.finalize()
        init.init(counting_sess)
        init.init(counting_sess)
        assert n_ops(graph) == ops
        assert counting_sess.run(v).tolist() == [1, 2]

    def test_unfeedable_finalized_fails(self, graph, sess):
        """Without setup, a finalized graph cannot take such a variable; the message says why."""
        v = tf1.get_variable("v", initializer=np.zeros(2, np.float32))
        graph.prevent_feeding(v.initializer.inputs[1])
        graph.finalize()
        with pytest.raises(RuntimeError, match=r"cannot assign variable 'v' in a finalized graph"):
            DictRestore({"v": np.ones(2, np.float32)}).init(sess)

    def test_repr_and_view(self):
        """The repr counts entries; `variable_dict` is read-only."""
        init = DictRestore({"a:0": np.zeros(1)})
        assert repr(init) == "DictRestore(<1 entries>, ignore_mismatch=False)"
        with pytest.raises(TypeError):
            init.variable_dict["b"] = np.zeros(1)
        assert list(init.variable_dict) == ["a"]
        assert init.ignore_mismatch is False

    def test_fail(self):
        """Bad dicts fail at construction."""
        with pytest.raises(TypeError, match=r"'variable_dict' is a str: expected a mapping"):
            DictRestore("model-1")
        with pytest.raises(ValueError, match=r"'variable_dict' names variables twice"):
            DictRestore({"a": 1, "a:0": 2})


class TestChainInit:
    """ChainInit runs its members in order."""

    def test_order(self, graph, sess, make_vars, write_checkpoint):
        """Later members overwrite earlier ones."""
        prefix = write_checkpoint(VALUES)
        variables = make_vars(SHAPES)
        init_all(sess)
        chain = ChainInit([SaverRestore(prefix), DictRestore({"step": np.array(5, np.int64)})])
        chain.setup_graph()
        graph.finalize()
        chain.init(sess)
        got = read(sess, variables)
        assert got["step"] == 5
        np.testing.assert_array_equal(got["block/conv/W"], VALUES["block/conv/W"])
        assert len(chain.sess_inits) == 2

    def test_repr(self):
        """The repr lists the members."""
        assert repr(ChainInit([JustCurrentSession()])) == "ChainInit([JustCurrentSession()])"

    def test_fail(self):
        """Members that are not SessionInits are listed by index."""
        with pytest.raises(
            TypeError, match=r"entries at \{1: 'str', 2: 'int'\} are not SessionInit"
        ):
            ChainInit([JustCurrentSession(), "x", 3])


class TestSmartInit:
    """SmartInit accepts every documented kind of source."""

    def test_kinds(self, graph, sess, make_vars, write_checkpoint, tmp_path):
        """Checkpoint prefixes, index files, directories, npz files, dicts, None and lists."""
        prefix = write_checkpoint(VALUES)
        save_checkpoint_vars({"step": np.array(9, np.int64)}, tmp_path / "p.npz")
        variables = make_vars(SHAPES)
        init_all(sess)
        assert isinstance(SmartInit(None), JustCurrentSession)
        assert isinstance(SmartInit(""), JustCurrentSession)
        assert isinstance(SmartInit(prefix), SaverRestore)
        assert isinstance(SmartInit(prefix, ignore_mismatch=True), SaverRestoreRelaxed)
        assert isinstance(SmartInit({"step": 1}), DictRestore)
        kept = JustCurrentSession()
        assert SmartInit(kept) is kept
        for source, step in [
            (prefix, 42),
            (str(tmp_path / "p.npz"), 9),
            (prefix + ".index", 42),
            ({"step": np.array(3, np.int64)}, 3),
            (str(tmp_path), 42),
            ([prefix, None, tmp_path / "p.npz"], 9),
        ]:
            SmartInit(source).init(sess)
            assert sess.run(variables["step"]) == step, source

    def test_nothing_matches_is_an_error(self, graph, sess, make_vars, write_checkpoint, tmp_path):
        """A checkpoint of another model restores nothing: an error with both sides' names.

        The graph keeps nothing of the checkpoint, so training would start from the
        initial values; it fails before the session is touched.
        """
        prefix = write_checkpoint({"other/W": VALUES["block/conv/W"], "other/step": VALUES["step"]})
        save_checkpoint_vars({"elsewhere": np.zeros(2, np.float32)}, tmp_path / "p.npz")
        make_vars(SHAPES)
        init_all(sess)
        for source in (prefix, str(tmp_path / "p.npz"), {"nope": np.zeros(2, np.float32)}):
            init = SmartInit(source)
            with pytest.raises(NothingToRestoreError) as info:
                init.setup_graph(graph)
            with pytest.raises(NothingToRestoreError):
                init.init(sess)
        message = str(info.value)
        assert "none of its 1 entry names a variable of the graph (4 variables)" in message
        assert "'nope': float32 (2,)" in message
        assert "'block/conv/W': float32 (3, 4)" in message
        with pytest.raises(NothingToRestoreError, match=r"'other/W'.*\n.*'other/step'"):
            SmartInit(prefix).init(sess)
        # Entries all ignored on purpose are not this error.
        SaverRestore(prefix, ignore=["other/W", "other/step"]).init(sess)

    def test_get_model_loader(self, graph, sess, make_vars, write_checkpoint, tmp_path):
        """tensorpack's get_model_loader: a checkpoint or an npz file, as SmartInit reads them."""
        prefix = write_checkpoint(VALUES)
        save_checkpoint_vars({"step": np.array(9, np.int64)}, tmp_path / "p.npz")
        variables = make_vars(SHAPES)
        init_all(sess)
        get_model_loader(prefix).init(sess)
        assert sess.run(variables["step"]) == 42
        get_model_loader(tmp_path / "p.npz").init(sess)
        assert sess.run(variables["step"]) == 9
        with pytest.raises(ValueError, match=r"is a \.npy file"):
            get_model_loader(str(tmp_path / "p.npy"))
        with pytest.raises(TypeError, match="'filename' must be a path"):
            get_model_loader({"step": 1})

    def test_npz_without_suffix(self, graph, sess, make_vars, tmp_path):
        """A zip of ``.npy`` arrays is read as npz whatever its name."""
        np.savez(tmp_path / "weights.npz", step=np.array(4, np.int64))
        os.rename(tmp_path / "weights.npz", tmp_path / "weights.bin")
        variables = make_vars({"step": SHAPES["step"]})
        init_all(sess)
        init = SmartInit(str(tmp_path / "weights.bin"))
        init.init(sess)
        assert sess.run(variables["step"]) == 4
        assert repr(init) == f"SmartInit({str(tmp_path / 'weights.bin')!r}, ignore_mismatch=False)"

    def test_ignore_mismatch(self, graph, sess, make_vars, tmp_path, write_checkpoint):
        """ignore_mismatch relaxes every kind of source alike."""
        values = {"h": np.array([0.5, 1.5], np.float16), "bad": np.zeros(3, np.float32)}
        prefix = write_checkpoint(values)
        save_checkpoint_vars(values, tmp_path / "p.npz")
        variables = make_vars({"h": ((2,), "float32"), "bad": ((2,), "float32")})
        init_all(sess)
        for source in (prefix, str(tmp_path / "p.npz"), values):
            with pytest.raises(
                RestoreMismatchError, match=r"'bad': source float32 \(3,\), graph float32 \(2,\)"
            ) as info:
                SmartInit(source).init(sess)
            # The fix offered is SmartInit's own argument, whatever the source.
            assert str(info.value).splitlines()[-1] == (
                "Pass ignore_mismatch=True to SmartInit to convert the fixable ones and skip the rest."
            )
            sess.run(variables["h"].initializer)
            SmartInit(source, ignore_mismatch=True).init(sess)
            assert sess.run(variables["h"]).tolist() == [0.5, 1.5]

    def test_fail(self, tmp_path):
        """Missing paths, non-checkpoint files and unsupported kinds are reported."""
        with pytest.raises(CheckpointNotFoundError, match=r"checkpoint '.*absent' does not exist"):
            SmartInit(str(tmp_path / "absent"))
        with pytest.raises(
            CheckpointNotFoundError, match=r"npz file '.*absent.npz' does not exist"
        ):
            SmartInit(str(tmp_path / "absent.npz"))
        (tmp_path / "notes.txt").write_text("x")
        with pytest.raises(
            NotACheckpointError, match=r"'.*notes.txt' is not a TensorFlow checkpoint"
        ):
            SmartInit(str(tmp_path / "notes.txt"))
        (tmp_path / "fake.npz").write_text("x")
        with pytest.raises(NotACheckpointError, match=r"'.*fake.npz' is not an npz file"):
            SmartInit([None, str(tmp_path / "fake.npz")])
        with pytest.raises(TypeError, match=r"SmartInit cannot load a int: expected a checkpoint"):
            SmartInit(3)


class TestGraphLifetime:
    """Restoring keeps no reference to the graph: it is freed like any other."""

    def test_graph_collected(self, write_checkpoint):
        """After a restore and close, the graph is garbage-collected."""
        prefix = write_checkpoint(VALUES)

        def restore_once():
            g = tf.Graph()
            with g.as_default():
                _make = [tf1.get_variable(n, shape=s, dtype=d) for n, (s, d) in SHAPES.items()]
                with tf1.Session(graph=g) as s:
                    s.run(tf1.global_variables_initializer())
                    SaverRestore(prefix).init(s)
                    DictRestore(VALUES).init(s)
            return weakref.ref(g)

        ref = restore_once()
        gc.collect()
        assert ref() is None


class TestRoundTrip:
    """checkpoint -> npz -> dict -> session, values intact at every step."""

    def test_checkpoint_npz_dict_session(self, graph, sess, make_vars, write_checkpoint, tmp_path):
        """A checkpoint converted to npz and to a dict restores the same values."""
        prefix = write_checkpoint(VALUES)
        as_dict = load_checkpoint_vars(prefix)
        save_checkpoint_vars(as_dict, tmp_path / "params.npz")
        from_npz = load_npz(tmp_path / "params.npz")
        assert_values(from_npz, VALUES)
        variables = make_vars(SHAPES)
        for name in VALUES:
            tf1.add_to_collection(tf1.GraphKeys.MODEL_VARIABLES, variables[name])
        init_all(sess)
        DictRestore(from_npz).init(sess)
        assert_values(read(sess, variables), VALUES)
        with sess.as_default():
            dump_session_params(tmp_path / "dumped.npz")
        save_checkpoint_vars(load_npz(tmp_path / "dumped.npz"), tmp_path / "back-1")
        init_all(sess)
        SmartInit(str(tmp_path / "back-1")).init(sess)
        assert_values(read(sess, variables), VALUES)
