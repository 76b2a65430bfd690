"""Inference statistics as partials summed across processes, and runners that reduce them."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    BinaryClassificationStats,
    CallbackError,
    ClassificationError,
    Confusion,
    DataParallelInferenceRunner,
    Inferencer,
    InferenceRunner,
    MeanState,
    ScalarStats,
    Tally,
    confusion_add,
    confusion_from_partial,
    confusion_partial,
    mean_add,
    mean_from_partial,
    mean_partial,
    mean_values,
    sum_partials,
    tally_add,
    tally_from_partial,
    tally_partial,
)
from towerkit.callbacks._inference_partials import join_partials, split_partials
from towerkit.towers import TowerContext, TowerFunc, session_config_for_devices
from towerkit.towers.compat import tf1

# -- the pure core ---------------------------------------------------------------------------

small = st.floats(-1e3, 1e3, allow_nan=False).map(lambda v: round(v, 3))


@st.composite
def sharded_batches(draw, make_batch):
    """Batches, and a split of them among 1-4 processes (each gets a subset, maybe none)."""
    batches = draw(st.lists(make_batch, max_size=12))
    n = draw(st.integers(1, 4))
    owner = draw(st.lists(st.integers(0, n - 1), min_size=len(batches), max_size=len(batches)))
    shards = [[b for b, o in zip(batches, owner) if o == k] for k in range(n)]
    return batches, shards


def bits(size=None):
    size = st.integers(0, 9) if size is None else size
    return size.flatmap(lambda n: st.lists(st.integers(0, 1), min_size=n, max_size=n))


class TestMeanPartial:
    """A MeanState's partial: sums, then the count of batches."""

    @given(sharded_batches(st.tuples(small, small)))
    def test_split_sums_to_whole(self, case):
        """Batches split among processes: the summed partials are one process's over all."""
        batches, shards = case

        def state(bs):
            s = MeanState(sums=(0, 0))
            for b in bs:
                s = mean_add(s, b)
            return s

        summed = sum_partials([mean_partial(state(shard)) for shard in shards])
        whole = state(batches)
        got = mean_from_partial(summed, 2)
        assert got.count == whole.count
        assert got.sums == pytest.approx(whole.sums, abs=1e-6)
        if whole.count:
            assert mean_values(got) == pytest.approx(mean_values(whole), abs=1e-6)

    @given(st.lists(small, max_size=5), st.integers(0, 2**40))
    def test_round_trip(self, sums, count):
        """from_partial(partial(s)) == s."""
        s = MeanState(sums=sums, count=count)
        assert mean_from_partial(mean_partial(s), len(sums)) == s

    def test_fail(self):
        """A partial of the wrong length, a fractional or negative count, a NaN."""
        with pytest.raises(
            ValueError, match=r"MeanState must be a vector of 3 floats; got shape \(2,\)"
        ):
            mean_from_partial([1.0, 2.0], 2)
        with pytest.raises(
            ValueError, match=re.escape("'count' must be a whole number >= 0; got 1.5")
        ):
            mean_from_partial([1.0, 1.5], 1)
        with pytest.raises(
            ValueError, match=re.escape("'count' must be a whole number >= 0; got -1.0")
        ):
            mean_from_partial([1.0, -1.0], 1)
        with pytest.raises(ValueError, match=r"must be finite; got \[nan, 1.0\]"):
            mean_from_partial([float("nan"), 1.0], 1)


class TestTallyPartial:
    """A Tally's partial: ones, total."""

    @given(sharded_batches(bits()))
    def test_split_sums_to_whole(self, case):
        """Split among processes, the summed partials give the whole data's tally."""
        batches, shards = case

        def tally(bs):
            t = Tally()
            for b in bs:
                t = tally_add(t, b)
            return t

        summed = sum_partials([tally_partial(tally(shard)) for shard in shards])
        assert tally_from_partial(summed) == tally(batches)

    def test_fail(self):
        """More ones than entries, a vector of the wrong length."""
        with pytest.raises(ValueError, match=r"'ones' \(3\) exceeds 'total' \(2\)"):
            tally_from_partial([3, 2])
        with pytest.raises(ValueError, match="Tally must be a vector of 2 floats"):
            tally_from_partial([1, 2, 3])


