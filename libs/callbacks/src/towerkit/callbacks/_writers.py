"""Monitors that write statistics out: event files, stats.json, printed scalars; and `require_logdir`."""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from collections.abc import Iterable
from typing import Any

from towerkit.callbacks._base import Callback
from towerkit.callbacks._console import (
    VariableRow,
    epoch_line,
    format_stat,
    variable_table,
)
from towerkit.callbacks._console_stream import console_lines
from towerkit.callbacks._errors import CallbackError
from towerkit.callbacks._monitor_hub import MonitorBase
from towerkit.callbacks._stats import is_real_number
from towerkit.callbacks._stats_file import dumps_stats, read_stats_file
from towerkit.sessinit import atomic_write_text, back_up_file, remove_stale_temporaries
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")


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
        path: str = os.fspath(dir)
        return path
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
    logdir_path: str = os.fspath(logdir)
    return logdir_path


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
    them would leave the file with two records for one epoch; the old file is kept as
    ``stats.json.bak`` (``stats.json.bak-2``... when that exists, never overwritten),
    with a warning, so no record is lost silently. Scalars put in an epoch
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

        NaN and infinities, written as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, are
        read back as floats (see `loads_stats`).

        Raises:
            StatsFileError: (a ``ValueError``) the file is damaged: not UTF-8, not JSON, not
                a list of records, nested too deeply, or a number a float cannot hold;
                the message gives the path, the position and what was expected.
            TypeError: no `dir`, and no trainer's logdir to default to.
        """
        path = os.path.join(_stats_dir(self, dir, "load_existing_json"), JSONWriter.FILENAME)
        return read_stats_file(path)

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
            bak = back_up_file(self._path)
            logger.warning(
                "JSONWriter: dropping %d records of epochs >= %d from %s: those epochs run "
                "again; the old file is kept as %s",
                len(existing) - len(kept),
                start,
                self._path,
                os.path.basename(bak),
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
        atomic_write_text(self._path, dumps_stats(self._records))


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
    """Print scalars after each epoch and/or step, and the trainable variables at the start.

    By default (``one_line=True``) each epoch ends with one line holding the epoch, its
    wall time and every scalar put since the last print, sorted by name, with 4
    significant digits (``epoch 3/12  1.9 s  cost 0.2311  val_error 0.0412  lr 0.001``;
    ``stats.json`` keeps the full precision). With ``one_line=False`` each scalar gets a
    line of its own, ``name: value``, as tensorpack printed them. With ``variables``
    (the default), the table of the trainable variables (name, shape, element count)
    and their total is printed when training starts.

    When the program has set up logging (a handler on the ``towerkit.callbacks``
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
        one_line: one line per epoch (and per step) holding every scalar, instead of a
            line per scalar.
        variables: print the table of trainable variables when training starts.

    .. versionchanged:: 0.2
        ``one_line`` and ``variables``, both on by default.
    """

    accepts_coarse_steps = True  # prints what the call that ended put

    _chief_only = True

    def __init__(
        self,
        enable_step: bool = False,
        enable_epoch: bool = True,
        whitelist: Iterable[str] | None = None,
        blacklist: Iterable[str] | None = None,
        *,
        one_line: bool = True,
        variables: bool = True,
    ) -> None:
        if not (enable_step or enable_epoch):
            msg = "ScalarPrinter with enable_step=False and enable_epoch=False would print nothing"
            raise ValueError(msg)
        self._step = bool(enable_step)
        self._epoch = bool(enable_epoch)
        self._white = _compile_all("whitelist", whitelist)
        self._black = _compile_all("blacklist", blacklist) or ()
        self._one_line = bool(one_line)
        self._variables = bool(variables)
        self._allowed: dict[str, bool] = {}
        self._pending: dict[str, Any] = {}
        self._epoch_start: float | None = None

    @property
    def one_line(self) -> bool:
        """Whether the scalars of an epoch (or step) are printed on one line."""
        return self._one_line

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
        if method == "_before_epoch":
            return self._epoch and self._one_line
        if method == "_before_train":
            return self._variables
        return super().has_hook(method)

    def _emit(self, lines: list[str]) -> None:
        console_lines(logger, lines)  # a console that fails never ends the run

    def _before_train(self) -> None:
        if self._variables:
            self._emit(variable_table(trainable_variable_rows(self.graph)))

    def _before_epoch(self) -> None:
        self._epoch_start = time.perf_counter()

    def _print(self, prefix: str | None = None) -> None:
        pending = sorted(self._pending.items())
        self._pending = {}
        if prefix is None:
            self._emit([format_scalar(name, val) for name, val in pending])
        else:
            self._emit(["  ".join([prefix, *(f"{n} {format_stat(v)}" for n, v in pending)])])

    def _trigger_step(self) -> None:
        if self._step and self._pending:
            self._print(f"step {self.trainer.global_step}" if self._one_line else None)

    def _trigger_epoch(self) -> None:
        if not self._epoch:
            return
        if not self._one_line:
            self._print()
            return
        start, self._epoch_start = self._epoch_start, None
        seconds = None if start is None else time.perf_counter() - start
        pending = sorted(self._pending.items())
        self._pending = {}
        self._emit([epoch_line(self.trainer.epoch_num, self.trainer.max_epoch, seconds, pending)])


def trainable_variable_rows(graph: Any) -> list[VariableRow]:
    """The trainable variables of `graph` as rows of `variable_table`, in creation order."""
    rows = []
    for v in graph.get_collection(tf1.GraphKeys.TRAINABLE_VARIABLES):
        shape = v.shape
        dtype = v.dtype.base_dtype
        rows.append(
            VariableRow(
                name=v.op.name,
                shape=None if shape.rank is None else shape.as_list(),
                dtype=dtype.name,
                itemsize=dtype.size,
            )
        )
    return rows


def describe_trainable_vars(graph: Any = None) -> str:
    """The table of the trainable variables of `graph` (the default graph when None), logged.

    The table the trainers print when training starts (`variable_table`: name, shape,
    element count, the total in parameters and bytes; the per-tower copies of
    data-parallel trainers left out), logged at INFO on the ``towerkit.callbacks``
    logger and returned.

    Examples:
        >>> import tensorflow as tf
        >>> with tf.Graph().as_default():
        ...     _ = tf1.get_variable("fc/W", [256, 10])
        ...     print(describe_trainable_vars())
        trainable variables:
          name  shape   count
          fc/W  256x10  2,560
        1 trainable variable, 2,560 parameters (10.0 KiB)
    """
    text = "\n".join(variable_table(trainable_variable_rows(graph or tf1.get_default_graph())))
    logger.info("%s", text)
    return text
