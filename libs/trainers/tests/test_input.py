"""Input sources: the protocol, each source's batches in real sessions, prefetch heuristics."""

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks import (
    Callback,
    Callbacks,
    ClassificationError,
    DataParallelInferenceRunner,
    HookedSession,
    InferenceRunner,
    ScalarStats,
    StopTraining,
)
from towerkit.towers import TowerContext, TowerFunc, session_config_for_devices
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    DummyConstantInput,
    FeedInput,
    InputDataError,
    InputProducerError,
    InputSignatureError,
    InputSizeUnknownError,
    InputSource,
    InputTimeoutError,
    IterableInput,
    ModelDesc,
    NewSessionCreator,
    NumpyInput,
    SimpleTrainer,
    StagingInput,
    TFDatasetInput,
    TowerTrainer,
    TrainConfig,
    UnregisteredInputError,
    apply_default_prefetch,
    launch_train_with_config,
)
from towerkit.trainers._stop import sigint_step
from towerkit.trainers.inputs._base import check_input_tensors, spec_mismatches
from towerkit.trainers.inputs._feed import QueueFeeder, SwitchInterval
from towerkit.trainers.inputs._sources import datapoint_tuple, iterable_size, num_batches
from towerkit.trainers.inputs._staging import wants_staging

SIG = [tf.TensorSpec([None, 2], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]


def batch(i):
    """Datapoint i: a batch of 2 whose x and y are all i."""
    return (np.full([2, 2], i, np.float32), np.full([2], i, np.int32))


def batches_dataset(n=5):
    """A dataset of n such batches, in order."""
    xs = np.stack([batch(i)[0] for i in range(n)])
    ys = np.stack([batch(i)[1] for i in range(n)])
    return tf.data.Dataset.from_tensor_slices((xs, ys))


class View:
    """What input callbacks use from a trainer: the graph and the session."""

    def __init__(self, sess):
        self.graph = sess.graph
        self.sess = sess


def start(source, sess):
    """Set up `source`'s callbacks on `sess`, run before_train; return a hooked session and them."""
    cbs = Callbacks(source.get_callbacks())
    cbs.setup_graph(View(sess))
    cbs.before_train()
    return HookedSession(sess, list(cbs)), cbs


def ids(hooked, ys, runs):
    """The batch id (first y) of each tensor in `ys`, over `runs` hooked runs."""
    return [[int(y[0]) for y in hooked.run(ys)] for _ in range(runs)]


class CountingFlow:
    """A DataFlow-like iterable of `n` batches that counts its passes and resets."""

    def __init__(self, n=5, as_dict=False):
        self.n = n
        self.as_dict = as_dict
        self.passes = 0
        self.resets = 0

    def __len__(self):
        return self.n

    def reset_state(self):
        self.resets += 1

    def __iter__(self):
        self.passes += 1
        for i in range(self.n):
            x, y = batch(i)
            yield {"y": y, "x": x} if self.as_dict else (x, y)


class NoLen:
    """An iterable of 3 batches without a length."""

    def __iter__(self):
        return (batch(i) for i in range(3))


class TestProtocol:
    """The `InputSource` protocol that every source follows."""

    def test_setup_once(self, graph):
        """setup twice with the same signature is a no-op; another signature is an error."""
        source = TFDatasetInput(batches_dataset())
        assert not source.setup_done()
        source.setup(SIG)
        source.setup(list(SIG))
        assert source.setup_done()
        assert source.input_signature == tuple(SIG)
        with pytest.raises(RuntimeError, match="already set up with signature"):
            source.setup([tf.TensorSpec([None, 2], tf.float32, "x")])

    def test_before_setup(self):
        """Tensors, callbacks and the signature need setup first."""
        source = TFDatasetInput(batches_dataset)
        with pytest.raises(
            RuntimeError, match=r"get_input_tensors: call setup\(input_signature\) first"
        ):
            source.get_input_tensors()
        with pytest.raises(RuntimeError, match=r"get_callbacks: call setup"):
            source.get_callbacks()
        with pytest.raises(RuntimeError, match=r"input_signature: call setup"):
            _ = source.input_signature

    def test_bad_signature(self, graph):
        """The signature is checked: named TensorSpecs."""
        with pytest.raises(ValueError, match="unnamed entries: 0"):
            TFDatasetInput(batches_dataset()).setup([tf.TensorSpec([None, 2], tf.float32)])

    def test_callbacks_stable_and_not_chief_only(self, graph):
        """get_callbacks returns the same callbacks each time; they run on every worker."""
        source = IterableInput(CountingFlow())
        source.setup(SIG)
        first = source.get_callbacks()
        assert first == source.get_callbacks()
        assert all(not cb.chief_only for cb in first)

    @pytest.mark.parametrize(
        "make",
        [
            lambda: FeedInput([batch(0)]),
            lambda: DummyConstantInput([[2, 2], [2]]),
            lambda: StagingInput(IterableInput([batch(0)])),
        ],
    )
    def test_towers_before_callbacks(self, graph, make):
        """Sources whose callbacks serve each tower want every tower before get_callbacks."""
        source = make()
        source.setup(SIG)
        with pytest.raises(RuntimeError, match="get_callbacks before any get_input_tensors"):
            source.get_callbacks()
        source.get_input_tensors()
        source.get_callbacks()
        with pytest.raises(RuntimeError, match="get_input_tensors after get_callbacks"):
            source.get_input_tensors()

    def test_size_unknown_is_type_error(self, graph):
        """InputSizeUnknownError is a TypeError whose message says what to do."""
        source = DummyConstantInput([[2, 2], [2]])
        with pytest.raises(TypeError, match="unknown: pass 'steps_per_epoch' explicitly"):
            source.size()
        assert issubclass(InputSizeUnknownError, TypeError)

    def test_wrong_tensors(self, graph):
        """A source producing the wrong tensors fails in get_input_tensors, naming both specs."""

        class Wrong(InputSource):
            def _setup(self, specs):
                pass

            def _get_input_tensors(self):
                return [tf.zeros([2, 3], tf.float64), tf.zeros([2], tf.int32)]

        source = Wrong()
        source.setup(SIG)
        with pytest.raises(
            InputSignatureError,
            match=r"Wrong does not produce the input signature: #0 'x': expected float32\(None, 2\), got float64\(2, 3\)",
        ):
            source.get_input_tensors()

    def test_static_shape_merged(self, graph):
        """Tensors of unknown shape get the signature's static shape."""
        t = tf1.placeholder(tf.float32, None)
        (out,) = check_input_tensors("src", [tf.TensorSpec([None, 2], tf.float32, "x")], [t])
        assert out.shape.as_list() == [None, 2]


class LinearTrainer(TowerTrainer):
    """A trainer written as tensorpack's docs show: the input's callbacks from ``setup``.

    With ``register=False`` it forgets to register them.
    """

    def __init__(self, input, register=True):
        super().__init__()
        sig = Linear().get_input_signature()
        cbs = input.setup(sig)
        self.setup_returned = cbs
        if register:
            self.register_callback(cbs)
        self.tower_func = TowerFunc(Linear().build_graph, sig)
        with TowerContext("", is_training=True):
            cost = self.tower_func(*input.get_input_tensors())
        self.train_op = tf1.train.GradientDescentOptimizer(0.01).minimize(cost)


class AfterTrain(Callback):
    """Appends its name to `ended` after training; with `fail`, then raises."""

    _chief_only = False

    def __init__(self, name, ended, fail=False):
        self.name, self.ended, self.fail = name, ended, fail

    def _after_train(self):
        self.ended.append(self.name)
        if self.fail:
            raise RuntimeError(f"after_train of {self.name} failed")


class Explains(Callback):
    """An input callback of a custom source that explains any failed step."""

    _chief_only = False

    def explain_failure(self, err):
        return InputDataError(f"explained: {type(err).__name__}")


class WithExtraCallbacks(FeedInput):
    """A FeedInput whose callbacks are `extra`'s first, its own, then the rest of `extra`."""

    def __init__(self, flow, extra):
        super().__init__(flow)
        self.extra = extra

    def get_callbacks(self):
        return [*self.extra[:1], *super().get_callbacks(), *self.extra[1:]]


class FailsAtThirdStep(LinearTrainer):
    """LinearTrainer whose third step fails in the graph (an ``Assert`` of the model)."""

    def __init__(self, input):
        super().__init__(input)
        count = tf1.Variable(0, name="count")
        check = tf1.Assert(count.assign_add(1) < 3, ["the model check"])
        with tf.control_dependencies([check]):
            self.train_op = tf.group(self.train_op)


class TestSetupReturnsCallbacks:
    """``InputSource.setup`` returns the callbacks to register, as custom trainers expect."""

    @pytest.mark.parametrize(
        "make",
        [
            lambda: FeedInput(CountingFlow(3)),
            lambda: IterableInput(CountingFlow(3)),
            lambda: TFDatasetInput(lambda: batches_dataset(3)),
            lambda: NumpyInput([np.ones([6, 2], np.float32), np.arange(6, dtype=np.int32)], 2),
            lambda: DummyConstantInput([[2, 2], [2]]),
        ],
    )
    def test_custom_trainer_registers_them(self, graph, make):
        """``self.register_callback(input.setup(sig))`` in a TowerTrainer subclass trains."""
        source = make()
        seen = SeenIds()
        trainer = LinearTrainer(source)
        trainer.train_with_defaults(
            callbacks=[seen], monitors=[], extra_callbacks=[], steps_per_epoch=2, max_epoch=2
        )
        assert trainer.global_step == 4
        assert len(seen.ids) == 4
        registered = trainer.callbacks
        assert all(cb in registered for cb in source.get_callbacks()), "the source's own callbacks"
        assert not any(type(cb).__name__ == "InputSourceCallbacks" for cb in registered)

    def test_feed_order(self, graph):
        """A FeedInput registered through setup feeds its datapoints in order, across epochs."""
        seen = SeenIds()
        LinearTrainer(FeedInput(CountingFlow(3))).train_with_defaults(
            callbacks=[seen], monitors=[], extra_callbacks=[], steps_per_epoch=2, max_epoch=2
        )
        assert seen.ids == [0, 1, 2, 0]

    def test_same_on_each_call(self, graph):
        """setup again with the same signature returns the same callbacks."""
        source = FeedInput(CountingFlow(3))
        first = source.setup(SIG)
        assert len(first) == 1
        assert isinstance(first[0], Callback)
        assert source.setup(SIG) == first
        assert not first[0].chief_only, "input callbacks run on every worker"

    def test_forwarded_outside_a_trainer(self, graph, sess):
        """Driven as a plain callback, the stand-in forwards to the source's callbacks."""
        source = FeedInput(CountingFlow(3))
        (stand_in,) = source.setup(SIG)
        _, y = source.get_input_tensors()
        cbs = Callbacks([stand_in])
        cbs.setup_graph(View(sess))
        cbs.before_train()
        hooked = HookedSession(sess, [stand_in])
        assert ids(hooked, [y], 4) == [[0], [1], [2], [0]]

    def test_stand_in_is_a_group(self, graph, sess):
        """The stand-in is a `Callbacks`: one source callback's failing ``after_train`` does
        not skip the others', and the first error is raised once all have run."""
        ended = []
        source = WithExtraCallbacks(
            CountingFlow(3), [AfterTrain("first", ended, fail=True), AfterTrain("last", ended)]
        )
        (stand_in,) = source.setup(SIG)
        source.get_input_tensors()
        assert isinstance(stand_in, Callbacks)
        assert stand_in, "a stand-in is never an empty group"
        stand_in.setup_graph(View(sess))
        assert len(stand_in) == 3
        stand_in.before_train()
        with pytest.raises(RuntimeError, match="after_train of first failed"):
            stand_in.after_train()
        assert ended == ["first", "last"]

    def test_any_input_callback_explains_a_failed_step(self, graph):
        """The loop asks every registered callback's ``explain_failure`` about a failed step,
        whatever the input's kind: the first explanation is raised, located, the step's
        own error its cause."""
        source = WithExtraCallbacks(CountingFlow(3), [Explains()])
        with pytest.raises(InputDataError) as info:
            FailsAtThirdStep(source).train_with_defaults(
                callbacks=[], monitors=[], extra_callbacks=[], steps_per_epoch=2, max_epoch=2
            )
        assert str(info.value).startswith(
            "explained: InvalidArgumentError [at epoch 2, step 0 of 2 (0-based), global step 2]"
        )
        assert isinstance(info.value.__cause__, tf.errors.InvalidArgumentError)

    def test_unexplained_failed_step_raised_as_is(self, graph):
        """With no explanation from any callback, the step's own error is raised."""
        with pytest.raises(tf.errors.InvalidArgumentError, match="the model check"):
            FailsAtThirdStep(FeedInput(CountingFlow(3))).train_with_defaults(
                callbacks=[], monitors=[], extra_callbacks=[], steps_per_epoch=2, max_epoch=2
            )

    def test_forgotten(self, graph):
        """A trainer that never registers the input's callbacks fails before the first step."""
        trainer = LinearTrainer(FeedInput(CountingFlow(3)), register=False)
        probe = SeenIds()
        with pytest.raises(
            UnregisteredInputError,
            match=r"the input FeedInput\(CountingFlow\) gave tensors to the trainer's graph, "
            r"but its callbacks are not registered.*self.register_callback\(input.setup\(",
        ):
            trainer.train_with_defaults(
                callbacks=[probe], monitors=[], extra_callbacks=[], steps_per_epoch=2, max_epoch=1
            )
        assert probe.ids == [], "no step ran"
        assert trainer.sess is None, "no session was made"

    def test_forgotten_dataset(self, graph):
        """The same for an iterator-based source (which would fail uninitialized at step 1)."""
        trainer = LinearTrainer(TFDatasetInput(batches_dataset(3)), register=False)
        with pytest.raises(UnregisteredInputError, match=r"the input TFDatasetInput gave"):
            trainer.train_with_defaults(monitors=[], extra_callbacks=[], steps_per_epoch=2)

    def test_get_callbacks_registered_instead(self, graph):
        """Registering ``get_callbacks()`` after building the towers is as good."""

        class Later(LinearTrainer):
            def __init__(self, input):
                super().__init__(input, register=False)
                self.register_callback(input.get_callbacks())

        seen = SeenIds()
        Later(FeedInput(CountingFlow(3))).train_with_defaults(
            callbacks=[seen], monitors=[], extra_callbacks=[], steps_per_epoch=3, max_epoch=1
        )
        assert seen.ids == [0, 1, 2]


def labelled(n=10, seed=3):
    """n datapoints of Linear's signature (batches of 2) and the labels Linear's w=0 gets right."""
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 2, 2)).astype(np.float32)
    ys = rng.integers(0, 2, size=(n, 2)).astype(np.int32)
    return list(zip(xs, ys))


