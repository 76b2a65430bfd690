"""Monitors: where statistics go (history, event files, stats.json, logs, commands)."""

from __future__ import annotations

import functools
import json
import logging
import numbers
import os
import re
import string
import struct
import subprocess
import time
import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from towerkit.callbacks._base import Callback, Callbacks
from towerkit.callbacks._errors import CallbackError, MissingStatError
from towerkit.callbacks._stats import is_real_number
from towerkit.callbacks._types import TrainerView
from towerkit.sessinit import atomic_write_text, remove_stale_temporaries
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")

_PROCESS_METHODS = ("process_scalar", "process_image", "process_summary", "process_event")


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
        """Take a key-value pair: a number goes to :meth:`process_scalar`, an array to
        :meth:`process_image`."""
        if isinstance(val, np.ndarray) and val.ndim >= 2:
            self.process_image(name, val)
        else:
            self.process_scalar(name, _as_number(name, val))

    def _uses(self, method: str) -> bool:
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


def encode_png(image: np.ndarray) -> bytes:
    """A PNG file holding ``image`` (HWC, 1 to 4 channels), values clipped to [0, 255].

    Examples:
        >>> png = encode_png(np.zeros((2, 3, 1)))
        >>> png[:8], png[16:24]
        (b'\\x89PNG\\r\\n\\x1a\\n', b'\\x00\\x00\\x00\\x03\\x00\\x00\\x00\\x02')
    """
    h, w, c = image.shape
    pixels = np.clip(np.rint(image.astype(np.float64)), 0, 255).astype(np.uint8)
    color_type = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    rows = np.concatenate([np.zeros((h, 1), np.uint8), pixels.reshape(h, w * c)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )


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
            method: tuple(m for m in self._monitors if m._uses(method))
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
        summary reaches ``process_summary``.
        """
        if isinstance(summary, bytes | bytearray):
            summary = tf1.Summary.FromString(bytes(summary))
        if not isinstance(summary, tf1.Summary):
            msg = f"'summary' must be a tf.compat.v1.Summary or its serialized bytes; got {type(summary).__name__}"
            raise TypeError(msg)
        step = self._global_step()
        for v in summary.value:
            if v.WhichOneof("value") == "simple_value":
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

    def _trigger_epoch(self) -> None:
        self._group.trigger_epoch()

    def _trigger(self) -> None:
        self._group.trigger()

    def __str__(self) -> str:
        return f"Monitors({', '.join(str(m) for m in self._monitors)})"


def require_logdir(callback: Callback, explicit: str | None = None, what: str = "logdir") -> str:
    """The directory a callback writes to: ``explicit``, else the trainer's ``logdir``.

    Raises:
        CallbackError: neither is set; the message names the callback.
    """
    if explicit is not None:
        return str(explicit)
    logdir = getattr(callback.trainer, "logdir", None)
    if logdir is None:
        msg = (
            f"{callback} writes files and needs a directory: the trainer has no logdir "
            f"and no {what!r} was given to it"
        )
        raise CallbackError(msg)
    return str(logdir)


class TFEventWriter(MonitorBase):
    """Write every summary and event to a TensorFlow event file (for TensorBoard).

    The writer opens when something is first written (the graph, in ``before_train``,
    or a statistic put before it), so a run that fails before training writes no
    event file. It flushes after each epoch and closes after training. Summaries are
    written at the trainer's global step.

    Args:
        logdir: the directory of the event files; the trainer's ``logdir`` by default.
        max_queue: events queued before a write, as in ``tf.compat.v1.summary.FileWriter``.
        flush_secs: seconds between automatic flushes, as in ``FileWriter``.
        split_files: start a new event file after each epoch instead of appending to
            one (for file systems where appending is expensive).
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str] | None = None,
        max_queue: int = 10,
        flush_secs: float = 120,
        split_files: bool = False,
    ) -> None:
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            msg = f"'max_queue' must be an int >= 1; got {max_queue!r}"
            raise ValueError(msg)
        if not is_real_number(flush_secs) or not flush_secs > 0:
            msg = f"'flush_secs' must be a number > 0; got {flush_secs!r}"
            raise ValueError(msg)
        self._logdir_arg = None if logdir is None else os.fspath(logdir)
        self._max_queue = max_queue
        self._flush_secs = flush_secs
        self._split = bool(split_files)
        self._writer: Any = None
        self.logdir: str | None = None

    def _setup_graph(self) -> None:
        self.logdir = require_logdir(self, self._logdir_arg)
        self._files = 0
        self._writer = None

    def _opened(self) -> Any:
        if self._writer is None:
            self._open()
        return self._writer

    def _open(self) -> None:
        # a distinct suffix per file: event file names hold the time in seconds only
        self._files += 1
        with self.graph.as_default():
            self._writer = tf1.summary.FileWriter(
                self.logdir,
                max_queue=self._max_queue,
                flush_secs=self._flush_secs,
                filename_suffix=f".{os.getpid()}.{self._files}",
            )

    def _before_train(self) -> None:
        self._opened().add_graph(self.graph)

    def process_summary(self, summary: Any) -> None:
        self._opened().add_summary(summary, self.trainer.global_step)

    def process_event(self, evt: Any) -> None:
        self._opened().add_event(evt)

    def _trigger_epoch(self) -> None:
        if self._split:
            self._opened().close()
            self._open()
        else:
            self._opened().flush()

    def _after_train(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _last_epoch(records: list[dict[str, Any]]) -> int | None:
    """The ``epoch_num`` of the last record that has one."""
    for rec in reversed(records):
        epoch = rec.get("epoch_num")
        if isinstance(epoch, int) and not isinstance(epoch, bool):
            return epoch
    return None


class _class_or_instance_method:
    """A method called on the class (``self`` is None) or on an instance."""

    def __init__(self, fn: Any) -> None:
        self._fn = fn
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__
        self.__wrapped__ = fn

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        return functools.partial(self._fn, obj)


def _stats_dir(writer: Any, dir: Any, what: str) -> str:
    """`dir` as a string; else the logdir of `writer`'s trainer; TypeError when neither."""
    if dir is not None:
        return os.fspath(dir)
    trainer = getattr(writer, "trainer", None)
    logdir = getattr(trainer, "logdir", None)
    if logdir is None:
        where = (
            "called on the class"
            if writer is None
            else "this JSONWriter has no trainer with a logdir yet"
        )
        msg = (
            f"JSONWriter.{what}() needs 'dir' (the log directory): {where}, and there is "
            "no global log directory to default to"
        )
        raise TypeError(msg)
    return os.fspath(logdir)


_RECORD_KEYS = ("epoch_num", "global_step")
"""The keys JSONWriter writes in every record itself; statistics of those names are not written."""


def _scalar_summary_tags(graph: Any) -> set[str]:
    """The constant tags of the scalar summary ops in `graph`'s summaries collection."""
    tags = set()
    for op in graph.get_collection(tf1.GraphKeys.SUMMARIES):
        op = getattr(op, "op", op)
        if op.type != "ScalarSummary":
            continue
        tag_op = op.inputs[0].op
        if tag_op.type == "Const":
            value = tf1.make_ndarray(tag_op.get_attr("value"))
            if value.ndim == 0:
                tags.add(value.item().decode() if isinstance(value.item(), bytes) else str(value))
    return tags


class JSONWriter(MonitorBase):
    """Write the scalars of each epoch to ``<logdir>/stats.json``.

    After each epoch, one record ``{"epoch_num": ..., "global_step": ..., <name>:
    <value>, ...}`` is appended, holding the scalars put since the previous record
    (the latest value of each; the full history is in the monitors and the event
    files), and the whole file is rewritten atomically. The file is a JSON list of
    records.

    On a resumed run (``starting_epoch`` > 1) the records of an existing file are kept,
    except those with ``epoch_num >= starting_epoch``: those epochs are about to run
    again (they were written after the checkpoint the run resumes from), and keeping
    them would leave the file with two records for one epoch. Scalars put in an epoch
    that does not finish (training stopped in the middle) are not written, so the last
    record always marks a finished epoch.

    Attributes:
        FILENAME: the file's name, ``"stats.json"``.
    """

    FILENAME = "stats.json"

    def __init__(self) -> None:
        self._records: list[dict[str, Any]] = []
        self._pending: dict[str, Any] = {}
        self._path = ""

    @property
    def path(self) -> str | None:
        """The file written (after ``setup_graph``)."""
        return self._path or None

    @property
    def records(self) -> list[dict[str, Any]]:
        """The records written so far (a copy)."""
        return [dict(r) for r in self._records]

    @_class_or_instance_method
    def load_existing_json(
        self: JSONWriter | None, dir: str | os.PathLike[str] | None = None
    ) -> list[dict[str, Any]] | None:
        """The records of ``<dir>/stats.json``, or None when there is no such file.

        Call it on the class with `dir` (``JSONWriter.load_existing_json(logdir)``), or on
        a set-up writer, where `dir` defaults to its trainer's ``logdir``. There is no
        global log directory to default to on the class.

        Raises:
            ValueError: the file is not a JSON list of records.
            TypeError: no `dir`, and no trainer's logdir to default to.
        """
        path = os.path.join(_stats_dir(self, dir, "load_existing_json"), JSONWriter.FILENAME)
        if not os.path.isfile(path):
            return None
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as err:
            msg = f"{path!r} is not valid JSON ({err}); expected a list of statistics records"
            raise ValueError(msg) from err
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            msg = f"{path!r} must hold a JSON list of records (objects); got {type(data).__name__}"
            raise ValueError(msg)
        return data

    @_class_or_instance_method
    def load_existing_epoch_number(
        self: JSONWriter | None, dir: str | os.PathLike[str] | None = None
    ) -> int | None:
        """The ``epoch_num`` of the last record of ``<dir>/stats.json``, or None without one.

        `dir` defaults as for `load_existing_json`.
        """
        directory = _stats_dir(self, dir, "load_existing_epoch_number")
        return _last_epoch(JSONWriter.load_existing_json(directory) or [])

    def _before_train(self) -> None:
        directory = os.path.dirname(self._path)
        name = os.path.basename(self._path)
        remove_stale_temporaries(directory, lambda n: n in (name, name + ".bak"), what=name)
        existing = self.load_existing_json(directory) or []
        start = self.trainer.starting_epoch
        kept = [
            r
            for r in existing
            if not (isinstance(r.get("epoch_num"), int) and r["epoch_num"] >= start)
        ]
        if len(kept) != len(existing):
            logger.info(
                "JSONWriter: dropping %d records of epochs >= %d from %s: those epochs run again",
                len(existing) - len(kept),
                start,
                self._path,
            )
        self._records = kept
        last = _last_epoch(kept)
        if last is not None and last != start - 1:
            logger.warning(
                "JSONWriter: %s ends at epoch %d but training starts at epoch %d",
                self._path,
                last,
                start,
            )
        if kept != existing:
            self._write()

    def process_scalar(self, name: str, val: float) -> None:
        if name in _RECORD_KEYS:
            if name not in self._clashes:
                self._clashes.add(name)
                logger.warning(
                    "JSONWriter: a statistic named %r is not written to %s: each record's %r "
                    "is the trainer's own; give the statistic another name",
                    name,
                    self._path,
                    name,
                )
            return
        self._pending[name] = val

    def _setup_graph(self) -> None:
        self._path = os.path.join(require_logdir(self), self.FILENAME)
        self._clashes: set[str] = set()
        for tag in _scalar_summary_tags(self.graph) & set(_RECORD_KEYS):
            self._clashes.add(tag)
            logger.warning(
                "JSONWriter: the graph has a scalar summary named %r, which %s will not hold: "
                "each record's %r is the trainer's own; give the summary another name",
                tag,
                self._path,
                tag,
            )

    def _trigger_epoch(self) -> None:
        record: dict[str, Any] = {
            "epoch_num": self.trainer.epoch_num,
            "global_step": self.trainer.global_step,
        }
        for k, v in self._pending.items():
            record.setdefault(k, v)
        self._pending = {}
        self._records.append(record)
        self._write()

    def _after_train(self) -> None:
        if self._pending:
            logger.debug(
                "JSONWriter: %d scalars of an unfinished epoch not written", len(self._pending)
            )
            self._pending = {}

    def _write(self) -> None:
        atomic_write_text(self._path, json.dumps(self._records, indent=1, sort_keys=False) + "\n")


def _compile_all(what: str, patterns: Iterable[str] | None) -> tuple[re.Pattern[str], ...] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str):
        patterns = [patterns]
    out, bad = [], []
    for p in patterns:
        try:
            out.append(re.compile(p))
        except (re.error, TypeError) as err:
            bad.append(f"{p!r} ({err})")
    if bad:
        msg = f"{what!r} must hold regular expressions; invalid: {', '.join(bad)}"
        raise ValueError(msg)
    return tuple(out)


