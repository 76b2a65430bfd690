"""Inferencers, their pure statistics, and the inference runners over a real training loop."""

import itertools

import attrs
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    BinaryClassificationStats,
    Callback,
    CallbackError,
    ClassificationError,
    Confusion,
    DataParallelInferenceRunner,
    Inferencer,
    InferenceRunner,
    MeanState,
    ScalarStats,
    StopTraining,
    Tally,
    confusion_add,
    mean_add,
    mean_values,
    precision_recall,
    tally_add,
    tally_ratio,
)
from towerkit.callbacks._inference_stats import chunks
from towerkit.towers import TowerContext, TowerFunc, session_config_for_devices
from towerkit.towers.compat import tf1

W = np.array([[1.0, -1.0], [-2.0, 0.5]], np.float32)
SIGNATURE = [tf.TensorSpec([None, 2], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "label")]


def tower_fn(x, label):
    w = tf1.get_variable("w", initializer=W)
    logits = tf.matmul(x, w)
    pred = tf.argmax(logits, axis=1, output_type=tf.int32, name="pred")
    wrong = tf.cast(tf.not_equal(pred, label), tf.float32, name="incorrect_vector")
    tf.subtract(1.0, tf.reduce_mean(wrong), name="accuracy")
    tf.reduce_sum(x, name="xsum")
    return logits


def data(n, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2).astype(np.float32)
    y = rng.randint(0, 2, size=n).astype(np.int32)
    return x, y


def batches(x, y, sizes):
    out, start = [], 0
    for s in sizes:
        out.append((x[start : start + s], y[start : start + s]))
        start += s
    return out


def expected(x, y, sizes):
    pred = np.argmax(x @ W, axis=1)
    wrong = (pred != y).astype(np.float64)
    per_batch = [1.0 - wrong[a : a + s].mean() for a, s in zip(np.cumsum([0, *sizes[:-1]]), sizes)]
    tp = np.sum((pred == 1) & (y == 1))
    return {
        "error": wrong.mean(),
        "batch_accuracy": float(np.mean(per_batch)),
        "precision": tp / max(1, np.sum(pred == 1)),
        "recall": tp / max(1, np.sum(y == 1)),
    }


def build_trainer(graph, runner, **kwargs):
    """A trainer whose training tower is the tower function on constant inputs."""
    func = TowerFunc(tower_fn, SIGNATURE)
    x, y = data(4, seed=9)
    with TowerContext("", is_training=True):
        func(tf.constant(x), tf.constant(y))
    steps = tf1.get_variable("steps", initializer=0.0, trainable=False)
    train = tf1.assign_add(steps, 1.0).op
    kwargs.setdefault("max_epoch", 2)
    kwargs.setdefault("steps_per_epoch", 2)
    return LoopTrainer(graph, train, [runner], tower_func=func, **kwargs)


def infs():
    return [
        ClassificationError(),
        ScalarStats("accuracy"),
        BinaryClassificationStats("pred", "label"),
    ]


def check_stats(trainer, want, epochs=2):
    mons = trainer.monitors
    hist = mons.get_history("validation_error")
    assert [step for step, _ in hist] == [trainer.steps_per_epoch * e for e in range(1, epochs + 1)]
    assert mons.get_latest("validation_error") == pytest.approx(want["error"])
    assert mons.get_latest("validation_accuracy") == pytest.approx(want["batch_accuracy"])
    assert mons.get_latest("val_precision") == pytest.approx(want["precision"])
    assert mons.get_latest("val_recall") == pytest.approx(want["recall"])


SIZES = [4, 4, 3]