def val_cost(x, y):
    """Linear's cost and a per-datapoint 0/1 'wrong' vector: prediction 0 for every point."""
    w = tf1.get_variable("w", [2], initializer=tf1.zeros_initializer())
    err = tf.linalg.matvec(x, w) - tf.cast(y, tf.float32)
    tf.cast(tf.not_equal(y, 0), tf.float32, name="incorrect_vector")
    return tf.reduce_mean(tf.square(err), name="cost")


class TestSourcesInInferenceRunner:
    """InferenceRunner and DataParallelInferenceRunner take this lib's input sources."""

    def run(self, runner, epochs=2, **kw):
        trainer = SimpleTrainer()
        trainer.setup_graph(
            Linear().get_input_signature(),
            DummyConstantInput([[2, 2], [2]]),
            val_cost,
            lambda: tf1.train.GradientDescentOptimizer(0.0),
        )
        trainer.train_with_defaults(
            callbacks=[runner],
            monitors=None if "logdir" in kw else [],
            extra_callbacks=[],
            steps_per_epoch=2,
            max_epoch=epochs,
            **kw,
        )
        return trainer

    def test_infinite_source(self, graph):
        """A repeated TFDatasetInput: refused without size (the message says how), n batches with it."""
        pts = labelled()
        xs = np.stack([x for x, _ in pts])
        ys = np.stack([y for _, y in pts])

        def source():
            return TFDatasetInput(lambda: tf.data.Dataset.from_tensor_slices((xs, ys)).repeat())

        with pytest.raises(
            ValueError,
            match=r"InferenceRunner\(InferenceTower\): .* TFDatasetInput is unknown or infinite "
            r".* or the runner size=n to run n batches per round",
        ):
            self.run(InferenceRunner(source(), [ClassificationError()]))

    def test_infinite_source_with_size(self, graph):
        """size=4 bounds each round of a repeated TFDatasetInput to 4 batches."""
        pts = labelled()
        xs = np.stack([x for x, _ in pts])
        ys = np.stack([y for _, y in pts])
        source = TFDatasetInput(lambda: tf.data.Dataset.from_tensor_slices((xs, ys)).repeat())
        runner = InferenceRunner(source, [ClassificationError()], size=4)
        trainer = self.run(runner, epochs=1)
        want = float(np.mean(ys[:4] != 0))
        assert trainer.monitors.get_latest("validation_error") == pytest.approx(want)

    @pytest.mark.parametrize(
        "make",
        [
            lambda pts: FeedInput(pts),
            lambda pts: FeedInput(pts, infinite=False),
            lambda pts: IterableInput(pts),
            lambda pts: NumpyInput(
                [np.concatenate([x for x, _ in pts]), np.concatenate([y for _, y in pts])],
                batch_size=2,
                shuffle=False,
            ),
        ],
    )
    def test_inference_runner(self, graph, make):
        """``InferenceRunner(FeedInput(...), ...)``: every round is one pass over the data."""
        pts = labelled()
        want = float(np.mean(np.concatenate([y for _, y in pts]) != 0))
        runner = InferenceRunner(make(pts), [ClassificationError(), ScalarStats("cost")])
        trainer = self.run(runner, epochs=3)
        history = trainer.monitors.get_history("validation_error")
        assert [v for _, v in history] == pytest.approx([want] * 3)
        assert trainer.monitors.get_latest("validation_cost") > 0

    def test_data_parallel(self, graph):
        """``DataParallelInferenceRunner(FeedInput(...), ...)`` on two logical devices."""
        pts = labelled(n=7)
        want = float(np.mean(np.concatenate([y for _, y in pts]) != 0))
        runner = DataParallelInferenceRunner(FeedInput(pts), ClassificationError(), gpus=2)
        trainer = SimpleTrainer()
        trainer.setup_graph(
            Linear().get_input_signature(),
            DummyConstantInput([[2, 2], [2]]),
            val_cost,
            lambda: tf1.train.GradientDescentOptimizer(0.0),
        )
        trainer.train_with_defaults(
            callbacks=[runner],
            monitors=[],
            extra_callbacks=[],
            steps_per_epoch=1,
            max_epoch=2,
            session_creator=NewSessionCreator(
                config=session_config_for_devices(["/cpu:0", "/cpu:1"])
            ),
        )
        history = trainer.monitors.get_history("validation_error")
        assert [v for _, v in history] == pytest.approx([want] * 2)

    def test_unknown_size(self, graph):
        """A source of unknown size cannot make rounds; the error names it."""
        runner = InferenceRunner(FeedInput(NoLen()), ClassificationError())
        with pytest.raises(ValueError, match=r"the size of FeedInput\(NoLen\) is unknown"):
            self.run(runner)


