"""The monitors' hub: `MonitorBase`, and `Monitors`, which dispatches statistics and keeps their history."""

from __future__ import annotations

import numbers
import re
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from towerkit.callbacks._base import Callback, Callbacks
from towerkit.callbacks._errors import CallbackError, MissingStatError
from towerkit.callbacks._png import encode_png
from towerkit.callbacks._types import TrainerView
from towerkit.towers.compat import tf1

_PROCESS_METHODS = ("process_scalar", "process_image", "process_summary", "process_event")


_TOWER_SCOPE = re.compile(r"(?:^|(?<=/))tower[0-9]+/")
_SUMMARY_SUFFIX = "-summary"


def stat_name(tag: str) -> str:
    """The statistic a summary's scalar `tag` is recorded as, as tensorpack's monitors named it.

    Data-parallel towers' scopes (``tower0/``, ``tower1/``: a whole name component) are
    dropped, and so is a trailing ``-summary`` (tensorpack's moving summaries and
    TensorFlow's duplicate-tag workaround add it).

    Examples:
        >>> stat_name("tower0/cross_entropy_loss-summary")
        'cross_entropy_loss'
        >>> stat_name("val/tower1/accuracy")
        'val/accuracy'
        >>> stat_name("mytower1/x")
        'mytower1/x'
    """
    return _TOWER_SCOPE.sub("", tag).removesuffix(_SUMMARY_SUFFIX)


class MonitorBase(Callback):
    """Base class of monitors: callbacks that also receive every statistic put to the trainer.

    A monitor is given to the trainer's :class:`Monitors` (``trainer.monitors``), which
    calls its ``process_*`` methods whenever a callback puts data, and drives its
    callback methods (``setup_graph``, ``before_train``, ``trigger_epoch``,
    ``after_train``, ...) like any callback's. A subclass overrides the ``process_*``
    methods it cares about; :class:`Monitors` calls only those.

    Monitors do not take part in session runs: ``before_run``/``after_run`` are not
    called on them.
    """

    def process_scalar(self, name: str, val: float) -> None:
        """Take a scalar put at the trainer's current global step.

        Args:
            name: the statistic's name.
            val: its value, a Python ``float`` or ``int``.
        """

    def process_image(self, name: str, val: np.ndarray) -> None:
        """Take images put at the trainer's current global step.

        Args:
            name: the images' name.
            val: a 4-D ``NHWC`` array with values in ``[0, 255]``; 3 channels are RGB.
        """

    def process_summary(self, summary: Any) -> None:
        """Take a ``tf.compat.v1.Summary`` protocol buffer (scalars arrive here too)."""

    def process_event(self, evt: Any) -> None:
        """Take a ``tf.compat.v1.Event``, its ``step`` and ``wall_time`` filled in."""

    def process(self, name: str, val: Any) -> None:
        """Take a key-value pair and pass it to the method for its kind.

        A number goes to :meth:`process_scalar`, an array to :meth:`process_image`.
        """
        if isinstance(val, np.ndarray) and val.ndim >= 2:
            self.process_image(name, val)
        else:
            self.process_scalar(name, _as_number(name, val))

    def processes(self, method: str) -> bool:
        """Whether this monitor does something in ``method`` (one of the ``process_*`` methods).

        `Monitors` hands a statistic of a kind only to the monitors that process it. A
        wrapper forwarding to another monitor answers for it.
        """
        return getattr(type(self), method) is not getattr(MonitorBase, method)


def _as_number(name: str, val: Any) -> float | int:
    """``val`` as a Python number; TypeError naming the statistic otherwise."""
    if isinstance(val, bool | np.bool_):
        return int(val)
    if isinstance(val, numbers.Integral):
        return int(val)
    if isinstance(val, numbers.Real):
        return float(val)
    if isinstance(val, np.ndarray) and val.size == 1 and val.dtype.kind in "biuf":
        return _as_number(name, val.reshape(()).item())
    msg = f"statistic {name!r} must be a real number; got {type(val).__name__} {val!r:.80}"
    raise TypeError(msg)


