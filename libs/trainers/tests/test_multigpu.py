"""Multi-device trainers in one process, on logical CPU devices: the maths, the copies, the files."""

import logging

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from scripts.dp_model import (
    SIG,
    CostLog,
    Snapshot,
    cost_fn,
    data,
    error_rate,
    forward,
    initial_weights,
    sgd,
)

from towerkit.callbacks import (
    Callback,
    ClassificationError,
    DataParallelInferenceRunner,
    ModelSaver,
    ScalarStats,
)
from towerkit.sessinit import SaverRestore, list_checkpoint_vars
from towerkit.towers import (
    TowerRuleError,
    get_current_tower_context,
    resolve_devices,
    visible_gpu_count,
)
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    ALLREDUCE_MODES,
    AllReduceChoice,
    AsyncMultiGPUTrainer,
    ModelDesc,
    NewSessionCreator,
    NumpyInput,
    SimpleTrainer,
    SyncMultiGPUTrainer,
    SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated,
    TowerVariableMismatchError,
    TrainConfig,
    choose_allreduce_mode,
    launch_train_with_config,
    match_tower_variables,
)
from towerkit.trainers.parallel._allreduce import nccl_available
from towerkit.trainers.parallel._builder import session_creator_for_devices
from towerkit.trainers.parallel._dataparallel import (
    device_key,
    hierarchical_groups,
    least_loaded,
    missing_devices,
    replica_sources,
    tower_variable_key,
)

N = 96
"""Datapoints of the training set: 12 batches of 8."""

BATCH = 8
MASTERS = sorted(initial_weights())


def need(n):
    """The devices of `n` towers; skip unless they fit: `n` GPUs, or none (logical CPUs)."""
    gpus = visible_gpu_count()
    if 0 < gpus < n:
        pytest.skip(f"{n} towers need {n} visible GPUs, or none; {gpus} visible")
    return resolve_devices(n)


def on(device, wanted):
    """Whether a placed device string names the device `wanted` (type and index)."""
    return device_key(device)[2:] == device_key(wanted)[2:]


def run(trainer, *, batch=BATCH, steps=6, epochs=1, callbacks=(), lr=0.1, shuffle=False, **kw):
    """Train `trainer` on the fixed data in order; return the Snapshot taken at the end."""
    snap = Snapshot()
    source = NumpyInput(data(N), batch_size=batch, shuffle=shuffle, seed=3)
    trainer.setup_graph(SIG, source, cost_fn, sgd(lr))
    trainer.train_with_defaults(
        callbacks=[*callbacks, snap],
        monitors=[],
        extra_callbacks=[],
        steps_per_epoch=steps,
        max_epoch=epochs,
        **kw,
    )
    return snap.values


def masters(values):
    """The model's variables of a snapshot, by plain name."""
    return {k: values[k] for k in MASTERS}


def assert_close(a, b, rtol=1e-5, atol=1e-6):
    """Every model variable of `a` and `b` agrees to float tolerance."""
    for k in MASTERS:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


# -- the pure core ---------------------------------------------------------------------------