class TestSpecMismatches:
    """`spec_mismatches` lists every entry at fault."""

    specs = st.lists(
        st.tuples(
            st.sampled_from([tf.float32, tf.int32, tf.int64, tf.uint8]),
            st.lists(st.none() | st.integers(1, 5), max_size=3),
        ),
        min_size=1,
        max_size=4,
    )

    @given(specs)
    def test_self_matches(self, entries):
        """A signature matches itself and any fully known instance of itself."""
        sig = [tf.TensorSpec(s, d, f"i{k}") for k, (d, s) in enumerate(entries)]
        assert spec_mismatches(sig, sig) == []
        known = [tf.TensorSpec([n or 7 for n in s], d) for d, s in entries]
        assert spec_mismatches(sig, known) == []

    @given(specs, st.data())
    def test_dtype_changes_reported(self, entries, data):
        """Each entry given another dtype is reported, by index and name."""
        sig = [tf.TensorSpec(s, d, f"i{k}") for k, (d, s) in enumerate(entries)]
        changed = data.draw(st.sets(st.integers(0, len(entries) - 1)))
        produced = [
            tf.TensorSpec(s, tf.float64 if k in changed else d) for k, (d, s) in enumerate(entries)
        ]
        wrong = spec_mismatches(sig, produced)
        assert [w.split(" ")[0] for w in wrong] == [f"#{k}" for k in sorted(changed)]

    def test_count(self):
        """A wrong number of tensors is one entry naming the inputs."""
        assert spec_mismatches(SIG, SIG[:1]) == ["count: expected 2 tensors (x, y), got 1"]