class TestConfusionPartial:
    """A Confusion's partial: tp, fp, fn, tn."""

    @given(
        sharded_batches(
            st.integers(0, 9).flatmap(lambda n: st.tuples(bits(st.just(n)), bits(st.just(n))))
        )
    )
    def test_split_sums_to_whole(self, case):
        """Split among processes, the summed partials give the whole data's confusion."""
        batches, shards = case

        def confusion(bs):
            c = Confusion()
            for pred, label in bs:
                c = confusion_add(c, pred, label)
            return c

        summed = sum_partials([confusion_partial(confusion(shard)) for shard in shards])
        assert confusion_from_partial(summed) == confusion(batches)

    def test_fail(self):
        """A fractional count names its field."""
        with pytest.raises(
            ValueError, match=re.escape("'fn' must be a whole number >= 0; got 0.5")
        ):
            confusion_from_partial([1, 0, 0.5, 0])


class TestJoinedPartials:
    """Several inferencers' partials travel as one vector."""

    @given(st.lists(st.lists(small, max_size=4), max_size=5))
    def test_split_inverts_join(self, parts):
        """split_partials(join_partials(p)) == p."""
        vector, lengths = join_partials(parts)
        assert [p.tolist() for p in split_partials(vector, lengths)] == [
            [float(v) for v in p] for p in parts
        ]

    def test_fail(self):
        """Sums of vectors of different lengths, none at all; a short joined vector."""
        with pytest.raises(ValueError, match=r"one length; got shapes \[\(1,\), \(2,\)\]"):
            sum_partials([[1.0], [1.0, 2.0]])
        with pytest.raises(ValueError, match="at least one vector"):
            sum_partials([])
        with pytest.raises(ValueError, match=r"lengths \(1, 2\) has 3 floats; got 2"):
            split_partials([1.0, 2.0], (1, 2))


# -- the shells ------------------------------------------------------------------------------

W = np.array([[1.0, -1.0], [-2.0, 0.5]], np.float32)
SIGNATURE = [tf.TensorSpec([None, 2], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "label")]


def tower_fn(x, label):
    w = tf1.get_variable("w", initializer=W)
    pred = tf.argmax(tf.matmul(x, w), axis=1, output_type=tf.int32, name="pred")
    wrong = tf.cast(tf.not_equal(pred, label), tf.float32, name="incorrect_vector")
    tf.subtract(1.0, tf.reduce_mean(wrong), name="accuracy")


def shard(n, seed, sizes):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2).astype(np.float32)
    y = rng.randint(0, 2, size=n).astype(np.int32)
    starts = np.cumsum([0, *sizes[:-1]])
    return [(x[a : a + s], y[a : a + s]) for a, s in zip(starts, sizes)]


def infs():
    return [
        ClassificationError(),
        ScalarStats("accuracy"),
        BinaryClassificationStats("pred", "label"),
    ]


def numpy_stats(batches):
    """The statistics of one process that evaluated all `batches`, in NumPy."""
    preds = [np.argmax(x @ W, axis=1) for x, _ in batches]
    wrong = np.concatenate([p != y for p, (_, y) in zip(preds, batches)])
    pred, label = np.concatenate(preds), np.concatenate([y for _, y in batches])
    tp = np.sum((pred == 1) & (label == 1))
    return {
        "validation_error": wrong.mean(),
        "validation_accuracy": np.mean([1 - np.mean(p != y) for p, (_, y) in zip(preds, batches)]),
        "val_precision": tp / max(1, np.sum(pred == 1)),
        "val_recall": tp / max(1, np.sum(label == 1)),
    }


def peer_partial(batches):
    """The joined partial that a second process evaluating `batches` contributes, in NumPy."""
    infs_ = infs()
    for inf in infs_:
        inf.before_inference()
    for x, y in batches:
        pred = np.argmax(x @ W, axis=1)
        wrong = (pred != y).astype(np.float32)
        infs_[0].on_fetches([wrong])
        infs_[1].on_fetches([np.float32(1 - wrong.mean())])
        infs_[2].on_fetches([pred, y])
    return join_partials([inf.partial() for inf in infs_])[0]


class TwoProcessTrainer(LoopTrainer):
    """A trainer of this process and one peer whose partial is known (computed in NumPy)."""

    def __init__(self, *args, peer, **kwargs):
        super().__init__(*args, **kwargs)
        self.peer = peer
        self.sums = []

    def make_process_sum(self, name):
        self.sums.append(name)
        return lambda vector: np.asarray(vector) + self.peer


def build(graph, runner, trainer_cls=LoopTrainer, **kwargs):
    func = TowerFunc(tower_fn, SIGNATURE)
    with TowerContext("", is_training=True):
        func(tf.zeros([1, 2]), tf.zeros([1], tf.int32))
    train = tf1.assign_add(tf1.get_variable("steps", initializer=0.0), 1.0).op
    return trainer_cls(
        graph, train, [runner], tower_func=func, steps_per_epoch=1, max_epoch=2, **kwargs
    )


