"""ThroughputTracker, HostMemoryTracker, GPUUtilizationTracker and GPUMemoryTracker in a real loop."""

import logging
import queue
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import (
    Callback,
    GPUMemoryTracker,
    GPUUtilizationTracker,
    HostMemoryTracker,
    ThroughputTracker,
)
from towerkit.callbacks._trackers import (
    _nvml,
    guess_gpu_devices,
    parse_meminfo,
    throughput,
)
from towerkit.towers.compat import tf1

STEP_SECONDS = 0.02


def slow_step():
    """A step that takes at least STEP_SECONDS."""
    steps = tf1.get_variable("steps", initializer=0.0, trainable=False)
    pause = tf1.py_func(lambda: np.float32(time.sleep(STEP_SECONDS) or 1.0), [], tf.float32)
    return tf1.assign_add(steps, pause).op


def fast_step():
    steps = tf1.get_variable("steps", initializer=0.0, trainable=False)
    return tf1.assign_add(steps, 1.0).op


class SlowTrigger(Callback):
    """Spends time between epochs."""

    def _trigger(self):
        time.sleep(0.3)


class TestThroughputTracker:
    """Throughput over the time spent in epochs only."""

    def test_steps_per_second(self, graph):
        """Time spent by callbacks between epochs does not count."""
        cb = ThroughputTracker()
        t = LoopTrainer(
            graph, slow_step(), [SlowTrigger(), cb], steps_per_epoch=3, max_epoch=2
        ).train()
        hist = t.monitors.get_history("Throughput (steps/sec)")
        assert [s for s, _ in hist] == [3, 6]
        for _, value in hist:
            # At most 1 / STEP_SECONDS; far above 3 / (3 * STEP_SECONDS + 0.3) ~ 8.
            assert 15 < value <= 1 / STEP_SECONDS

    def test_samples_per_second(self, graph):
        """With samples_per_step the rate is in samples."""
        cb = ThroughputTracker(samples_per_step=64)
        t = LoopTrainer(graph, slow_step(), [cb], steps_per_epoch=2, max_epoch=1).train()
        assert 0 < t.monitors.get_latest("Throughput (samples/sec)") <= 64 / STEP_SECONDS

    def test_fail(self):
        """samples_per_step is a positive int."""
        with pytest.raises(ValueError, match=r"'samples_per_step' must be > 0; got 0"):
            ThroughputTracker(0)
        with pytest.raises(
            TypeError, match=r"'samples_per_step' must be an int or None; got float"
        ):
            ThroughputTracker(2.5)

    @given(st.integers(1, 10**6), st.floats(1e-6, 1e6), st.integers(1, 4096))
    def test_throughput(self, steps, seconds, batch):
        """Samples per second are steps per second times the batch."""
        assert throughput(steps, seconds, batch) == pytest.approx(
            batch * throughput(steps, seconds)
        )


def meminfo_total():
    with open("/proc/meminfo") as f:
        return parse_meminfo(f.read())["MemTotal"]


class TestHostMemoryTracker:
    """The host's available memory, in GB."""

    def test_value(self, graph):
        """The value is positive and at most the total memory."""
        t = LoopTrainer(graph, fast_step(), [HostMemoryTracker()], max_epoch=2).train()
        hist = t.monitors.get_history("HostFreeMemory (GB)")
        assert len(hist) == 2
        for _, value in hist:
            assert 0 < value <= meminfo_total() / 1e9

    @given(
        st.dictionaries(
            st.from_regex(r"[A-Za-z][A-Za-z_()]{0,12}", fullmatch=True),
            st.tuples(st.integers(0, 2**40), st.booleans()),
            max_size=10,
        )
    )
    def test_parse_meminfo(self, fields):
        """Every field is read back, kB values in bytes."""
        text = "".join(f"{k}: {v}{' kB' if kb else ''}\n" for k, (v, kb) in fields.items())
        assert parse_meminfo(text) == {k: v * 1024 if kb else v for k, (v, kb) in fields.items()}


