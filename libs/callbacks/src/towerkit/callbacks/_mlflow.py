"""`MLflowMonitor`: a run's parameters, statistics, ``stats.json`` and end status in MLflow."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from towerkit.callbacks._tracking import (
    DEFAULT_TRACKER_TIMEOUT_S,
    TrackerMonitor,
    optional_import,
)
from towerkit.callbacks._tracking_core import EndStatus, Scalar, param_value

_BATCH = 1000  # MLflow's limit of metrics in one log_batch call


class MLflowMonitor(TrackerMonitor):
    """Send the run to an MLflow tracking server (needs the optional ``mlflow``).

    On the chief only. Before training it starts an MLflow run (named `run_name`, in
    `experiment_name`, with `tags`) and logs its parameters: what the trainer knows
    (its class, ``steps_per_epoch``, ``starting_epoch``, ``max_epoch``,
    ``steps_per_execution``, the precision policy, the model's and optimizer's
    classes), the plain-valued options of `config` (a ``TrainConfig``) and `params`.
    After each epoch it logs every scalar put during the epoch as a metric at the
    global step it was put at (and ``epoch``), and uploads ``stats.json``; after
    training, ``stats.json`` and the `artifacts` again, then ends the run as
    ``FINISHED`` (the epochs done, or a callback stopped training), ``FAILED`` (an
    error) or ``KILLED`` (a preemption or Ctrl-C).

    The run's id is recorded in ``<logdir>/tracker_runs.json``: a run that resumes in
    that logdir (``AutoResumeTrainConfig``, a rerun after a preemption) continues the
    same MLflow run, which is ``RUNNING`` again and gets the later epochs.

    The tracker never stops training: every call to it runs on a thread of its own;
    the first that fails (the server down, refusing, timing out) logs one warning
    naming the monitor and the error, and the monitor sends nothing more in this run.
    At the end of training it waits at most `timeout` seconds for the server. MLflow
    retries a request that fails for minutes by default
    (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``MLFLOW_HTTP_REQUEST_TIMEOUT`` set fewer).

    Args:
        tracking_uri: the tracking server (``http://host:5000``) or store; by default
            ``MLFLOW_TRACKING_URI``, else MLflow's own default.
        experiment_name: the experiment, made when missing; by default
            ``MLFLOW_EXPERIMENT_NAME``, else MLflow's default experiment.
        run_name: the new run's name (MLflow makes one up when None).
        tags: tags of the new run.
        params: more parameters (they win over those found); nested mappings are
            flattened to ``outer/inner`` names, other objects give their class's name.
        config: the ``TrainConfig`` of the run, to log its options too.
        artifacts: more files to upload at the end: names or glob patterns relative
            to the logdir (``"*.png"``).
        timeout: seconds to wait for the server at the end of training (> 0), or None
            to wait however long it takes. Default 30.

    Raises:
        ImportError: ``mlflow`` is not installed (``pip install 'towerkit-callbacks[mlflow]'``).
        TypeError: an argument of the wrong kind.

    .. versionadded:: 0.2
    """

    TRACKER = "mlflow"

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment_name: str | None = None,
        run_name: str | None = None,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        config: Any = None,
        artifacts: Iterable[str] = (),
        timeout: float | None = DEFAULT_TRACKER_TIMEOUT_S,
    ) -> None:
        super().__init__(params=params, config=config, artifacts=artifacts, timeout=timeout)
        optional_import("mlflow", "MLflowMonitor", "mlflow")
        for what, value in (
            ("tracking_uri", tracking_uri),
            ("experiment_name", experiment_name),
            ("run_name", run_name),
        ):
            if value is not None and not (isinstance(value, str) and value):
                msg = f"MLflowMonitor: {what!r} must be a non-empty str or None; got {value!r}"
                raise TypeError(msg)
        if tags is not None and not isinstance(tags, Mapping):
            msg = f"MLflowMonitor: 'tags' must be a mapping of str to str or None; got {type(tags).__name__}"
            raise TypeError(msg)
        self._uri_arg = tracking_uri
        self._experiment = experiment_name
        self._run_name = run_name
        self._tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self._client: Any = None
        self.tracking_uri: str | None = None
        """The tracking URI used (after ``before_train``)."""

    def __str__(self) -> str:
        return f"MLflowMonitor({self.tracking_uri or self._uri_arg or 'MLFLOW_TRACKING_URI'})"

    def _before_train(self) -> None:
        self.tracking_uri = self._uri_arg or os.environ.get("MLFLOW_TRACKING_URI") or None
        super()._before_train()

    def _open_run(self, values: dict[str, Scalar], resume_id: str | None) -> str:
        tracking = optional_import("mlflow.tracking", "MLflowMonitor", "mlflow")
        entities = optional_import("mlflow.entities", "MLflowMonitor", "mlflow")
        params = {k: str(param_value(v)) for k, v in values.items()}
        self._client = client = tracking.MlflowClient(tracking_uri=self.tracking_uri)
        self.tracking_uri = client.tracking_uri
        if resume_id is not None:
            client.update_run(resume_id, status="RUNNING")
            run_id = resume_id
            known = client.get_run(run_id).data.params
            params = {k: v for k, v in params.items() if k not in known}
        else:
            name = self._experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME")
            if name:
                exp = client.get_experiment_by_name(name)
                exp_id = exp.experiment_id if exp is not None else client.create_experiment(name)
            else:
                exp_id = "0"
            run = client.create_run(exp_id, run_name=self._run_name, tags=self._tags)
            run_id = run.info.run_id
        items = [entities.Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
        return str(run_id)

    def _run_entry(self) -> dict[str, str]:
        return {"tracking_uri": str(self.tracking_uri)}

    def _send_metrics(self, rows: list[tuple[str, float, int, int]]) -> None:
        if self.run_id is None:
            return
        entities = optional_import("mlflow.entities", "MLflowMonitor", "mlflow")
        metrics = [entities.Metric(n, v, ms, step) for n, v, step, ms in rows]
        for i in range(0, len(metrics), _BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[i : i + _BATCH])

    def _send_file(self, path: str) -> None:
        if self.run_id is not None:
            self._client.log_artifact(self.run_id, path)

    def _end_run(self, status: EndStatus) -> None:
        if self.run_id is not None:
            self._client.set_terminated(self.run_id, status)
