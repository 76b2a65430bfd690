"""Plumbing of the callbacks lib for towerkit's own libs and tools; no stability promise.

What sibling libs (the trainers, the conformance suite) and the command-line tools
(``timeline``, ``install_horovod``) share with this lib's shells, so that each list and
each builder has one definition: the trigger kinds and gated methods, the builders of
the trigger shells' records, the loop event of a trainer (``trainer_event``), the checks
of several steps per session call, ``stop_process_group``, the console stream that
never ends a run (``CONSOLE``, ``console_lines``), the input vocabulary
(``input_kind``, ``DatapointLayout``, ``conform_datapoint``) that training and inference
inputs share, the numbers tensorpack's entry points took (``whole_number``,
``real_number``), and the pure core of parallel Python input (how a source is split
across worker processes, the ordered merge, the workers' seeds). Names here may change or
go between any two releases without deprecation: programs should use the names of
``towerkit.callbacks`` instead.
Importing this module never loads TensorFlow.
"""

from towerkit.callbacks._console_stream import CONSOLE, ConsoleStream, console_lines
from towerkit.callbacks._datapoints import (
    INPUT_KINDS,
    INPUT_SOURCE_METHODS,
    DatapointLayout,
    cast_component,
    conform_datapoint,
    datapoint_tuple,
    describe_value,
    input_kind,
    timeout_message,
)
from towerkit.callbacks._loop import (
    GATE_KINDS,
    GATED_KINDS,
    TRIGGER_KINDS,
    check_steps_per_execution,
)
from towerkit.callbacks._multistep import coarse_step_faults
from towerkit.callbacks._numbers import real_number, whole_number
from towerkit.callbacks._parallel_core import (
    SPLITS,
    START_METHODS,
    MergeState,
    StartLimit,
    check_worker_limits,
    choose_split,
    keeps_position,
    merge_after_datapoint,
    merge_after_end,
    pick_start_method,
    room_for_workers,
    round_robin,
    shard_indices,
    start_merge,
    worker_seed,
)
from towerkit.callbacks._parallel_pool import PoolStats
from towerkit.callbacks._positions import (
    POSITIONS_FILENAME,
    SavedPosition,
    dumps_positions,
    loads_positions,
    merge_positions,
    read_positions,
    write_positions,
)
from towerkit.callbacks._procs import stop_process_group
from towerkit.callbacks._shell_records import (
    SHELL_RECORDS,
    ShellRecord,
    callback_record,
    gate_kinds,
    gated_record,
    periodic_callback_record,
    periodic_trigger_record,
    scheduled_setter_record,
)
from towerkit.callbacks._timeline import timeline_entry
from towerkit.callbacks._triggers import periodic_record, trainer_event

__all__ = [
    "real_number",
    "whole_number",
    "POSITIONS_FILENAME",
    "SavedPosition",
    "dumps_positions",
    "loads_positions",
    "merge_positions",
    "read_positions",
    "write_positions",
    "CONSOLE",
    "ConsoleStream",
    "console_lines",
    "SPLITS",
    "START_METHODS",
    "MergeState",
    "PoolStats",
    "StartLimit",
    "check_worker_limits",
    "choose_split",
    "keeps_position",
    "merge_after_datapoint",
    "merge_after_end",
    "pick_start_method",
    "room_for_workers",
    "round_robin",
    "shard_indices",
    "start_merge",
    "worker_seed",
    "GATED_KINDS",
    "INPUT_KINDS",
    "INPUT_SOURCE_METHODS",
    "GATE_KINDS",
    "SHELL_RECORDS",
    "TRIGGER_KINDS",
    "DatapointLayout",
    "ShellRecord",
    "callback_record",
    "check_steps_per_execution",
    "coarse_step_faults",
    "cast_component",
    "conform_datapoint",
    "datapoint_tuple",
    "describe_value",
    "gate_kinds",
    "gated_record",
    "input_kind",
    "timeout_message",
    "periodic_callback_record",
    "periodic_record",
    "periodic_trigger_record",
    "scheduled_setter_record",
    "stop_process_group",
    "timeline_entry",
    "trainer_event",
]
