"""XLA as one switch: TrainConfig(xla=...) and setup_graph(xla=...), on real sessions."""

from __future__ import annotations

import logging
import os
import sys
import textwrap

import numpy as np
import prefork
import pytest
import tensorflow as tf
from helpers import blobs, creator, mlp_cost
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import Callback
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AutoResumeTrainConfig,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated,
    TrainConfig,
    XlaCompileError,
    launch_train_with_config,
)
from towerkit.trainers._xla import XLA_VALUES, check_xla, unsupported_ops, xla_in_effect

X, Y = blobs(128)
BATCHES = [[X[i : i + 16], Y[i : i + 16]] for i in range(0, 128, 16)]


class Mlp(ModelDesc):
    """The helpers' MLP: static shapes, no summaries, so XLA compiles it."""

    def inputs(self):
        return [tf.TensorSpec([16, 32], tf.float32, "x"), tf.TensorSpec([16], tf.int32, "y")]

    def build_graph(self, x, y):
        return mlp_cost(x, y)

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.1)


class WithPyFunc(Mlp):
    """The MLP with a ``py_func`` in its tower: XLA has no kernel for it."""

    def build_graph(self, x, y):
        scaled = tf1.py_func(lambda a: a * np.float32(1.0), [x], tf.float32, name="host_scale")
        scaled.set_shape(x.shape)
        return mlp_cost(scaled, y)


class Trajectory(Callback):
    """The loss on the whole data set after every session call, by a predictor.

    Tensors inside an XLA cluster cannot be fetched: a predictor builds an inference
    tower outside it.
    """

    accepts_coarse_steps = True  # with K steps per call: once per call

    def __init__(self):
        self.losses: list[float] = []

    def _setup_graph(self):
        self.pred = self.trainer.get_predictor(["x", "y"], ["cost"])

    def _loss(self):
        return float(
            np.mean([self.pred(X[i : i + 16], Y[i : i + 16])[0] for i in range(0, 128, 16)])
        )

    def _before_train(self):
        self.losses.append(self._loss())

    def _trigger_step(self):
        self.losses.append(self._loss())


def run(trainer, xla, *, model=None, k=1, queue=False):
    """Train `model` (the MLP) for 2 epochs of 8 steps with `trainer`; the loss trajectory."""
    traj = Trajectory()
    source = NumpyInput([X, Y], batch_size=16, shuffle=False)
    with tf.Graph().as_default():
        cfg = TrainConfig(
            model=model or Mlp(),
            # a data flow goes through the launcher's prefetching queue (tensorpack's QueueInput)
            **({"dataflow": BATCHES} if queue else {"data": source}),
            callbacks=[traj],
            monitors=[],
            extra_callbacks=[],
            session_creator=creator(),
            max_epoch=2,
            steps_per_epoch=8,
            steps_per_execution=k,
            seed=0,
            xla=xla,
        )
        launch_train_with_config(cfg, trainer)
        compiled = has_cluster(trainer.graph)
    assert compiled == trainer.xla_compiled
    return np.array(traj.losses)


def has_cluster(graph):
    """Whether the graph, or a function of it (the K-step loop's body), holds an XLA cluster."""
    graph_def = graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return any("_xla_compile_id" in n.attr for n in nodes)


TRAINERS = {
    "simple": lambda: SimpleTrainer(),
    "replicated": lambda: SyncMultiGPUTrainerReplicated(2, mode="cpu"),
    "parameter_server": lambda: SyncMultiGPUTrainerParameterServer(2),
}