class TestTFDatasetInput:
    """`TFDatasetInput` reads a user's dataset, repeated forever."""

    def test_batches_repeat(self, graph, sess):
        """Batches come in order and continue into the next pass."""
        source = TFDatasetInput(batches_dataset(5))
        source.setup(SIG)
        x, y = source.get_input_tensors()
        hooked, _ = start(source, sess)
        assert ids(hooked, [y], 7) == [[0], [1], [2], [3], [4], [0], [1]]
        np.testing.assert_array_equal(hooked.run(x), np.full([2, 2], 2.0))

    def test_infinite_not_repeated(self, graph, sess):
        """An infinite dataset is read as it is; a finite one gets a repeat of its own."""

        def repeats():
            return sum(op.type == "RepeatDataset" for op in graph.get_operations())

        endless = TFDatasetInput(batches_dataset(3).repeat())
        endless.setup(SIG)
        _, y = endless.get_input_tensors()
        assert repeats() == 1
        hooked, _ = start(endless, sess)
        assert ids(hooked, [y], 4) == [[0], [1], [2], [0]]
        finite = TFDatasetInput(batches_dataset(3))
        finite.setup(SIG)
        assert repeats() == 2
        assert finite.size() == 3
        with pytest.raises(InputSizeUnknownError):
            endless.size()

    def test_reinit_each_train(self, graph, sess):
        """before_train starts again from the first element; epochs do not re-initialize."""
        source = TFDatasetInput(batches_dataset(5))
        source.setup(SIG)
        _, y = source.get_input_tensors()
        hooked, cbs = start(source, sess)
        assert ids(hooked, [y], 3) == [[0], [1], [2]]
        cbs.before_epoch()
        cbs.after_epoch()
        cbs.trigger_epoch()
        assert ids(hooked, [y], 1) == [[3]]
        cbs.before_train()
        assert ids(hooked, [y], 2) == [[0], [1]]

    def test_two_towers(self, graph, sess):
        """Two get_input_tensors calls take two different batches in one run."""
        source = TFDatasetInput(batches_dataset(6))
        source.setup(SIG)
        _, y0 = source.get_input_tensors()
        _, y1 = source.get_input_tensors()
        hooked, _ = start(source, sess)
        runs = ids(hooked, [y0, y1], 3)
        for k, pair in enumerate(runs):
            assert sorted(pair) == [2 * k, 2 * k + 1]

    def test_size(self, graph):
        """size is the number of elements of the dataset, before the repeat."""
        assert TFDatasetInput(batches_dataset(5)).size() == 5
        source = TFDatasetInput(lambda: batches_dataset(3).batch(2))
        with pytest.raises(InputSizeUnknownError):
            source.size()
        source.setup(
            [
                tf.TensorSpec([None, 2, 2], tf.float32, "x"),
                tf.TensorSpec([None, 2], tf.int32, "y"),
            ]
        )
        graph.finalize()
        assert source.size() == 2

    def test_size_unknown(self, graph):
        """Infinite datasets and datasets of unknown length have no size."""
        with pytest.raises(InputSizeUnknownError, match="TFDatasetInput is unknown"):
            TFDatasetInput(batches_dataset().repeat()).size()
        with pytest.raises(InputSizeUnknownError):
            TFDatasetInput(batches_dataset().filter(lambda x, y: True)).size()

    def test_factory_and_dict(self, graph, sess):
        """A function building the dataset, with dict elements keyed by input name."""

        def build():
            return batches_dataset(3).map(lambda x, y: {"y": y, "x": x, "extra": y})

        source = TFDatasetInput(build, prefetch=2)
        source.setup(SIG)
        x, y = source.get_input_tensors()
        hooked, _ = start(source, sess)
        assert ids(hooked, [y], 4) == [[0], [1], [2], [0]]
        assert x.shape.as_list() == [2, 2]

    def test_single_tensor(self, graph, sess):
        """Elements that are one tensor feed a one-input signature."""
        source = TFDatasetInput(tf.data.Dataset.range(3).batch(1))
        source.setup([tf.TensorSpec([None], tf.int64, "i")])
        (i,) = source.get_input_tensors()
        hooked, _ = start(source, sess)
        assert [int(hooked.run(i)[0]) for _ in range(4)] == [0, 1, 2, 0]

    def test_mismatch_at_setup(self, graph):
        """Elements that cannot match the signature fail in setup with both specs."""
        bad = batches_dataset().map(lambda x, y: (tf.cast(x, tf.float64), y))
        with pytest.raises(
            InputSignatureError,
            match=r"#0 'x': expected float32\(None, 2\), got float64\(2, 2\)",
        ):
            TFDatasetInput(bad).setup(SIG)
        no_y = batches_dataset().map(lambda x, y: {"x": x})
        with pytest.raises(InputSignatureError, match=r"dicts without \['y'\]"):
            TFDatasetInput(no_y).setup(SIG)

    def test_wrong_graph(self, graph):
        """A dataset built eagerly or in another graph is rejected with the fix."""
        other = tf.Graph()
        with other.as_default():
            ds = batches_dataset()
        with pytest.raises(
            ValueError, match=r"built in another graph.*pass a function that builds it"
        ):
            TFDatasetInput(ds).setup(SIG)
        with pytest.raises(TypeError, match=r"returned list, not a tf\.data\.Dataset"):
            TFDatasetInput(lambda: [1]).setup(SIG)

    def test_eager_dataset(self):
        """An eager dataset knows its size but cannot feed a graph."""
        ds = batches_dataset(4)
        source = TFDatasetInput(ds)
        assert source.size() == 4
        with tf.Graph().as_default(), pytest.raises(ValueError, match="built eagerly"):
            source.setup(SIG)

    def test_fail(self):
        """Bad arguments fail at construction."""
        with pytest.raises(TypeError, match=r"'dataset' must be a tf\.data\.Dataset or a function"):
            TFDatasetInput([1, 2])
        with pytest.raises(ValueError, match="'prefetch' must be None, an int >= 1, or -1"):
            TFDatasetInput(batches_dataset, prefetch=0)


def feeding_threads():
    """The feeding threads of IterableInputs still alive."""
    return [t for t in threading.enumerate() if t.name.startswith("feed IterableInput")]


class SlowFlow:
    """An endless DataFlow-like iterable whose batches take `delay` seconds each."""

    def __init__(self, delay=0.0):
        self.delay = delay
        self.closed = 0

    def __iter__(self):
        i = 0
        try:
            while True:
                time.sleep(self.delay)
                yield batch(i % 7)
                i += 1
        finally:
            self.closed += 1


class FailingFlow:
    """Yields `good` batches, then raises KeyError."""

    def __init__(self, good):
        self.good = good

    def __len__(self):
        return self.good + 1

    def __iter__(self):
        for i in range(self.good):
            yield batch(i)
        raise KeyError("no such file: image-3.jpg")


class TestIterableInput:
    """`IterableInput` feeds Python datapoints through a queue filled by a thread of its own."""

    def test_batches(self, graph, sess):
        """Datapoints come in order, pass after pass; reset_state ran once before training."""
        flow = CountingFlow(5)
        source = IterableInput(flow, prefetch=2)
        source.setup(SIG)
        x, y = source.get_input_tensors()
        hooked, cbs = start(source, sess)
        assert flow.resets == 1
        assert ids(hooked, [y], 7) == [[0], [1], [2], [3], [4], [0], [1]]
        assert flow.passes >= 2
        assert x.dtype == tf.float32
        assert x.shape.as_list() == [None, 2]
        assert source.size() == 5
        assert len(feeding_threads()) == 1
        cbs.after_train()
        assert feeding_threads() == []

    def test_dicts_and_cast(self, graph, sess):
        """Dict datapoints are read by name; float64 arrays become float32, int64 int32."""
        data = [{"x": np.ones([3, 2]) * i, "y": np.arange(3) + i} for i in range(2)]
        source = IterableInput(data)
        source.setup(SIG)
        x, y = source.get_input_tensors()
        hooked, cbs = start(source, sess)
        xv, yv = hooked.run([x, y])
        cbs.after_train()
        assert xv.dtype == np.float32
        assert yv.dtype == np.int32
        np.testing.assert_array_equal(yv, [0, 1, 2])

    def test_two_towers(self, graph, sess):
        """Two towers take two different datapoints per run."""
        source = IterableInput(CountingFlow(4, as_dict=True))
        source.setup(SIG)
        _, y0 = source.get_input_tensors()
        _, y1 = source.get_input_tensors()
        hooked, cbs = start(source, sess)
        runs = ids(hooked, [y0, y1], 2)
        cbs.after_train()
        assert sorted(runs[0] + runs[1]) == [0, 1, 2, 3]

    def test_session_is_default_in_the_thread(self, graph, sess):
        """The iterable runs with the session as the default one (a player asking the model)."""
        scale = tf1.constant(3.0, name="scale")
        seen = []

        class AsksTheModel:
            def __iter__(self):
                for i in range(2):
                    seen.append(tf1.get_default_session())
                    x, y = batch(i)
                    yield x * tf1.get_default_session().run(scale), y

        source = IterableInput(AsksTheModel())
        source.setup(SIG)
        x, _ = source.get_input_tensors()
        hooked, cbs = start(source, sess)
        got = [hooked.run(x)[0, 0] for _ in range(3)]
        cbs.after_train()
        assert got == [0.0, 3.0, 0.0]
        assert len(seen) >= 2
        assert all(s is sess for s in seen)
        assert tf1.get_default_session() is None  # this thread's default is untouched

    def test_size_unknown(self, graph):
        """An iterable without len has no size."""
        with pytest.raises(InputSizeUnknownError, match="IterableInput\\(NoLen\\) is unknown"):
            IterableInput(NoLen()).size()

    def test_fail(self):
        """One-pass iterators, strings, arrays and non-iterables are rejected."""
        with pytest.raises(
            TypeError, match="is an iterator \\(generator\\), which gives one pass only"
        ):
            IterableInput(batch(i) for i in range(3))
        with pytest.raises(TypeError, match="'iterable' must be a re-iterable"):
            IterableInput(np.zeros(3))
        with pytest.raises(TypeError, match="'iterable' must be a re-iterable"):
            IterableInput(3)
        with pytest.raises(TypeError, match="'prefetch' of IterableInput must be an int"):
            IterableInput([], prefetch=None)