def format_scalar(name: str, val: Any) -> str:
    """The line `ScalarPrinter` prints for one scalar.

    Examples:
        >>> format_scalar("cost", 0.123456789)
        'cost: 0.12346'
        >>> format_scalar("epoch_num", 3)
        'epoch_num: 3'
    """
    return f"{name}: {val:.5g}" if isinstance(val, float) else f"{name}: {val}"


def logging_configured(log: logging.Logger) -> bool:
    """Whether records of `log` reach a handler someone set up (the program, not Python's default).

    False when neither `log` nor the loggers it propagates to have a handler: then
    Python shows only warnings and errors (through its last-resort handler).
    """
    return log.hasHandlers()


class ScalarPrinter(MonitorBase):
    """Print scalars after each epoch and/or step.

    Each scalar put since the last print is printed once, as ``name: value``, sorted by
    name. When the program has set up logging (a handler on the ``towerkit.callbacks``
    logger or one of its parents, e.g. with ``logging.basicConfig``), the lines go
    to that logger at level INFO, so its configuration decides where they go and
    whether they show. Otherwise they are written to standard error (above any
    progress bar), so a program that configured nothing still sees them.

    Args:
        enable_step: print after each step the scalars put during it.
        enable_epoch: print after each epoch.
        whitelist: regular expressions; only names in which one matches (``re.search``)
            are printed. All names by default.
        blacklist: regular expressions; names in which one matches are not printed.
    """

    _chief_only = True

    def __init__(
        self,
        enable_step: bool = False,
        enable_epoch: bool = True,
        whitelist: Iterable[str] | None = None,
        blacklist: Iterable[str] | None = None,
    ) -> None:
        if not (enable_step or enable_epoch):
            msg = "ScalarPrinter with enable_step=False and enable_epoch=False would print nothing"
            raise ValueError(msg)
        self._step = bool(enable_step)
        self._epoch = bool(enable_epoch)
        self._white = _compile_all("whitelist", whitelist)
        self._black = _compile_all("blacklist", blacklist) or ()
        self._allowed: dict[str, bool] = {}
        self._pending: dict[str, Any] = {}

    def allows(self, name: str) -> bool:
        """Whether ``name`` passes the whitelist and the blacklist."""
        ok = self._allowed.get(name)
        if ok is None:
            ok = (self._white is None or any(r.search(name) for r in self._white)) and not any(
                r.search(name) for r in self._black
            )
            self._allowed[name] = ok
        return ok

    def process_scalar(self, name: str, val: float) -> None:
        if self.allows(name):
            self._pending[name] = val

    def has_hook(self, method: str) -> bool:
        if method == "_trigger_step":
            return self._step
        if method == "_trigger_epoch":
            return self._epoch
        return super().has_hook(method)

    def _print(self) -> None:
        lines = [format_scalar(name, self._pending[name]) for name in sorted(self._pending)]
        self._pending = {}
        if logging_configured(logger):
            for line in lines:
                logger.info("%s", line)
            return
        import sys

        import tqdm

        for line in lines:
            tqdm.tqdm.write(line, file=sys.stderr)

    def _trigger_step(self) -> None:
        if self._step and self._pending:
            self._print()

    def _trigger_epoch(self) -> None:
        if self._epoch:
            self._print()


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or not all(isinstance(n, str) and n for n in names):
        msg = f"'names' must be a statistic name or a non-empty list of names; got {value!r}"
        raise TypeError(msg)
    return names