def _nhwc(name: str, val: Any) -> np.ndarray:
    arr = np.asarray(val)
    shape = arr.shape
    if arr.ndim == 2:
        arr = arr[np.newaxis, :, :, np.newaxis]
    elif arr.ndim == 3:
        arr = arr[np.newaxis]
    elif arr.ndim != 4:
        msg = f"image {name!r} must be a 2-D (HW), 3-D (HWC) or 4-D (NHWC) array; got shape {arr.shape}"
        raise ValueError(msg)
    if arr.shape[-1] not in (1, 2, 3, 4):
        msg = f"image {name!r} must have 1, 2, 3 or 4 channels (the last axis); got shape {shape}"
        raise ValueError(msg)
    if arr.dtype.kind not in "biuf":
        msg = f"image {name!r} must hold numbers in [0, 255]; got dtype {arr.dtype}"
        raise TypeError(msg)
    return arr


def _image_summary(name: str, images: np.ndarray) -> Any:
    values = []
    for i, img in enumerate(images):
        tag = name if len(images) == 1 else f"{name}/{i}"
        h, w, c = img.shape
        values.append(
            tf1.Summary.Value(
                tag=tag,
                image=tf1.Summary.Image(
                    height=h, width=w, colorspace=c, encoded_image_string=encode_png(img)
                ),
            )
        )
    return tf1.Summary(value=values)


