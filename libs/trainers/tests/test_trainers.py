"""Single-cost trainers on a real model: training, graph-building options, towers, predictors."""

import numpy as np
import pytest
import tensorflow as tf
from helpers import blobs, creator, dense, mlp_cost

from towerkit.callbacks import Callback
from towerkit.towers import TowerContext, TowerFunc, TowerRuleError, visible_gpu_count
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    DEFAULT_CALLBACKS,
    InputSizeUnknownError,
    NoOpTrainer,
    NumpyInput,
    SimpleTrainer,
    SingleCostTrainer,
    TFDatasetInput,
    TrainerStateError,
)

SIG = [tf.TensorSpec([None, 32], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]


class CostLog(Callback):
    """Fetches the tensor named ``cost`` along every step and keeps the values."""

    def __init__(self):
        self.values = []

    def _setup_graph(self):
        self.cost = self.graph.get_tensor_by_name("cost:0")

    def _before_run(self, ctx):
        return [self.cost]

    def _after_run(self, ctx, values):
        self.values.append(float(values.results[0]))


def numpy_input(n=256, batch=32):
    """Shuffled synthetic blobs in batches of `batch`."""
    return NumpyInput(list(blobs(n)), batch_size=batch, seed=1)


def sgd():
    """Plain SGD."""
    return tf1.train.GradientDescentOptimizer(0.1)


def train(trainer, cost_fn=mlp_cost, callbacks=(), epochs=3, source=None, **kw):
    """Set up and train `trainer` on blobs; return the CostLog."""
    log = CostLog()
    trainer.setup_graph(SIG, source or numpy_input(), cost_fn, sgd)
    trainer.train_with_defaults(
        callbacks=[log, *callbacks],
        monitors=[],
        extra_callbacks=[],
        session_creator=creator(),
        max_epoch=epochs,
        **kw,
    )
    return log


def fell(values, k=8):
    """Whether the mean of the last `k` values is under half the mean of the first `k`."""
    return np.mean(values[-k:]) < 0.5 * np.mean(values[:k])


class TestSimpleTrainer:
    """SimpleTrainer trains a real model."""

    def test_loss_falls(self, graph):
        """The MLP's loss falls; steps_per_epoch defaults to the input's size."""
        trainer = SimpleTrainer()
        log = train(trainer)
        assert trainer.steps_per_epoch == 8
        assert len(log.values) == 24
        assert fell(log.values)
        assert trainer.global_step == 24

    def test_with_default_callbacks(self, graph):
        """DEFAULT_CALLBACKS run along (moving averages, summaries, update ops, progress bar)."""
        trainer = SimpleTrainer()
        trainer.setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        log = CostLog()
        trainer.train_with_defaults(
            callbacks=[log], monitors=[], session_creator=creator(), max_epoch=2
        )
        assert fell(log.values, 4)
        defaults = [type(cb) for cb in DEFAULT_CALLBACKS()]
        assert [type(cb) for cb in trainer.callbacks][-5:-1] == defaults, "before the monitors"

    def test_no_global_step_in_optimizer(self, graph):
        """The train op does not touch the global step: only the hooked session counts it."""
        trainer = SimpleTrainer()
        trainer.setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        gs = tf1.train.get_global_step()
        readers = [
            op
            for op in graph.get_operations()
            if op.type == "AssignAddVariableOp" and gs.op in [i.op for i in op.inputs]
        ]
        assert len(readers) == 1
        assert readers[0].name.startswith("global_step_increment/")

    def test_opt_fn_called_once(self, graph):
        """get_opt_fn is called once."""
        calls = []

        def opt():
            calls.append(1)
            return sgd()

        SimpleTrainer().setup_graph(SIG, numpy_input(), mlp_cost, opt)
        assert calls == [1]

    def test_unknown_size(self, graph):
        """An input without a size and no steps_per_epoch: a clear error."""
        x, y = blobs(64)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
        trainer = SimpleTrainer()
        with pytest.raises(InputSizeUnknownError, match="pass 'steps_per_epoch' explicitly"):
            train(trainer, source=TFDatasetInput(ds))

    def test_dataset_input(self, graph):
        """A tf.data input with an explicit steps_per_epoch trains."""
        x, y = blobs(256)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(32).repeat()
        log = train(SimpleTrainer(), source=TFDatasetInput(ds), steps_per_epoch=8)
        assert fell(log.values)

    def test_bad_cost(self, graph):
        """A non-scalar or non-tensor cost, or one with no trainable variable, is refused."""
        with pytest.raises(
            TypeError, match=r"the cost must be a scalar floating tensor; got .* shape"
        ):
            SimpleTrainer().setup_graph(SIG, numpy_input(), lambda x, y: dense(x, 3, "fc"), sgd)

    def test_cost_without_variables(self):
        """A cost that depends on no trainable variable: nothing to train."""
        with (
            tf.Graph().as_default(),
            pytest.raises(ValueError, match="the cost depends on none of the trainable variables"),
        ):
            SimpleTrainer().setup_graph(
                SIG,
                numpy_input(),
                lambda x, y: tf1.get_variable("unused", [1]) is None or tf.reduce_sum(x),
                sgd,
            )

    def test_bad_arguments(self, graph):
        """Arguments of the wrong kind are named."""
        with pytest.raises(TypeError, match="'get_cost_fn' must be callable; got int"):
            SimpleTrainer().setup_graph(SIG, numpy_input(), 3, sgd)
        with pytest.raises(
            TypeError, match=r"'input' must be an InputSource .*; got list without setup\(\)"
        ):
            SimpleTrainer().setup_graph(SIG, [], mlp_cost, sgd)


def cost_with_decay(x, y):
    """The MLP cost plus weight decay, so fc0/W gets gradients from two paths."""
    cost = mlp_cost(x, y)
    w = tf1.get_variable("fc0/W")
    return cost + 1e-4 * tf.nn.l2_loss(w)


def reused_cost(x, y):
    """`cost_with_decay` under an auto-reuse scope (it re-gets fc0/W)."""
    with tf1.variable_scope(tf1.get_variable_scope(), reuse=tf1.AUTO_REUSE):
        return cost_with_decay(x, y)


class TestOptions:
    """GATE_GRADIENTS, COLOCATE_GRADIENTS_WITH_OPS, AGGREGATION_METHOD and XLA_COMPILE act."""

    def test_gate_gradients(self, graph):
        """Gated gradients group each op's gradients with a tuple; training still works."""

        class Gated(SimpleTrainer):
            GATE_GRADIENTS = True

        log = train(Gated(), epochs=2)
        assert fell(log.values, 4)
        assert any(
            "tuple" in op.name and op.name.startswith("gradients") for op in graph.get_operations()
        )

    def test_no_gate(self, graph):
        """Without gating there is no gradient tuple."""
        SimpleTrainer().setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        assert not any(
            "tuple" in op.name and op.name.startswith("gradients") for op in graph.get_operations()
        )

    def test_aggregation_method(self, graph):
        """EXPERIMENTAL_TREE sums a variable's gradient terms in its own tree (default: one AddN)."""

        class Tree(SimpleTrainer):
            AGGREGATION_METHOD = tf.AggregationMethod.EXPERIMENTAL_TREE

        def sums(g):
            return [
                op.name
                for op in g.get_operations()
                if op.name.startswith("gradients") and op.type == "AddN"
            ]

        log = train(Tree(), cost_fn=reused_cost, epochs=2)
        assert fell(log.values, 4)
        assert sums(graph) == ["gradients/fc0/W_gradient_sum/AddN"]
        with tf.Graph().as_default() as g2:
            SimpleTrainer().setup_graph(SIG, numpy_input(), reused_cost, sgd)
        assert sums(g2) == ["gradients/AddN"]

    def test_colocate(self, graph):
        """With colocation, gradient ops carry their forward op's colocation group."""

        class Colocate(SimpleTrainer):
            COLOCATE_GRADIENTS_WITH_OPS = True

        class Free(SimpleTrainer):
            COLOCATE_GRADIENTS_WITH_OPS = False

        def count_colocated(g):
            n = 0
            for op in g.get_operations():
                if op.name.startswith("gradients") and any(
                    c != f"loc:@{op.name}".encode() for c in op.colocation_groups()
                ):
                    n += 1
            return n

        Colocate().setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        with_colocation = count_colocated(graph)
        g2 = tf.Graph()
        with g2.as_default():
            Free().setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        assert with_colocation > count_colocated(g2)

    def test_xla_compile(self, graph):
        """XLA_COMPILE builds cost and gradients in an XLA cluster; training works.

        Tensors inside the cluster cannot be fetched, so the loss is measured by a
        predictor (an inference tower outside the cluster).
        """

        class Xla(SimpleTrainer):
            XLA_COMPILE = True

        x, y = blobs(256)
        losses = []

        class Loss(Callback):
            def _setup_graph(self):
                self.pred = self.trainer.get_predictor(["x", "y"], ["cost"])

            def _before_train(self):
                losses.append(float(self.pred(x, y)[0]))

            def _after_train(self):
                losses.append(float(self.pred(x, y)[0]))

        trainer = Xla()
        trainer.setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        trainer.train_with_defaults(
            callbacks=[Loss()],
            monitors=[],
            extra_callbacks=[],
            session_creator=creator(),
            max_epoch=2,
        )
        assert losses[1] < 0.5 * losses[0]
        assert any("_xla_compile_id" in op.node_def.attr for op in graph.get_operations())

    def test_bad_gate(self, graph):
        """A GATE_GRADIENTS that is neither bool nor 0..2 is refused."""

        class Bad(SimpleTrainer):
            GATE_GRADIENTS = 7

        with pytest.raises(ValueError, match="'GATE_GRADIENTS' must be a bool or 0, 1, 2; got 7"):
            Bad().setup_graph(SIG, numpy_input(), mlp_cost, sgd)


def tower_breaker(x, y):
    """Breaks rule 4: a trainable variable made with tf.Variable (not shared between towers)."""
    v = tf.Variable(tf.ones([32, 10]), name="free")
    logits = tf.matmul(x, v)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


class TestTowerRules:
    """CHECK_TOWER_RULES checks the tower function before building."""

    def test_violation_raises(self, graph):
        """A tower function breaking a rule is refused with the rule named."""

        class Checked(SimpleTrainer):
            CHECK_TOWER_RULES = True

        with pytest.raises(TowerRuleError, match=r"breaks the tower rules:\n  \[rule 4"):
            Checked().setup_graph(SIG, numpy_input(), tower_breaker, sgd)

    def test_good_function_passes(self, graph):
        """A rule-abiding tower function builds and the graph is untouched by the check."""

        class Checked(SimpleTrainer):
            CHECK_TOWER_RULES = True

        trainer = Checked()
        trainer.setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        assert len(trainer.towers) == 1

    def test_unchecked_by_default(self, graph):
        """Without the flag the same function builds."""
        SimpleTrainer().setup_graph(SIG, numpy_input(), tower_breaker, sgd)


class TestTowers:
    """tower_func, inputs_desc, towers and predictors."""

    def test_towers(self, graph):
        """One training tower, with its tensors by name and its inputs by signature name."""
        trainer = SimpleTrainer()
        trainer.setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        assert isinstance(trainer.tower_func, TowerFunc)
        assert [s.name for s in trainer.inputs_desc] == ["x", "y"]
        tower = trainer.towers[0]
        assert tower.is_training
        assert tower.get_tensor("cost").name == "cost:0"
        assert tower.get_tensor("x") is tower.inputs[0]
        assert len(trainer.towers.training()) == 1

    def test_tower_func_once(self, graph):
        """tower_func is set once."""
        trainer = SimpleTrainer()
        trainer.setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        with pytest.raises(TrainerStateError, match="'tower_func' can be set only once"):
            trainer.tower_func = TowerFunc(mlp_cost, SIG)
        with pytest.raises(TypeError, match="'tower_func' must be a TowerFunc; got function"):
            SimpleTrainer().tower_func = mlp_cost

    def test_no_tower_func(self, graph):
        """Without a tower function, predictors and inputs_desc say what is missing."""
        with pytest.raises(TrainerStateError, match="needs 'tower_func'"):
            SimpleTrainer().get_predictor(["x"], ["prob"])
        with pytest.raises(TrainerStateError, match="needs 'tower_func'"):
            _ = SimpleTrainer().inputs_desc

    def test_predictor(self, graph):
        """A predictor built in setup_graph runs the trained model in inference mode."""
        x, y = blobs(256)
        results = {}

        class Evaluate(Callback):
            def _setup_graph(self):
                self.pred = self.trainer.get_predictor(["x"], ["prob"])
                self.cpu = self.trainer.get_predictor(["x"], ["prob"], device=-1)
                self.again = self.trainer.get_predictor(["x"], ["prob"])

            def _after_train(self):
                (prob,) = self.pred(x)
                results["acc"] = float(np.mean(prob.argmax(1) == y))
                results["cpu"] = self.cpu(x)[0]
                results["prob"] = prob

        trainer = SimpleTrainer()
        train(trainer, callbacks=[Evaluate()])
        assert results["acc"] > 0.9
        np.testing.assert_allclose(results["cpu"], results["prob"], rtol=1e-5)
        inference = trainer.towers.inference()
        assert len(inference) == (1 if visible_gpu_count() == 0 else 2)
        assert inference[0].ns_name == "InferenceTower"
        assert not inference[0].is_training
        assert len(tf1.trainable_variables()) == 4, "inference towers reuse the training variables"
        assert trainer.get_predictor(["x"], ["prob"], device=-1) is not None, "cached"
        assert trainer.get_predictor(["x"], ["cost"]) is not None, "same tower, other outputs"

    def test_predictor_feeds_a_tensor_inside_the_model(self, graph):
        """A sampler callback feeds a tensor of the tower that is not a model input."""

        def cost_with_hidden(x, y):
            h = dense(x, 16, "fc0", tf.nn.relu)
            h = tf1.placeholder_with_default(h, [None, 16], name="hidden")
            logits = dense(h, 10, "fc1")
            tf.identity(tf.nn.softmax(logits), name="prob")
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            return tf.reduce_mean(loss, name="cost")

        got = {}

        class Sampler(Callback):
            def _setup_graph(self):
                self.sample = self.trainer.get_predictor(["hidden"], ["prob"])
                self.bias = self.trainer.towers[0].get_variable("fc1/b")

            def _after_train(self):
                (got["prob"],) = self.sample(np.zeros([2, 16], np.float32))
                got["bias"] = self.bias.eval(session=self.trainer.sess)

        train(SimpleTrainer(), cost_fn=cost_with_hidden, callbacks=[Sampler()], epochs=1)
        expected = np.exp(got["bias"]) / np.exp(got["bias"]).sum()
        np.testing.assert_allclose(got["prob"], np.stack([expected] * 2), rtol=1e-5)

    def test_predictor_names_fail(self, graph):
        """Names that are no tensor, or a variable, are refused with the name at fault."""
        trainer = SimpleTrainer()
        trainer.setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        with pytest.raises(KeyError, match=r"has no tensor 'hiden'"):
            trainer.get_predictor(["hiden"], ["prob"])
        with pytest.raises(
            TypeError, match=r"'input_names' must name tensors that can be fed.*'fc0/W'"
        ):
            trainer.get_predictor(["fc0/W"], ["prob"])

    def test_predictor_after_finalize(self, graph):
        """A predictor needing a new tower once the graph is finalized: a clear error."""

        class Late(Callback):
            def _before_train(self):
                self.trainer.get_predictor(["x"], ["prob"])

        with pytest.raises(
            TrainerStateError,
            match="the graph is finalized: call get_predictor in a callback's _setup_graph",
        ):
            train(SimpleTrainer(), callbacks=[Late()])

    def test_bad_device(self):
        """Devices below -1 are refused."""
        from towerkit.trainers._tower import predictor_device

        with pytest.raises(
            ValueError, match="'device' must be a GPU id >= 0 or -1 for the CPU; got -2"
        ):
            predictor_device(-2, 0)
        with pytest.raises(ValueError, match="'device' 3 is not a visible GPU"):
            predictor_device(3, 2)


class TestNoOpTrainer:
    """NoOpTrainer builds the model and only runs callbacks."""

    def test_runs_callbacks_only(self, graph):
        """The weights stay, the global step counts, hooks fetch what they ask for."""
        trainer = NoOpTrainer()
        trainer.setup_graph(SIG, numpy_input(), mlp_cost, sgd)
        assert trainer.train_op is None
        w = tf1.trainable_variables()[0]
        seen = []

        class Weights(Callback):
            def _trigger_epoch(self):
                seen.append(self.trainer.sess.run(w))

        log = CostLog()
        trainer.train_with_defaults(
            callbacks=[log, Weights()],
            monitors=[],
            extra_callbacks=[],
            session_creator=creator(),
            max_epoch=2,
        )
        np.testing.assert_array_equal(seen[0], seen[1])
        assert trainer.global_step == 16
        assert len(log.values) == 16


class TestSingleCostTrainerIsAbstract:
    """SingleCostTrainer is a base: a subclass defines how the towers are built."""

    def test_cannot_instantiate(self, graph):
        """Instantiating it, or a subclass without _setup_graph, names the missing method."""

        class NoSetup(SingleCostTrainer):
            pass

        for cls in (SingleCostTrainer, NoSetup):
            with pytest.raises(TypeError, match="_setup_graph"):
                cls()

    def test_subclass_with_setup_graph(self, graph):
        """A subclass composing the gradient primitive with a clipped optimizer step trains."""

        class Clipped(SingleCostTrainer):
            def _setup_graph(self, input, get_cost_fn, get_opt_fn):
                with TowerContext("", is_training=True):
                    grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
                    grads = [(tf.clip_by_norm(g, 1.0), v) for g, v in grads]
                    self.train_op = get_opt_fn().apply_gradients(grads, name="train_op")
                return []

        trainer = Clipped()
        log = train(trainer)
        assert fell(log.values)
        assert trainer.global_step == 24
