"""The built-in rows: a factory and the capabilities of every trainer towerkit ships."""

from __future__ import annotations

from typing import Any

from towerkit.conformance._entries import Capabilities, TrainerEntry, available

MULTI_DEVICE_TOWERS = 2
"""Towers of the multi-device rows: 2 logical CPU devices, or GPUs 0 and 1 where present."""


def simple_trainer() -> Any:
    """``SimpleTrainer()``."""
    from towerkit.trainers import SimpleTrainer

    return SimpleTrainer()


def noop_trainer() -> Any:
    """``NoOpTrainer()``."""
    from towerkit.trainers import NoOpTrainer

    return NoOpTrainer()


def replicated_trainer() -> Any:
    """``SyncMultiGPUTrainerReplicated(2)`` (averaged gradients, automatic all-reduce mode)."""
    from towerkit.trainers import SyncMultiGPUTrainerReplicated

    return SyncMultiGPUTrainerReplicated(MULTI_DEVICE_TOWERS)


def replicated_sum_trainer() -> Any:
    """``SyncMultiGPUTrainerReplicated(2, average=False)``: summed gradients."""
    from towerkit.trainers import SyncMultiGPUTrainerReplicated

    return SyncMultiGPUTrainerReplicated(MULTI_DEVICE_TOWERS, average=False)


def parameter_server_trainer() -> Any:
    """``SyncMultiGPUTrainerParameterServer(2)``."""
    from towerkit.trainers import SyncMultiGPUTrainerParameterServer

    return SyncMultiGPUTrainerParameterServer(MULTI_DEVICE_TOWERS)


def async_trainer() -> Any:
    """``AsyncMultiGPUTrainer(2)`` (each tower's gradients scaled by 1/2)."""
    from towerkit.trainers import AsyncMultiGPUTrainer

    return AsyncMultiGPUTrainer(MULTI_DEVICE_TOWERS)


def sync_default_trainer() -> Any:
    """``SyncMultiGPUTrainer(2)``: the default synchronous multi-device trainer."""
    from towerkit.trainers import SyncMultiGPUTrainer

    return SyncMultiGPUTrainer(MULTI_DEVICE_TOWERS)


def horovod_trainer() -> Any:
    """``HorovodTrainer()`` (averaged gradients), one per rank of a horovod job."""
    from towerkit.trainers import HorovodTrainer

    return HorovodTrainer()


CHIEF_WAIT_SECONDS = 120.0
"""How long a non-chief cluster worker waits for the chief to initialize the variables."""


def distributed_replicated_trainer() -> Any:
    """``DistributedTrainerReplicated(2, server)`` in a worker of the suite's cluster job."""
    from towerkit.conformance._cluster import cluster_server
    from towerkit.trainers import DistributedTrainerReplicated

    trainer = DistributedTrainerReplicated(MULTI_DEVICE_TOWERS, cluster_server())
    trainer.WAIT_FOR_CHIEF_SECONDS = CHIEF_WAIT_SECONDS
    return trainer


def distributed_ps_trainer() -> Any:
    """``DistributedTrainerParameterServer(2, server)`` in a worker of the suite's cluster job."""
    from towerkit.conformance._cluster import cluster_server
    from towerkit.trainers import DistributedTrainerParameterServer

    trainer = DistributedTrainerParameterServer(MULTI_DEVICE_TOWERS, cluster_server())
    trainer.WAIT_FOR_CHIEF_SECONDS = CHIEF_WAIT_SECONDS
    return trainer


_HERE = "towerkit.conformance._factories"
_TWO = MULTI_DEVICE_TOWERS

BUILTIN_ENTRIES: tuple[TrainerEntry, ...] = (
    TrainerEntry(name="SimpleTrainer", factory=f"{_HERE}:simple_trainer"),
    TrainerEntry(
        name="NoOpTrainer",
        factory=f"{_HERE}:noop_trainer",
        capabilities=Capabilities(trains=False, steps_per_execution=False),
    ),
    TrainerEntry(
        name="SyncMultiGPUTrainerReplicated",
        factory=f"{_HERE}:replicated_trainer",
        capabilities=Capabilities(num_towers=_TWO, variables="replicated"),
        requires="SyncMultiGPUTrainerReplicated",
    ),
    TrainerEntry(
        name="SyncMultiGPUTrainerReplicated-sum",
        factory=f"{_HERE}:replicated_sum_trainer",
        capabilities=Capabilities(num_towers=_TWO, variables="replicated", gradients="sum"),
        requires="SyncMultiGPUTrainerReplicated",
    ),
    TrainerEntry(
        name="SyncMultiGPUTrainerParameterServer",
        factory=f"{_HERE}:parameter_server_trainer",
        capabilities=Capabilities(num_towers=_TWO),
        requires="SyncMultiGPUTrainerParameterServer",
    ),
    TrainerEntry(
        name="SyncMultiGPUTrainer",
        factory=f"{_HERE}:sync_default_trainer",
        capabilities=Capabilities(num_towers=_TWO),
        requires="SyncMultiGPUTrainer",
    ),
    TrainerEntry(
        name="AsyncMultiGPUTrainer",
        factory=f"{_HERE}:async_trainer",
        capabilities=Capabilities(num_towers=_TWO, synchronous=False),
        requires="AsyncMultiGPUTrainer",
    ),
    TrainerEntry(
        name="HorovodTrainer",
        factory=f"{_HERE}:horovod_trainer",
        capabilities=Capabilities(launcher="horovod", processes=2, steps_per_execution=False),
        requires="HorovodTrainer",
    ),
    TrainerEntry(
        name="DistributedTrainerReplicated",
        factory=f"{_HERE}:distributed_replicated_trainer",
        capabilities=Capabilities(
            num_towers=_TWO,
            variables="replicated",
            synchronous=False,
            launcher="tf-distributed",
            processes=2,
            steps_per_execution=False,
        ),
        requires="DistributedTrainerReplicated",
    ),
    TrainerEntry(
        name="DistributedTrainerParameterServer",
        factory=f"{_HERE}:distributed_ps_trainer",
        capabilities=Capabilities(
            num_towers=_TWO,
            synchronous=False,
            launcher="tf-distributed",
            processes=2,
            steps_per_execution=False,
        ),
        requires="DistributedTrainerParameterServer",
    ),
)
"""Every trainer towerkit ships, one row each; adding a trainer is adding a line."""


def builtin_entries() -> tuple[TrainerEntry, ...]:
    """The built-in rows whose trainers the installed ``towerkit.trainers`` has."""
    return tuple(e for e in BUILTIN_ENTRIES if available(e))


def missing_builtin_entries() -> tuple[TrainerEntry, ...]:
    """The built-in rows whose trainers the installed ``towerkit.trainers`` lacks."""
    return tuple(e for e in BUILTIN_ENTRIES if not available(e))