class Monitors(Callback):
    """The trainer's monitors as one: what callbacks put statistics to (``trainer.monitors``).

    It dispatches every ``put_*`` to the monitors that process that kind of data,
    keeps the history of every scalar (with the global step it was put at), and
    drives its monitors' callback methods. The trainer appends it last to its
    callbacks, so monitors see ``trigger_epoch`` after every other callback has put
    its statistics for the epoch, and flush then.

    A scalar put with :meth:`put_scalar` reaches ``process_scalar`` and, as a
    one-value summary, ``process_summary``; the scalar values of a summary put with
    :meth:`put_summary` reach ``process_scalar`` and enter the history too.

    Args:
        monitors: the :class:`MonitorBase` instances to dispatch to, in order.
    """

    _chief_only = False

    def __init__(self, monitors: Iterable[MonitorBase]) -> None:
        mons = list(monitors)
        bad = [
            f"#{i}: {type(m).__name__}"
            for i, m in enumerate(mons)
            if not isinstance(m, MonitorBase)
        ]
        if bad:
            msg = f"'monitors' must hold MonitorBase instances; got {', '.join(bad)}"
            raise TypeError(msg)
        hooking = [str(m) for m in mons if m.has_hook("_before_run") or m.has_hook("_after_run")]
        if hooking:
            msg = (
                f"monitors {hooking} define before_run/after_run, which monitors never get; "
                "give such a callback to the trainer's callbacks instead"
            )
            raise TypeError(msg)
        self._monitors = tuple(mons)
        self._group = Callbacks(self._monitors)
        self._by_kind = {
            method: tuple(m for m in self._monitors if m.processes(method))
            for method in _PROCESS_METHODS
        }
        self._history: dict[str, list[tuple[int, float | int]]] = {}

    @property
    def monitors(self) -> tuple[MonitorBase, ...]:
        """The monitors dispatched to, in order."""
        return self._monitors

    # -- putting data ----------------------------------------------------------------

    def _global_step(self) -> int:
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            msg = "Monitors has no trainer yet: data can be put only after setup_graph(trainer)"
            raise CallbackError(msg)
        return int(trainer.global_step)

    def _record(self, name: str, val: float | int, step: int) -> None:
        hist = self._history.get(name)
        if hist is None:
            hist = self._history[name] = []
        hist.append((step, val))
        for m in self._by_kind["process_scalar"]:
            m.process_scalar(name, val)

    def put_scalar(self, name: str, val: Any) -> None:
        """Put a scalar statistic at the trainer's current global step.

        Args:
            name: the statistic's name.
            val: a real number (Python or NumPy, or a one-element array).

        Raises:
            TypeError: ``val`` is not a real number.
        """
        if not isinstance(name, str):
            msg = f"a statistic's name must be a str; got {type(name).__name__} {name!r}"
            raise TypeError(msg)
        val = _as_number(name, val)
        self._record(name, val, self._global_step())
        summary_mons = self._by_kind["process_summary"]
        if summary_mons:
            s = tf1.Summary(value=[tf1.Summary.Value(tag=name, simple_value=float(val))])
            for m in summary_mons:
                m.process_summary(s)

    def put_image(self, name: str, val: Any) -> None:
        """Put images.

        Args:
            name: the images' name (with several images, the summary tags are
                ``name/0``, ``name/1``, ...).
            val: a 2-D (HW), 3-D (HWC) or 4-D (NHWC) array with values in [0, 255]; 3
                channels are RGB. Monitors receive it as 4-D.
        """
        arr = _nhwc(name, val)
        self._global_step()
        for m in self._by_kind["process_image"]:
            m.process_image(name, arr)
        summary_mons = self._by_kind["process_summary"]
        if summary_mons:
            s = _image_summary(name, arr)
            for m in summary_mons:
                m.process_summary(s)

    def put_summary(self, summary: Any) -> None:
        """Put a ``tf.compat.v1.Summary`` (or its serialized bytes, as a summary op returns).

        Its scalar values enter the history and reach ``process_scalar``; the whole
        summary reaches ``process_summary``. A scalar's tag is named as tensorpack's
        monitors named it (`stat_name`: no ``tower0/`` prefix, no ``-summary`` suffix),
        in the history, ``stats.json`` and the event file alike.
        """
        if isinstance(summary, bytes | bytearray):
            summary = tf1.Summary.FromString(bytes(summary))
        if not isinstance(summary, tf1.Summary):
            msg = f"'summary' must be a tf.compat.v1.Summary or its serialized bytes; got {type(summary).__name__}"
            raise TypeError(msg)
        step = self._global_step()
        renamed = [
            v
            for v in summary.value
            if v.WhichOneof("value") == "simple_value" and stat_name(v.tag) != v.tag
        ]
        if renamed:  # a copy: the caller's summary is left as it was
            summary = tf1.Summary.FromString(summary.SerializeToString())
        for v in summary.value:
            if v.WhichOneof("value") == "simple_value":
                v.tag = stat_name(v.tag)
                self._record(v.tag, float(v.simple_value), step)
        for m in self._by_kind["process_summary"]:
            m.process_summary(summary)

    def put_event(self, evt: Any) -> None:
        """Put a ``tf.compat.v1.Event``; its ``step`` and ``wall_time`` are filled in here."""
        if not isinstance(evt, tf1.Event):
            msg = f"'evt' must be a tf.compat.v1.Event; got {type(evt).__name__}"
            raise TypeError(msg)
        evt.step = self._global_step()
        evt.wall_time = time.time()
        for m in self._by_kind["process_event"]:
            m.process_event(evt)

    # -- reading the history -----------------------------------------------------------

    @property
    def stat_names(self) -> list[str]:
        """The names of every scalar put so far, sorted."""
        return sorted(self._history)

    def _missing(self, name: str) -> MissingStatError:
        msg = (
            f"no statistic named {name!r} was put to the monitors; "
            f"the statistics put so far are {self.stat_names}"
        )
        return MissingStatError(msg)

    def get_history(self, name: str) -> list[tuple[int, float | int]]:
        """Every value of the scalar ``name`` put so far, as ``(global_step, value)`` pairs.

        On multi-process training, only the chief's monitors receive most statistics.

        Raises:
            MissingStatError: no scalar ``name`` was put; the message lists those that were.
        """
        hist = self._history.get(name)
        if hist is None:
            raise self._missing(name)
        return list(hist)

    def get_latest(self, name: str) -> float | int:
        """The latest value of the scalar ``name``.

        Raises:
            MissingStatError: no scalar ``name`` was put; the message lists those that were.
        """
        hist = self._history.get(name)
        if not hist:
            raise self._missing(name)
        return hist[-1][1]

    # -- driving the monitors ------------------------------------------------------------

    def has_hook(self, method: str) -> bool:
        if method in ("_before_run", "_after_run"):
            return False
        return self._group.has_hook(method)

    def setup_graph(self, trainer: TrainerView) -> None:
        self.trainer = trainer
        self.graph = trainer.graph
        self._group.setup_graph(trainer)

    def _before_train(self) -> None:
        self._group.before_train()

    def _after_train(self) -> None:
        self._group.after_train()

    def _before_epoch(self) -> None:
        self._group.before_epoch()

    def _after_epoch(self) -> None:
        self._group.after_epoch()

    def _trigger_step(self) -> None:
        self._group.trigger_step()

    def coarse_steps_faults(self, steps_per_execution: int) -> list[str]:
        return self._group.coarse_steps_faults(steps_per_execution)

    def _trigger_epoch(self) -> None:
        self._group.trigger_epoch()

    def _trigger(self) -> None:
        self._group.trigger()

    def __str__(self) -> str:
        return f"Monitors({', '.join(str(m) for m in self._monitors)})"
