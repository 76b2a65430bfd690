"""MinSaver and MaxSaver: the best checkpoint, or the best k, by a statistic, copied atomically."""

from __future__ import annotations

import logging
import math
import os
import re
import shutil

from towerkit.callbacks._background_save import wait_for_saves
from towerkit.callbacks._base import Callback
from towerkit.callbacks._best_k import (
    BestEntry,
    BestKState,
    best_k_json,
    parse_best_k,
    plan_best_k,
    resume_best_k,
)
from towerkit.callbacks._errors import CallbackError, StatsFileError
from towerkit.callbacks._paths import check_file_name
from towerkit.callbacks._savers import _CKPT_FILE, _delete_checkpoint
from towerkit.callbacks._stats import improves, is_real_number
from towerkit.callbacks._stats_file import read_stats_file
from towerkit.callbacks._writers import require_logdir
from towerkit.sessinit import (
    CheckpointNotFoundError,
    atomic_checkpoint_prefix,
    atomic_write_text,
    checkpoint_step,
    move_checkpoints_aside,
    remove_stale_temporaries,
    resolve_checkpoint,
)

logger = logging.getLogger("towerkit.callbacks")


_MODEL_STEM = re.compile(r"\.(index|data-\d+-of-\d+)$")


def _publish_copy(directory: str, base: str, files: list[str], target: str) -> None:
    """Copy checkpoint `base`'s files to `target`, published whole (`atomic_checkpoint_prefix`)."""
    with atomic_checkpoint_prefix(target) as tmp:
        for name in files:
            shutil.copyfile(os.path.join(directory, name), tmp + name[len(base) :])


def _file_safe(name: str) -> str:
    return name.replace(os.sep, "_").replace("/", "_")


