"""Staging another source's batches on the towers' devices, and the default prefetching."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.callbacks.plumbing import input_kind
from towerkit.towers import visible_gpu_count
from towerkit.towers.compat import tf1
from towerkit.trainers._multistep import STAGING_PUT_OPS_KEY
from towerkit.trainers._seams import DatasetFactory
from towerkit.trainers.inputs._base import InputSource
from towerkit.trainers.inputs._callbacks import (
    StageInputCallback,
)
from towerkit.trainers.inputs._python import DummyConstantInput, FeedInput, IterableInput
from towerkit.trainers.inputs._sources import (
    _INPUT_DEVICE,
    TFDatasetInput,
)

if TYPE_CHECKING:
    from towerkit.trainers._base import Trainer

logger = logging.getLogger("towerkit.trainers")

__all__ = ["StagingInput", "apply_default_prefetch", "wants_staging"]


def wants_staging(devices: Sequence[Any], num_visible_gpus: int) -> bool:
    """Whether towers on `devices` benefit from staging their input on the device.

    True when some device is a GPU: a device string naming a GPU, or an int (a GPU
    id) while GPUs are visible.

    Examples:
        >>> wants_staging(["/gpu:0", "/gpu:1"], num_visible_gpus=2)
        True
        >>> wants_staging(["/cpu:0", "/cpu:1"], num_visible_gpus=0)
        False
        >>> wants_staging([0, 1], num_visible_gpus=0)
        False
        >>> wants_staging([0], num_visible_gpus=1)
        True
    """
    for d in devices:
        if isinstance(d, str) and "gpu" in d.lower():
            return True
        if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and num_visible_gpus > 0:
            return True
    return False


class StagingInput(InputSource):
    """Stage another source's batches on each tower's device, one step ahead.

    Each ``get_input_tensors`` call takes a batch from the wrapped source (on the CPU)
    and puts it into a staging area on that tower's device; the tower reads from the
    area. Each training run also stages the next batch, so the copy to the device
    overlaps with the step. Before training the areas get `nr_stage` batches.

    A run whose fetches read from the areas stages one more batch per area; other runs
    (a callback's ``hooked_sess.run`` on other tensors) leave them alone. Do not fetch
    the input tensors with a plain ``sess.run``: that takes a batch without staging a
    new one, and a later step would wait forever.

    With several steps per session call (``steps_per_execution``), the towers are built
    inside the trainer's loop: each step of the loop takes its batch from the area and
    puts the next one there, so the copy of step ``i + 1``'s batch overlaps step ``i``
    inside the call, and the areas stay `nr_stage` batches ahead between calls. The
    batches come in the same order as with one step per call.

    Args:
        input: the wrapped source (not a :class:`FeedInput` or :class:`DummyConstantInput`).
        devices: the device of each tower, in the order the towers call
            ``get_input_tensors``; None uses the device scope open at each call.
        nr_stage: batches staged ahead per area, >= 1.

    Raises:
        TypeError: `input` is not a source that can be staged.
        ValueError: `nr_stage` < 1.
    """

    PER_TOWER_CALLBACKS = True
    TOWERS_IN_ORDER = False  # a put ordered after another tower's get would run it at warm-up

    def __init__(
        self, input: InputSource, devices: Sequence[str] | None = None, nr_stage: int = 1
    ) -> None:
        if not isinstance(input, InputSource):
            msg = f"'input' must be an InputSource; got {type(input).__name__}"
            raise TypeError(msg)
        if isinstance(input, (FeedInput, DummyConstantInput, StagingInput)):
            msg = (
                f"'input' {input} cannot be staged: staging needs a source whose tensors "
                "produce a batch whenever run (TFDatasetInput, IterableInput, NumpyInput)"
            )
            raise TypeError(msg)
        if devices is not None:
            if isinstance(devices, str) or not all(isinstance(d, str) for d in devices):
                msg = f"'devices' must be a list of device strings or None; got {devices!r}"
                raise TypeError(msg)
            devices = tuple(devices)
        if isinstance(nr_stage, bool) or not isinstance(nr_stage, int):
            msg = f"'nr_stage' must be an int >= 1; got {type(nr_stage).__name__}"
            raise TypeError(msg)
        if nr_stage < 1:
            msg = f"'nr_stage' must be >= 1; got {nr_stage}"
            raise ValueError(msg)
        self._input = input
        self._devices = devices
        self._nr_stage = nr_stage
        self._puts: list[Any] = []
        self._gets: list[Any] = []
        self._in_loop = False

    @property
    def input(self) -> InputSource:
        """The wrapped source."""
        return self._input

    def _setup(self, specs: tuple[tf.TensorSpec, ...]) -> None:
        self._input.setup(specs)

    def skip_steps(self, steps: int) -> bool:
        """Skip in the wrapped source (`InputSource.skip_steps`)."""
        return self._input.skip_steps(steps)

    def _get_input_tensors(self) -> list[tf.Tensor]:
        tower = len(self._puts)
        if self._devices is not None and tower >= len(self._devices):
            msg = (
                f"{self}: tower #{tower} asks for input, but 'devices' names only "
                f"{len(self._devices)} device(s): {list(self._devices)}"
            )
            raise RuntimeError(msg)
        in_loop = tf1.get_default_graph() is not self._graph
        device = self._devices[tower] if self._devices is not None else None
        shared = self._graph.unique_name(f"StagingInput{tower}/staging_area", mark_as_used=True)
        batch = self._stage(tower, device, shared)
        if in_loop:
            # a loop of several steps per call: this put runs with every step inside the
            # loop; the warm-up needs a put outside it, on a batch read there
            tf1.add_to_collection(STAGING_PUT_OPS_KEY, batch[1])
            with self._graph.as_default():
                self._puts.append(self._stage(tower, device, shared)[1])
        else:
            self._puts.append(batch[1])
        self._in_loop = in_loop
        dtypes = [t.dtype for t in batch[0]]
        where = tf.device(device) if device is not None else contextlib.nullcontext()
        with where, tf1.name_scope(f"StagingInput{tower}"):
            got = tf.raw_ops.Unstage(dtypes=dtypes, shared_name=shared, name="get")
        out = []
        for t, g in zip(batch[0], got):
            g.set_shape(t.shape)
            out.append(g)
        self._gets.extend(out)
        return out

    def _stage(self, tower: int, device: str | None, shared: str) -> tuple[list[tf.Tensor], Any]:
        """A batch of the wrapped source (read on the CPU) and the op putting it in `shared`."""
        with tf.device(_INPUT_DEVICE):
            batch = self._input.get_input_tensors()
        where = tf.device(device) if device is not None else contextlib.nullcontext()
        with where, tf1.name_scope(f"StagingInput{tower}"):
            put = tf.raw_ops.Stage(values=batch, shared_name=shared, name="put")
        return batch, put

    def _size(self) -> int | None:
        return self._input.size()

    def _reset_state(self) -> None:
        self._input.reset_state()

    def _get_callbacks(self) -> list[Callback]:
        cbs = self._input.get_callbacks()
        if self._puts:
            put = tf.group(*self._puts, name="StagingInput_put")
            cbs.append(
                StageInputCallback(
                    str(self), put, self._gets, self._nr_stage, per_run=not self._in_loop
                )
            )
        return cbs

    def __str__(self) -> str:
        return f"StagingInput({self._input})"


# -- the default heuristics ------------------------------------------------------------------


def apply_default_prefetch(
    input_or_data: InputSource | tf.data.Dataset | DatasetFactory | Iterable[Any],
    trainer: Trainer | None = None,
) -> InputSource:
    """The input source a trainer uses for `input_or_data`, with automatic prefetching.

    * an :class:`InputSource` is used as it is;
    * a ``tf.data.Dataset``, or a function building one, becomes a
      :class:`TFDatasetInput` with ``tf.data.AUTOTUNE`` prefetching;
    * any other re-iterable (a DataFlow, a list of datapoints) becomes an
      :class:`IterableInput` (a background thread fills a prefetch buffer).

    Then, when the trainer's ``devices`` (one entry per tower) include a GPU, the
    source is wrapped in a :class:`StagingInput` on those devices, unless it is already
    staged or is a :class:`FeedInput` or :class:`DummyConstantInput`.

    Args:
        input_or_data: an input source, a dataset (or a function building one), or an
            iterable of datapoints.
        trainer: the trainer; its ``devices`` attribute (device strings or GPU ids), when
            present, decides the staging.

    Raises:
        TypeError: `input_or_data` is none of these.
    """
    kind = input_kind(input_or_data)
    source: InputSource
    if kind == "source":
        source = cast("InputSource", input_or_data)  # the protocol's methods, checked
    elif kind in ("dataset", "builder"):
        source = TFDatasetInput(input_or_data, prefetch=tf.data.AUTOTUNE)
    elif kind == "iterable":
        source = IterableInput(cast("Iterable[Any]", input_or_data))
    else:
        msg = (
            "the input must be an InputSource, a tf.data.Dataset (or a function returning "
            f"one) or a re-iterable of datapoints; got {type(input_or_data).__name__}"
        )
        raise TypeError(msg)
    devices = list(getattr(trainer, "devices", None) or [])
    if devices and not isinstance(source, (StagingInput, FeedInput, DummyConstantInput)):
        gpus = visible_gpu_count() if any(not isinstance(d, str) for d in devices) else 0
        if wants_staging(devices, gpus):
            names = [d if isinstance(d, str) else f"/gpu:{d}" for d in devices]
            logger.info("staging the input on %s", names)
            source = StagingInput(source, devices=names)
    return source
