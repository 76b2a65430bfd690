"""Mixed precision: policies, float32 storage, dynamic loss scaling; real sessions and files."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.callbacks import JSONWriter, ModelSaver, ScalarPrinter
from towerkit.sessinit import load_checkpoint_vars
from towerkit.towers import (
    FLOAT32,
    POLICIES,
    Precision,
    TowerContext,
    TowerFunc,
    add_moving_summary,
    precision_policy,
    precision_scope,
)
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    AccumGradOptimizer,
    AsyncMultiGPUTrainer,
    AutoResumeTrainConfig,
    LossScaleOptimizer,
    LossScaleSchedule,
    ModelDesc,
    NumpyInput,
    SimpleTrainer,
    SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated,
    TrainConfig,
    Trainer,
    launch_train_with_config,
    next_loss_scale,
)
from towerkit.trainers._precision import built_in_refusal, ops_without_half_kernels

SEED = 3


def data(n: int = 128) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.random((n, 8, 8, 1)).astype(np.float32)
    y = (x.reshape(n, -1).mean(1) > 0.5).astype(np.int32)
    return [x, y]


class ConvNet(ModelDesc):
    """conv - BN - pool, then a plain ``get_variable`` matmul: both kinds follow the policy."""

    def __init__(self, schedule: LossScaleSchedule | None = None, lr: float = 1e-2) -> None:
        self.schedule = schedule
        self.lr = lr
        self.dtypes: list[tf.DType] = []

    def inputs(self) -> list[tf.TensorSpec]:
        return [
            tf.TensorSpec((None, 8, 8, 1), tf.float32, "image"),
            tf.TensorSpec((None,), tf.int32, "label"),
        ]

    def build_graph(self, image: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
        self.dtypes.append(image.dtype)
        init = tf1.glorot_uniform_initializer(seed=SEED)
        with tf1.variable_scope("conv0"):
            x = tf.nn.conv2d(
                image, tf1.get_variable("W", [3, 3, 1, 8], initializer=init), 1, "SAME"
            )
            x = tf.nn.relu(x + tf1.get_variable("b", [8], initializer=tf1.zeros_initializer()))
        # statistics in float32, as the policy wants them
        mean, var = tf.nn.moments(tf.cast(x, tf.float32), [0, 1, 2])
        x = tf.cast(
            tf.nn.batch_normalization(tf.cast(x, tf.float32), mean, var, None, None, 1e-5), x.dtype
        )
        x = tf.nn.max_pool2d(x, 2, 2, "VALID")
        w = tf1.get_variable("head/W", [4 * 4 * 8, 2], initializer=init)
        logits = tf.cast(tf.matmul(tf.reshape(x, [-1, 4 * 4 * 8]), w), tf.float32)
        cost = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
            name="cost",
        )
        add_moving_summary(cost)
        return cost

    def optimizer(self) -> tf1.train.Optimizer:
        opt = tf1.train.AdamOptimizer(self.lr)
        return opt if self.schedule is None else LossScaleOptimizer(opt, self.schedule)


def train(tmp_path, precision, *, model=None, trainer=None, epochs=2, config=TrainConfig, **kw):
    model = ConvNet() if model is None else model
    cfg = config(
        model=model,
        data=NumpyInput(data(), batch_size=16, shuffle=False),
        callbacks=[ModelSaver(max_to_keep=10)],
        monitors=[JSONWriter(), ScalarPrinter()],
        max_epoch=epochs,
        steps_per_epoch=8,
        logdir=str(tmp_path),
        precision=precision,
        **kw,
    )
    tf1.set_random_seed(SEED)
    launch_train_with_config(cfg, SimpleTrainer() if trainer is None else trainer)
    return json.loads((tmp_path / "stats.json").read_text())


# -- the pure core ------------------------------------------------------------------------

schedules = st.builds(
    LossScaleSchedule,
    initial=st.sampled_from([1.0, 8.0, 2.0**15]),
    growth_interval=st.integers(1, 5),
    factor=st.sampled_from([2.0, 4.0]),
    minimum=st.sampled_from([1.0]),
)


@given(schedules, st.lists(st.booleans(), max_size=30))
def test_next_loss_scale_grows_after_a_run_and_shrinks_on_overflow(schedule, steps):
    scale, good = schedule.initial, 0
    run = 0
    for finite in steps:
        before = scale
        scale, good = next_loss_scale(scale, good, finite, schedule)
        assert scale >= schedule.minimum
        if not finite:
            run = 0
            assert scale == max(before / schedule.factor, schedule.minimum)
            assert good == 0
        else:
            run += 1
            grew = run % schedule.growth_interval == 0
            assert scale == (before * schedule.factor if grew else before)
            assert good == run % schedule.growth_interval


@settings(max_examples=15, deadline=None)
@given(schedules, st.lists(st.booleans(), min_size=1, max_size=12))
def test_the_graph_update_is_next_loss_scale(schedule, steps):
    """The update op built by LossScaleOptimizer moves the scale as the pure function does."""
    g = tf.Graph()
    with g.as_default():
        w = tf1.Variable(1.0, name="w")
        x = tf1.placeholder(tf.float32, [])
        opt = LossScaleOptimizer(tf1.train.GradientDescentOptimizer(0.1), schedule)
        train_op = opt.apply_gradients(opt.compute_gradients(w * x))
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            scale, good = schedule.initial, 0
            for finite in steps:
                sess.run(train_op, {x: 1.0 if finite else np.inf})
                scale, good = next_loss_scale(scale, good, finite, schedule)
                assert sess.run(opt.loss_scale) == pytest.approx(scale)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"growth_interval": 0}, "growth_interval must be an int >= 1; got 0"),
        ({"factor": 1.0}, "factor must be > 1; got 1.0"),
        ({"initial": float("inf")}, "initial must be a finite number > 0"),
        ({"initial": 0.5, "minimum": 1.0}, "'initial' 0.5 is below 'minimum' 1.0"),
    ],
)
def test_a_bad_schedule_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LossScaleSchedule(**kwargs)


def test_an_unknown_policy_lists_the_valid_ones(tmp_path):
    expected = (
        "unknown precision policy 'mixed_fp16'; valid: 'float32', 'mixed_bfloat16', 'mixed_float16'"
    )
    with pytest.raises(ValueError, match=expected):
        precision_policy("mixed_fp16")
    with pytest.raises(ValueError, match=expected):
        TrainConfig(model=ConvNet(), precision="mixed_fp16")
    assert not list(tmp_path.iterdir())


# -- the graph ----------------------------------------------------------------------------


def test_towers_compute_in_bfloat16_with_float32_variables():
    g = tf.Graph()
    with g.as_default():
        model = ConvNet()
        func = TowerFunc(model.build_graph, model.get_input_signature())
        image = tf1.placeholder(tf.float32, [None, 8, 8, 1])
        label = tf1.placeholder(tf.int32, [None])
        with TowerContext("", is_training=True), precision_scope("mixed_bfloat16"):
            cost = func(image, label)
        assert model.dtypes == [tf.bfloat16]
        assert cost.dtype == tf.float32
        assert {v.dtype.base_dtype for v in tf1.global_variables()} == {tf.float32}
        convs = [op for op in g.get_operations() if op.type == "Conv2D"]
        assert [op.get_attr("T") for op in convs] == [tf.bfloat16]
        # the handle keeps the inputs as given (what a predictor feeds)
        assert func.towers[0].inputs[0] is image


def test_gradients_reach_the_processors_unscaled():
    g = tf.Graph()
    with g.as_default():
        w = tf1.Variable([1.0, 2.0], name="w")
        x = tf1.constant([3.0, -5.0])
        opt = LossScaleOptimizer(tf1.train.GradientDescentOptimizer(1.0))
        ((grad, _),) = opt.compute_gradients(tf.reduce_sum(w * x))
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            assert sess.run(opt.loss_scale) == 2.0**15
            np.testing.assert_allclose(sess.run(grad), [3.0, -5.0])


def test_an_overflow_step_is_skipped_and_halves_the_scale():
    """No variable or slot changes on a non-finite gradient; the next finite step applies."""
    g = tf.Graph()
    with g.as_default():
        w = tf1.Variable([1.0, 2.0], name="w")
        x = tf1.placeholder(tf.float16, [2])
        cost = tf.cast(tf.reduce_sum(tf.cast(w, tf.float16) * x), tf.float32)
        opt = LossScaleOptimizer(tf1.train.AdamOptimizer(0.1))
        train_op = opt.apply_gradients(opt.compute_gradients(cost))
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            slots = [opt.get_slot(w, "m"), opt.get_slot(w, "v")]
            before = sess.run([w, *slots])
            # 60000 * 32768 overflows float16 in the scaled gradient
            sess.run(train_op, {x: [60000.0, 1.0]})
            after = sess.run([w, *slots])
            for b, a in zip(before, after):
                np.testing.assert_array_equal(b, a)
            assert sess.run(opt.loss_scale) == 2.0**14
            sess.run(train_op, {x: [1.0, 1.0]})
            assert not np.array_equal(sess.run(w), before[0])


def test_float16_ops_without_a_kernel_are_named():
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float16, [3, 3], name="x")
        tf.linalg.cholesky(x, name="chol")
        tf.matmul(x, x, name="mm")
    assert [(n, t) for n, t, _ in ops_without_half_kernels(g)] == [("chol", "Cholesky")]


# -- training runs ------------------------------------------------------------------------


def test_a_bfloat16_run_keeps_float32_checkpoints_and_ends_near_float32(tmp_path):
    mixed = train(tmp_path / "bf16", "mixed_bfloat16")
    plain = train(tmp_path / "f32", "float32")
    for ckpt in sorted((tmp_path / "bf16").glob("model-*.index")):
        values = load_checkpoint_vars(str(ckpt)[: -len(".index")])
        floats = {k: v.dtype for k, v in values.items() if v.dtype.kind == "f"}
        assert set(floats.values()) == {np.dtype(np.float32)}, floats
    assert "loss_scale" not in mixed[-1]
    # same seed, same data: bfloat16's 8-bit mantissa moves the cost by little
    assert mixed[-1]["cost"] == pytest.approx(plain[-1]["cost"], abs=0.05)
    assert mixed[-1]["cost"] < mixed[0]["cost"]


def test_a_float16_run_reports_the_scale_and_resumes_with_it(tmp_path):
    schedule = LossScaleSchedule(initial=256.0, growth_interval=3)
    whole = train(tmp_path / "whole", "mixed_float16", model=ConvNet(schedule), epochs=4)
    scales = [row["loss_scale"] for row in whole]
    assert scales[0] > 256.0  # it grew: 8 finite steps in the first epoch
    part = tmp_path / "part"
    train(part, "mixed_float16", model=ConvNet(schedule), epochs=2, config=AutoResumeTrainConfig)
    saved = load_checkpoint_vars(tf1.train.latest_checkpoint(str(part)))
    assert saved["loss_scale"].dtype == np.float32
    assert float(saved["loss_scale"]) == scales[1]
    resumed = train(
        part, "mixed_float16", model=ConvNet(schedule), epochs=4, config=AutoResumeTrainConfig
    )
    assert [row["loss_scale"] for row in resumed] == scales
    assert resumed[-1]["cost"] == pytest.approx(whole[-1]["cost"], rel=1e-3)


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_replicated_towers_and_several_steps_per_call(tmp_path, precision):
    stats = train(
        tmp_path,
        precision,
        trainer=SyncMultiGPUTrainerReplicated(2),
        steps_per_execution=4,
    )
    assert [row["global_step"] for row in stats] == [8, 16]
    assert ("loss_scale" in stats[-1]) == (precision == "mixed_float16")
    values = load_checkpoint_vars(tf1.train.latest_checkpoint(str(tmp_path)))
    assert {v.dtype for k, v in values.items() if v.dtype.kind == "f"} == {np.dtype(np.float32)}


def test_a_variable_made_by_hand_in_low_precision_is_named(tmp_path, caplog):
    class HandMade(ConvNet):
        def build_graph(self, image, label):
            bias = tf1.Variable(tf.zeros([], tf.bfloat16), name="hand_bias")
            return super().build_graph(image, label) + tf.cast(bias, tf.float32)

    with caplog.at_level(logging.WARNING, logger="towerkit.trainers"):
        train(tmp_path, "mixed_bfloat16", model=HandMade(), epochs=1)
    assert "['hand_bias']" in caplog.text


@pytest.mark.parametrize(
    "make",
    [
        lambda: SyncMultiGPUTrainerParameterServer(2, ps_device="cpu"),
        lambda: AsyncMultiGPUTrainer(2),
    ],
    ids=["ps", "async"],
)
def test_the_other_multi_tower_trainers(tmp_path, make):
    stats = train(tmp_path, "mixed_float16", trainer=make())
    assert [row["global_step"] for row in stats] == [8, 16]
    assert stats[-1]["loss_scale"] > 0
    assert stats[-1]["cost"] < stats[0]["cost"]


class Accumulating(ConvNet):
    def optimizer(self):
        return AccumGradOptimizer(tf1.train.AdamOptimizer(self.lr), 2)


def test_accumulated_gradients_under_loss_scaling(tmp_path):
    """AccumGradOptimizer inside LossScaleOptimizer: every second step applies, scaled once."""
    stats = train(tmp_path, "mixed_float16", model=Accumulating())
    # 16 steps, none long enough to grow the scale: each halving is one skipped step,
    # which the accumulator never counted
    skipped = int(np.log2(2.0**15 / stats[-1]["loss_scale"]))
    values = load_checkpoint_vars(tf1.train.latest_checkpoint(str(tmp_path)))
    assert values["AccumGrad/counter"] == 16 - skipped
    assert values["loss_scale"] == stats[-1]["loss_scale"]


class Dense(ModelDesc):
    """A model XLA can compile: no summaries, static shapes."""

    def inputs(self):
        return [
            tf.TensorSpec((16, 64), tf.float32, "image"),
            tf.TensorSpec((16,), tf.int32, "label"),
        ]

    def build_graph(self, image, label):
        w = tf1.get_variable("W", [64, 2], initializer=tf1.glorot_uniform_initializer(seed=SEED))
        logits = tf.cast(tf.matmul(image, w), tf.float32)
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        )

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.5)


class XlaTrainer(SimpleTrainer):
    XLA_COMPILE = True


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_xla_compiled_towers(tmp_path, precision):
    x, y = data()
    cfg = TrainConfig(
        model=Dense(),
        data=NumpyInput([x.reshape(-1, 64), y], batch_size=16, shuffle=False),
        monitors=[JSONWriter()],
        max_epoch=2,
        steps_per_epoch=8,
        logdir=str(tmp_path),
        precision=precision,
    )
    launch_train_with_config(cfg, XlaTrainer())
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert ("loss_scale" in stats[-1]) == (precision == "mixed_float16")
    matmuls = [op for op in tf1.get_default_graph().get_operations() if op.type == "MatMul"]
    assert matmuls == [] or {op.get_attr("T") for op in matmuls} <= {tf.bfloat16, tf.float16}


def test_train_takes_the_precision_the_graph_was_built_for():
    """A program that builds its own trainer gives the policy to setup_graph; train checks it."""
    with tf.Graph().as_default():
        model = ConvNet()
        trainer = SimpleTrainer()
        source = NumpyInput(data(), batch_size=16, shuffle=False)
        trainer.setup_graph(
            model.get_input_signature(),
            source,
            model.build_graph,
            model.get_optimizer,
            precision="mixed_bfloat16",
        )
        assert trainer.precision.name == "mixed_bfloat16"
        expected = (
            r"train\(precision='float32'\): the graph of SimpleTrainer was built in "
            r"'mixed_bfloat16'; pass precision='float32' to setup_graph"
        )
        with pytest.raises(ValueError, match=expected):
            trainer.train_with_defaults(precision="float32", monitors=[], steps_per_epoch=2)
        with pytest.raises(ValueError, match="unknown precision policy 'bf16'"):
            trainer.train_with_defaults(precision="bf16", monitors=[], steps_per_epoch=2)
        trainer.train_with_defaults(
            precision="mixed_bfloat16", callbacks=[], monitors=[], steps_per_epoch=2, max_epoch=1
        )
        assert trainer.global_step == 2


def test_a_custom_tower_trainer_composed_from_the_primitives():
    """A TowerTrainer of its own: precision_scope around its tower, LossScaleOptimizer."""
    from towerkit.trainers import TowerTrainer

    class MyTrainer(TowerTrainer):
        def __init__(self, model, source, policy):
            super().__init__()
            self.tower_func = TowerFunc(model.build_graph, model.get_input_signature())
            source.setup(self.tower_func.input_signature)
            self.opt = LossScaleOptimizer(model.get_optimizer())
            with TowerContext("", is_training=True), precision_scope(policy):
                cost = tf.cast(self.tower_func(*source.get_input_tensors()), tf.float32)
            self.train_op = self.opt.minimize(cost)
            self.register_callback(source.get_callbacks())

    with tf.Graph().as_default():
        model = ConvNet()
        trainer = MyTrainer(model, NumpyInput(data(), batch_size=16), "mixed_float16")
        assert model.dtypes == [tf.float16]
        trainer.train_with_defaults(callbacks=[], monitors=[], steps_per_epoch=4, max_epoch=1)
        assert trainer.global_step == 4


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_a_custom_setup_graph_builds_under_the_policy(precision):
    """A `SingleCostTrainer` whose ``_setup_graph`` calls the tower function itself (the
    README's composed trainer) gets it bound to the policy: its towers follow it."""
    from towerkit.trainers import GlobalNormClip, SingleCostTrainer, apply_grad_processors

    class ClippedTrainer(SingleCostTrainer):
        def _setup_graph(self, input, get_cost_fn, get_opt_fn):
            with TowerContext("", is_training=True):
                cost = get_cost_fn(*input.get_input_tensors())
            opt = apply_grad_processors(get_opt_fn(), [GlobalNormClip(5.0)])
            self.train_op = opt.minimize(cost, name="train_op")
            return []

    dtype = {"mixed_bfloat16": tf.bfloat16, "mixed_float16": tf.float16}[precision]
    g = tf.Graph()
    with g.as_default():
        model = ConvNet()
        trainer = ClippedTrainer()
        trainer.setup_graph(
            model.get_input_signature(),
            NumpyInput(data(), batch_size=16),
            model.build_graph,
            model.get_optimizer,
            precision=precision,
        )
        assert model.dtypes == [dtype]
        assert {v.dtype.base_dtype for v in tf1.trainable_variables()} == {tf.float32}
        assert len(trainer.tower_func.towers) == 1
        trainer.train_with_defaults(
            precision=precision, callbacks=[], monitors=[], steps_per_epoch=3, max_epoch=1
        )
        assert trainer.global_step == 3


def test_gradient_processors_see_unscaled_gradients():
    """A norm clip at 10 leaves the true gradient (norm 5.8) alone; scaled, it would clip."""
    from towerkit.trainers import GlobalNormClip, apply_grad_processors

    g = tf.Graph()
    with g.as_default():
        w = tf1.Variable([1.0, 2.0], name="w")
        x = tf1.constant([3.0, -5.0])
        inner = apply_grad_processors(tf1.train.GradientDescentOptimizer(1.0), [GlobalNormClip(10)])
        opt = LossScaleOptimizer(inner)
        train_op = opt.minimize(tf.reduce_sum(w * x))
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(train_op)
            np.testing.assert_allclose(sess.run(w), [1.0 - 3.0, 2.0 + 5.0])


_POLICY = st.sampled_from(sorted(POLICIES)).map(precision_policy)


@given(_POLICY, _POLICY)
def test_built_in_refusal_refuses_exactly_another_policy(asked, built):
    """`built_in_refusal` is None for the policy the graph was built in, else names both."""
    refusal = built_in_refusal(asked, built, "SomeTrainer")
    assert (refusal is None) == (asked == built)
    if refusal is not None:
        assert refusal.startswith(f"train(precision={asked.name!r}): the graph of SomeTrainer")
        assert f"built in {built.name!r}" in refusal


class TestOneRecord:
    """The policy is one `Precision` record from `TrainConfig` to the towers and the checks."""

    def test_config_and_spec_hold_the_record(self):
        """A name given to `TrainConfig` is the record from then on; the default is `FLOAT32`."""
        config = TrainConfig(precision="mixed_bfloat16")
        assert config.precision is precision_policy(config.precision)
        assert config.precision == Precision("mixed_bfloat16", "bfloat16")
        assert TrainConfig().precision is FLOAT32
        assert TrainConfig(precision=FLOAT32).precision is FLOAT32

    def test_the_trainer_gets_the_config_record(self, tmp_path):
        """`launch_train_with_config` hands the config's record itself to ``setup_graph``."""
        policy = precision_policy("mixed_bfloat16")
        with tf.Graph().as_default():
            trainer = SimpleTrainer()
            config = TrainConfig(
                model=ConvNet(),
                data=NumpyInput(data(), batch_size=16, shuffle=False),
                callbacks=[],
                monitors=[],
                steps_per_epoch=1,
                max_epoch=1,
                precision=policy,
            )
            launch_train_with_config(config, trainer)
            assert trainer.precision is policy
            assert trainer.global_step == 1

    def test_a_trainer_without_towers_builds_in_float32(self):
        """The base `Trainer` reports `FLOAT32` and refuses a train call asking for another."""
        with tf.Graph().as_default():
            trainer = Trainer()
            assert trainer.precision is FLOAT32
            expected = "the graph of Trainer was built in 'float32'"
            with pytest.raises(ValueError, match=expected):
                trainer.train([], [], None, None, 1, precision="mixed_float16")