class SwitchIntervalProbe(Callback):
    """The interpreter's switch interval seen at each step."""

    _chief_only = False

    def __init__(self):
        self.seen = []

    def _trigger_step(self):
        self.seen.append(sys.getswitchinterval())


class TestSwitchInterval:
    """While a feeding thread runs, the GIL is handed over within QueueFeeder.switch_interval_s."""

    @pytest.fixture
    def interval(self):
        """A known switch interval before the test, put back after it."""
        before = sys.getswitchinterval()
        sys.setswitchinterval(0.005)
        yield 0.005
        sys.setswitchinterval(before)

    def test_lowered_while_training(self, graph, interval):
        """Every step sees the lowered interval; after training the interval is as before."""
        probe = SwitchIntervalProbe()
        train_linear(IterableInput(CountingFlow(3)), callbacks=[probe])
        assert probe.seen == pytest.approx([QueueFeeder.switch_interval_s] * 8)
        assert sys.getswitchinterval() == pytest.approx(interval)

    def test_restored_after_failure(self, graph, interval):
        """A run ended by bad data restores it too."""
        with pytest.raises(InputDataError):
            train_linear(IterableInput([(GOOD_X,)]))
        assert sys.getswitchinterval() == pytest.approx(interval)

    def test_left_alone(self, graph, interval, monkeypatch):
        """switch_interval_s = None leaves the interval as it is."""
        monkeypatch.setattr(QueueFeeder, "switch_interval_s", None)
        probe = SwitchIntervalProbe()
        train_linear(IterableInput(CountingFlow(3)), callbacks=[probe])
        assert probe.seen == pytest.approx([interval] * 8)

    @given(
        st.lists(st.tuples(st.booleans(), st.sampled_from([1e-5, 1e-4, 1e-3, 0.01])), max_size=12)
    )
    def test_holders(self, ops):
        """Nested lower/restore: the least value asked while held; the first one's interval after."""
        before = sys.getswitchinterval()
        holder = SwitchInterval()
        asked = []
        try:
            for is_lower, seconds in ops:
                if is_lower:
                    holder.lower(seconds)
                    asked.append(seconds)
                elif holder.holders:
                    holder.restore()
                    if holder.holders == 0:
                        asked = []
                else:
                    holder.restore()  # unmatched: no effect
                want = min([before, *asked]) if holder.holders else before
                assert sys.getswitchinterval() == pytest.approx(want)
            while holder.holders:
                holder.restore()
            assert sys.getswitchinterval() == pytest.approx(before)
        finally:
            sys.setswitchinterval(before)


def train_linear(data, steps=4, callbacks=(), epochs=2):
    """Train `Linear` on `data` (a source or a dataflow) with SimpleTrainer; return the trainer."""
    key = "data" if isinstance(data, InputSource) else "dataflow"
    trainer = SimpleTrainer()
    config = TrainConfig(
        model=Linear(),
        max_epoch=epochs,
        steps_per_epoch=steps,
        monitors=[],
        extra_callbacks=[],
        callbacks=list(callbacks),
        **{key: data},
    )
    try:
        launch_train_with_config(config, trainer)
    finally:
        assert feeding_threads() == [], "the feeding thread outlived the run"
    return trainer


GOOD_X, GOOD_Y = batch(0)

BAD_DATA = {
    "arity": (
        [(GOOD_X,)],
        r"IterableInput\(list\): datapoint #0 of pass 1 does not fit the input signature "
        r"\(x: float32\(None, 2\), y: int32\(None,\)\): datapoint has 1 component\(s\); the "
        r"input signature \('x', 'y'\) needs 2",
    ),
    "kind": ([3], r"datapoint #0 of pass 1 .* a datapoint must be a list/tuple .* got int"),
    "missing key": ([{"x": GOOD_X}], r"datapoint lacks \['y'\]; it has keys \['x'\]"),
    "dtype": (
        [(GOOD_X, GOOD_Y), (GOOD_X, np.full([2], 0.5))],
        r"datapoint #1 of pass 1 does not fit .*: #1 'y': expected int32\(None,\), got float64\(2,\)",
    ),
    "shape": (
        [(np.zeros([2, 3], np.float32), GOOD_Y)],
        r"#0 'x': expected float32\(None, 2\), got float32\(2, 3\)",
    ),
    "rank": (
        [(GOOD_X, np.zeros([2, 1], np.int32))],
        r"#1 'y': expected int32\(None,\), got int32\(2, 1\)",
    ),
    "string": ([(GOOD_X, ["a", "b"])], r"#1 'y': expected int32\(None,\), got string\(2,\)"),
    "ragged": ([([[1.0], [1.0, 2.0]], GOOD_Y)], r"#0 'x': expected float32\(None, 2\), got list"),
    "empty": (
        [],
        r"IterableInput\(list\): pass 1 over the iterable yielded no datapoint; expected "
        r"datapoints \(x: float32\(None, 2\), y: int32\(None,\)\)",
    ),
}


class TestIterableInputErrors:
    """Bad data, a failing iterable, stops and Ctrl-C: clear errors and no thread left behind."""

    @pytest.mark.parametrize("case", sorted(BAD_DATA))
    def test_bad_data(self, graph, case):
        """Wrong arity, kind, dtype, shape, or no datapoint: InputDataError naming the input."""
        data, message = BAD_DATA[case]
        with pytest.raises(InputDataError, match=message) as info:
            train_linear(IterableInput(data))
        assert not isinstance(info.value.__context__, InputDataError)
        assert info.value.__suppress_context__, "TensorFlow's end-of-queue error is not shown"

    def test_bad_datapoint_after_good_ones(self, graph):
        """The batches queued before the bad one are trained on; the error comes at the next step."""
        data = [batch(0), batch(1), (GOOD_X, np.full([2], 0.5))]
        trainer = SimpleTrainer()
        with pytest.raises(InputDataError, match="datapoint #2 of pass 1"):
            launch_train_with_config(
                TrainConfig(
                    model=Linear(),
                    data=IterableInput(data),
                    steps_per_epoch=5,
                    max_epoch=1,
                    monitors=[],
                    extra_callbacks=[],
                ),
                trainer,
            )
        assert trainer.global_step == 2
        assert feeding_threads() == []

    def test_producer_exception(self, graph):
        """An exception of the iterable surfaces as InputProducerError, caused by it."""
        with pytest.raises(
            InputProducerError,
            match=r"IterableInput\(FailingFlow\): the iterable raised KeyError: "
            r"'no such file: image-3.jpg'",
        ) as info:
            train_linear(FailingFlow(3))
        assert isinstance(info.value.__cause__, KeyError)

    def test_staged_bad_data(self, graph):
        """Behind a StagingInput the bad data fails before training with the same error."""
        with pytest.raises(InputDataError, match="yielded no datapoint"):
            train_linear(StagingInput(IterableInput([])))

    def test_no_thread_after_train(self, graph):
        """After a normal run the thread is joined and the iterable's generator closed."""
        flow = SlowFlow()
        train_linear(IterableInput(flow))
        assert flow.closed == 1

    def test_stop_training(self, graph):
        """StopTraining mid-epoch stops and joins the thread, even with a slow producer."""

        class Stop(Callback):
            def _trigger_step(self):
                if self.trainer.global_step == 3:
                    raise StopTraining("enough")

        trainer = train_linear(IterableInput(SlowFlow(0.02)), steps=10, callbacks=[Stop()])
        assert trainer.global_step == 3

    def test_error_in_loop_not_replaced(self, graph):
        """An error of another callback propagates as it is; the thread is still joined."""

        class Boom(Callback):
            def _trigger_step(self):
                raise ZeroDivisionError("boom")

        with pytest.raises(ZeroDivisionError, match="boom"):
            train_linear(IterableInput(SlowFlow()), callbacks=[Boom()])

    def test_sigint(self, graph, default_sigint):
        """A real SIGINT ends the run after the step, joins the thread, then KeyboardInterrupt."""

        class Interrupt(Callback):
            def _trigger_step(self):
                if self.trainer.global_step == 2:
                    os.kill(os.getpid(), signal.SIGINT)

        with pytest.raises(KeyboardInterrupt):
            train_linear(IterableInput(SlowFlow(0.01)), steps=10, callbacks=[Interrupt()])


