"""Where a process of a SLURM job step runs, read from what ``srun`` sets (pure).

``srun`` starts each task of a step with ``SLURM_PROCID`` (its rank), ``SLURM_NTASKS``,
``SLURM_LOCALID`` (its rank on its node), the step's nodes (``SLURM_STEP_NODELIST``, a
host list such as ``node[1-3,5]``) and how many tasks each runs
(``SLURM_STEP_TASKS_PER_NODE``, such as ``2(x3),1``). `slurm_step` reads them into a
`SlurmStep`; `slurm_placement` maps its tasks onto a TensorFlow cluster.

.. versionadded:: 0.2
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from towerkit.trainers.parallel._placement import ClusterPlacement

__all__ = [
    "SlurmStep",
    "expand_hostlist",
    "expand_tasks_per_node",
    "slurm_placement",
    "slurm_step",
]

PORT_BASE = 30000
"""The first port of the default port range of a job (see `slurm_placement`)."""

PORTS_PER_JOB = 32
"""Ports a job's default range holds: the most tasks one node may run of one job."""

_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
_COUNT = re.compile(r"^([0-9]+)(?:\(x([0-9]+)\))?$")


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _expand_brackets(body: str, whole: str) -> list[str]:
    values: list[str] = []
    for piece in body.split(","):
        match = _RANGE.match(piece)
        if match is None:
            msg = f"host list {whole!r}: {piece!r} in brackets is not N or N-M"
            raise ValueError(msg)
        first, last = match.group(1), match.group(2) or match.group(1)
        if int(last) < int(first):
            msg = f"host list {whole!r}: range {piece!r} ends before it starts"
            raise ValueError(msg)
        width = len(first) if first.startswith("0") or len(first) == len(last) else 0
        values += [str(n).zfill(width) for n in range(int(first), int(last) + 1)]
    return values


def expand_hostlist(text: str) -> tuple[str, ...]:
    """The host names of a SLURM host list, in order.

    Bracketed ranges keep their zero padding, and several brackets in one name
    expand to every combination (the last varying fastest), as ``scontrol show
    hostnames`` prints them.

    Args:
        text: a host list (``SLURM_JOB_NODELIST``, ``SLURM_STEP_NODELIST``).

    Raises:
        ValueError: an empty list or name, unbalanced brackets, a range that is not
            ``N`` or ``N-M`` (with ``N <= M``).

    >>> expand_hostlist("node[1-3,5],gpu01")
    ('node1', 'node2', 'node3', 'node5', 'gpu01')
    >>> expand_hostlist("r[1-2]n[08-09]")
    ('r1n08', 'r1n09', 'r2n08', 'r2n09')
    """
    hosts: list[str] = []
    if text.count("[") != text.count("]"):
        msg = f"host list {text!r}: unbalanced brackets"
        raise ValueError(msg)
    for name in _split_top(text.strip()):
        if not name:
            msg = f"host list {text!r}: an empty name"
            raise ValueError(msg)
        pieces = re.split(r"\[([^\]]*)\]", name)
        if any("[" in p or "]" in p for p in pieces[::2]):
            msg = f"host list {text!r}: unbalanced brackets in {name!r}"
            raise ValueError(msg)
        choices = [
            [piece] if i % 2 == 0 else _expand_brackets(piece, text)
            for i, piece in enumerate(pieces)
        ]
        hosts += ["".join(combo) for combo in itertools.product(*choices)]
    return tuple(hosts)


def expand_tasks_per_node(text: str) -> tuple[int, ...]:
    """The task count of each node, from SLURM's compressed form.

    >>> expand_tasks_per_node("2(x3),1")
    (2, 2, 2, 1)

    Raises:
        ValueError: a piece that is not ``N`` or ``N(xK)``.
    """
    counts: list[int] = []
    for piece in text.strip().split(","):
        match = _COUNT.match(piece)
        if match is None:
            msg = f"tasks per node {text!r}: {piece!r} is not N or N(xK)"
            raise ValueError(msg)
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return tuple(counts)


def _tuple_str(values: Iterable[object]) -> tuple[str, ...]:
    return tuple(str(v) for v in values)


