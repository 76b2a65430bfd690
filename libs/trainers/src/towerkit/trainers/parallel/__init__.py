"""The trainers lib's data-parallel trainers and their machinery.

Internal: every public name of these modules is imported from `towerkit.trainers`
(``from towerkit.trainers import HorovodTrainer``), and this package exports nothing
of its own, so a name has one public path. To add a data-parallel trainer, build its
graph from ``_builder`` (towers on devices) and ``_grad_sync`` (gradients, replicas)
and its session from ``_trainer_parts``, as the trainers here do.

- ``_dataparallel``: pure choices (all-reduce mode, tower variable matching, devices).
- ``_builder``: towers on devices, and sessions that have those devices.
- ``_allreduce``, ``_grad_sync``: summing and averaging gradients, replicated variables.
- ``_trainer_parts``: session initializers, per-epoch ops, who owns the log directory.
- ``_multigpu``: the single-process multi-device trainers.
- ``_health_core``, ``_health``, ``_cluster``, ``_distributed``: TensorFlow-cluster trainers,
  task liveness (a task's health: pure records and transition; the watch thread).
- ``_horovod``, ``_hvdrun``: the Horovod trainer and its launcher.
- ``_elastic_core``, ``_elastic``: elastic Horovod training (pure decisions, graph state).
"""