def _check_command(command: str, names: tuple[str, ...]) -> None:
    if not isinstance(command, str) or not command.strip():
        msg = f"'command' must be a non-empty shell command; got {command!r}"
        raise TypeError(msg)
    try:
        parts = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(command)]
    except ValueError as err:
        msg = f"'command' is not a valid format string: {err}; command: {command!r}"
        raise ValueError(msg) from err
    fields = [f for f, _, _ in parts if f is not None]
    unknown = [f for f in fields if f not in names]
    if unknown:
        msg = f"'command' uses fields {unknown} that are not in 'names' {list(names)}"
        raise ValueError(msg)
    bad = []
    for field, spec, conv in parts:
        if field is None:
            continue
        if conv not in (None, "r", "s", "a"):
            bad.append(f"{{{field}!{conv}}}: unknown conversion {conv!r} (use !r, !s or !a)")
        elif spec and ("{" in spec or "}" in spec):
            bad.append(f"{{{field}:{spec}}}: nested fields in a format spec are not supported")
        else:
            try:
                fill_command(f"{{x{'!' + conv if conv else ''}:{spec or ''}}}", {"x": 0.5})
            except (ValueError, TypeError) as err:
                bad.append(
                    f"{{{field}:{spec}}}: {err} (statistics are floats: use a float format "
                    "such as '.3f', '.0f' or 'g')"
                )
    if bad:
        msg = f"'command' has fields that cannot format a statistic: {'; '.join(bad)}"
        raise ValueError(msg)