class TestInferenceRunner:
    """InferenceRunner runs its inferencers over the input after every epoch."""

    def test_python_datapoints(self, graph):
        """Lists of arrays are fed to a placeholder tower; stats match numpy's."""
        x, y = data(11)
        runner = InferenceRunner(batches(x, y, SIZES), infs())
        trainer = build_trainer(graph, runner).train()
        check_stats(trainer, expected(x, y, SIZES))
        assert runner.handle.ns_name == "InferenceTower"
        assert not runner.handle.is_training
        assert graph.get_tensor_by_name("InferenceTower/x:0").op.type == "Placeholder"
        assert len([v for v in tf1.global_variables() if "w" in v.op.name]) == 1, "w is reused"

    def test_dataflow_reset_before_read(self, graph):
        """A DataFlow-like input gets ``reset_state()`` once, before its first pass.

        Like a shuffling tensorpack DataFlow, it has no random state until reset.
        """
        x, y = data(11)

        class ShuffledBatches:
            def __init__(self):
                self.rng = None
                self.resets = 0

            def reset_state(self):
                self.resets += 1
                self.rng = np.random.RandomState(3)

            def __len__(self):
                return len(SIZES)

            def __iter__(self):
                order = self.rng.permutation(len(SIZES))
                all_batches = batches(x, y, SIZES)
                for i in order:
                    yield all_batches[i]

        df = ShuffledBatches()
        runner = InferenceRunner(df, infs())
        trainer = build_trainer(graph, runner).train()
        assert df.resets == 1
        assert trainer.monitors.get_latest("validation_error") == pytest.approx(
            expected(x, y, SIZES)["error"]
        )

    def test_true_error_differs_from_mean(self, graph):
        """With uneven batches, the true error is not the mean of per-batch errors."""
        x, y = data(11)
        want = expected(x, y, SIZES)
        assert abs((1 - want["batch_accuracy"]) - want["error"]) > 1e-3

    def test_dataset(self, graph):
        """A tf.data.Dataset made in the graph feeds the tower directly, until exhausted."""
        x, y = data(11)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
        runner = InferenceRunner(ds, infs(), tower_name="ValTower")
        trainer = build_trainer(graph, runner).train()
        check_stats(trainer, expected(x, y, SIZES))
        assert (
            graph.get_operation_by_name("ValTower/pred").inputs[0].op.name.startswith("ValTower/")
        )

    def test_infinite_dataset_refused(self, graph):
        """A repeated dataset is refused at setup with a message naming it and the fixes."""
        x, y = data(11)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
        runner = InferenceRunner(ds, infs())
        with pytest.raises(
            ValueError,
            match=r"InferenceRunner\(InferenceTower\): the input dataset \(.*\) is infinite .*"
            r"dataset.take\(n\), or pass size=n",
        ):
            build_trainer(graph, runner).train()

    def test_infinite_dataset_with_size(self, graph):
        """With size=n an infinite dataset runs n batches per round, from its start each round."""
        x, y = data(11)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
        runner = InferenceRunner(ds, infs(), size=3)
        trainer = build_trainer(graph, runner).train()
        check_stats(trainer, expected(x, y, SIZES))

    def test_size_bounds_python_input(self, graph):
        """size=n caps a round of a re-iterable input at its first n datapoints."""
        x, y = data(11)
        runner = InferenceRunner(batches(x, y, SIZES), infs(), size=2)
        trainer = build_trainer(graph, runner).train()
        check_stats(trainer, expected(x[:8], y[:8], [4, 4]))

    @pytest.mark.parametrize(
        ("size", "err"), [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)]
    )
    def test_bad_size(self, size, err):
        """'size' must be a number of batches >= 1."""
        with pytest.raises(err, match="'size' must be a number of batches"):
            InferenceRunner([], infs(), size=size)
        with pytest.raises(err, match="'size' must be a number of batches"):
            DataParallelInferenceRunner([], infs(), gpus=1, size=size)

    def test_dict_datapoints_and_own_tower_func(self, graph):
        """Datapoints may be dicts keyed by input name; a tower function may be given."""
        x, y = data(7)
        points = [{"x": a, "label": b} for a, b in batches(x, y, [5, 2])]
        other = TowerFunc(tower_fn, SIGNATURE)
        runner = InferenceRunner(
            points, [ClassificationError(summary_name="err")], tower_func=other
        )
        trainer = build_trainer(graph, runner, max_epoch=1).train()
        assert trainer.monitors.get_latest("err") == pytest.approx(expected(x, y, [5, 2])["error"])
        assert len(other.towers) == 1

    def test_one_callable_per_batch(self, graph):
        """All inferencers' fetches run in one session callable; shared tensors are fetched once."""
        x, y = data(6)
        a = ClassificationError()
        b = ClassificationError(summary_name="again")
        runner = InferenceRunner(batches(x, y, [3, 3]), [a, b])
        trainer = build_trainer(graph, runner, max_epoch=1).train()
        assert len(runner._fetches) == 1
        assert runner._slots == [[0], [0]]
        assert trainer.monitors.get_latest("again") == trainer.monitors.get_latest(
            "validation_error"
        )

    def test_fail(self, graph):
        """Bad arguments are refused early; missing tensors and mismatched datapoints are named."""
        with pytest.raises(
            TypeError, match=r"'infs' must hold Inferencer instances; entries at fault: #1: int"
        ):
            InferenceRunner([], [ClassificationError(), 3])
        with pytest.raises(ValueError, match=r"'infs' is empty"):
            InferenceRunner([], [])
        with pytest.raises(TypeError, match=r"'input' is an iterator \(generator\)"):
            InferenceRunner((p for p in []), ClassificationError())
        with pytest.raises(
            TypeError,
            match=r"'input' must be a tf.data.Dataset, a function of no argument building one, "
            r"an InputSource \(e.g. FeedInput\), or a re-iterable of datapoints.*got int",
        ):
            InferenceRunner(3, ClassificationError())
        with pytest.raises(TypeError, match=r"'tower_func' must be a towerkit.towers.TowerFunc"):
            InferenceRunner([], ClassificationError(), tower_func=print)
        with pytest.raises(ValueError, match=r"'device' must be a GPU id"):
            InferenceRunner([], ClassificationError(), device=-1)

    def test_missing_tensors(self, graph):
        """Every missing tensor is listed with its inferencer."""
        runner = InferenceRunner(
            [], [ScalarStats(["accuracy", "nope"]), ClassificationError("nada")]
        )
        with pytest.raises(
            KeyError,
            match=r"has no tensor for: ScalarStats: 'nope:0', ClassificationError: 'nada:0'",
        ):
            build_trainer(graph, runner).train()

    def test_bad_datapoint(self, graph):
        """A datapoint with the wrong number of components names its index and the inputs."""
        x, y = data(4)
        runner = InferenceRunner([(x, y), (x,)], ClassificationError())
        with pytest.raises(
            ValueError,
            match=r"datapoint #1 \(0-based\) does not fit the input signature \(x: .*, label: .*\): "
            r"datapoint has 1 component\(s\); the input signature \('x', 'label'\) needs 2",
        ):
            build_trainer(graph, runner).train()

    def test_float_for_an_integer_input(self, graph):
        """Inference follows the trainers' datapoint rule: a float for an integer input is
        refused (never silently truncated), naming the input and both dtypes."""
        x, y = data(4)
        runner = InferenceRunner([(x, y), (x, y + 0.5)], ClassificationError())
        with pytest.raises(
            ValueError,
            match=r"datapoint #1 \(0-based\) does not fit .*#1 'label': expected int32.*got float64",
        ):
            build_trainer(graph, runner).train()

    def test_cast_within_kind(self, graph):
        """float64 for a float32 input, int64 for an int32 one: cast, as in training."""
        x, y = data(4)
        runner = InferenceRunner(
            [(x.astype(np.float64), y.astype(np.int64))], ClassificationError()
        )
        build_trainer(graph, runner).train()

    def test_no_tower_func(self, graph):
        """Without any tower function there is nothing to build."""
        steps = tf1.get_variable("steps", initializer=0.0)
        trainer = LoopTrainer(
            graph, tf1.assign_add(steps, 1.0).op, [InferenceRunner([], ClassificationError())]
        )
        with pytest.raises(CallbackError, match=r"needs a tower function"):
            trainer.train()

    def test_dataset_function(self, graph):
        """A function building the dataset is called in the trainer's graph, in setup_graph."""
        x, y = data(11)
        called_in = []

        def make():
            called_in.append(tf1.get_default_graph())
            return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)

        runner = InferenceRunner(make, infs())
        trainer = build_trainer(graph, runner).train()
        check_stats(trainer, expected(x, y, SIZES))
        assert called_in == [graph]

    def test_dataset_function_fail(self, graph):
        """A function that builds no dataset is named with what it returned."""
        runner = InferenceRunner(lambda: [1, 2], ClassificationError())
        with pytest.raises(TypeError, match=r"the function given as 'input' returned list, not a"):
            build_trainer(graph, runner).train()

    def test_input_source(self, graph):
        """An input source's tensors feed the tower; the runner drives the source's callbacks."""
        x, y = data(11)
        source = ListSource(batches(x, y, SIZES))
        runner = InferenceRunner(source, infs())
        trainer = build_trainer(graph, runner, max_epoch=3).train()
        check_stats(trainer, expected(x, y, SIZES), epochs=3)
        assert source.callback.trainer is trainer, "set up by the runner"
        assert source.callback.phases == ["before_train", "after_train"]

    def test_input_source_finite(self, graph):
        """A finite source that ends at the first batch of a round is restarted once."""
        x, y = data(11)
        source = ListSource(batches(x, y, SIZES), infinite=False)
        runner = InferenceRunner(source, infs())
        trainer = build_trainer(graph, runner, max_epoch=2).train()
        check_stats(trainer, expected(x, y, SIZES))
        assert source.callback.phases == ["before_train", "before_train", "after_train"]

    def test_input_source_unknown_size(self, graph):
        """A source of unknown size cannot make rounds: a clear error."""
        source = ListSource(batches(*data(4), [4]), size=None)
        with pytest.raises(ValueError, match=r"the size of ListSource is unknown"):
            build_trainer(graph, InferenceRunner(source, ClassificationError())).train()

    def test_dataset_from_another_graph(self, graph):
        """A dataset made outside the trainer's graph is refused with the reason."""
        with tf.Graph().as_default():
            ds = tf.data.Dataset.from_tensor_slices(
                (np.zeros((2, 2), np.float32), np.zeros(2, np.int32))
            )
        with pytest.raises(ValueError, match=r"the dataset must be created in the trainer's graph"):
            build_trainer(graph, InferenceRunner(ds, ClassificationError())).train()


