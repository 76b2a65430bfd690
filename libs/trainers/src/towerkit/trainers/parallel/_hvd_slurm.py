"""Horovod ranks started by ``srun``: the launcher's environment and rendezvous, from the step.

.. versionadded:: 0.2
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import MutableMapping
from typing import Any

from towerkit.trainers.parallel._slurm import horovod_environment, slurm_step

logger = logging.getLogger("towerkit.trainers")

LAUNCHED = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
"""Variables a launcher (horovodrun, mpirun) sets: where one is, SLURM's step is not read."""

START_WITHIN = 600.0
"""Seconds the ranks of a step may take to start, from the first to the last (TensorFlow's
import and the graph; minutes on a loaded machine)."""

_servers: list[Any] = []
"""The rendezvous server this process runs (rank 0), kept for the life of the process."""


def join_slurm_step(environ: MutableMapping[str, str] | None = None) -> bool:
    """Before ``hvd.init()``: make a task started by ``srun`` a horovod rank of its step.

    Outside a SLURM step, or under a launcher (`LAUNCHED`), nothing changes. Otherwise the
    variables of `horovod_environment` are set (``TOWERKIT_CLUSTER_PORT`` moves the
    ports, as for the cluster trainers) and rank 0 starts horovod's rendezvous server,
    which every rank's ``hvd.init()`` reaches.

    Returns:
        Whether the step was joined.
    """
    env = os.environ if environ is None else environ
    if any(name in env for name in LAUNCHED):
        return False
    step = slurm_step(env)
    if step is None:
        return False
    port = env.get("TOWERKIT_CLUSTER_PORT")
    if port is not None and not port.isdigit():
        msg = f"TOWERKIT_CLUSTER_PORT must be an integer; got {port!r}"
        raise ValueError(msg)
    values = dict(horovod_environment(step, None if port is None else int(port)))
    address = f"{values['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:{values['HOROVOD_GLOO_RENDEZVOUS_PORT']}"
    if step.procid == 0:
        _serve_rendezvous(step, int(values["HOROVOD_GLOO_RENDEZVOUS_PORT"]))
    # srun starts the tasks, not their TensorFlow: one may reach hvd.init() minutes after
    # another, past gloo's wait (30 s) and its HTTP retries; so every rank first waits for
    # all the others here, where the bound is ours
    _all_started(address, step.procid, step.ntasks, START_WITHIN)
    env.update(values)
    logger.info(
        "horovod: rank %s of %s from SLURM job %s (rendezvous %s:%s)",
        values["HOROVOD_RANK"],
        values["HOROVOD_SIZE"],
        step.job_id,
        values["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
        values["HOROVOD_GLOO_RENDEZVOUS_PORT"],
    )
    return True


def _serve_rendezvous(step: Any, port: int) -> None:
    # horovod's own server and slot records, as horovodrun starts them (its find_port
    # would pick a random port, which the other ranks could not know)
    from horovod.runner.common.util.hosts import SlotInfo
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    plan = []
    for rank in range(step.ntasks):
        values = dict(horovod_environment(_as_rank(step, rank)))
        plan.append(
            SlotInfo(
                hostname=values["HOROVOD_HOSTNAME"],
                rank=rank,
                local_rank=int(values["HOROVOD_LOCAL_RANK"]),
                cross_rank=int(values["HOROVOD_CROSS_RANK"]),
                size=step.ntasks,
                local_size=int(values["HOROVOD_LOCAL_SIZE"]),
                cross_size=int(values["HOROVOD_CROSS_SIZE"]),
            )
        )
    server = RendezvousHTTPServer(("0.0.0.0", port), RendezvousHandler, 0)
    server.init(plan)
    threading.Thread(target=server.serve_forever, name="horovod-rendezvous", daemon=True).start()
    _servers.append(server)


def _all_started(address: str, rank: int, size: int, within: float) -> None:
    """Say rank `rank` started (a key on the rendezvous server); wait for every rank's."""
    end = time.monotonic() + within
    url = f"http://{address}/towerkit_started"
    told = False
    while True:
        try:
            if not told:
                put = urllib.request.Request(f"{url}/{rank}", data=b"1", method="PUT")
                urllib.request.urlopen(put, timeout=5).close()
                told = True
            missing = [r for r in range(size) if not _has_key(f"{url}/{r}")]
        except OSError:  # the server not up yet (rank 0 still starting), or busy
            missing = None
        if missing == []:
            return
        if time.monotonic() > end:
            what = (
                "the rendezvous server never answered"
                if missing is None
                else f"ranks {missing} never started"
            )
            msg = f"horovod in SLURM step (rank {rank} of {size}, rendezvous {address}): {what} within {within:g} s"
            raise TimeoutError(msg)
        time.sleep(0.5)


def _has_key(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return False
        raise
    return True


def _as_rank(step: Any, rank: int) -> Any:
    import attrs

    return attrs.evolve(step, procid=rank, localid=step.task_slots()[rank][1])