class TestChooseAllreduceMode:
    """choose_allreduce_mode: the documented heuristics and NCCL's fallback."""

    def test_repr(self):
        """The record prints its fields."""
        assert repr(AllReduceChoice(mode="cpu", reason="r")) == (
            "AllReduceChoice(mode='cpu', reason='r', fallback=False)"
        )

    def test_fail(self):
        """Unknown modes and impossible tower counts are refused, naming the value."""
        with pytest.raises(
            ValueError, match=r"'mode' must be None \(automatic\) or one of .*'ring'"
        ):
            choose_allreduce_mode("ring", 2, 2, True)
        with pytest.raises(TypeError, match=r"'mode' must be None or a str .*got int"):
            choose_allreduce_mode(3, 2, 2, True)
        with pytest.raises(ValueError, match=r"'num_gpu_towers' in \[0, num_towers\]; got 2 and 3"):
            choose_allreduce_mode(None, 2, 3, True)
        with pytest.raises(ValueError, match="'mode'"):
            AllReduceChoice(mode="ring", reason="")

    def test_automatic(self):
        """8 GPUs: hierarchical; other GPU layouts: NCCL; CPU or no NCCL: cpu."""
        assert choose_allreduce_mode(None, 8, 8, True).mode == "hierarchical"
        assert choose_allreduce_mode(None, 4, 4, True).mode == "nccl"
        assert choose_allreduce_mode(None, 4, 4, False).mode == "cpu"
        assert choose_allreduce_mode(None, 2, 1, True).mode == "cpu"

    @given(
        st.sampled_from([None, *ALLREDUCE_MODES]),
        st.integers(1, 16),
        st.data(),
        st.booleans(),
    )
    def test_properties(self, requested, n, draw, nccl):
        """NCCL only with every tower on a GPU and NCCL present; fallback only from NCCL."""
        gpus = draw.draw(st.integers(0, n))
        choice = choose_allreduce_mode(requested, n, gpus, nccl)
        assert choice.mode in ALLREDUCE_MODES
        if choice.mode == "nccl":
            assert gpus == n
            assert nccl
        assert choice.fallback == (requested == "nccl" and choice.mode != "nccl")
        if requested in ("cpu", "hierarchical"):
            assert choice.mode == requested


class TestHierarchicalGroups:
    """hierarchical_groups partitions the towers into consecutive groups."""

    def test_fail(self):
        """Counts and sizes below 1 are refused."""
        with pytest.raises(ValueError, match=r"'num_towers' must be an int >= 1; got 0"):
            hierarchical_groups(0)
        with pytest.raises(ValueError, match=r"'group_size' must be an int >= 1; got 0"):
            hierarchical_groups(4, 0)

    @given(st.integers(1, 64), st.one_of(st.none(), st.integers(1, 64)))
    def test_partition(self, n, size):
        """Every tower once, in order, groups no larger than asked."""
        groups = hierarchical_groups(n, size)
        assert [i for g in groups for i in g] == list(range(n))
        if size is not None:
            assert all(1 <= len(g) <= size for g in groups)


@st.composite
def tower_names(draw):
    """Variable names of tower 0 and a shuffled, tower-prefixed copy for each other tower."""
    names = draw(
        st.lists(
            st.from_regex(r"[a-s][a-z0-9]{0,4}(/[a-z][a-z0-9]{0,4}){0,2}", fullmatch=True),
            min_size=1,
            max_size=8,
            unique=True,
        )
    )
    n = draw(st.integers(1, 4))
    towers = [list(names)]
    for k in range(1, n):
        towers.append([f"tower{k}/{x}" for x in draw(st.permutations(names))])
    return towers


class TestMatchTowerVariables:
    """match_tower_variables pairs each tower's variables with tower 0's, or says which differ."""

    @given(tower_names())
    def test_pairs(self, towers):
        """Each row names the same variable in every tower."""
        rows = match_tower_variables(towers)
        assert len(rows) == len(towers[0])
        for i, row in enumerate(rows):
            keys = {tower_variable_key(towers[t][row[t]]) for t in range(len(towers))}
            assert keys == {towers[0][i]}

    @given(tower_names(), st.data())
    def test_missing(self, towers, draw):
        """A variable missing from one tower is named, with the towers that have it."""
        if len(towers) < 2:
            towers.append([f"tower1/{x}" for x in towers[0]])
        t = draw.draw(st.integers(1, len(towers) - 1))
        dropped = towers[t].pop(draw.draw(st.integers(0, len(towers[t]) - 1)))
        with pytest.raises(TowerVariableMismatchError, match=repr(tower_variable_key(dropped))):
            match_tower_variables(towers)

    def test_fail(self):
        """A name twice in a tower, and an empty input, are refused."""
        with pytest.raises(TowerVariableMismatchError, match=r"tower 1: \['w'\]"):
            match_tower_variables([["w"], ["tower1/w", "tower1/w"]])
        with pytest.raises(ValueError, match="non-empty list"):
            match_tower_variables([])