class TestSameTrajectory:
    """The compiled step follows the plain one's loss trajectory to float tolerance."""

    @pytest.mark.parametrize("name", sorted(TRAINERS))
    def test_trainers(self, name):
        """Each shipped single-process trainer trains the same with xla=True as without."""
        plain = run(TRAINERS[name](), False)
        xla = run(TRAINERS[name](), True)
        assert len(plain) == 17
        assert plain[-1] < 0.5 * plain[0]
        np.testing.assert_allclose(xla, plain, rtol=2e-4, atol=1e-5)

    @pytest.mark.parametrize("queue", [False, True], ids=["numpy", "queue"])
    def test_k_steps_per_call(self, queue):
        """K=4 steps per call: each step of the in-graph loop runs the cluster; same losses."""
        plain = run(SimpleTrainer(), False, k=4, queue=queue)
        xla = run(SimpleTrainer(), True, k=4, queue=queue)
        assert len(plain) == 5
        np.testing.assert_allclose(xla, plain, rtol=2e-4, atol=1e-5)
        one = run(SimpleTrainer(), True)
        np.testing.assert_allclose(xla, one[::4], rtol=2e-4, atol=1e-5)

    def test_auto_compiles_what_compiles(self):
        """xla='auto' on a tower XLA compiles builds the cluster, and warns nothing."""
        trainer = SimpleTrainer()
        losses = run(trainer, "auto")
        assert trainer.xla_compiled
        assert losses[-1] < 0.5 * losses[0]


XLA_RUN = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    from towerkit.towers.compat import tf1
    from towerkit.trainers import NumpyInput, SimpleTrainer

    def cost(x, y):
        w = tf1.get_variable("W", [8, 2])
        logits = tf.matmul(x, w)
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        )

    x = np.random.default_rng(0).random((64, 8)).astype(np.float32)
    y = (x.sum(1) > 4).astype(np.int32)
    sig = [tf.TensorSpec([16, 8], tf.float32, "x"), tf.TensorSpec([16], tf.int32, "y")]
    trainer = SimpleTrainer()
    trainer.setup_graph(
        sig, NumpyInput([x, y], batch_size=16), cost,
        lambda: tf1.train.GradientDescentOptimizer(0.1),
        steps_per_execution=int(sys.argv[1]), xla=sys.argv[2] == "True",
    )
    trainer.train_with_defaults(
        callbacks=[], monitors=[], extra_callbacks=[], max_epoch=1, steps_per_epoch=4,
        steps_per_execution=int(sys.argv[1]),
    )
    print("steps", trainer.global_step)
    """
)


@pytest.mark.procs
@pytest.mark.parametrize("k", [1, 4])
def test_xla_really_compiles(tmp_path, k):
    """XLA compiles two modules (the check at setup, the step), K=4's loop body included.

    And TensorFlow's deprecation notice for the call is not printed.

    In a process of its own: ``XLA_FLAGS`` is read once per process.
    """
    dumps = {}
    for xla in (True, False):
        where = tmp_path / f"dump-{xla}"
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={where}", TF_CPP_MIN_LOG_LEVEL="2")
        done = prefork.run([sys.executable, "-c", XLA_RUN, str(k), str(xla)], env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "steps 4" in done.stdout
        # TensorFlow's deprecation notice for tf.xla.experimental.compile is silenced
        assert "compiler.xla.xla) is deprecated" not in done.stderr
        dumps[xla] = (
            {p.name.split(".")[0] for p in where.glob("module_*")} if where.exists() else set()
        )
    assert len(dumps[True]) == 2, sorted(dumps[True])
    assert dumps[False] == set()


class TestRefusals:
    """Towers XLA cannot compile, and bad values of the switch."""

    def test_true_refuses_py_func(self):
        """xla=True on a tower with a py_func: an error at setup naming the op and the switch."""
        trainer = SimpleTrainer()
        expected = (
            r"xla=True \(or XLA_COMPILE\) for SimpleTrainer: XLA has no kernel for "
            r"PyFunc \(host_scale\); remove those ops .* pass xla='auto'"
        )
        with pytest.raises(XlaCompileError, match=expected):
            run(trainer, True, model=WithPyFunc())
        assert trainer.global_step == 0

    def test_auto_falls_back_with_one_warning(self, caplog):
        """xla='auto' on that tower trains the plain graph and says why, in one line."""
        trainer = SimpleTrainer()
        with caplog.at_level(logging.WARNING):
            auto = run(trainer, "auto", model=WithPyFunc())
        # (TensorFlow's notice about the test's own py_func names this file, whose name has "xla")
        messages = [r.getMessage().replace(__file__, "") for r in caplog.records]
        said = [m for m in messages if "xla" in m.lower()]
        assert said == [
            "xla='auto': training without XLA: XLA has no kernel for PyFunc (host_scale)"
        ]
        assert not trainer.xla_compiled
        np.testing.assert_allclose(auto, run(SimpleTrainer(), False, model=WithPyFunc()), rtol=1e-6)

    def test_class_attribute_and_config(self):
        """XLA_COMPILE is the class-level spelling; a config's xla wins over it."""

        class Compiled(SimpleTrainer):
            XLA_COMPILE = True

        assert Compiled().xla_compiled
        assert not SimpleTrainer().xla_compiled
        by_class = Compiled()
        run(by_class, None)
        assert by_class.xla_compiled
        overridden = Compiled()
        run(overridden, False)
        assert not overridden.xla_compiled

    def test_auto_resume_config(self, tmp_path):
        """AutoResumeTrainConfig takes the switch too (and refuses bad values)."""
        trainer = SimpleTrainer()
        with tf.Graph().as_default():
            cfg = AutoResumeTrainConfig(
                model=Mlp(),
                data=NumpyInput([X, Y], batch_size=16, shuffle=False),
                monitors=[],
                extra_callbacks=[],
                max_epoch=1,
                steps_per_epoch=4,
                logdir=str(tmp_path),
                xla=True,
            )
            assert cfg.xla is True
            launch_train_with_config(cfg, trainer)
        assert trainer.xla_compiled
        assert trainer.global_step == 4
        with pytest.raises(ValueError, match=r"'xla' must be False, True or 'auto'"):
            AutoResumeTrainConfig(logdir=str(tmp_path), xla="on")

    @pytest.mark.parametrize("bad", ["yes", "true", 1, 0, "AUTO", 1.0])
    def test_bad_values(self, bad):
        """A value other than False, True, 'auto' or None is refused, naming the argument."""
        expected = (
            r"'xla' must be False, True or 'auto' \(or None: the trainer's XLA_COMPILE\); "
            rf"got {bad!r}"
        )
        with pytest.raises(ValueError, match=expected):
            TrainConfig(xla=bad)
        with tf.Graph().as_default(), pytest.raises(ValueError, match=expected):
            SimpleTrainer().setup_graph(
                Mlp().get_input_signature(),
                NumpyInput([X, Y], batch_size=16),
                mlp_cost,
                Mlp().optimizer,
                xla=bad,
            )

    def test_set_after_construction(self):
        """Set after construction, the value is checked when the config is next read."""
        cfg = TrainConfig(xla="auto")
        assert cfg.xla == "auto"
        cfg.xla = "sometimes"
        with pytest.raises(ValueError, match="got 'sometimes'"):
            _ = cfg.spec


