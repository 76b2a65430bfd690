"""The shell the experiment trackers' monitors share: a sender thread, one warning, the run id file.

A tracker is a service (an MLflow server, W&B) that may be slow or down. Its monitor
never makes the training loop wait on it and never fails a run: every call to the
tracker runs on one sender thread, in order; the first one that fails logs one warning
naming the tracker and the error, and the monitor goes quiet for the rest of the run.
At the end of training the monitor waits at most ``timeout`` seconds for the tracker
to take the run's last data and status.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from towerkit.callbacks._monitor_hub import MonitorBase
from towerkit.callbacks._senders import check_timeout
from towerkit.callbacks._tracking_core import (
    TRACKER_RUNS_FILE,
    EndStatus,
    Scalar,
    end_status,
    read_tracker_runs,
    resumes_tracker_run,
    run_values,
    tracker_runs_text,
)
from towerkit.sessinit import atomic_write_text

logger = logging.getLogger("towerkit.callbacks")

DEFAULT_TRACKER_TIMEOUT_S = 30.0
"""How long a tracker's monitor waits at the end of training for the tracker, in seconds."""

_RUNS_FILE_LOCK = threading.Lock()  # several trackers' threads update one file


def optional_import(module: str, monitor: str, extra: str) -> Any:
    """Import `module` for `monitor`, or raise an ImportError naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        msg = (
            f"{monitor} needs the {module!r} package, which is not installed: "
            f"pip install 'towerkit-callbacks[{extra}]' (or pip install {module}); {err}"
        )
        raise ImportError(msg) from err


def read_runs_file(logdir: str) -> dict[str, dict[str, str]]:
    """The tracker runs recorded in ``<logdir>/tracker_runs.json`` (``{}`` without one)."""
    path = os.path.join(logdir, TRACKER_RUNS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            return read_tracker_runs(f.read())
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError):
        return {}


def record_run(logdir: str, tracker: str, entry: Mapping[str, str]) -> None:
    """Record `tracker`'s run (``{"run_id": ...}``) in ``<logdir>/tracker_runs.json``, atomically."""
    with _RUNS_FILE_LOCK:
        runs = read_runs_file(logdir)
        runs[tracker] = dict(entry)
        atomic_write_text(os.path.join(logdir, TRACKER_RUNS_FILE), tracker_runs_text(runs))


class _Sender:
    """One daemon thread calling a tracker, in order; the first failure silences it."""

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.quiet = False
        self._thread = threading.Thread(target=self._work, name=f"towerkit-{owner}", daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], None]) -> None:
        if not self.quiet:
            self._queue.put(call)

    def give_up(self, why: str) -> None:
        """Log `why` once (the first failure), then drop every later call."""
        with self._lock:
            if self.quiet:
                return
            self.quiet = True
        logger.warning("%s: %s; training goes on without it", self._owner, why)

    def _work(self) -> None:
        while True:
            call = self._queue.get()
            if call is None:
                return
            if self.quiet:
                continue
            try:
                call()
            except Exception as err:
                text = " ".join(str(err).split())
                text = text if len(text) <= 300 else text[:297] + "..."
                self.give_up(f"the tracker failed: {type(err).__name__}: {text}")

    def close(self, timeout: float | None) -> None:
        """Send what is queued, waiting at most `timeout` seconds; then give up (one warning)."""
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.give_up(f"the tracker did not answer within {timeout:g} s at the end of training")