class TestSmallHelpers:
    """replica_sources, least_loaded, missing_devices."""

    @given(st.lists(st.integers(0, 1000), min_size=1, max_size=10))
    def test_least_loaded(self, loads):
        """The first index of the smallest load."""
        assert least_loaded(loads) == loads.index(min(loads))

    def test_least_loaded_fail(self):
        """No device, no answer."""
        with pytest.raises(ValueError, match="'loads' is empty"):
            least_loaded([])

    @given(
        st.lists(st.from_regex(r"[a-z]{1,5}", fullmatch=True), min_size=1, max_size=6, unique=True)
    )
    def test_replica_sources(self, names):
        """Each replica finds its master; an unknown one finds None."""
        replicas = [f"tower2/{n}" for n in reversed(names)] + ["tower2/zz_none/x"]
        got = replica_sources(names, replicas)
        assert [names[i] for i in got[:-1]] == list(reversed(names))
        assert got[-1] is None

    def test_missing_devices(self):
        """Devices compare by job, task, type and index, whatever the spelling."""
        have = ["/job:localhost/replica:0/task:0/device:CPU:0"]
        assert missing_devices(["/cpu:0", "/device:CPU:0", "/gpu:0"], have) == ["/gpu:0"]
        with pytest.raises(ValueError, match="unknown part 'tpu:0'"):
            missing_devices(["/tpu:0"], have)


# -- the trainers ------------------------------------------------------------------------------


