"""Callbacks that track resources: throughput, host memory, GPU utilization and GPU memory."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from towerkit.callbacks._base import Callback
from towerkit.callbacks._numbers import whole_number

logger = logging.getLogger("towerkit.callbacks")


def throughput(steps: int, seconds: float, samples_per_step: int | None = None) -> float:
    """Steps (or samples, given ``samples_per_step``) per second.

    Examples:
        >>> throughput(30, 1.5)
        20.0
        >>> throughput(30, 1.5, samples_per_step=64)
        1280.0
    """
    rate = steps / seconds
    return rate * samples_per_step if samples_per_step is not None else rate


class ThroughputTracker(Callback):
    """Put the training throughput to the monitors on every ``trigger``.

    The throughput is the global steps made since the previous trigger (or the
    start) over the time spent inside epochs meanwhile: the time callbacks take
    between epochs does not count. It is put as ``Throughput (steps/sec)``, or
    ``Throughput (samples/sec)`` given ``samples_per_step``.

    Args:
        samples_per_step: the total batch size of a step, or None to count steps.

    Raises:
        TypeError: not an int.
        ValueError: not positive.
    """

    _chief_only = False

    def __init__(self, samples_per_step: int | None = None) -> None:
        if samples_per_step is not None:
            given, samples_per_step = samples_per_step, whole_number(samples_per_step)
            if samples_per_step is None:
                msg = f"'samples_per_step' must be an int or None; got {type(given).__name__} {given!r}"
                raise TypeError(msg)
            if samples_per_step <= 0:
                msg = f"'samples_per_step' must be > 0; got {samples_per_step}"
                raise ValueError(msg)
            samples_per_step = int(samples_per_step)
        self._samples = samples_per_step
        self.stat_name = (
            "Throughput (steps/sec)" if samples_per_step is None else "Throughput (samples/sec)"
        )
        self._elapsed = 0.0
        self._since: float | None = None
        self._last_step = 0

    def _before_train(self) -> None:
        self._elapsed = 0.0
        self._since = None
        self._last_step = self.trainer.global_step

    def _before_epoch(self) -> None:
        self._since = time.perf_counter()

    def _after_epoch(self) -> None:
        if self._since is not None:
            self._elapsed += time.perf_counter() - self._since
            self._since = None

    def _trigger(self) -> None:
        now = time.perf_counter()
        elapsed = self._elapsed + (now - self._since if self._since is not None else 0.0)
        steps = self.trainer.global_step - self._last_step
        if steps > 0 and elapsed > 0:
            self.trainer.monitors.put_scalar(
                self.stat_name, throughput(steps, elapsed, self._samples)
            )
        self._elapsed = 0.0
        self._last_step = self.trainer.global_step
        if self._since is not None:
            self._since = now


def parse_meminfo(text: str) -> dict[str, int]:
    r"""The fields of ``/proc/meminfo``, in bytes (``kB`` values are multiplied by 1024).

    Examples:
        >>> parse_meminfo("MemTotal:       16318480 kB\nMemAvailable:    8000 kB\nHugePages_Total:       0\n")
        {'MemTotal': 16710123520, 'MemAvailable': 8192000, 'HugePages_Total': 0}
    """
    out = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts or not parts[0].isdigit():
            continue
        value = int(parts[0])
        if len(parts) > 1 and parts[1].lower() == "kb":
            value *= 1024
        out[key.strip()] = value
    return out


def available_host_memory() -> int:
    """Bytes of RAM available to new allocations (``MemAvailable``, else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            info = parse_meminfo(f.read())
    except OSError:
        info = {}
    if "MemAvailable" in info:
        return info["MemAvailable"]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class HostMemoryTracker(Callback):
    """Put the host's available RAM to the monitors on every ``trigger``, as ``HostFreeMemory (GB)``.

    The value is ``MemAvailable`` of ``/proc/meminfo`` (the free pages from
    ``os.sysconf`` where that file is missing), in GB (10^9 bytes).
    """

    stat_name = "HostFreeMemory (GB)"

    def _trigger(self) -> None:
        self.trainer.monitors.put_scalar(self.stat_name, available_host_memory() / 1e9)


def guess_gpu_devices(cuda_visible_devices: str | None, count: int) -> tuple[int, ...]:
    """Physical GPU ids to watch: those of ``CUDA_VISIBLE_DEVICES``, else all ``count``.

    Like CUDA, it reads the list up to its first entry that is not a valid id.

    Examples:
        >>> guess_gpu_devices(None, 3)
        (0, 1, 2)
        >>> guess_gpu_devices("2,0", 4)
        (2, 0)
        >>> guess_gpu_devices("1,7,0", 4), guess_gpu_devices("", 4), guess_gpu_devices("-1", 2)
        ((1,), (), ())
    """
    if cuda_visible_devices is None:
        return tuple(range(count))
    out: list[int] = []
    for entry in cuda_visible_devices.split(","):
        entry = entry.strip()
        if not entry.isdigit() or int(entry) >= count or int(entry) in out:
            break
        out.append(int(entry))
    return tuple(out)


def _device_ids(devices: Any, what: str) -> tuple[int, ...] | None:
    if devices is None:
        return None
    items = [devices] if isinstance(devices, (int, np.integer)) else devices
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        msg = f"{what!r} must be a GPU id or a list of GPU ids; got {type(devices).__name__}"
        raise TypeError(msg)
    out, bad = [], []
    for item in items:
        text = str(item).lower().removeprefix("/").removeprefix("device:").removeprefix("gpu:")
        if isinstance(item, bool) or not text.isdigit():
            bad.append(repr(item))
        else:
            out.append(int(text))
    if bad:
        msg = f"{what!r} must hold GPU ids (0, 1, ... or 'gpu:0', ...); entries at fault: {', '.join(bad)}"
        raise ValueError(msg)
    return tuple(out)


def _nvml() -> Any:
    """The initialized ``pynvml`` module, or None (logged by the caller) when NVML is unusable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError has many subclasses: no driver, no library, ...
        return None
    return pynvml


class _Sampler(threading.Thread):
    """Samples the utilization of some GPUs about every ``interval`` seconds until stopped."""

    def __init__(self, nvml: Any, handles: Sequence[Any], interval: float = 1.0) -> None:
        super().__init__(name="towerkit-gpu-utilization", daemon=True)
        self._nvml = nvml
        self._handles = handles
        self._interval = interval
        self._halt = threading.Event()
        self.sums = np.zeros(len(handles))
        self.count = 0

    def _sample(self) -> None:
        self.sums += [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
        self.count += 1

    def run(self) -> None:
        while not self._halt.wait(self._interval):
            self._sample()

    def stop(self) -> np.ndarray:
        """Stop and return the mean utilization (%) of each GPU."""
        self._halt.set()
        self.join()
        if self.count == 0:
            self._sample()
        return self.sums / self.count


class GPUUtilizationTracker(Callback):
    """Put the mean GPU utilization within each epoch to the monitors.

    While an epoch runs, a thread reads each GPU's utilization through NVML about
    once a second; after the epoch the mean of each GPU (in %) goes to the
    monitors as ``GPUUtil/<id>`` and the mean over GPUs as ``GPUUtil``. The time
    between epochs is not sampled.

    NVML comes from the optional package ``nvidia-ml-py`` (module ``pynvml``),
    imported when training starts. Without it, without an NVIDIA driver, or with
    no GPU to watch, the callback logs once that there is nothing to track and
    then does nothing.

    Args:
        devices: physical GPU ids (NVML's numbering) to watch; when None, those
            listed in ``CUDA_VISIBLE_DEVICES``, else every GPU.

    Raises:
        TypeError, ValueError: ``devices`` is not a list of GPU ids.
    """

    def __init__(self, devices: Sequence[int] | None = None) -> None:
        self._devices = _device_ids(devices, "devices")
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._sampler: _Sampler | None = None
        self._means: np.ndarray | None = None
        self._active = True
        self.devices: tuple[int, ...] = ()
        """The watched GPU ids (known from ``setup_graph`` on)."""

    def has_hook(self, method: str) -> bool:
        return self._active and super().has_hook(method)

    @staticmethod
    def worker(evt: Any, rst_queue: Any, stop_evt: Any, devices: Sequence[int]) -> None:
        """Measure GPU utilization between two settings of an event; run it in a process or thread.

        The callback samples in a thread of its own; this is for code that drives the
        measurements itself (as with tensorpack's worker process). The protocol:
        setting `evt` starts a measurement (the worker clears it); setting it again
        ends it, and the mean utilization (%) of each GPU of `devices` (physical ids),
        as a numpy array, is put on `rst_queue`. When `stop_evt` is set at either
        moment, the worker returns. When NVML cannot be used (no ``nvidia-ml-py``, no
        NVIDIA driver, e.g. a machine without GPUs) or a GPU does not exist, it logs why,
        puts ``-1`` on `rst_queue` and returns at once.

        Args:
            evt: a ``threading.Event`` or ``multiprocessing.Event``.
            rst_queue: a queue (``queue.Queue``, ``multiprocessing.Queue``) for the results.
            stop_evt: an event; set it (then `evt`) to end the worker.
            devices: physical GPU ids (NVML's numbering).
        """
        ids = _device_ids(devices, "devices") or ()
        nvml = _nvml()
        if nvml is None:
            logger.warning("GPUUtilizationTracker.worker: NVML is not available; nothing to track")
            rst_queue.put(-1)
            return
        try:
            count = nvml.nvmlDeviceGetCount()
            beyond = [d for d in ids if d >= count]
            if beyond or not ids:
                logger.warning(
                    "GPUUtilizationTracker.worker: GPU ids %s do not exist (NVML sees %d GPUs)",
                    beyond or "(none given)",
                    count,
                )
                rst_queue.put(-1)
                return
            handles = [nvml.nvmlDeviceGetHandleByIndex(d) for d in ids]
            while True:
                evt.wait()
                evt.clear()
                if stop_evt.is_set():
                    return
                sampler = _Sampler(nvml, handles)
                sampler.start()
                evt.wait()
                evt.clear()
                rst_queue.put(sampler.stop())
                if stop_evt.is_set():
                    return
        finally:
            nvml.nvmlShutdown()

    def _setup_graph(self) -> None:
        nvml = _nvml()
        if nvml is None:
            logger.info(
                "%s: NVML is not available (nvidia-ml-py, NVIDIA driver); nothing to track", self
            )
            self._active = False
            return
        count = nvml.nvmlDeviceGetCount()
        devices = self._devices
        if devices is None:
            devices = guess_gpu_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), count)
        beyond = [str(d) for d in devices if d >= count]
        if beyond:
            nvml.nvmlShutdown()
            msg = f"{self}: GPU ids {', '.join(beyond)} do not exist: NVML sees {count} GPU(s)"
            raise ValueError(msg)
        if not devices:
            logger.info("%s: no GPU to watch; nothing to track", self)
            nvml.nvmlShutdown()
            self._active = False
            return
        self._nvml = nvml
        self.devices = tuple(devices)
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(d) for d in devices]

    def _before_epoch(self) -> None:
        self._sampler = _Sampler(self._nvml, self._handles)
        self._sampler.start()

    def _after_epoch(self) -> None:
        if self._sampler is not None:
            self._means = self._sampler.stop()
            self._sampler = None

    def _trigger(self) -> None:
        if self._means is None:
            return
        for device, mean in zip(self.devices, self._means):
            self.trainer.monitors.put_scalar(f"GPUUtil/{device}", float(mean))
        self.trainer.monitors.put_scalar("GPUUtil", float(np.mean(self._means)))
        self._means = None

    def _after_train(self) -> None:
        self._after_epoch()
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None


class GPUMemoryTracker(Callback):
    """Put the peak memory each GPU used since the previous ``trigger`` to the monitors.

    On every ``trigger`` (after each epoch by default) it reads the peak bytes of
    TensorFlow's allocator on each GPU (``tf.config.experimental.get_memory_info``;
    the allocator is shared by graph sessions and eager code of the process), puts
    it as ``PeakMemory(MB)/gpu:<id>`` (MB = 2^20 bytes), and resets the peak. On a
    machine where TensorFlow sees no GPU it logs once that there is nothing to
    track and then does nothing.

    Args:
        devices: a GPU id or a list of ids (ints, or strings like ``"gpu:0"``), as
            TensorFlow numbers the visible GPUs.

    Raises:
        TypeError, ValueError: ``devices`` is not a list of GPU ids;
            (in ``setup_graph``) some ids are not visible.
    """

    def __init__(self, devices: int | Sequence[int | str] = 0) -> None:
        self._devices = _device_ids(devices, "devices") or ()
        if not self._devices:
            msg = "'devices' is empty: expected at least one GPU id"
            raise ValueError(msg)
        self._active = True

    @property
    def devices(self) -> tuple[int, ...]:
        """The tracked GPU ids."""
        return self._devices

    def has_hook(self, method: str) -> bool:
        return self._active and super().has_hook(method)

    def _setup_graph(self) -> None:
        import tensorflow as tf

        visible = len(tf.config.list_physical_devices("GPU"))
        if visible == 0:
            logger.info("%s: TensorFlow sees no GPU; nothing to track", self)
            self._active = False
            return
        beyond = [str(d) for d in self._devices if d >= visible]
        if beyond:
            msg = f"{self}: GPU ids {', '.join(beyond)} are not visible: TensorFlow sees {visible} GPU(s)"
            raise ValueError(msg)

    def _trigger(self) -> None:
        import tensorflow as tf

        for d in self._devices:
            info = tf.config.experimental.get_memory_info(f"GPU:{d}")
            self.trainer.monitors.put_scalar(f"PeakMemory(MB)/gpu:{d}", info["peak"] / 2**20)
            tf.config.experimental.reset_memory_stats(f"GPU:{d}")