class TrackerMonitor(MonitorBase):
    """A monitor sending a run's parameters, statistics, files and end status to a tracker.

    Subclasses say how to talk to their tracker (`_open_run`, `_send_metrics`,
    `_send_file`, `_end_run`); this shell decides when, on its sender thread.
    """

    TRACKER = ""
    """The tracker's key in ``tracker_runs.json`` (``"mlflow"``, ``"wandb"``)."""

    def __init__(
        self,
        params: Mapping[str, Any] | None = None,
        config: Any = None,
        artifacts: Iterable[str] = (),
        timeout: float | None = DEFAULT_TRACKER_TIMEOUT_S,
    ) -> None:
        if params is not None and not isinstance(params, Mapping):
            msg = f"{type(self).__name__}: 'params' must be a mapping of names to values or None; got {type(params).__name__}"
            raise TypeError(msg)
        if isinstance(artifacts, str):
            artifacts = (artifacts,)
        self._artifacts = tuple(artifacts)
        if not all(isinstance(a, str) and a for a in self._artifacts):
            msg = f"{type(self).__name__}: 'artifacts' must be file names or glob patterns (relative to the logdir); got {artifacts!r}"
            raise TypeError(msg)
        self._params = dict(params or {})
        self._config = config
        self._timeout = check_timeout(timeout, "timeout")
        self._sender: _Sender | None = None
        self._rows: list[tuple[str, float, int, int]] = []
        self.run_id: str | None = None
        """The tracker's id of this run, once the tracker made or resumed it."""

    # -- for subclasses -------------------------------------------------------------------

    def _open_run(self, params: dict[str, Scalar], resume_id: str | None) -> str:
        """Start the tracker's run (or continue run `resume_id`) with `params`; its id."""
        raise NotImplementedError  # abstract: each tracker's monitor defines it

    def _send_metrics(self, rows: list[tuple[str, float, int, int]]) -> None:
        """Send ``(name, value, global_step, wall_time_ms)`` rows, in the order they were put."""
        raise NotImplementedError  # abstract: each tracker's monitor defines it

    def _send_file(self, path: str) -> None:
        """Send the file at `path` as an artifact of the run."""
        raise NotImplementedError  # abstract: each tracker's monitor defines it

    def _end_run(self, status: EndStatus) -> None:
        """Mark the run ended with `status`."""
        raise NotImplementedError  # abstract: each tracker's monitor defines it

    def _run_entry(self) -> dict[str, str]:
        """What ``tracker_runs.json`` records of the run, besides its id."""
        return {}

    # -- the shell --------------------------------------------------------------------------

    def __str__(self) -> str:
        return type(self).__name__

    def _setup_graph(self) -> None:
        self._logdir = getattr(self.trainer, "logdir", None)

    def _before_train(self) -> None:
        trainer = self.trainer
        params = run_values(trainer, self._config, self._params)
        stored = read_runs_file(self._logdir).get(self.TRACKER, {}) if self._logdir else {}
        resume = resumes_tracker_run(
            stored.get("run_id"),
            starting_epoch=trainer.starting_epoch,
            resumed_steps=int(getattr(trainer, "resumed_steps_in_epoch", 0) or 0),
            global_step=trainer.global_step,
        )
        resume_id = stored["run_id"] if resume else None
        self._rows = []
        self._sender = _Sender(str(self))

        def open_run() -> None:
            run_id = self._open_run(params, resume_id)
            self.run_id = run_id
            if self._logdir:
                record_run(self._logdir, self.TRACKER, {"run_id": run_id, **self._run_entry()})

        self._sender.submit(open_run)

    def process_scalar(self, name: str, val: float) -> None:
        self._rows.append((name, float(val), self.trainer.global_step, int(time.time() * 1000)))

    def _trigger_epoch(self) -> None:
        rows = [
            *self._rows,
            (
                "epoch",
                float(self.trainer.epoch_num),
                self.trainer.global_step,
                int(time.time() * 1000),
            ),
        ]
        self._rows = []
        sender = self._sender
        if sender is None:
            return
        sender.submit(lambda: self._send_metrics(rows))
        stats = self._stats_file()
        if stats is not None:
            sender.submit(lambda: self._send_file(stats))

    def _stats_file(self) -> str | None:
        if not self._logdir:
            return None
        path = os.path.join(self._logdir, "stats.json")
        return path if os.path.isfile(path) else None

    def _after_train(self) -> None:
        sender, self._sender = self._sender, None
        if sender is None:
            return
        self._rows = []  # an unfinished epoch's statistics: that epoch runs again on resume
        trainer = self.trainer
        status = end_status(
            preempted=bool(getattr(trainer, "preempted", False)),
            failure=getattr(trainer, "run_failure", None),
        )
        files = []
        stats = self._stats_file()
        if stats is not None:
            files.append(stats)
        if self._logdir:
            for pattern in self._artifacts:
                files += sorted(
                    p for p in glob.glob(os.path.join(self._logdir, pattern)) if os.path.isfile(p)
                )
        for path in dict.fromkeys(files):
            sender.submit(functools.partial(self._send_file, path))
        sender.submit(lambda: self._end_run(status))
        sender.close(self._timeout)