class TestReplicated:
    """SyncMultiGPUTrainerReplicated: all-reduced gradients, one copy per tower, plain checkpoints."""

    @pytest.mark.parametrize(("towers", "mode"), [(2, "cpu"), (4, "hierarchical")])
    def test_average_is_one_big_batch(self, towers, mode):
        """k steps of n towers (average) equal k steps of one tower on the n batches together."""
        need(towers)
        with tf.Graph().as_default():
            got = run(SyncMultiGPUTrainerReplicated(towers, mode=mode), steps=3)
        with tf.Graph().as_default():
            want = run(SimpleTrainer(), batch=BATCH * towers, steps=3)
        assert_close(got, want)
        assert not np.allclose(got["fc0/W"], initial_weights()["fc0/W"])

    def test_sum(self):
        """average=False sums: one tower on both batches with twice the learning rate."""
        need(2)
        with tf.Graph().as_default():
            got = run(SyncMultiGPUTrainerReplicated(2, average=False, mode="cpu"), steps=4)
        with tf.Graph().as_default():
            want = run(SimpleTrainer(), batch=2 * BATCH, steps=4, lr=0.2)
        assert_close(got, want)

    def test_copies_stay_identical(self, graph):
        """Each tower's copy equals tower 0's, bit for bit; copies live in local variables only."""
        devices = need(3)
        trainer = SyncMultiGPUTrainerReplicated(3, mode="cpu")
        trainer.BROADCAST_EVERY_EPOCH = False
        values = run(trainer, steps=5)
        for k in (1, 2):
            for name in MASTERS:
                assert np.array_equal(values[f"tower{k}/{name}"], values[name]), (k, name)
        global_names = {v.op.name for v in tf1.global_variables()}
        assert global_names == {*MASTERS, "global_step"}
        assert {v.op.name for v in tf1.trainable_variables()} == set(MASTERS)
        local = {v.op.name for v in tf1.local_variables()}
        assert {f"tower{k}/{n}" for k in (1, 2) for n in MASTERS} <= local
        assert trainer.devices == devices
        assert on(graph.get_operation_by_name("tower2/cost").device, devices[2])

    def test_each_tower_takes_its_own_batch(self, graph):
        """Towers see different batches; one step consumes as many batches as towers."""
        need(2)

        class Inputs(Callback):
            _chief_only = False

            def __init__(self):
                self.seen = []

            def _setup_graph(self):
                self.xs = [h.inputs[0] for h in self.trainer.towers.training()]

            def _before_run(self, ctx):
                return self.xs

            def _after_run(self, ctx, values):
                self.seen.extend(tuple(np.round(x[:, 0], 4)) for x in values.results)

        probe = Inputs()
        run(SyncMultiGPUTrainerReplicated(2, mode="cpu"), steps=6, callbacks=[probe])
        x = data(N)[0]
        want = {tuple(np.round(x[i : i + BATCH, 0], 4)) for i in range(0, N, BATCH)}
        assert len(probe.seen) == 12
        assert set(probe.seen) == want

    def test_broadcast_every_epoch(self, graph):
        """A replica pushed off is copied back at the end of the epoch, not before."""
        need(2)

        class Disturb(Callback):
            _chief_only = False

            def _setup_graph(self):
                copy = next(
                    v for v in self.trainer.replica_variables if v.op.name == "tower1/fc1/b"
                )
                self.op = copy.assign_add(tf.fill(copy.shape, 5.0))
                self.copy = copy

            def _after_epoch(self):
                self.trainer.sess.run(self.op)
                self.after_epoch = self.trainer.sess.run(self.copy)

        for every_epoch in (True, False):
            with tf.Graph().as_default():
                trainer = SyncMultiGPUTrainerReplicated(2, mode="cpu")
                trainer.BROADCAST_EVERY_EPOCH = every_epoch
                disturb = Disturb()
                values = run(trainer, steps=2, callbacks=[disturb])
                gap = values["tower1/fc1/b"] - values["fc1/b"]
                np.testing.assert_allclose(disturb.after_epoch - values["fc1/b"], 5.0, rtol=1e-5)
                np.testing.assert_allclose(gap, 0.0 if every_epoch else 5.0, atol=1e-5)

    def test_nccl_falls_back_on_cpu(self, graph, caplog):
        """NCCL asked for without GPUs: a warning, and the CPU all-reduce."""
        need(2)
        if nccl_available():
            pytest.skip("NCCL runs here: there is no fallback to observe")
        trainer = SyncMultiGPUTrainerReplicated(2, mode="nccl")
        with caplog.at_level(logging.WARNING, logger="towerkit.trainers"):
            run(trainer, steps=1)
        assert trainer.mode == "cpu"
        assert "mode 'nccl' needs every tower on a GPU" in caplog.text
        assert "falling back to 'cpu'" in caplog.text

    def test_deprecated_use_nccl(self):
        """use_nccl still works, with a DeprecationWarning; it excludes mode."""
        with pytest.warns(DeprecationWarning, match="use_nccl"):
            assert SyncMultiGPUTrainerReplicated(2, use_nccl=False).mode == "cpu"
        with (
            pytest.warns(DeprecationWarning, match="use_nccl"),
            pytest.raises(ValueError, match="give 'mode' or the deprecated 'use_nccl', not both"),
        ):
            SyncMultiGPUTrainerReplicated(2, mode="cpu", use_nccl=True)

    def test_fail(self):
        """Bad arguments are refused at construction, naming them."""
        with pytest.raises(ValueError, match="'mode' must be None"):
            SyncMultiGPUTrainerReplicated(2, mode="ring")
        with pytest.raises(TypeError, match="'average' must be a bool"):
            SyncMultiGPUTrainerReplicated(2, average="yes")
        with pytest.raises(ValueError, match="'gpus' ids must be unique"):
            SyncMultiGPUTrainerReplicated([0, 0])

    def test_towers_that_differ(self, graph):
        """A tower building a variable the others lack is an error naming it."""
        need(2)

        def uneven(x, y):
            ctx = get_current_tower_context()
            if ctx.index == 1:
                extra = tf1.get_variable("extra", initializer=1.0)
                x = x * extra
            return cost_fn(x, y)

        trainer = SyncMultiGPUTrainerReplicated(2)
        source = NumpyInput(data(N), batch_size=BATCH)
        with pytest.raises(
            TowerVariableMismatchError, match=r"'extra' in towers \[1\] only \(of 2\)"
        ):
            trainer.setup_graph(SIG, source, uneven, sgd())

    def test_tower_rules(self, graph):
        """With CHECK_TOWER_RULES the checker runs: the model passes, a rule breaker does not."""
        need(2)

        def breaker(x, y):
            w = tf1.Variable(tf.ones([8, 3]), name="w")
            return tf.reduce_mean(tf.matmul(x, w)) + 0.0 * tf.cast(tf.reduce_sum(y), tf.float32)

        trainer = SyncMultiGPUTrainerReplicated(2)
        trainer.CHECK_TOWER_RULES = True
        values = run(trainer, steps=1)
        assert set(MASTERS) <= set(values)
        with tf.Graph().as_default():
            trainer = SyncMultiGPUTrainerReplicated(2)
            trainer.CHECK_TOWER_RULES = True
            with pytest.raises(TowerRuleError, match="breaks the tower rules"):
                trainer.setup_graph(SIG, NumpyInput(data(N), batch_size=BATCH), breaker, sgd())

    def test_checkpoints_are_single_tower(self, tmp_path):
        """A checkpoint holds one copy under plain names and loads both ways with SimpleTrainer."""
        need(2)
        with tf.Graph().as_default():
            got = run(
                SyncMultiGPUTrainerReplicated(2, mode="cpu"),
                steps=3,
                callbacks=[ModelSaver()],
                logdir=tmp_path / "replicated",
            )
        ckpt = str(tmp_path / "replicated" / "model-3")
        assert {v.name for v in list_checkpoint_vars(ckpt)} == {*MASTERS, "global_step"}
        with tf.Graph().as_default():
            back = run(SimpleTrainer(), steps=1, epochs=0, session_init=SaverRestore(ckpt))
        assert_close(back, got, rtol=0, atol=0)
        with tf.Graph().as_default():
            simple = run(
                SimpleTrainer(), steps=2, callbacks=[ModelSaver()], logdir=tmp_path / "simple"
            )
        with tf.Graph().as_default():
            loaded = run(
                SyncMultiGPUTrainerReplicated(2),
                steps=1,
                epochs=0,
                session_init=SaverRestore(str(tmp_path / "simple" / "model-2")),
            )
        for name in MASTERS:
            np.testing.assert_array_equal(loaded[name], simple[name])
            np.testing.assert_array_equal(loaded[f"tower1/{name}"], simple[name])

    def test_session_config_is_merged(self, graph):
        """A user's session config keeps its settings and gains the towers' CPU devices."""
        need(2)
        config = tf1.ConfigProto(intra_op_parallelism_threads=1)
        config.device_count["CPU"] = 1
        creator = session_creator_for_devices(
            NewSessionCreator(config=config), ["/cpu:0", "/cpu:1"]
        )
        assert creator.config.device_count["CPU"] == 2
        assert creator.config.intra_op_parallelism_threads == 1
        assert config.device_count["CPU"] == 1

        class Devices(Callback):
            def _before_train(self):
                self.names = [d.name for d in self.trainer.sess.list_devices()]

        probe = Devices()
        trainer = SyncMultiGPUTrainerReplicated(2)
        launch_train_with_config(
            TrainConfig(
                data=NumpyInput(data(N), batch_size=BATCH),
                model=_Model(),
                callbacks=[probe],
                extra_callbacks=[],
                monitors=[],
                session_config=config,
                steps_per_epoch=1,
                max_epoch=1,
            ),
            trainer,
        )
        assert missing_devices(trainer.devices, probe.names) == []


