"""The graph's queue runners: started with the session, as tensorpack's MonitoredSession did."""

import threading

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers.compat import tf1
from towerkit.trainers import (
    ModelDesc,
    SimpleTrainer,
    TensorInput,
    TrainConfig,
    launch_train_with_config,
)
from towerkit.trainers._queue_runners import start_queue_runners

EPOCH = 3  # batches the producer cycles through


class Linear(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([4, 2], tf.float32, "x"), tf.TensorSpec([4], tf.float32, "y")]

    def build_graph(self, x, y):
        w = tf1.get_variable("w", [2], initializer=tf1.zeros_initializer())
        err = tf.linalg.matvec(x, w) - y
        return tf.reduce_mean(tf.square(err), name="cost")

    def optimizer(self):
        return tf1.train.GradientDescentOptimizer(0.01)


def queued_batches():
    """PTB's reader: the batch index from ``range_input_producer``, a queue runner's queue."""
    i = tf1.train.range_input_producer(EPOCH, shuffle=False).dequeue()
    x = tf.identity(tf.fill([4, 2], tf.cast(i, tf.float32)), name="x_read")
    return [x, 2.0 * x[:, 0]]


def batched():
    """Examples through ``tf.compat.v1.train.batch``: two queues, two runners."""
    k = tf1.train.range_input_producer(100, shuffle=False).dequeue()
    one = tf.fill([2], tf.cast(k, tf.float32))
    x = tf1.train.batch([one], batch_size=4, num_threads=1, capacity=8)
    return [tf.identity(x, name="x_read"), x[:, 0]]


class Reads(Callback):
    """The x of every step, as the tower read it."""

    def __init__(self):
        self.firsts = []

    def _before_run(self, ctx):
        return self.graph.get_tensor_by_name("x_read:0")

    def _after_run(self, ctx, values):
        self.firsts.append(float(values.results[0, 0]))


def runner_threads():
    return {t for t in threading.enumerate() if t.name.endswith(("(_run)", "(_close_on_stop)"))}


def train(fn):
    reads = Reads()
    config = TrainConfig(
        model=Linear(),
        data=TensorInput(fn, size=4),
        callbacks=[reads],
        monitors=[],
        extra_callbacks=[],
        max_epoch=2,
    )
    trainer = SimpleTrainer()
    launch_train_with_config(config, trainer)
    return trainer, reads


def test_range_input_producer_trains(graph):
    """Without the runner started, the first step's dequeue blocks for ever."""
    before = runner_threads()
    trainer, reads = train(queued_batches)
    assert trainer.global_step == 8
    assert reads.firsts == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0], "the producer's order"
    assert runner_threads() <= before, "the runners' threads are stopped with the session"


def test_batch_trains(graph):
    trainer, reads = train(batched)
    assert trainer.global_step == 8
    assert reads.firsts == [float(4 * n) for n in range(8)], "examples batched in order"
    assert trainer.sess._closed


def test_no_runner_no_thread(sess):
    tf.constant(1.0)
    assert start_queue_runners(sess) is None


def test_a_runners_error_is_handed_back(graph):
    """A runner whose enqueue fails stops on its error; stopping hands it back."""
    queue = tf1.FIFOQueue(4, tf.float32)
    negative = tf.random.uniform([]) - 2.0  # known only when it runs
    bad = tf1.debugging.assert_positive(negative, message="no data")
    with tf.control_dependencies([bad]):
        enqueue = queue.enqueue(tf.constant(1.0))
    tf1.train.add_queue_runner(tf1.train.QueueRunner(queue, [enqueue]))
    with tf1.Session(graph=graph) as sess:
        runners = start_queue_runners(sess)
        assert runners is not None
        for t in runners.threads:
            t.join(30)
        failure = runners.failure()
        assert isinstance(failure, tf.errors.InvalidArgumentError)
        assert "no data" in str(failure)
        assert runners.stop() is failure