class ListSource:
    """A small input source following the protocol: batches fed into placeholders.

    Its callback feeds the next batch in ``before_run`` and, when not ``infinite``,
    raises ``StopTraining`` at the end of the data.
    """

    def __init__(self, points, infinite=True, size=-1):
        self.points = points
        self.infinite = infinite
        self._size = len(points) if size == -1 else size
        self.callback = None

    def __str__(self):
        return "ListSource"

    def setup(self, signature):
        self.signature = signature
        return []

    def get_input_tensors(self):
        self.placeholders = [tf1.placeholder(s.dtype, s.shape) for s in self.signature]
        return self.placeholders

    def get_callbacks(self):
        if self.callback is None:
            self.callback = ListFeed(self)
        return [self.callback]

    def size(self):
        if self._size is None:
            raise TypeError("size unknown")
        return self._size


class ListFeed(Callback):
    """Feeds `ListSource`'s placeholders."""

    def __init__(self, source):
        self.source = source
        self.phases = []
        self.it = None

    def _before_train(self):
        self.phases.append("before_train")
        self.it = iter(self.source.points)

    def _after_train(self):
        self.phases.append("after_train")

    def _before_run(self, ctx):
        try:
            point = next(self.it)
        except StopIteration:
            if not self.source.infinite:
                raise StopTraining("no more data") from None
            self.it = iter(self.source.points)
            point = next(self.it)
        return tf1.train.SessionRunArgs(None, dict(zip(self.source.placeholders, point)))