class TestReducingRunner:
    """InferenceRunner(reduce=True) puts the statistics of every process's batches."""

    @pytest.mark.parametrize("runner_cls", ["InferenceRunner", "DataParallelInferenceRunner"])
    def test_sum_with_a_peer(self, graph, runner_cls):
        """This process's batches plus a peer's partial give the statistics of all batches."""
        mine, theirs = shard(11, 1, [4, 4, 3]), shard(9, 2, [5, 2, 2])
        if runner_cls == "InferenceRunner":
            runner = InferenceRunner(mine, infs(), reduce=True)
            kwargs = {}
        else:
            runner = DataParallelInferenceRunner(mine, infs(), gpus=2, reduce=True)
            kwargs = {"session_config": session_config_for_devices(["/cpu:0", "/cpu:1"])}
        trainer = build(
            graph, runner, TwoProcessTrainer, peer=peer_partial(theirs), **kwargs
        ).train()
        assert trainer.sums == ["inference_sum_InferenceTower"]
        want = numpy_stats(mine + theirs)
        for name, value in want.items():
            assert trainer.monitors.get_latest(name) == pytest.approx(value, abs=1e-6), name
        assert len(trainer.monitors.get_history("validation_error")) == 2

    def test_identity_sum(self, graph):
        """With a sum that is the vector itself, reduce=True reports as reduce=False does."""
        batches = shard(10, 3, [3, 3, 4])
        runner = InferenceRunner(batches, infs(), reduce=True)
        trainer = build(graph, runner, TwoProcessTrainer, peer=0.0).train()
        for name, value in numpy_stats(batches).items():
            assert trainer.monitors.get_latest(name) == pytest.approx(value, abs=1e-6), name

    def test_runs_on_every_process(self):
        """A reducing runner is not chief-only (every process meets in the sum), and cannot
        be made so."""
        assert not InferenceRunner([], infs(), reduce=True).chief_only
        assert InferenceRunner([], infs()).chief_only
        assert InferenceRunner([], infs(), reduce=True).reduces
        runner = InferenceRunner([], infs(), reduce=True)
        with pytest.raises(ValueError, match="reduce=True runs on every process"):
            runner.set_chief_only(True)
        assert runner.set_chief_only(False) is runner
        assert InferenceRunner([], infs()).set_chief_only(False).chief_only is False

    def test_fail(self, graph):
        """A non-bool reduce, an inferencer without partials, a trainer without the hook."""
        with pytest.raises(TypeError, match="'reduce' must be a bool; got 1"):
            InferenceRunner([], infs(), reduce=1)
        with pytest.raises(TypeError, match=r"these do not: .*\(Fetcher\)"):
            InferenceRunner([], [ScalarStats("a"), Fetcher()], reduce=True)
        InferenceRunner([], [Fetcher()])  # fine without reduce

        class NoSum(TwoProcessTrainer):
            make_process_sum = None

        runner = InferenceRunner(shard(4, 0, [4]), infs(), reduce=True)
        with pytest.raises(CallbackError, match="needs a trainer with a 'make_process_sum' method"):
            build(graph, runner, NoSum, peer=0.0).train()

    def test_mismatched_sum(self, graph):
        """A sum returning another shape (processes with other inferencers) is an error."""
        runner = InferenceRunner(shard(4, 0, [4]), infs(), reduce=True)
        peer = np.zeros(3)
        with pytest.raises((CallbackError, ValueError)):
            build(graph, runner, TwoProcessTrainer, peer=peer).train()


class Fetcher(Inferencer):
    """An inferencer without partials."""

    def _get_fetches(self):
        return ["accuracy"]

    def _on_fetches(self, results):
        del results


class TestInferencerPartials:
    """partial() and from_partial() on the stock inferencers; the base refuses."""

    def test_reducible(self):
        """The stock inferencers are reducible; one without the methods is not."""
        assert all(inf.reducible for inf in infs())
        assert not Fetcher().reducible
        with pytest.raises(TypeError, match=r"Fetcher\) cannot be summed across processes"):
            Fetcher().partial()
        with pytest.raises(TypeError, match="cannot be summed across processes"):
            Fetcher().from_partial([1.0])

    def test_round_trip(self):
        """from_partial of a summed partial gives the round's statistics of both."""
        a, b = ClassificationError(summary_name="e"), ClassificationError(summary_name="e")
        for inf, vec in ((a, [1, 0, 0]), (b, [1, 1])):
            inf.before_inference()
            inf.on_fetches([vec])
        a.from_partial(a.partial() + b.partial())
        assert a.after_inference() == {"e": pytest.approx(0.6)}
        with pytest.raises(ValueError, match="Tally must be a vector of 2 floats"):
            a.from_partial([1.0])