def fill_command(command: str, values: dict[str, Any]) -> str:
    """``command`` with each ``{name}`` (or ``{name:spec}``) replaced by ``values[name]``.

    Names may hold any character but braces and ``:``/``!`` (``{val/error}`` works).

    Examples:
        >>> fill_command("echo {val/error:.2f} {step}", {"val/error": 0.1234, "step": 7})
        'echo 0.12 7'
    """
    out = []
    for literal, field, spec, conv in string.Formatter().parse(command):
        out.append(literal)
        if field is None:
            continue
        v = values[field]
        if conv == "r":
            v = repr(v)
        elif conv == "s":
            v = str(v)
        elif conv == "a":
            v = ascii(v)
        out.append(format(v, spec or ""))
    return "".join(out)


def run_command(owner: object, command: str) -> int:
    """Run a shell command; log its failure (training goes on) and return its exit status."""
    result = subprocess.run(command, shell=True, check=False)
    if result.returncode != 0:
        logger.error("%s: command exited with status %d: %s", owner, result.returncode, command)
    return result.returncode


class SendMonitorData(MonitorBase):
    """Run a shell command with some scalars once all of them have been put.

    The command is a format string whose fields are statistic names
    (``"notify {val-error}"``). Each time every one of ``names`` has received a value,
    the command runs with the latest values, and the collection starts over. A
    command that fails is logged; training goes on.

    Args:
        command: the shell command, with ``{name}`` fields.
        names: the statistic name(s) to collect.

    Raises:
        ValueError: the command is not a valid template: a field that is not in
            ``names``, an unknown conversion, or a format spec that cannot format a
            float (``{x:d}``); checked here, not at the first send.
    """

    def __init__(self, command: str, names: str | Iterable[str]) -> None:
        self._names = _names(names)
        _check_command(command, self._names)
        self._command = command
        self._wanted = frozenset(self._names)
        self._values: dict[str, Any] = {}

    def process_scalar(self, name: str, val: float) -> None:
        if name not in self._wanted:
            return
        self._values[name] = val
        if len(self._values) == len(self._wanted):
            values, self._values = self._values, {}
            run_command(self, fill_command(self._command, values))