class TestDataParallelInferenceRunner:
    """DataParallelInferenceRunner puts one tower per device and runs the remainder on the first."""

    def test_two_logical_devices(self, graph):
        """Two towers on /cpu:0 and /cpu:1 give the statistics of one tower, odd batch count included."""
        x, y = data(11)
        runner = DataParallelInferenceRunner(batches(x, y, SIZES), infs(), gpus=2)
        config = session_config_for_devices(["/cpu:0", "/cpu:1"])
        config.allow_soft_placement = False
        trainer = build_trainer(graph, runner, session_config=config).train()
        check_stats(trainer, expected(x, y, SIZES))
        assert runner.devices == ("/cpu:0", "/cpu:1")
        assert [h.ns_name for h in runner.handles] == ["InferenceTower0", "InferenceTower1"]
        assert graph.get_operation_by_name("InferenceTower1/pred").device.endswith("CPU:1")
        assert graph.get_operation_by_name("InferenceTower0/pred").device.endswith("CPU:0")

    def test_dataset(self, graph):
        """A dataset is read on the host, one element per datapoint."""
        x, y = data(11)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
        runner = DataParallelInferenceRunner(ds, infs(), gpus=[0, 1])
        config = session_config_for_devices(["/cpu:0", "/cpu:1"])
        trainer = build_trainer(graph, runner, session_config=config).train()
        check_stats(trainer, expected(x, y, SIZES))

    def test_infinite_dataset(self, graph):
        """A repeated dataset is refused without size, and runs size batches with it."""
        x, y = data(11)
        config = session_config_for_devices(["/cpu:0", "/cpu:1"])
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
        with pytest.raises(
            ValueError,
            match=r"DataParallelInferenceRunner\(InferenceTower\): the input dataset .* is infinite",
        ):
            build_trainer(
                graph, DataParallelInferenceRunner(ds, infs(), gpus=[0, 1]), session_config=config
            ).train()

    def test_infinite_dataset_with_size(self, graph):
        """size=3 over a repeated dataset: one pass of 3 batches per round."""
        x, y = data(11)
        config = session_config_for_devices(["/cpu:0", "/cpu:1"])
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
        runner = DataParallelInferenceRunner(ds, infs(), gpus=[0, 1], size=3)
        trainer = build_trainer(graph, runner, session_config=config).train()
        check_stats(trainer, expected(x, y, SIZES))

    def test_input_source(self, graph):
        """An input source's batches are pulled on the host, one per tower."""
        x, y = data(11)
        runner = DataParallelInferenceRunner(ListSource(batches(x, y, SIZES)), infs(), gpus=2)
        config = session_config_for_devices(["/cpu:0", "/cpu:1"])
        trainer = build_trainer(graph, runner, session_config=config).train()
        check_stats(trainer, expected(x, y, SIZES))

    def test_dataset_function(self, graph):
        """A function building the dataset works as the dataset does."""
        x, y = data(11)
        runner = DataParallelInferenceRunner(
            lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(4), infs(), gpus=2
        )
        config = session_config_for_devices(["/cpu:0", "/cpu:1"])
        trainer = build_trainer(graph, runner, session_config=config).train()
        check_stats(trainer, expected(x, y, SIZES))

    def test_fail(self):
        """gpus is checked at construction."""
        with pytest.raises(ValueError, match=r"'gpus' as a count must be >= 1; got 0"):
            DataParallelInferenceRunner([], ClassificationError(), gpus=0)