def nvml_gpus():
    nvml = _nvml()
    if nvml is None:
        return 0
    try:
        return nvml.nvmlDeviceGetCount()
    finally:
        nvml.nvmlShutdown()


class TestGPUUtilizationTracker:
    """GPU utilization through NVML, or one log line where there is none."""

    def test_real_machine(self, graph, caplog):
        """Without NVML or GPUs: logged once, nothing tracked; with GPUs: one mean per epoch."""
        cb = GPUUtilizationTracker()
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            t = LoopTrainer(graph, slow_step(), [cb], steps_per_epoch=2, max_epoch=2).train()
        if nvml_gpus() == 0:
            assert sum("nothing to track" in r.getMessage() for r in caplog.records) == 1
            assert not any(cb.has_hook(m) for m in ("_before_epoch", "_after_epoch", "_trigger"))
            assert not [n for n in t.monitors.stat_names if n.startswith("GPUUtil")]
        else:
            hist = t.monitors.get_history("GPUUtil")
            assert len(hist) == 2
            assert all(0 <= v <= 100 for _, v in hist)

    def test_worker(self):
        """The static worker measures between two settings of the event; -1 without NVML."""
        evt, stop = threading.Event(), threading.Event()
        results = queue.Queue()
        gpus = nvml_gpus()
        thread = threading.Thread(
            target=GPUUtilizationTracker.worker, args=(evt, results, stop, [0]), daemon=True
        )
        thread.start()
        if gpus == 0:
            thread.join(timeout=30)
            assert not thread.is_alive(), "returns at once without NVML or GPUs"
            assert results.get(timeout=1) == -1
            return
        evt.set()
        time.sleep(2.5)
        evt.set()
        (util,) = results.get(timeout=30)
        assert 0 <= util <= 100
        stop.set()
        evt.set()
        thread.join(timeout=30)
        assert not thread.is_alive()

    def test_fail(self):
        """devices are GPU ids."""
        with pytest.raises(ValueError, match=r"entries at fault: 'x', -1"):
            GPUUtilizationTracker(["x", -1])
        with pytest.raises(
            TypeError, match=r"'devices' must be a GPU id or a list of GPU ids; got str"
        ):
            GPUUtilizationTracker("0")

    @given(st.lists(st.integers(0, 9), max_size=6), st.integers(0, 8))
    def test_guess_devices(self, ids, count):
        """CUDA_VISIBLE_DEVICES is read up to its first invalid entry; unset means all GPUs."""
        got = guess_gpu_devices(",".join(map(str, ids)), count)
        prefix = []
        for i in ids:
            if i >= count or i in prefix:
                break
            prefix.append(i)
        assert got == tuple(prefix)
        assert guess_gpu_devices(None, count) == tuple(range(count))


class TestGPUMemoryTracker:
    """Peak GPU memory per epoch, or one log line where TensorFlow sees no GPU."""

    def test_real_machine(self, graph, caplog):
        """Without GPUs: logged once, nothing tracked; with GPUs: a peak per epoch."""
        cb = GPUMemoryTracker()
        with caplog.at_level(logging.INFO, logger="towerkit.callbacks"):
            t = LoopTrainer(graph, fast_step(), [cb], max_epoch=2).train()
        if not tf.config.list_physical_devices("GPU"):
            assert sum("nothing to track" in r.getMessage() for r in caplog.records) == 1
            assert not cb.has_hook("_trigger")
            assert not [n for n in t.monitors.stat_names if n.startswith("PeakMemory")]
        else:
            assert len(t.monitors.get_history("PeakMemory(MB)/gpu:0")) == 2

    def test_fail(self):
        """devices are GPU ids, at least one."""
        assert GPUMemoryTracker(["gpu:1", "/GPU:2", 3]).devices == (1, 2, 3)
        with pytest.raises(ValueError, match=r"'devices' is empty"):
            GPUMemoryTracker([])
        with pytest.raises(ValueError, match=r"entries at fault: 'cpu:0'"):
            GPUMemoryTracker(["cpu:0"])
