"""Plumbing of the callbacks lib for towerkit's own libs and tools; no stability promise.

What sibling libs (the trainers, the conformance suite) and the command-line tools
(``timeline``) share with this lib's shells, so that each list and each builder has
one definition. Names here may change or go between any two releases without
deprecation: programs should use the names of ``towerkit.callbacks`` instead.
Importing this module never loads TensorFlow.
"""

from towerkit.callbacks._loop import GATE_KINDS, GATED_KINDS, TRIGGER_KINDS
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

__all__ = [
    "GATED_KINDS",
    "GATE_KINDS",
    "SHELL_RECORDS",
    "TRIGGER_KINDS",
    "ShellRecord",
    "callback_record",
    "gate_kinds",
    "gated_record",
    "periodic_callback_record",
    "periodic_trigger_record",
    "scheduled_setter_record",
]
