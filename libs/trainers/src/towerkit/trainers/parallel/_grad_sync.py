"""Data-parallel gradients and replicas: aggregate or all-reduce the towers' gradients, sync copies."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from towerkit.towers.compat import tf1
from towerkit.trainers.parallel._allreduce import (
    allreduce,
    nccl_available,
    scale_gradient,
    sum_gradients,
)
from towerkit.trainers.parallel._dataparallel import (
    choose_allreduce_mode,
    device_key,
    match_tower_variables,
    replica_index,
    replica_sources,
)

__all__ = [
    "GradsAndVars",
    "aggregate_grads",
    "align_tower_grads",
    "allreduce_grads",
    "copy_masters_op",
    "make_replicas_local",
    "sync_replicas_op",
]

logger = logging.getLogger("towerkit.trainers")

GradsAndVars = list[tuple[Any, Any]]
"""One tower's ``(gradient, variable)`` pairs."""


# -- gradients -------------------------------------------------------------------------------


def align_tower_grads(tower_grads: Sequence[GradsAndVars]) -> list[list[tuple[Any, Any]]]:
    """One row per variable of tower 0: that variable's (gradient, variable) in every tower.

    Variables pair by name without the ``tower<k>/`` scope, so shared variables
    and replicated copies both pair up.

    Raises:
        TowerVariableMismatchError: the towers trained different variables.
    """
    names = [[v.op.name for _, v in grads] for grads in tower_grads]
    order = match_tower_variables(names)
    return [[tower_grads[t][row[t]] for t in range(len(tower_grads))] for row in order]


def _check_grad_list(all_grads: Any, what: str) -> list[GradsAndVars]:
    if isinstance(all_grads, (str, bytes)) or not isinstance(all_grads, Sequence) or not all_grads:
        msg = (
            f"{what!r} must be a non-empty list with one list of (gradient, variable) pairs "
            f"per tower; got {all_grads!r}"
        )
        raise TypeError(msg)
    return [list(g) for g in all_grads]


def aggregate_grads(
    all_grads: Sequence[GradsAndVars],
    colocation: bool = True,
    devices: Sequence[str] | None = None,
    average: bool = True,
) -> GradsAndVars:
    """Sum or average each shared variable's gradients over the towers (parameter-server style).

    Args:
        all_grads: one list of (gradient, variable) pairs per tower, the towers
            sharing their variables (as `DataParallelBuilder.call_for_each_tower`
            returns them without ``use_vs``); each tower may list them in any order.
        colocation: compute each variable's sum on the variable's device.
        devices: compute the sums on these devices, in turn (variable ``i`` on
            ``devices[i % len(devices)]``); not together with `colocation`.
        average: divide the sum by the number of towers.

    Returns:
        One (gradient, variable) pair per variable, in tower 0's order: what one
        ``optimizer.apply_gradients`` applies.

    Raises:
        TowerVariableMismatchError: the towers have gradients for different variables.
        ValueError: both `colocation` and `devices`.
    """
    grads = _check_grad_list(all_grads, "all_grads")
    if colocation and devices:
        msg = "give 'colocation=True' or 'devices', not both"
        raise ValueError(msg)
    rows = align_tower_grads(grads)
    factor = 1.0 / len(grads) if average else 1.0
    out = []
    with tf1.name_scope("aggregate_grads"):
        for i, row in enumerate(rows):
            var = row[0][1]
            if colocation:
                device: Any = var.device
            elif devices:
                device = devices[i % len(devices)]
            else:
                device = None
            with tf1.device(device):
                total = sum_gradients([g for g, _ in row])
                out.append((scale_gradient(total, factor), var))
    return out


