"""`WandbMonitor`: a run's parameters, statistics, ``stats.json`` and end in Weights & Biases."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

from towerkit.callbacks._tracking import (
    DEFAULT_TRACKER_TIMEOUT_S,
    TrackerMonitor,
    optional_import,
)
from towerkit.callbacks._tracking_core import EndStatus, Scalar

WANDB_EXIT_CODES = {"FINISHED": 0, "FAILED": 1, "KILLED": 143}
"""The exit code a W&B run ends with: W&B marks 0 finished and others failed (preempted when marked)."""

_MODES = ("online", "offline", "disabled", "shared")


class WandbMonitor(TrackerMonitor):
    """Send the run to Weights & Biases (needs the optional ``wandb``).

    On the chief only. Before training it starts a W&B run (in `project`, named `name`,
    with `tags`) whose config is the run's parameters, as `MLflowMonitor` finds them;
    after each epoch it logs every scalar put during the epoch at the global step it
    was put at (W&B's ``step``) with ``epoch``, and saves ``stats.json`` to the run;
    after training, ``stats.json`` and the `artifacts` again, then it finishes the run
    with exit code 0 (the epochs done, or a callback stopped training), 1 (an error), or
    143 after marking it preempting (a preemption, Ctrl-C).

    The run's files go under ``<logdir>/wandb``; its id is recorded in
    ``<logdir>/tracker_runs.json``, and a run resumed in that logdir continues the same
    W&B run (``resume="allow"`` with that id). ``WANDB_MODE=offline`` (or
    ``mode="offline"``) writes the run to disk only, for ``wandb sync`` later.

    Every call to W&B runs on a thread of its own: the first that fails logs one
    warning naming the monitor and the error, and the monitor sends nothing more in
    this run; training goes on. At the end it waits at most `timeout` seconds for W&B.

    Args:
        project: the W&B project; by default ``WANDB_PROJECT`` or W&B's default.
        entity: the W&B user or team; by default ``WANDB_ENTITY`` or the account's.
        name: the run's display name (W&B makes one up when None).
        tags: tags of the run.
        mode: ``"online"``, ``"offline"`` or ``"disabled"``; by default ``WANDB_MODE``
            or online.
        params: more parameters (they win over those found).
        config: the ``TrainConfig`` of the run, to log its options too.
        artifacts: more files to save at the end: names or glob patterns relative to
            the logdir.
        timeout: seconds to wait for W&B at the end of training (> 0), or None.

    Raises:
        ImportError: ``wandb`` is not installed (``pip install 'towerkit-callbacks[wandb]'``).
        TypeError, ValueError: an argument of the wrong kind or value.

    .. versionadded:: 0.2
    """

    TRACKER = "wandb"

    def __init__(
        self,
        project: str | None = None,
        entity: str | None = None,
        name: str | None = None,
        tags: Sequence[str] | None = None,
        mode: str | None = None,
        params: Any = None,
        config: Any = None,
        artifacts: Iterable[str] = (),
        timeout: float | None = DEFAULT_TRACKER_TIMEOUT_S,
    ) -> None:
        super().__init__(params=params, config=config, artifacts=artifacts, timeout=timeout)
        optional_import("wandb", "WandbMonitor", "wandb")
        for what, value in (("project", project), ("entity", entity), ("name", name)):
            if value is not None and not (isinstance(value, str) and value):
                msg = f"WandbMonitor: {what!r} must be a non-empty str or None; got {value!r}"
                raise TypeError(msg)
        if mode is not None and mode not in _MODES:
            msg = f"WandbMonitor: 'mode' must be one of {_MODES} or None; got {mode!r}"
            raise ValueError(msg)
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags or ()):
            msg = f"WandbMonitor: 'tags' must be a list of str or None; got {tags!r}"
            raise TypeError(msg)
        self._project, self._entity, self._name = project, entity, name
        self._tags = list(tags or ())
        self._mode = mode
        self._run: Any = None

    def _open_run(self, params: dict[str, Scalar], resume_id: str | None) -> str:
        wandb = optional_import("wandb", "WandbMonitor", "wandb")
        directory = str(self._logdir) if self._logdir else None
        if directory is not None:
            os.makedirs(os.path.join(directory, "wandb"), exist_ok=True)
        run_id = resume_id or secrets.token_hex(6)
        self._run = wandb.init(
            project=self._project,
            entity=self._entity,
            name=self._name,
            tags=self._tags or None,
            mode=self._mode,
            dir=directory,
            id=run_id,
            resume="allow",
            config=dict(params),
            allow_val_change=True,
            settings=wandb.Settings(console="off"),
        )
        return str(self._run.id)

    def _run_entry(self) -> dict[str, str]:
        return {"project": str(getattr(self._run, "project", "") or "")}

    def _send_metrics(self, rows: list[tuple[str, float, int, int]]) -> None:
        if self._run is None:
            return
        by_step: dict[int, dict[str, float]] = {}
        for name, value, step, _ in rows:
            by_step.setdefault(step, {})[name] = value
        for step in sorted(by_step):
            self._run.log(by_step[step], step=step)

    def _send_file(self, path: str) -> None:
        if self._run is not None:
            self._run.save(path, base_path=os.path.dirname(path), policy="now")

    def _end_run(self, status: EndStatus) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        if status == "KILLED":
            run.mark_preempting()
        run.finish(exit_code=WANDB_EXIT_CODES[status])