class Recorder(Inferencer):
    """Records what a runner calls."""

    def __init__(self):
        self.calls = []

    def _get_fetches(self):
        return ["xsum"]

    def _before_inference(self):
        self.calls.append("before")

    def _on_fetches(self, results):
        self.calls.append(float(results[0]))

    def _after_inference(self):
        self.calls.append("after")


class TestInferencer:
    """The Inferencer protocol."""

    def test_calls(self, graph):
        """before_inference, on_fetches per batch, after_inference, every round."""
        x, y = data(5)
        rec = Recorder()
        build_trainer(graph, InferenceRunner(batches(x, y, [3, 2]), rec), max_epoch=2).train()
        round_ = ["before", pytest.approx(x[:3].sum()), pytest.approx(x[3:].sum()), "after"]
        assert rec.calls == round_ * 2

    def test_fetch_names(self):
        """get_fetches gives tensor names, never op names."""
        assert ScalarStats(["a", "b:1"]).get_fetches() == ["a:0", "b:1"]
        assert Recorder().get_fetches() == ["xsum:0"]

    def test_abstract(self):
        """An inferencer must say what it fetches and what it does with it."""

        class Half(Inferencer):
            def _get_fetches(self):
                return ["a"]

        with pytest.raises(TypeError, match=r"abstract method '?_on_fetches"):
            Half()

    def test_stat_names(self):
        """ScalarStats names its statistics with the prefix, without ':0'."""
        assert ScalarStats(["loss:0", "acc"]).stat_names == ("validation_loss", "validation_acc")
        assert ScalarStats("acc", prefix="").stat_names == ("acc",)

    def test_fail(self):
        """Inferencer arguments are checked at construction."""
        with pytest.raises(TypeError, match=r"'prefix' must be a string; got int"):
            ScalarStats("a", prefix=1)
        with pytest.raises(ValueError, match=r"'summary_name' must be a non-empty string"):
            ClassificationError(summary_name="")
        with pytest.raises(TypeError, match=r"'label_tensor_name' must be a tensor name"):
            BinaryClassificationStats("p", 3)


@st.composite
def split_vector(draw):
    vec = draw(st.lists(st.integers(0, 1), min_size=1, max_size=60))
    cuts = sorted(draw(st.lists(st.integers(0, len(vec)), max_size=6)))
    edges = [0, *cuts, len(vec)]
    parts = [np.array(vec[a:b], np.float32) for a, b in itertools.pairwise(edges)]
    return np.array(vec), parts


def run_round(inf, batches):
    """One round of inference driven by hand, as a runner drives it."""
    inf.before_inference()
    for b in batches:
        inf.on_fetches(list(b))
    return inf.after_inference()


class TestScalarStats:
    """ScalarStats averages scalars over batches."""

    def test_round(self):
        """The mean of each scalar over the round's batches; a new round starts afresh."""
        inf = ScalarStats(["loss", "acc:0"], prefix="val")
        assert run_round(inf, [(1.0, 0.5), (3.0, 1.0)]) == {"val_loss": 2.0, "val_acc": 0.75}
        assert run_round(inf, [(5.0, 0.0)]) == {"val_loss": 5.0, "val_acc": 0.0}