def allreduce_grads(
    all_grads: Sequence[GradsAndVars],
    devices: Sequence[str],
    average: bool = True,
    mode: str | None = None,
) -> list[GradsAndVars]:
    """All-reduce the gradients of replicated towers: every tower gets the sum (or mean) of all.

    Args:
        all_grads: one list of (gradient, variable) pairs per tower, each tower
            holding its own copy of the variables (as
            `DataParallelBuilder.call_for_each_tower` with ``use_vs`` returns them).
        devices: the towers' devices, in tower order.
        average: divide the sums by the number of towers.
        mode: ``'cpu'``, ``'hierarchical'``, ``'nccl'`` or None for the automatic
            choice (as `SyncMultiGPUTrainerReplicated`'s ``mode``; NCCL where it
            cannot run falls back to ``'cpu'`` with a warning).

    Returns:
        One list per tower of (reduced gradient, that tower's variable), in tower 0's
        variable order, each gradient on its tower's device: apply tower ``k``'s list
        to tower ``k``'s copy (one ``apply_gradients`` over all lists keeps the copies equal).

    Raises:
        TowerVariableMismatchError: the towers have gradients for different variables.
        ValueError: not one device per tower, or an unknown mode.
    """
    grads = _check_grad_list(all_grads, "all_grads")
    n = len(grads)
    if isinstance(devices, str) or len(devices) != n:
        msg = f"'devices' must hold one device per tower ({n}); got {devices!r}"
        raise ValueError(msg)
    gpu_towers = sum(1 for d in devices if device_key(d)[2] == "GPU")
    choice = choose_allreduce_mode(mode, n, gpu_towers, nccl_available())
    if choice.fallback:
        logger.warning("all-reduce: %s", choice.reason)
    else:
        (logger.info if mode is None else logger.debug)("all-reduce: %s", choice.reason)
    rows = align_tower_grads(grads)
    reduced = allreduce([[g for g, _ in row] for row in rows], list(devices), choice.mode, average)
    return [[(reduced[i][t], rows[i][t][1]) for i in range(len(rows))] for t in range(n)]


# -- replicated variables --------------------------------------------------------------------


def make_replicas_local(graph: Any, num_towers: int, first: int = 1) -> list[Any]:
    """Move the variables of towers ``first..num_towers-1`` into ``LOCAL_VARIABLES`` only.

    After it, the global, trainable and model-variable collections hold one copy of
    the model (as a single tower's graph does), so savers, restores and summaries
    see the master copy only; the replicas (``tower<k>/...``, their optimizer slots
    included) are still initialized with the local variables. Call it after the
    optimizer's ``apply_gradients``, which creates the slots.

    Args:
        graph: the graph (e.g. ``trainer.graph``).
        num_towers: how many towers were built.
        first: the first tower whose variables move.

    Returns:
        The replica variables moved, in graph order.
    """
    keys = (
        tf1.GraphKeys.GLOBAL_VARIABLES,
        tf1.GraphKeys.TRAINABLE_VARIABLES,
        tf1.GraphKeys.MODEL_VARIABLES,
    )
    moved: list[Any] = []
    seen: set[int] = set()
    for key in keys:
        ref = graph.get_collection_ref(key)
        keep = []
        for v in ref:
            k = replica_index(v.op.name)
            if k is not None and first <= k < num_towers:
                if id(v) not in seen:
                    seen.add(id(v))
                    moved.append(v)
            else:
                keep.append(v)
        ref[:] = keep
    local = graph.get_collection_ref(tf1.GraphKeys.LOCAL_VARIABLES)
    have = {id(v) for v in local}
    local.extend(v for v in moved if id(v) not in have)
    return moved


def copy_masters_op(masters: Sequence[Any], replicas: Sequence[Any], name: str) -> Any:
    """An op copying each master variable into its replicas (paired by name); a no-op when none.

    Replicas without a master are left alone, with a warning.
    """
    sources = replica_sources([v.op.name for v in masters], [v.op.name for v in replicas])
    assigns, orphans = [], []
    for replica, src in zip(replicas, sources):
        if src is None:
            orphans.append(replica.op.name)
            continue
        master = masters[src]
        with tf1.device(replica.device):
            assigns.append(replica.assign(master.read_value(), read_value=False))
    if orphans:
        logger.warning(
            "tower variables without a tower-0 counterpart are not synchronized: %s", orphans
        )
    with tf1.name_scope(None):
        return tf.group(*assigns, name=name)


def sync_replicas_op(name: str = "sync_replicas", graph: Any = None) -> Any:
    """An op copying tower 0's variables into every replica (``tower<k>/...``, k >= 1).

    Run it once after the variables are initialized or restored, so the copies
    start equal, and (optionally) after each epoch, so rounding differences do not
    accumulate: e.g. ``RunOp(op, run_before=True, run_as_trigger=True)``. The
    replicas are paired with the global variables by name without the ``tower<k>/``
    scope, optimizer slots included.

    Args:
        name: the op's name.
        graph: the graph; default the current default graph.
    """
    graph = graph or tf1.get_default_graph()
    with graph.as_default():
        everything = graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES) + graph.get_collection(
            tf1.GraphKeys.LOCAL_VARIABLES
        )
        masters: list[Any] = []
        replicas: list[Any] = []
        seen: set[int] = set()
        for v in everything:
            if id(v) in seen:
                continue
            seen.add(id(v))
            k = replica_index(v.op.name)
            (replicas if k is not None and k >= 1 else masters).append(v)
        return copy_masters_op(masters, replicas, name)