class TestGradientKinds:
    """Sparse gradients and the NCCL graph."""

    @staticmethod
    def embedding_cost(x, y):
        """A cost whose embedding gradient is sparse (tf.IndexedSlices)."""
        table = tf1.get_variable(
            "emb", initializer=np.arange(40, dtype=np.float32).reshape(10, 4) / 40
        )
        ids = tf.cast(tf.abs(x[:, 0] * 3), tf.int32) % 10
        rows = tf.gather(table, ids)
        w = tf1.get_variable("w", initializer=np.ones([4, 3], np.float32) / 4)
        logits = tf.matmul(rows, w)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        return tf.reduce_mean(loss, name="cost")

    @pytest.mark.parametrize(
        "make",
        [
            lambda: SyncMultiGPUTrainerReplicated(2, mode="cpu"),
            lambda: SyncMultiGPUTrainerReplicated(2, mode="hierarchical"),
            lambda: SyncMultiGPUTrainerParameterServer(2),
        ],
        ids=["cpu", "hierarchical", "ps"],
    )
    def test_sparse(self, make):
        """Sparse gradients are summed without densifying and equal one tower on both batches."""
        need(2)
        got, want = {}, {}
        for trainer, batch, out in ((make, BATCH, got), (SimpleTrainer, 2 * BATCH, want)):
            with tf.Graph().as_default():
                snap = Snapshot()
                t = trainer()
                t.setup_graph(
                    SIG,
                    NumpyInput(data(N), batch_size=batch, shuffle=False),
                    self.embedding_cost,
                    sgd(0.5),
                )
                t.train_with_defaults(
                    callbacks=[snap],
                    monitors=[],
                    extra_callbacks=[],
                    steps_per_epoch=3,
                    max_epoch=1,
                )
                out.update(snap.values)
        for name in ("emb", "w"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
        assert not np.allclose(got["emb"], np.arange(40, dtype=np.float32).reshape(10, 4) / 40)

    def test_nccl_graph(self, graph):
        """The NCCL all-reduce builds one NcclAllReduce per variable and device, scaled by 1/n."""
        from towerkit.trainers.parallel._allreduce import allreduce

        grads = [[tf.ones([3]) * (k + 1)] for k in range(2)]
        columns = [[grads[0][0], grads[1][0]]]
        (row,) = allreduce(columns, ["/gpu:0", "/gpu:1"], "nccl", average=True)
        nccl = [op for op in graph.get_operations() if op.type == "NcclAllReduce"]
        assert len(nccl) == 2
        assert {op.get_attr("num_devices") for op in nccl} == {2}
        assert len({op.get_attr("shared_name") for op in nccl}) == 1
        assert [on(op.device, d) for op, d in zip(nccl, ["/gpu:0", "/gpu:1"])] == [True, True]
        assert [t.shape.as_list() for t in row] == [[3], [3]]


class _Model(ModelDesc):
    """The test model as a ModelDesc."""

    def inputs(self):
        return SIG

    def build_graph(self, x, y):
        return cost_fn(x, y)

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.1)