class TestClassificationError:
    """ClassificationError counts wrong samples over the whole round."""

    def test_round(self):
        """Uneven batches weigh by their sizes; an empty round puts nothing."""
        inf = ClassificationError(summary_name="err")
        assert run_round(inf, [([1, 0, 0, 0],), ([1],)]) == {"err": 0.4}
        assert run_round(inf, []) == {}


class TestBinaryClassificationStats:
    """BinaryClassificationStats gives precision and recall over the round."""

    def test_round(self):
        """Counts add up over batches."""
        inf = BinaryClassificationStats("p", "y", prefix="test")
        got = run_round(inf, [([1, 1, 0], [1, 0, 1]), ([1, 0], [1, 0])])
        assert got == {"test_precision": pytest.approx(2 / 3), "test_recall": pytest.approx(2 / 3)}


class TestStatistics:
    """The pure statistics behind the inferencers."""

    @given(split_vector())
    def test_classification_error_any_split(self, case):
        """ClassificationError over any batch split equals the error over the whole data."""
        vec, parts = case
        inf = ClassificationError()
        inf.before_inference()
        for p in parts:
            inf.on_fetches([p])
        assert inf.after_inference() == {"validation_error": pytest.approx(vec.mean())}
        tally = Tally()
        for p in parts:
            tally = tally_add(tally, p)
        assert tally == Tally(ones=int(vec.sum()), total=len(vec))

    @given(
        st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=40),
        st.integers(1, 7),
    )
    def test_confusion_any_split(self, pairs, size):
        """Precision and recall do not depend on how the data is batched."""
        pred = np.array([p for p, _ in pairs])
        label = np.array([q for _, q in pairs])
        whole = confusion_add(Confusion(), pred, label)
        parts = Confusion()
        for i in range(0, len(pairs), size):
            parts = confusion_add(parts, pred[i : i + size], label[i : i + size])
        assert parts == whole
        assert whole.tp + whole.fp + whole.fn + whole.tn == len(pairs)
        precision, recall = precision_recall(whole)
        if pred.sum():
            assert precision == pytest.approx(((pred == 1) & (label == 1)).sum() / pred.sum())
        if label.sum():
            assert recall == pytest.approx(((pred == 1) & (label == 1)).sum() / label.sum())

    @given(
        st.lists(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=2), min_size=1, max_size=20)
    )
    def test_mean_state(self, rows):
        """The state's means are the means of the values put in."""
        state = MeanState(sums=[0, 0])
        for r in rows:
            state = mean_add(state, r)
        assert mean_values(state) == pytest.approx(tuple(np.mean(rows, axis=0)), abs=1e-6)

    @given(st.lists(st.integers(), max_size=30), st.integers(1, 8))
    def test_chunks(self, items, size):
        """Chunks cover the items in order; only the last may be short."""
        groups = list(chunks(items, size))
        assert [x for g in groups for x in g] == items
        assert all(len(g) == size for g in groups[:-1])

    def test_records(self):
        """Records are frozen, compare by value and print their fields."""
        assert repr(Tally(ones=1, total=2)) == "Tally(ones=1, total=2)"
        assert repr(MeanState(sums=[1, 2])) == "MeanState(sums=(1.0, 2.0), count=0)"
        assert repr(Confusion(tp=1)) == "Confusion(tp=1, fp=0, fn=0, tn=0)"
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            Tally().ones = 3
        assert tally_ratio(Tally()) != tally_ratio(Tally())  # NaN before any data

    def test_fail(self):
        """Bad counts and mismatched values are refused, naming what is wrong."""
        with pytest.raises(ValueError, match=r"'total' must be >= 0: -1"):
            Tally(total=-1)
        with pytest.raises(ValueError, match=r"expected 2 values, one per statistic; got 1"):
            mean_add(MeanState(sums=[0, 0]), [1.0])
        with pytest.raises(ValueError, match=r"the values must be scalars; got #0: shape \(2,\)"):
            mean_add(MeanState(sums=[0]), [np.zeros(2)])
        with pytest.raises(ValueError, match=r"as many entries; got 2 and 3"):
            confusion_add(Confusion(), [1, 0], [1, 0, 1])
        with pytest.raises(ValueError, match=r"'size' must be >= 1; got 0"):
            list(chunks([1], 0))
