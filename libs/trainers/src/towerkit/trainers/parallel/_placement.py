"""Where a process of a TensorFlow-cluster job runs: one record, read from ``TF_CONFIG`` (pure).

Kubernetes' TFJob, Vertex AI, AI Platform and SageMaker start each process of a job
with ``TF_CONFIG``: the whole cluster (``chief``, ``worker``, ``ps``, ``evaluator``, each
a list of ``host:port``) and this process's task (``type``, ``index``). towerkit's
cluster trainers know two jobs, ``ps`` and ``worker``, worker 0 being the chief;
`tf_config_placement` maps one onto the other and says so in `ClusterPlacement`.

.. versionadded:: 0.2
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "ClusterPlacement",
    "exit_is_retryable",
    "tf_config_placement",
]

_ADDRESS = re.compile(r"^[^\s:/]+:[0-9]{1,5}$|^\[[0-9a-fA-F:.]+\]:[0-9]{1,5}$")
_CHIEF_NAMES = ("chief", "master")
_KNOWN_TYPES = (*_CHIEF_NAMES, "worker", "ps", "evaluator")


def exit_is_retryable(status: int) -> bool:
    """Whether the Kubernetes operators' ``ExitCode`` restart policy retries `status`.

    TFJob, PyTorchJob and MPIJob with ``restartPolicy: ExitCode`` restart a replica
    whose container exited with 128 or more (killed by a signal: 130, 137, and a
    preempted run's `PREEMPTED_EXIT_STATUS`, 143) and fail the job for 1 to 127 (an
    uncaught error, the user's, exits 1). 0 is success, not a failure to retry.

    .. versionadded:: 0.2

    >>> exit_is_retryable(143), exit_is_retryable(137), exit_is_retryable(1)
    (True, True, False)
    >>> exit_is_retryable(0)
    False
    """
    return status >= 128


def _jobs_converter(jobs: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    items = jobs.items() if isinstance(jobs, Mapping) else jobs
    return tuple((str(name), tuple(addresses)) for name, addresses in items)


@attrs.frozen(kw_only=True)
class ClusterPlacement:
    """This process's place in a TensorFlow cluster, in towerkit's jobs ``ps`` and ``worker``.

    Attributes:
        jobs: ``(("ps", addresses), ("worker", addresses))``: the cluster the servers
            run (worker 0 is the chief). A mapping given is made pairs.
        job: ``"ps"`` or ``"worker"``.
        task: this process's index in `job` (0-based).
        origin: where the placement was read and as what, for messages (e.g.
            ``"TF_CONFIG task chief:0"``).

    Raises:
        ValueError: a job other than ``ps``/``worker``, an empty one, a task out of range.
    """

    jobs: tuple[tuple[str, tuple[str, ...]], ...] = attrs.field(converter=_jobs_converter)
    job: str
    task: int
    origin: str

    def __attrs_post_init__(self) -> None:
        names = [name for name, _ in self.jobs]
        if sorted(names) != ["ps", "worker"]:
            msg = f"'jobs' must be 'ps' and 'worker', once each; got {names}"
            raise ValueError(msg)
        empty = [name for name, addresses in self.jobs if not addresses]
        if empty:
            msg = f"'jobs' needs at least one address per job; {empty} have none"
            raise ValueError(msg)
        if self.job not in names:
            msg = f"'job' must be 'ps' or 'worker'; got {self.job!r}"
            raise ValueError(msg)
        size = len(self.addresses(self.job))
        if not 0 <= self.task < size:
            msg = f"'task' must be in [0, {size}) for job {self.job!r}; got {self.task}"
            raise ValueError(msg)

    def addresses(self, job: str) -> tuple[str, ...]:
        """The addresses of `job`, in task order."""
        return dict(self.jobs)[job]

    @property
    def is_chief(self) -> bool:
        """Whether this process is worker 0, the chief."""
        return self.job == "worker" and self.task == 0

    def cluster_dict(self) -> dict[str, list[str]]:
        """The cluster as ``tf.compat.v1.train.ClusterSpec`` takes it.

        >>> ClusterPlacement(jobs={"ps": ["a:1"], "worker": ["b:2"]}, job="ps", task=0,
        ...                  origin="x").cluster_dict()
        {'ps': ['a:1'], 'worker': ['b:2']}
        """
        return {name: list(addresses) for name, addresses in self.jobs}


def _fail(msg: str) -> ValueError:
    return ValueError(f"TF_CONFIG: {msg}")


def _read_cluster(cluster: Any) -> dict[str, list[str]]:
    if not isinstance(cluster, Mapping) or not cluster:
        msg = f"'cluster' must be a non-empty object of job -> addresses; got {cluster!r}"
        raise _fail(msg)
    unknown = sorted(str(k) for k in cluster if k not in _KNOWN_TYPES)
    if unknown:
        msg = f"'cluster' has jobs {unknown}; the jobs known are {list(_KNOWN_TYPES)}"
        raise _fail(msg)
    jobs: dict[str, list[str]] = {}
    for name, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            msg = f"'cluster.{name}' must be a list of 'host:port' strings; got {addresses!r}"
            raise _fail(msg)
        bad = [a for a in addresses if not _ADDRESS.match(a)]
        if bad:
            msg = f"'cluster.{name}' has addresses that are not 'host:port': {bad}"
            raise _fail(msg)
        jobs[name] = addresses
    chiefs = [n for n in _CHIEF_NAMES if n in jobs]
    if len(chiefs) > 1 or any(len(jobs[n]) > 1 for n in chiefs):
        msg = f"'cluster' may hold one chief ('chief' or 'master'); got { ({n: jobs[n] for n in chiefs}) }"
        raise _fail(msg)
    return jobs


def _read_task(task: Any, jobs: Mapping[str, list[str]]) -> tuple[str, int]:
    if not isinstance(task, Mapping) or "type" not in task:
        msg = f"'task' must be an object with 'type' and 'index'; got {task!r}"
        raise _fail(msg)
    kind, index = task["type"], task.get("index", 0)
    if kind not in _KNOWN_TYPES:
        msg = f"'task.type' must be one of {list(_KNOWN_TYPES)}; got {kind!r}"
        raise _fail(msg)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        msg = f"'task.index' must be an integer >= 0; got {index!r}"
        raise _fail(msg)
    if kind == "evaluator":
        msg = (
            f"task evaluator:{index}: towerkit's cluster trainers run no evaluator task "
            "(an evaluator reads the chief's checkpoints as they appear, which these "
            "trainers leave to an InferenceRunner on the chief or a separate job on the "
            "log directory): declare no 'Evaluator' replicas"
        )
        raise _fail(msg)
    size = len(jobs.get(kind, []))
    if index >= size:
        msg = f"'task' is {kind}:{index}, but 'cluster.{kind}' has {size} address(es)"
        raise _fail(msg)
    return kind, index


def tf_config_placement(text: str) -> ClusterPlacement:
    """Where this process runs, read from the text of ``TF_CONFIG``.

    The mapping onto towerkit's jobs: the chief (``chief``, or ``master`` as older
    operators name it) is worker 0 and the ``worker`` tasks follow it (``worker:i`` is
    worker ``i + 1``); without a chief, ``worker:0`` is the chief. ``ps:i`` is ps ``i``.
    ``evaluator`` tasks are outside the cluster (TensorFlow's convention) and an
    evaluator process is refused. Fields other than ``cluster`` and ``task``
    (``environment``, ``job``, ``trial``, ``rpc_layer``) are ignored.

    Args:
        text: the value of ``TF_CONFIG`` (JSON).

    Returns:
        The `ClusterPlacement`.

    Raises:
        ValueError: text that is not such JSON, a cluster without ``ps`` or without
            workers, a task not in the cluster, an evaluator task; the message names
            the field at fault.

    >>> tf_config_placement('{"cluster": {"chief": ["c:2222"], "worker": ["w0:2222"],'
    ...     ' "ps": ["p:2222"]}, "task": {"type": "worker", "index": 0}}')  # doctest: +NORMALIZE_WHITESPACE
    ClusterPlacement(jobs=(('ps', ('p:2222',)), ('worker', ('c:2222', 'w0:2222'))),
        job='worker', task=1, origin='TF_CONFIG task worker:0')
    """
    try:
        config = json.loads(text)
    except ValueError as err:
        msg = f"must be JSON; {err}: {text[:200]!r}"
        raise _fail(msg) from None
    if not isinstance(config, Mapping) or "cluster" not in config or "task" not in config:
        msg = f"must be an object with 'cluster' and 'task'; got {text[:200]!r}"
        raise _fail(msg)
    jobs = _read_cluster(config["cluster"])
    kind, index = _read_task(config["task"], jobs)
    chief = next((jobs[n] for n in _CHIEF_NAMES if n in jobs), [])
    workers = chief + jobs.get("worker", [])
    missing = [
        name for name, have in (("ps", jobs.get("ps")), ("chief or worker", workers)) if not have
    ]
    if missing:
        msg = (
            f"'cluster' needs {' and '.join(repr(m) for m in missing)} tasks for towerkit's "
            f"parameter-server trainers; it has {sorted(jobs)}"
        )
        raise _fail(msg)
    if kind in _CHIEF_NAMES:
        job, task = "worker", 0
    elif kind == "worker":
        job, task = "worker", index + len(chief)
    else:
        job, task = "ps", index
    return ClusterPlacement(
        jobs={"ps": jobs["ps"], "worker": workers},
        job=job,
        task=task,
        origin=f"TF_CONFIG task {kind}:{index}",
    )