class TestParameterServer:
    """SyncMultiGPUTrainerParameterServer: one shared copy, averaged gradients."""

    def test_average_is_one_big_batch(self, graph):
        """Equals one tower on both batches; one copy of every variable."""
        need(2)
        got = run(SyncMultiGPUTrainerParameterServer(2), steps=3)
        assert {v.op.name for v in tf1.global_variables()} == {*MASTERS, "global_step"}
        assert tf1.local_variables() == []
        with tf.Graph().as_default():
            want = run(SimpleTrainer(), batch=2 * BATCH, steps=3)
        assert_close(got, want)

    def test_ps_device(self, graph):
        """'cpu' puts variables on /cpu:0; 'gpu' spreads them over the towers' devices."""
        towers = need(2)
        trainer = SyncMultiGPUTrainerParameterServer(2, ps_device="gpu")
        trainer.setup_graph(SIG, NumpyInput(data(N), batch_size=BATCH), cost_fn, sgd())
        devices = {v.op.name: v.device for v in tf1.trainable_variables()}
        # fc0/W (128 floats) goes first to tower 0's device, then fc0/b to the lighter
        # tower 1's, then fc1/W (48 floats) too, then fc1/b.
        assert on(devices["fc0/W"], towers[0])
        assert all(on(devices[k], towers[1]) for k in ("fc0/b", "fc1/W", "fc1/b"))
        with tf.Graph().as_default():
            trainer = SyncMultiGPUTrainerParameterServer(2)
            assert trainer.ps_device == "cpu"
            trainer.setup_graph(SIG, NumpyInput(data(N), batch_size=BATCH), cost_fn, sgd())
            assert all(on(v.device, "/cpu:0") for v in tf1.trainable_variables())

    def test_fail(self):
        """ps_device is 'cpu', 'gpu' or None."""
        with pytest.raises(
            ValueError, match=r"'ps_device' must be 'cpu', 'gpu' or None; got 'tpu'"
        ):
            SyncMultiGPUTrainerParameterServer(2, ps_device="tpu")