class TestPure:
    """The switch's pure functions."""

    @given(st.one_of(st.none(), st.sampled_from(XLA_VALUES)), st.booleans())
    def test_in_effect(self, given_value, class_default):
        """The given value wins; None falls back on the class's XLA_COMPILE."""
        got = xla_in_effect(given_value, class_default)
        assert got == (class_default if given_value is None else given_value)
        assert check_xla(got) == got

    @given(st.one_of(st.integers(), st.floats(), st.text(), st.binary()))
    def test_other_values_refused(self, value):
        """Anything that is not False, True, 'auto' or None is refused."""
        if value == "auto":
            assert check_xla(value) == "auto"
            return
        with pytest.raises(ValueError, match="'xla' must be False, True or 'auto'"):
            check_xla(value)

    @given(
        st.lists(
            st.tuples(
                st.from_regex(r"[A-Z][A-Za-z0-9]{0,12}", fullmatch=True),
                st.from_regex(r"[a-z_][a-z0-9_/]{0,20}", fullmatch=True),
            ),
            max_size=4,
        )
    )
    def test_unsupported_ops(self, pairs):
        """Each op and node an XLA error names comes back once, in order."""
        text = (
            "Detected unsupported operations when trying to compile graph c on XLA_CPU_JIT: "
            + ", ".join(
                f"{op} (No registered '{op}' OpKernel for XLA_CPU_JIT devices compatible with node "
                f"{{{{node {node}}}}}){{{{node {node}}}}}"
                for op, node in pairs
            )
        )
        unique = list(dict.fromkeys(pairs))
        assert unsupported_ops(text) == tuple(unique)