class SendStat(Callback):
    """Run a shell command with the latest values of some statistics, on each trigger.

    Like :class:`SendMonitorData`, as a plain callback: when triggered (every epoch by
    default) it reads the latest value of each of ``names`` from the monitors.

    Args:
        command: the shell command, with ``{name}`` fields.
        names: the statistic name(s) to send.

    Raises:
        MissingStatError: when triggered, a statistic was never put (the message
            lists those that were).
    """

    def __init__(self, command: str, names: str | Iterable[str]) -> None:
        self._names = _names(names)
        _check_command(command, self._names)
        self._command = command

    def _trigger(self) -> None:
        monitors = self.trainer.monitors
        values = {n: monitors.get_latest(n) for n in self._names}
        run_command(self, fill_command(self._command, values))


class CometMLMonitor(MonitorBase):
    """Send scalars, images and the graph to comet.ml (needs the optional ``comet_ml``).

    ``comet_ml`` likes to be imported before TensorFlow; import it first in the
    training script. Its automatic output logging (which makes a progress bar appear
    frozen) is off unless asked for in ``kwargs``.

    Args:
        experiment: a ``comet_ml.Experiment`` to use; then ``tags`` and ``kwargs``
            must be empty.
        tags: tags to add to a new experiment.
        kwargs: arguments of ``comet_ml.Experiment`` (project name, API key, ...).

    Raises:
        ImportError: ``comet_ml`` is not installed.
        ValueError: ``experiment`` given together with ``tags`` or ``kwargs``.
    """

    def __init__(
        self, experiment: Any = None, tags: Iterable[str] | None = None, **kwargs: Any
    ) -> None:
        try:
            import comet_ml
        except ImportError as err:
            msg = "CometMLMonitor needs comet_ml: pip install comet_ml"
            raise ImportError(msg) from err
        if experiment is not None:
            if tags or kwargs:
                msg = (
                    "CometMLMonitor: an 'experiment' was given, so 'tags' and the Experiment "
                    f"arguments would be ignored; got tags={tags!r}, kwargs={sorted(kwargs)}"
                )
                raise ValueError(msg)
            self._exp = experiment
        else:
            kwargs.setdefault("auto_output_logging", None)
            self._exp = comet_ml.Experiment(**kwargs)
            if tags:
                self._exp.add_tags(list(tags))

    @property
    def experiment(self) -> Any:
        """The ``comet_ml.Experiment``."""
        return self._exp

    def _before_train(self) -> None:
        self._exp.set_model_graph(self.graph)

    def process_scalar(self, name: str, val: float) -> None:
        self._exp.log_metric(name, val, step=self.trainer.global_step)

    def process_image(self, name: str, val: np.ndarray) -> None:
        step = self.trainer.global_step
        for i, img in enumerate(val):
            self._exp.log_image(
                np.clip(img, 0, 255).astype(np.uint8),
                name=name if len(val) == 1 else f"{name}_{i}",
                step=step,
            )

    def _trigger_epoch(self) -> None:
        self._exp.log_epoch_end(self.trainer.epoch_num)

    def _after_train(self) -> None:
        self._exp.end()