class BlockingFlow:
    """Yields `good` batches, then waits until `release` is set (a producer that blocks)."""

    def __init__(self, good):
        self.good = good
        self.release = threading.Event()

    def __iter__(self):
        for i in range(self.good):
            yield batch(i)
        self.release.wait()
        yield batch(self.good)


class TestIterableInputTimeout:
    """`IterableInput(timeout=...)`: a producer that blocks ends training with a clear error."""

    def test_blocked_producer(self, graph):
        """No datapoint for `timeout` s: InputTimeoutError naming the input, datapoint and wait."""
        flow = BlockingFlow(2)
        config = TrainConfig(
            model=Linear(),
            data=IterableInput(flow, prefetch=1, timeout=0.5),
            max_epoch=2,
            steps_per_epoch=4,
            monitors=[],
            extra_callbacks=[],
        )
        start = time.monotonic()
        try:
            with pytest.raises(
                InputTimeoutError,
                match=r"^IterableInput\(BlockingFlow\): the iterable gave no datapoint for "
                r"0\.\d s \(timeout=0\.5 s\), waiting for datapoint #2 of pass 1; .*"
                r"\[at epoch 1, step 2 of 4 \(0-based\), global step 2\]$",
            ):
                launch_train_with_config(config, SimpleTrainer())
            assert time.monotonic() - start < 8, "the stuck thread is not waited for"
            assert isinstance(InputTimeoutError("x"), InputProducerError)
        finally:
            flow.release.set()
        deadline = time.monotonic() + 10
        while feeding_threads() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert feeding_threads() == []

    def test_slow_but_within_timeout(self, graph):
        """A producer slower than the step but within the timeout trains to the end."""
        trainer = train_linear(IterableInput(SlowFlow(0.01), timeout=2.0), steps=5)
        assert trainer.global_step == 10

    def test_timeout_property(self):
        """The timeout is kept as float seconds; None means no limit."""
        assert IterableInput([batch(0)], timeout=3).timeout == 3.0
        assert IterableInput([batch(0)]).timeout is None

    @pytest.mark.parametrize(
        ("timeout", "err"),
        [(0, ValueError), (-1.5, ValueError), (float("nan"), ValueError), ("5", TypeError)],
    )
    def test_fail(self, timeout, err):
        """A timeout that is not a number of seconds > 0 is refused at construction."""
        with pytest.raises(err, match="'timeout' of IterableInput must be a number of seconds > 0"):
            IterableInput([batch(0)], timeout=timeout)


class TestSigintStep:
    """`sigint_step`: the first SIGINT asks to stop after the step, the next ones abort."""

    @given(st.integers(0, 10_000))
    def test_sequence(self, before):
        """Exactly the first requests a stop; every later one aborts; the count goes up by one."""
        step = sigint_step(before)
        assert step.count == before + 1
        assert step.request_stop == (before == 0)
        assert step.abort == (before >= 1)
        assert step.request_stop != step.abort

    def test_fail(self):
        """A negative count is refused."""
        with pytest.raises(ValueError, match="'before' must be a count of SIGINTs >= 0; got -1"):
            sigint_step(-1)


class TestNumpyInput:
    """`NumpyInput` batches in-memory arrays."""

    def arrays(self, n):
        return [np.repeat(np.arange(n, dtype=np.float32), 2).reshape(n, 2), np.arange(n)]

    def test_in_order(self, graph, sess):
        """Without shuffle, batches come in order; the remainder is dropped."""
        source = NumpyInput(self.arrays(5), batch_size=2, shuffle=False)
        source.setup(SIG)
        x, y = source.get_input_tensors()
        hooked, _ = start(source, sess)
        got = [hooked.run(y).tolist() for _ in range(3)]
        assert got == [[0, 1], [2, 3], [0, 1]]
        assert source.size() == 2
        assert x.shape.as_list() == [2, 2]

    def test_keep_remainder(self, graph, sess):
        """drop_remainder=False keeps the smaller last batch."""
        source = NumpyInput(self.arrays(5), batch_size=2, shuffle=False, drop_remainder=False)
        source.setup(SIG)
        _, y = source.get_input_tensors()
        hooked, _ = start(source, sess)
        assert [hooked.run(y).tolist() for _ in range(3)] == [[0, 1], [2, 3], [4]]
        assert source.size() == 3

    def test_shuffle(self, graph, sess):
        """Each pass is a new permutation of all datapoints, the same for the same seed."""
        source = NumpyInput(self.arrays(20), batch_size=5, seed=3)
        source.setup(SIG)
        _, y = source.get_input_tensors()
        hooked, _ = start(source, sess)
        first = np.concatenate([hooked.run(y) for _ in range(4)])
        second = np.concatenate([hooked.run(y) for _ in range(4)])
        assert sorted(first.tolist()) == list(range(20))
        assert sorted(second.tolist()) == list(range(20))
        assert first.tolist() != second.tolist()
        with tf.Graph().as_default() as g2, tf1.Session(graph=g2) as s2:
            again = NumpyInput(self.arrays(20), batch_size=5, seed=3)
            again.setup(SIG)
            _, y2 = again.get_input_tensors()
            hooked2, _ = start(again, s2)
            assert np.concatenate([hooked2.run(y2) for _ in range(4)]).tolist() == first.tolist()

    def test_dict_and_not_in_graph(self, graph, sess):
        """Arrays keyed by name; they are fed, not stored in the graph."""
        big = np.zeros([4096, 2], np.float64)
        source = NumpyInput({"y": np.arange(4096), "x": big}, batch_size=4, shuffle=False)
        source.setup(SIG)
        x, _ = source.get_input_tensors()
        hooked, _ = start(source, sess)
        assert hooked.run(x).dtype == np.float32
        assert graph.as_graph_def().ByteSize() < big.nbytes // 4

    def test_mismatch(self, graph):
        """Dtypes that would lose their kind, wrong shapes and missing names fail in setup."""
        bad = NumpyInput([np.zeros([4, 3]), np.zeros(4)], batch_size=2)
        with pytest.raises(
            InputSignatureError,
            match=r"'x': datapoint shape \(3,\) vs signature \(None, 2\); 'y': array dtype float64 cannot become int32",
        ):
            bad.setup(SIG)
        with pytest.raises(InputSignatureError, match=r"no array for inputs \['y'\]"):
            NumpyInput({"x": np.zeros([4, 2])}, batch_size=2).setup(SIG)
        with pytest.raises(InputSignatureError, match="1 arrays for the 2 inputs"):
            NumpyInput([np.zeros([4, 2])], batch_size=2).setup(SIG)

    def test_fail(self):
        """Bad arrays or batch sizes fail at construction, listing what is wrong."""
        with pytest.raises(ValueError, match="same first dimension; got #0: 4, #1: 3"):
            NumpyInput([np.zeros([4, 2]), np.zeros(3)], batch_size=2)
        with pytest.raises(ValueError, match="0-d entries: y"):
            NumpyInput({"x": np.zeros([4, 2]), "y": 1}, batch_size=2)
        with pytest.raises(ValueError, match="'batch_size' 8 exceeds the 4 datapoints"):
            NumpyInput([np.zeros([4, 2])], batch_size=8)
        with pytest.raises(ValueError, match="'batch_size' must be >= 1; got 0"):
            NumpyInput([np.zeros([4, 2])], batch_size=0)
        with pytest.raises(TypeError, match="'batch_size' must be an int >= 1; got float"):
            NumpyInput([np.zeros([4, 2])], batch_size=2.0)
        with pytest.raises(ValueError, match="'arrays' is empty"):
            NumpyInput([], batch_size=2)
        with pytest.raises(ValueError, match="hold no datapoint"):
            NumpyInput([np.zeros([0, 2])], batch_size=1, drop_remainder=False)
        with pytest.raises(TypeError, match="'seed' must be an int or None; got str"):
            NumpyInput([np.zeros([4, 2])], batch_size=2, seed="1")
        with pytest.raises(TypeError, match="'arrays' must be a list of arrays or a dict"):
            NumpyInput(np.zeros([4, 2]).tobytes(), batch_size=2)

    @given(st.integers(1, 1000), st.integers(1, 100))
    def test_num_batches(self, n, batch_size):
        """Dropping: whole batches only; keeping: every datapoint in ceil(n / b) batches."""
        dropped = num_batches(n, batch_size, drop_remainder=True)
        kept = num_batches(n, batch_size, drop_remainder=False)
        assert dropped * batch_size <= n < (dropped + 1) * batch_size
        assert (kept - 1) * batch_size < n <= kept * batch_size