class MinSaver(Callback):
    """Keep a copy of the checkpoint with the lowest (or highest) value of a statistic.

    When triggered, it reads the latest value of ``monitor_stat`` from the monitors;
    when it beats the best so far, the latest checkpoint of the directory (written by
    a :class:`ModelSaver` earlier in the callback list) is copied, published
    atomically, to ``<checkpoint_dir>/<filename>`` (its ``.index`` and ``.data-*``
    files). The copy loads like any checkpoint (``SaverRestore(".../min-val-error.tfmodel")``).

    Only finite values compete (see :func:`~towerkit.callbacks.improves`): a NaN or
    an infinity (a diverged epoch) never becomes the best and is logged as a
    warning, so a run whose first value is NaN still keeps its best later epoch.
    Equal values keep the earlier copy.

    On a resumed run, the best value so far is read back from the directory's
    ``stats.json`` (records of finished epochs before the starting epoch) when the
    copy already exists, so an earlier better model is not overwritten.

    Put it after the callback that produces the statistic, and after the ModelSaver.

    **The best k** (``top_k > 1``): the k best checkpoints are kept, each under its own
    name, ``filename`` with the global step it holds before the extension
    (``min-val-error-120.tfmodel``), and the record ``<filename>.json`` (written
    atomically) lists them best first with their statistic, step and epoch
    (:class:`BestEntry`; the decision is :func:`plan_best_k`). A better candidate is
    published whole first, then the record is rewritten, and only then is the
    displaced one deleted: a process killed at any moment leaves a record naming
    only complete checkpoints, at most k. A resumed run reads the record back
    (:func:`resume_best_k`): entries saved after its starting global step are moved
    aside into a ``superseded-<timestamp>`` folder (never deleted), copies the record
    does not name (a kill between two of those writes) are deleted, and so are the
    worst ones when k was lowered. Equal values keep the earlier checkpoint.

    Args:
        monitor_stat: the statistic's name.
        reverse: keep the highest value instead of the lowest.
        filename: the checkpoint name, a file name inside ``checkpoint_dir`` (no
            directories, not ``..``); ``min-<monitor_stat>.tfmodel`` (``max-`` with
            ``reverse``) by default, ``/`` in the statistic's name becoming ``_``.
        checkpoint_dir: the directory of the ModelSaver's checkpoints and of the copy;
            the trainer's ``logdir`` by default.
        top_k: how many of the best to keep; 1 (the default) keeps one copy named
            ``filename``, as tensorpack does.

            .. versionadded:: 0.2

    Raises:
        ValueError: ``filename`` would leave the directory, or is a name the
            ModelSaver's checkpoints use (``model-<step>``), or ``top_k`` is not an int >= 1.
        CallbackError: at ``before_train`` (``top_k > 1``), the record in the directory
            is not one this saver writes (another statistic or mode, or unreadable).
        MissingStatError: when triggered, ``monitor_stat`` was never put; the message
            lists the statistics that were.
        CallbackError: when a copy is due, the directory holds no checkpoint.
    """

    def __init__(
        self,
        monitor_stat: str,
        reverse: bool = False,
        filename: str | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        top_k: int = 1,
    ) -> None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            msg = f"'top_k' must be an int >= 1 (how many of the best to keep); got {top_k!r}"
            raise ValueError(msg)
        if not isinstance(monitor_stat, str) or not monitor_stat:
            msg = f"'monitor_stat' must be a statistic's name; got {monitor_stat!r}"
            raise TypeError(msg)
        if filename is not None:
            filename = check_file_name("filename", filename)
            if re.fullmatch(r"model-\d+", filename) or filename == "checkpoint":
                msg = (
                    f"'filename' must not be a name of ModelSaver's files (model-<step>, "
                    f"checkpoint); got {filename!r}"
                )
                raise ValueError(msg)
        self._stat = monitor_stat
        self._reverse = bool(reverse)
        kind = "max" if self._reverse else "min"
        self._filename = filename or f"{kind}-{_file_safe(monitor_stat)}.tfmodel"
        root, ext = os.path.splitext(self._filename)
        self._copy_pattern = re.compile(re.escape(root) + r"-(\d+)" + re.escape(ext))
        if top_k > 1 and re.fullmatch(r"model-\d+", f"{root}-1{ext}"):
            msg = (
                f"'filename' {self._filename!r}: with top_k > 1 its copies would be named "
                "model-<step>, as ModelSaver's checkpoints are; choose another name"
            )
            raise ValueError(msg)
        self._top_k = top_k
        self._best_k = BestKState(k=top_k, mode="max" if self._reverse else "min")
        self._dir_arg = None if checkpoint_dir is None else os.fspath(checkpoint_dir)
        self._dir: str | None = None
        self._best: float | None = None
        self._best_epoch: int | None = None

    @property
    def monitor_stat(self) -> str:
        """The statistic watched."""
        return self._stat

    @property
    def filename(self) -> str:
        """The name of the copy."""
        return self._filename

    @property
    def top_k(self) -> int:
        """How many of the best checkpoints are kept.

        .. versionadded:: 0.2
        """
        return self._top_k

    @property
    def kept(self) -> tuple[BestEntry, ...]:
        """The best checkpoints kept, best first (``top_k > 1``; empty otherwise).

        .. versionadded:: 0.2
        """
        return self._best_k.kept if self._top_k > 1 else ()

    @property
    def record_path(self) -> str | None:
        """The record of the best k, ``<checkpoint_dir>/<filename>.json`` (``top_k > 1``), or None.

        .. versionadded:: 0.2
        """
        if self._dir is None or self._top_k == 1:
            return None
        return os.path.join(self._dir, self._filename + ".json")

    def copy_name(self, step: int) -> str:
        """The name of the copy of the checkpoint at global `step` (``top_k > 1``).

        .. versionadded:: 0.2
        """
        root, ext = os.path.splitext(self._filename)
        return f"{root}-{int(step)}{ext}"

    @property
    def best(self) -> float | None:
        """The best value seen so far, or None."""
        if self._top_k > 1:
            return self._best_k.kept[0].value if self._best_k.kept else None
        return self._best

    @property
    def best_epoch(self) -> int | None:
        """The epoch (1-based) of the best value, the one the copy holds, or None.

        .. versionadded:: 0.2
        """
        if self._top_k > 1:
            return self._best_k.kept[0].epoch if self._best_k.kept else None
        return self._best_epoch

    @property
    def path(self) -> str | None:
        """The checkpoint prefix of the copy (known after ``setup_graph``).

        With ``top_k > 1``, that of the best one kept (None while none is).

        .. versionadded:: 0.2
        """
        if self._dir is None:
            return None
        if self._top_k > 1:
            kept = self._best_k.kept
            return os.path.join(self._dir, kept[0].name) if kept else None
        return os.path.join(self._dir, self._filename)

    def _setup_graph(self) -> None:
        self._dir = require_logdir(self, self._dir_arg, "checkpoint_dir")

    def _before_train(self) -> None:
        if self._top_k > 1:
            self._resume_best_k()
            return
        self._best = None
        self._best_epoch = None
        remove_stale_temporaries(
            str(self._dir), lambda n: n.startswith(self._filename + "."), what=self._filename
        )
        target = os.path.join(self._dir, self._filename)  # type: ignore[arg-type]
        stats = os.path.join(self._dir, "stats.json")  # type: ignore[arg-type]
        if not (os.path.isfile(target + ".index") and os.path.isfile(stats)):
            return
        try:
            records = read_stats_file(stats) or []
        except (OSError, StatsFileError) as err:
            logger.warning("%s: the best value so far is not known: %s", self, err)
            return
        start = self.trainer.starting_epoch
        for rec in records:
            epoch, value = rec.get("epoch_num"), rec.get(self._stat)
            if (
                isinstance(epoch, int)
                and epoch < start
                and is_real_number(value)
                and improves(float(value), self._best, self._reverse)  # type: ignore[arg-type]
            ):
                self._best = float(value)  # type: ignore[arg-type]
                self._best_epoch = epoch

    def _trigger(self) -> None:
        value = float(self.trainer.monitors.get_latest(self._stat))
        if not math.isfinite(value):
            logger.warning(
                "%s: %s = %s at global step %d is not a candidate for the best (only "
                "finite values are)",
                self,
                self._stat,
                value,
                self.trainer.global_step,
            )
            return
        if self._top_k > 1:
            self._offer(value)
            return
        if improves(value, self._best, self._reverse):
            self._best = value
            self._best_epoch = self.trainer.epoch_num
            self._copy_latest(value)

    def _copy_latest(self, value: float) -> None:
        directory, base, files = self._latest_checkpoint()
        target = os.path.join(self._dir, self._filename)  # type: ignore[arg-type]
        _publish_copy(directory, base, files, target)
        step = self.trainer.global_step
        if not base.endswith(f"-{step}"):
            logger.warning(
                "%s: the latest checkpoint %s is not from the current global step %d",
                self,
                base,
                step,
            )
        logger.info(
            "%s: %s = %g is the best so far; %s saved to %s", self, self._stat, value, base, target
        )

    def _latest_checkpoint(self) -> tuple[str, str, list[str]]:
        """The directory, base name and files of the ModelSaver's latest checkpoint."""
        wait_for_saves(str(self._dir))  # a background save of this step is published first
        try:
            latest = resolve_checkpoint(str(self._dir))
        except CheckpointNotFoundError:
            latest = None
        if latest is None or os.path.basename(latest).startswith(self._filename):
            msg = (
                f"{self} found no checkpoint in {self._dir!r} to copy: put a ModelSaver "
                "with the same checkpoint_dir before it in the callbacks"
            )
            raise CallbackError(msg)
        directory, base = os.path.split(latest)
        files = [
            n
            for n in os.listdir(directory)
            if n.startswith(base) and _CKPT_FILE.fullmatch(n[len(base) :])
        ]
        return directory, base, files

    def _resume_best_k(self) -> None:
        """Read the record back, keep its best k behind the start, clean the rest (see the class doc)."""
        directory = str(self._dir)
        record = os.path.join(directory, self._filename + ".json")
        remove_stale_temporaries(
            directory,
            lambda n: (
                n == self._filename + ".json"
                or self._copy_pattern.fullmatch(_MODEL_STEM.sub("", n)) is not None
            ),
            what=self._filename,
        )
        mode = self._best_k.mode
        entries: tuple[BestEntry, ...] = ()
        if os.path.isfile(record):
            try:
                with open(record, encoding="utf-8") as f:
                    stat, got_mode, entries = parse_best_k(f.read())
            except (OSError, UnicodeDecodeError, ValueError) as err:
                msg = (
                    f"{self}: the record {record!r} of the best {self._top_k} is unreadable: {err}"
                )
                raise CallbackError(msg) from err
            if (stat, got_mode) != (self._stat, mode):
                msg = (
                    f"{self}: the record {record!r} keeps the best by {got_mode} of {stat!r}, "
                    f"not by {mode} of {self._stat!r}: give this saver another 'filename'"
                )
                raise CallbackError(msg)
        complete = [
            e for e in entries if os.path.isfile(os.path.join(directory, e.name + ".index"))
        ]
        if len(complete) < len(entries):
            logger.warning(
                "%s: the record %s names checkpoints no longer in %s: %s; forgotten",
                self,
                record,
                directory,
                sorted(e.name for e in entries if e not in complete),
            )
        plan = resume_best_k(
            complete, k=self._top_k, mode=mode, start_step=int(self.trainer.global_step)
        )
        self._best_k = plan.state
        if entries or plan.state.kept:
            # the record first: it never names a checkpoint that is moved or deleted below
            atomic_write_text(record, best_k_json(plan.state, self._stat))
        if plan.ahead:
            aside = move_checkpoints_aside(directory, [e.name for e in plan.ahead])
            logger.warning(
                "%s: the best checkpoints %s were saved after global step %d, where this run "
                "starts; moved aside to %s (nothing deleted)",
                self,
                [e.name for e in plan.ahead],
                self.trainer.global_step,
                aside,
            )
        keep = {e.name for e in plan.state.kept}
        stray = sorted(
            {
                stem
                for n in os.listdir(directory)
                if self._copy_pattern.fullmatch(stem := _MODEL_STEM.sub("", n)) and stem not in keep
            }
        )
        for name in stray:
            _delete_checkpoint(directory, name)
        if stray:
            logger.info(
                "%s: deleted %s, not among the best %d that %s records",
                self,
                stray,
                self._top_k,
                record,
            )

    def _offer(self, value: float) -> None:
        """Offer the latest checkpoint to the best k: publish, record, then prune (in that order)."""
        directory, base, files = self._latest_checkpoint()
        held = checkpoint_step(base)
        held = int(self.trainer.global_step) if held is None else held
        if held != self.trainer.global_step:
            logger.warning(
                "%s: the latest checkpoint %s is not from the current global step %d",
                self,
                base,
                self.trainer.global_step,
            )
        plan = plan_best_k(
            self._best_k,
            name=self.copy_name(held),
            step=held,
            epoch=int(self.trainer.epoch_num),
            value=value,
        )
        if not plan.admitted:
            logger.debug("%s: %s = %g not kept: %s", self, self._stat, value, plan.reason)
            return
        target = os.path.join(str(self._dir), self.copy_name(held))
        _publish_copy(directory, base, files, target)
        atomic_write_text(str(self.record_path), best_k_json(plan.state, self._stat))
        self._best_k = plan.state
        for gone in plan.prune:
            _delete_checkpoint(str(self._dir), gone.name)
        logger.info(
            "%s: %s = %g is %s; %s saved to %s%s",
            self,
            self._stat,
            value,
            plan.reason,
            base,
            target,
            f"; {', '.join(e.name for e in plan.prune)} deleted" if plan.prune else "",
        )

    def __str__(self) -> str:
        return f"{type(self).__name__}({self._stat!r})"


class MaxSaver(MinSaver):
    """Keep a copy of the checkpoint with the highest value of a statistic.

    See :class:`MinSaver`; the default file name is ``max-<monitor_stat>.tfmodel``.

    Args:
        monitor_stat: the statistic's name.
        filename: the checkpoint name.
        checkpoint_dir: the checkpoint directory; the trainer's ``logdir`` by default.
        top_k: how many of the best to keep (see :class:`MinSaver`).

            .. versionadded:: 0.2
    """

    def __init__(
        self,
        monitor_stat: str,
        filename: str | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        top_k: int = 1,
    ) -> None:
        super().__init__(
            monitor_stat,
            reverse=True,
            filename=filename,
            checkpoint_dir=checkpoint_dir,
            top_k=top_k,
        )