class TestAsync:
    """AsyncMultiGPUTrainer: each tower's gradient applied on its own, scaled by 1/n if asked."""

    @pytest.mark.parametrize("scale", [True, False])
    def test_separate_updates(self, graph, scale):
        """A linear cost (gradient independent of w): w moves by each tower's own gradient."""
        need(2)
        calls = []

        class Recording(tf1.train.GradientDescentOptimizer):
            def apply_gradients(self, grads_and_vars, global_step=None, name=None):
                grads_and_vars = list(grads_and_vars)
                calls.append(len(grads_and_vars))
                return super().apply_gradients(grads_and_vars, global_step, name)

        def linear(x, y):
            w = tf1.get_variable("w", initializer=np.ones([8], np.float32))
            return tf.reduce_mean(tf.reduce_sum(x * w, axis=1)) + 0.0 * tf.cast(
                tf.reduce_sum(y), tf.float32
            )

        trainer = AsyncMultiGPUTrainer(2, scale_gradient=scale)
        snap = Snapshot()
        trainer.setup_graph(
            SIG,
            NumpyInput(data(N), batch_size=BATCH, shuffle=False),
            linear,
            lambda: Recording(0.1),
        )
        trainer.train_with_defaults(
            callbacks=[snap], monitors=[], extra_callbacks=[], steps_per_epoch=6, max_epoch=1
        )
        assert calls == [1, 1]
        x = data(N)[0]
        per_batch = x.reshape(-1, BATCH, 8).mean(axis=1)  # the gradient of each batch
        want = 1.0 - 0.1 * per_batch.sum(axis=0) * (0.5 if scale else 1.0)
        np.testing.assert_allclose(snap.values["w"], want, rtol=1e-5)

    def test_trains(self, graph):
        """The MLP learns: its error on the training set drops."""
        need(2)
        values = run(AsyncMultiGPUTrainer(2), steps=6, epochs=4, shuffle=True)
        x, y = data(N)
        assert error_rate(masters(values), x, y) < error_rate(initial_weights(), x, y)
        assert error_rate(masters(values), x, y) < 0.2


class TestDefaultAndInference:
    """SyncMultiGPUTrainer's choice; predictors and DataParallelInferenceRunner on the towers."""

    def test_default(self):
        """Up to 2 towers: parameter server on the CPU; more: replicated."""
        need(3)
        with tf.Graph().as_default():
            two = SyncMultiGPUTrainer(2)
            assert isinstance(two, SyncMultiGPUTrainerParameterServer)
            assert two.ps_device == "cpu"
            assert isinstance(SyncMultiGPUTrainer(3), SyncMultiGPUTrainerReplicated)

    def test_inference_runner_and_predictor(self, graph):
        """Both inference towers and the predictor compute with tower 0's variables."""
        devices = need(2)
        x, y = data(40, seed=5)
        val = [[x[i : i + 5], y[i : i + 5]] for i in range(0, 40, 5)]
        runner = DataParallelInferenceRunner(
            val, [ScalarStats("cost"), ClassificationError()], gpus=2
        )

        class Predict(Callback):
            def _setup_graph(self):
                self.predictor = self.trainer.get_predictor(["x"], ["prob"])

            def _after_train(self):
                (self.prob,) = self.predictor(x)

        predict = Predict()
        cost = CostLog()
        trainer = SyncMultiGPUTrainerReplicated(2, mode="cpu")
        values = run(trainer, steps=6, epochs=2, callbacks=[runner, predict, cost], shuffle=True)
        weights = masters(values)
        np.testing.assert_allclose(predict.prob, forward(weights, x), rtol=1e-4, atol=1e-6)
        assert trainer.monitors.get_latest("validation_error") == pytest.approx(
            error_rate(weights, x, y)
        )
        assert [h.ns_name for h in runner.handles] == ["InferenceTower0", "InferenceTower1"]
        assert on(graph.get_operation_by_name("InferenceTower1/prob").device, devices[1])
        assert len(cost.values) == 12