class TestDummyConstantInput:
    """`DummyConstantInput` gives fixed tensors."""

    def test_values(self, graph, sess):
        """Floats uniform in [0, 1), integers zero; the same every run; one copy per tower."""
        source = DummyConstantInput([[4, 2], [4]])
        source.setup(SIG)
        x, y = source.get_input_tensors()
        x1, _ = source.get_input_tensors()
        hooked, _ = start(source, sess)
        a, b = hooked.run([x, y]), hooked.run([x, y])
        np.testing.assert_array_equal(a[0], b[0])
        assert a[0].shape == (4, 2)
        assert a[0].min() >= 0
        assert a[0].max() < 1
        assert a[0].std() > 0
        np.testing.assert_array_equal(a[1], np.zeros(4))
        assert x1.op.inputs[0].op is not x.op.inputs[0].op
        assert x.shape.as_list() == [4, 2]

    def test_not_trained_or_saved(self, graph):
        """Its variables are local and not trainable."""
        source = DummyConstantInput([[4, 2], [4]])
        source.setup(SIG)
        source.get_input_tensors()
        assert tf1.trainable_variables() == []
        assert tf1.global_variables() == []
        assert len(tf1.local_variables()) == 2

    def test_fail(self, graph):
        """Shapes must be fully defined and match the signature."""
        with pytest.raises(ValueError, match=r"entries at fault: #1 \[None\]"):
            DummyConstantInput([[4, 2], [None]])
        with pytest.raises(
            InputSignatureError, match=r"#0 'x': expected float32\(None, 2\), got float32\(4, 3\)"
        ):
            DummyConstantInput([[4, 3], [4]]).setup(SIG)
        with pytest.raises(InputSignatureError, match="count: expected 2 tensors"):
            DummyConstantInput([[4, 2]]).setup(SIG)
        with pytest.raises(TypeError, match="'shapes' must be a list of shapes"):
            DummyConstantInput(3)


class TestFeedInput:
    """`FeedInput` feeds placeholders in before_run."""

    def test_feeds_in_order(self, graph, sess):
        """Each run that needs the input takes the next datapoint; others take none."""
        flow = CountingFlow(3)
        source = FeedInput(flow)
        source.setup(SIG)
        x, y = source.get_input_tensors()
        unrelated = tf.constant(1.0) + 1
        hooked, _ = start(source, sess)
        assert flow.resets == 1
        got = []
        for _ in range(4):
            got.append(int(hooked.run(y)[0]))
            hooked.run(unrelated)
        assert got == [0, 1, 2, 0]
        assert source.size() == 3
        assert x.op.type == "Placeholder"

    def test_two_towers(self, graph, sess):
        """Each tower gets its own placeholders and its own datapoint."""
        source = FeedInput(CountingFlow(4))
        source.setup(SIG)
        _, y0 = source.get_input_tensors()
        _, y1 = source.get_input_tensors()
        hooked, _ = start(source, sess)
        assert ids(hooked, [y0, y1], 3) == [[0, 1], [2, 3], [0, 1]]

    def test_finite(self, graph, sess):
        """With infinite=False the end of the data stops training."""
        source = FeedInput(CountingFlow(2), infinite=False)
        source.setup(SIG)
        _, y = source.get_input_tensors()
        hooked, _ = start(source, sess)
        assert ids(hooked, [y], 2) == [[0], [1]]
        with pytest.raises(StopTraining, match="the data is exhausted"):
            hooked.run(y)

    def test_plain_run_fails(self, graph, sess):
        """A plain sess.run has nobody to feed the placeholders."""
        source = FeedInput(CountingFlow(2))
        source.setup(SIG)
        _, y = source.get_input_tensors()
        with pytest.raises(tf.errors.InvalidArgumentError, match="must feed a value"):
            sess.run(y)

    def test_fail(self):
        """One-pass iterators are rejected."""
        with pytest.raises(TypeError, match="is an iterator"):
            FeedInput(iter([batch(0)]))


def stage_size(sess, get_tensor):
    """Elements in the staging area that `get_tensor` reads from."""
    op = get_tensor.op
    with sess.graph.as_default(), tf.device(op.device or None):
        size = tf.raw_ops.StageSize(
            dtypes=op.get_attr("dtypes"), shared_name=op.get_attr("shared_name")
        )
    return int(sess.run(size))


