"""A cluster process's server, started where the scheduler's environment places it.

.. versionadded:: 0.2
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from towerkit.towers import resolve_devices, session_config_for_devices
from towerkit.towers.compat import tf1
from towerkit.trainers.parallel._placement import ClusterPlacement, tf_config_placement
from towerkit.trainers.parallel._slurm import slurm_placement, slurm_step

__all__ = ["cluster_placement", "cluster_server"]


def cluster_placement(environ: Mapping[str, str] | None = None) -> ClusterPlacement:
    """Where this process runs in its TensorFlow cluster, from the scheduler's environment.

    ``TF_CONFIG`` first (Kubernetes' TFJob, Vertex AI, SageMaker: `tf_config_placement`),
    else a SLURM step (``srun``: `slurm_placement` over `slurm_step`, with
    ``TOWERKIT_PS_TASKS`` parameter servers, 1 by default, and ``TOWERKIT_CLUSTER_PORT``
    as the first port when set).

    Args:
        environ: the environment (default ``os.environ``).

    Raises:
        ValueError: neither is there, or what is there is malformed (the message names
            the variable).

    .. versionadded:: 0.2
    """
    env = os.environ if environ is None else environ
    if env.get("TF_CONFIG", "").strip():
        return tf_config_placement(env["TF_CONFIG"])
    step = slurm_step(env)
    if step is None:
        msg = (
            "no cluster given and none in the environment: set TF_CONFIG (as TFJob, "
            "Vertex AI and SageMaker do), run under SLURM's srun, or pass a "
            "tf.compat.v1.train.Server"
        )
        raise ValueError(msg)
    num_ps, port = env.get("TOWERKIT_PS_TASKS", "1"), env.get("TOWERKIT_CLUSTER_PORT")
    for name, value in (("TOWERKIT_PS_TASKS", num_ps), ("TOWERKIT_CLUSTER_PORT", port)):
        if value is not None and not value.isdigit():
            msg = f"{name} must be an integer; got {value!r}"
            raise ValueError(msg)
    return slurm_placement(step, int(num_ps), None if port is None else int(port))


def cluster_server(gpus: int | Sequence[int] = 0, placement: ClusterPlacement | None = None) -> Any:
    """Start this process's ``tf.compat.v1.train.Server`` where `placement` puts it.

    A worker's server gets the devices of `gpus` (logical CPU devices without GPUs, as
    `session_config_for_devices` makes them); a parameter server's sees no GPU.

    Args:
        gpus: a worker's towers, as the trainer takes them.
        placement: default `cluster_placement` of this process's environment.

    .. versionadded:: 0.2
    """
    placement = cluster_placement() if placement is None else placement
    if placement.job == "ps":
        config = tf1.ConfigProto(device_count={"GPU": 0})
    else:
        config = session_config_for_devices(resolve_devices(gpus))
        config.gpu_options.allow_growth = True
    cluster = tf1.train.ClusterSpec(placement.cluster_dict())
    return tf1.train.Server(
        cluster, job_name=placement.job, task_index=placement.task, config=config
    )


def placed_server(server: Any, gpus: int | Sequence[int], job: str = "worker") -> Any:
    """`server`, or when None the server of `job` the environment places this process in."""
    if server is not None:
        return server
    placement = cluster_placement()
    if placement.job != job:
        does = "calls serve_parameters()" if placement.job == "ps" else "runs a trainer"
        msg = (
            f"this process is {placement.origin}, job {placement.job!r} task "
            f"{placement.task}: it {does}, not {'a trainer' if job == 'worker' else 'serve_parameters()'}"
        )
        raise ValueError(msg)
    return cluster_server(gpus, placement)
