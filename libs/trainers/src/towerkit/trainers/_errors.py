"""The errors of the trainers, the configs and the log directory."""

from __future__ import annotations


class LogdirNotEmptyError(FileExistsError):
    """A fresh run was asked to write into a log directory that already holds files."""


class TrainerStateError(RuntimeError):
    """A trainer method was called in the wrong phase (e.g. registering a callback after setup)."""