class TestStagingInput:
    """`StagingInput` keeps each tower's batches one step ahead on its device."""

    def test_order_and_one_ahead(self, graph, sess):
        """Batches arrive in order; the area holds one batch between runs, whatever else runs."""
        source = StagingInput(IterableInput(CountingFlow(5)))
        source.setup(SIG)
        _, y = source.get_input_tensors()
        unrelated = tf.constant(2.0) * 3
        hooked, cbs = start(source, sess)
        assert stage_size(sess, y) == 1
        got = []
        for _ in range(6):
            got.append(int(hooked.run(y)[0]))
            assert stage_size(sess, y) == 1
            hooked.run(unrelated)
            assert stage_size(sess, y) == 1
        cbs.after_train()
        assert got == [0, 1, 2, 3, 4, 0]
        assert source.size() == 5

    def test_devices(self):
        """With two devices, each tower's area is on its device and takes its own batches."""
        graph = tf.Graph()
        with graph.as_default():
            source = StagingInput(
                TFDatasetInput(batches_dataset(6)), devices=["/cpu:0", "/cpu:1"], nr_stage=2
            )
            source.setup(SIG)
            _, y0 = source.get_input_tensors()
            _, y1 = source.get_input_tensors()
            assert y1.op.device.lower().endswith("cpu:1")
            with tf1.Session(graph=graph, config=tf1.ConfigProto(device_count={"CPU": 2})) as sess:
                hooked, _ = start(source, sess)
                assert stage_size(sess, y0) == 2
                runs = ids(hooked, [y0, y1], 3)
                assert stage_size(sess, y1) == 2
            flat = sorted(i for pair in runs for i in pair)
            assert flat == [0, 1, 2, 3, 4, 5]
            assert all(a != b for a, b in runs)
            one = StagingInput(TFDatasetInput(batches_dataset(6)), devices=["/cpu:0"])
            one.setup(SIG)
            one.get_input_tensors()
            with pytest.raises(
                RuntimeError, match="tower #1 asks for input, but 'devices' names only 1"
            ):
                one.get_input_tensors()

    def test_fail(self):
        """Sources that cannot be staged and bad arguments are rejected."""
        with pytest.raises(TypeError, match="cannot be staged"):
            StagingInput(FeedInput([batch(0)]))
        with pytest.raises(TypeError, match="cannot be staged"):
            StagingInput(DummyConstantInput([[2, 2], [2]]))
        with pytest.raises(TypeError, match="'input' must be an InputSource; got list"):
            StagingInput([batch(0)])
        with pytest.raises(ValueError, match="'nr_stage' must be >= 1; got 0"):
            StagingInput(IterableInput([batch(0)]), nr_stage=0)
        with pytest.raises(TypeError, match="'devices' must be a list of device strings"):
            StagingInput(IterableInput([batch(0)]), devices="/gpu:0")


class Trainer:
    """A stand-in for a trainer's ``devices``."""

    def __init__(self, devices):
        self.devices = devices


class TestApplyDefaultPrefetch:
    """`apply_default_prefetch` picks the source and stages on GPUs."""

    def test_kinds(self, graph):
        """Datasets and dataset functions, iterables and sources each get their source."""
        source = IterableInput([batch(0)])
        assert apply_default_prefetch(source) is source
        assert isinstance(apply_default_prefetch(batches_dataset()), TFDatasetInput)
        assert isinstance(apply_default_prefetch(batches_dataset), TFDatasetInput)
        assert isinstance(apply_default_prefetch(CountingFlow()), IterableInput)
        assert isinstance(apply_default_prefetch([batch(0)], Trainer(["/cpu:0"])), IterableInput)

    def test_staging(self):
        """GPU devices get a StagingInput on those devices; feeds and dummies stay as they are."""
        staged = apply_default_prefetch(CountingFlow(), Trainer(["/gpu:0", "/gpu:1"]))
        assert isinstance(staged, StagingInput)
        assert isinstance(staged.input, IterableInput)
        feed = FeedInput([batch(0)])
        assert apply_default_prefetch(feed, Trainer(["/gpu:0"])) is feed
        assert isinstance(apply_default_prefetch(staged, Trainer(["/gpu:0"])), StagingInput)
        assert apply_default_prefetch(staged, Trainer(["/gpu:0"])).input is staged.input

    def test_feeds_a_session(self, graph, sess):
        """The dataset path prefetches and gives the batches in order."""
        source = apply_default_prefetch(batches_dataset(3))
        source.setup(SIG)
        _, y = source.get_input_tensors()
        hooked, _ = start(source, sess)
        assert ids(hooked, [y], 4) == [[0], [1], [2], [0]]

    def test_fail(self):
        """Anything else is a TypeError listing what is accepted."""
        with pytest.raises(TypeError, match="a re-iterable of datapoints; got int"):
            apply_default_prefetch(3)
        with pytest.raises(TypeError, match="got ndarray"):
            apply_default_prefetch(np.zeros(3))

    @given(
        st.lists(st.sampled_from(["/cpu:0", "/cpu:1", "/device:CPU:2", "/job:w/cpu:0"]), max_size=4)
    )
    def test_cpus_never_staged(self, devices):
        """Devices that are all CPUs never want staging."""
        assert not wants_staging(devices, num_visible_gpus=0)
        assert not wants_staging(devices, num_visible_gpus=2)

    @given(
        st.lists(st.sampled_from(["/cpu:0", "/gpu:0", "/GPU:1", "/job:w/device:GPU:0"]), min_size=1)
    )
    def test_any_gpu_staged(self, devices):
        """A device list wants staging exactly when it names a GPU."""
        assert wants_staging(devices, 0) == any("gpu" in d.lower() for d in devices)


class TestDatapointHelpers:
    """`datapoint_tuple` and `iterable_size`."""

    @given(
        st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=4, unique=True), st.data()
    )
    def test_dict_and_sequence_agree(self, names, data):
        """A dict keyed by the names gives the same tuple as the list in order."""
        values = data.draw(st.lists(st.integers(), min_size=len(names), max_size=len(names)))
        extra = {"__extra__": 0} if "__extra__" not in names else {}
        as_dict = {**dict(zip(names, values)), **extra}
        assert datapoint_tuple(as_dict, names) == tuple(values) == datapoint_tuple(values, names)

    def test_fail(self):
        """Missing names and non-datapoints are reported."""
        with pytest.raises(ValueError, match=r"datapoint lacks \['y'\]; it has keys \['x'\]"):
            datapoint_tuple({"x": 1}, ["x", "y"])
        with pytest.raises(TypeError, match="a datapoint must be a list/tuple"):
            datapoint_tuple(3, ["x"])

    def test_iterable_size(self):
        """len when there is one, None otherwise."""
        assert iterable_size(CountingFlow(4)) == 4
        assert iterable_size(NoLen()) is None


class Linear(ModelDesc):
    """x @ w against y, trained by SGD."""

    def inputs(self):
        return SIG

    def build_graph(self, x, y):
        w = tf1.get_variable("w", [2], initializer=tf1.zeros_initializer())
        err = tf.linalg.matvec(x, w) - tf.cast(y, tf.float32)
        return tf.reduce_mean(tf.square(err), name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.01)


class SeenIds(Callback):
    """Records the trainer's steps_per_epoch and the batch id each step trained on."""

    def __init__(self):
        self.ids = []

    def _setup_graph(self):
        self.y = self.trainer.towers.training()[0].get_tensor("y")

    def _before_run(self, ctx):
        return [self.y]

    def _after_run(self, ctx, values):
        self.ids.append(int(values.results[0][0]))
        self.steps_per_epoch = self.trainer.steps_per_epoch


class TestLaunchTrainWithConfig:
    """The input side of `launch_train_with_config`: prefetching and steps_per_epoch."""

    def config(self, **kw):
        return TrainConfig(model=Linear(), max_epoch=2, monitors=[], extra_callbacks=[], **kw)

    def test_dataflow_size(self, graph):
        """A Python dataflow is prefetched; an epoch is len(dataflow) steps by default."""
        flow = CountingFlow(3)
        seen = SeenIds()
        launch_train_with_config(self.config(dataflow=flow, callbacks=[seen]), SimpleTrainer())
        assert seen.steps_per_epoch == 3
        assert seen.ids == [0, 1, 2, 0, 1, 2]
        assert flow.resets == 1

    def test_unknown_size(self, graph):
        """An input without size and no steps_per_epoch is a clear error."""
        config = self.config(data=DummyConstantInput([[2, 2], [2]]))
        with pytest.raises(InputSizeUnknownError, match="pass 'steps_per_epoch' explicitly"):
            launch_train_with_config(config, SimpleTrainer())

    def test_explicit_steps(self, graph):
        """An explicit steps_per_epoch wins over the size, and passes run across epochs."""
        seen = SeenIds()
        config = self.config(
            data=TFDatasetInput(batches_dataset(3)), steps_per_epoch=2, callbacks=[seen]
        )
        launch_train_with_config(config, SimpleTrainer())
        assert seen.steps_per_epoch == 2
        assert seen.ids == [0, 1, 2, 0]