def _tuple_int(values: Iterable[Any]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


@attrs.frozen(kw_only=True)
class SlurmStep:
    """One task of a SLURM job step, as ``srun`` describes it.

    Attributes:
        job_id: ``SLURM_JOB_ID``.
        procid: this task's rank in the step (``SLURM_PROCID``, 0-based).
        localid: its rank on its node (``SLURM_LOCALID``, 0-based).
        nodes: the step's nodes, in order.
        tasks_per_node: how many tasks each of `nodes` runs.
        restart_count: how many times the job was requeued (``SLURM_RESTART_COUNT``).

    Raises:
        ValueError: fields that disagree: `nodes` and `tasks_per_node` of different
            lengths, a rank out of range.
    """

    job_id: int
    procid: int
    localid: int
    nodes: tuple[str, ...] = attrs.field(converter=_tuple_str)
    tasks_per_node: tuple[int, ...] = attrs.field(converter=_tuple_int)
    restart_count: int = 0

    def __attrs_post_init__(self) -> None:
        if len(self.nodes) != len(self.tasks_per_node) or not self.nodes:
            msg = (
                f"a step's 'nodes' and 'tasks_per_node' must pair up, one count per node; "
                f"got {len(self.nodes)} node(s) {list(self.nodes)} and counts {list(self.tasks_per_node)}"
            )
            raise ValueError(msg)
        if any(n < 1 for n in self.tasks_per_node):
            msg = f"'tasks_per_node' must be >= 1 each; got {list(self.tasks_per_node)}"
            raise ValueError(msg)
        if not 0 <= self.procid < self.ntasks:
            msg = f"'procid' must be in [0, {self.ntasks}); got {self.procid}"
            raise ValueError(msg)
        if self.localid != self.task_slots()[self.procid][1]:
            host, slot = self.task_slots()[self.procid]
            msg = (
                f"task {self.procid} has local id {self.localid}, but the step's block "
                f"layout puts it at {slot} on {host}: towerkit needs SLURM's block "
                "distribution (srun --distribution=block, the default)"
            )
            raise ValueError(msg)

    @property
    def ntasks(self) -> int:
        """Tasks in the step."""
        return sum(self.tasks_per_node)

    def task_slots(self) -> tuple[tuple[str, int], ...]:
        """(node, local id) of each task of the step, by rank: SLURM's block layout.

        >>> SlurmStep(job_id=7, procid=0, localid=0, nodes=("a", "b"),
        ...           tasks_per_node=(2, 1)).task_slots()
        (('a', 0), ('a', 1), ('b', 0))
        """
        return tuple(
            (node, k)
            for node, count in zip(self.nodes, self.tasks_per_node, strict=True)
            for k in range(count)
        )


def slurm_step(environ: Mapping[str, str]) -> SlurmStep | None:
    """The `SlurmStep` of a task started by ``srun``; None outside a step.

    Reads ``SLURM_JOB_ID``, ``SLURM_PROCID``, ``SLURM_LOCALID``, the step's node list
    and tasks per node (``SLURM_STEP_*``, else the job's ``SLURM_JOB_NODELIST`` and
    ``SLURM_TASKS_PER_NODE``) and ``SLURM_RESTART_COUNT`` (0 until the job is requeued).

    Raises:
        ValueError: a variable missing or malformed, naming it.

    >>> slurm_step({}) is None
    True
    >>> slurm_step({"SLURM_JOB_ID": "12", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
    ...     "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}).task_slots()[1]
    ('n1', 1)
    """
    if "SLURM_JOB_ID" not in environ or "SLURM_PROCID" not in environ:
        return None

    def read(*names: str) -> str:
        for name in names:
            if name in environ:
                return environ[name]
        msg = f"SLURM's environment has SLURM_PROCID but none of {list(names)}"
        raise ValueError(msg)

    def number(name: str, default: str | None = None) -> int:
        value = environ.get(name, default)
        if value is None or not value.isdigit():
            msg = f"{name} must be an integer >= 0; got {value!r}"
            raise ValueError(msg)
        return int(value)

    return SlurmStep(
        job_id=number("SLURM_JOB_ID"),
        procid=number("SLURM_PROCID"),
        localid=number("SLURM_LOCALID", "0"),
        nodes=expand_hostlist(read("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")),
        tasks_per_node=expand_tasks_per_node(
            read("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
        ),
        restart_count=number("SLURM_RESTART_COUNT", "0"),
    )


def default_port(job_id: int) -> int:
    """The first port of job `job_id`'s default range: ranges of 32 ports from 30000.

    >>> default_port(1), default_port(1001)
    (30032, 30032)
    """
    return PORT_BASE + (job_id % 1000) * PORTS_PER_JOB


def slurm_placement(step: SlurmStep, num_ps: int = 1, port: int | None = None) -> ClusterPlacement:
    """The step's tasks as a TensorFlow cluster: the first `num_ps` ranks are ``ps``.

    Ranks ``0 .. num_ps - 1`` are the parameter servers, the others the workers in
    rank order (rank ``num_ps`` is worker 0, the chief). A task listens on its node at
    ``port + local id``; `port` defaults to `default_port` of the job (so two jobs on
    one node differ unless their ids are equal modulo 1000).

    Raises:
        ValueError: `num_ps` < 1 or leaving no worker; ports past 65535.

    >>> p = slurm_placement(SlurmStep(job_id=3, procid=2, localid=0, nodes=("a", "b"),
    ...     tasks_per_node=(2, 1)), port=5000)
    >>> p.cluster_dict(), p.job, p.task
    ({'ps': ['a:5000'], 'worker': ['a:5001', 'b:5000']}, 'worker', 1)
    """
    if not 1 <= num_ps < step.ntasks:
        msg = (
            f"'num_ps' must be >= 1 and leave a worker among the step's {step.ntasks} "
            f"task(s); got {num_ps}"
        )
        raise ValueError(msg)
    base = default_port(step.job_id) if port is None else port
    top = base + max(step.tasks_per_node) - 1
    if not base > 0 or top > 65535:
        msg = f"'port' must leave ports {base}..{top} in 1..65535; got {base}"
        raise ValueError(msg)
    addresses = [f"{node}:{base + k}" for node, k in step.task_slots()]
    if step.procid < num_ps:
        job, task = "ps", step.procid
    else:
        job, task = "worker", step.procid - num_ps
    return ClusterPlacement(
        jobs={"ps": addresses[:num_ps], "worker": addresses[num_ps:]},
        job=job,
        task=task,
        origin=f"SLURM job {step.job_id} task {step.procid}",
    )


def rendezvous_port(step: SlurmStep, port: int | None = None) -> int:
    """The port of a horovod job's rendezvous server: the first after the tasks' own.

    The tasks of a node listen from `port` (default `default_port` of the job) on, one
    port each (`slurm_placement`); the rendezvous, on the step's first node, follows them.

    >>> rendezvous_port(SlurmStep(job_id=3, procid=0, localid=0, nodes=("a",),
    ...                           tasks_per_node=(2,)), port=5000)
    5002
    """
    base = default_port(step.job_id) if port is None else port
    return base + max(step.tasks_per_node)


def horovod_environment(step: SlurmStep, port: int | None = None) -> tuple[tuple[str, str], ...]:
    """What horovod's gloo launcher would give this task, from its SLURM step.

    Rank, size, local rank and size are SLURM's (``SLURM_PROCID``, the step's tasks,
    ``SLURM_LOCALID``, this node's tasks); the cross rank of a task is its node's index
    among the nodes that run a task of its local rank, as horovod numbers them; the
    rendezvous server (`rendezvous_port`) runs in rank 0, on the step's first node.

    >>> dict(horovod_environment(SlurmStep(job_id=3, procid=2, localid=0, nodes=("a", "b"),
    ...     tasks_per_node=(2, 1)), port=5000))  # doctest: +NORMALIZE_WHITESPACE
    {'HOROVOD_HOSTNAME': 'b', 'HOROVOD_RANK': '2', 'HOROVOD_SIZE': '3',
     'HOROVOD_LOCAL_RANK': '0', 'HOROVOD_LOCAL_SIZE': '1', 'HOROVOD_CROSS_RANK': '1',
     'HOROVOD_CROSS_SIZE': '2', 'HOROVOD_GLOO_RENDEZVOUS_ADDR': 'a',
     'HOROVOD_GLOO_RENDEZVOUS_PORT': '5002', 'HOROVOD_CONTROLLER': 'gloo',
     'HOROVOD_CPU_OPERATIONS': 'gloo'}
    """
    node, local = step.task_slots()[step.procid]
    node_index = step.nodes.index(node)
    peers = [i for i, count in enumerate(step.tasks_per_node) if count > local]
    return (
        ("HOROVOD_HOSTNAME", node),
        ("HOROVOD_RANK", str(step.procid)),
        ("HOROVOD_SIZE", str(step.ntasks)),
        ("HOROVOD_LOCAL_RANK", str(local)),
        ("HOROVOD_LOCAL_SIZE", str(step.tasks_per_node[node_index])),
        ("HOROVOD_CROSS_RANK", str(peers.index(node_index))),
        ("HOROVOD_CROSS_SIZE", str(len(peers))),
        ("HOROVOD_GLOO_RENDEZVOUS_ADDR", step.nodes[0]),
        ("HOROVOD_GLOO_RENDEZVOUS_PORT", str(rendezvous_port(step, port))),
        ("HOROVOD_CONTROLLER", "gloo"),
        ("HOROVOD_CPU_OPERATIONS", "gloo"),
    )
