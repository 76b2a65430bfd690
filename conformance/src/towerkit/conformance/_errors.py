"""The conformance suite's errors."""

from __future__ import annotations


class EntryError(ValueError):
    """A trainer entry (``--trainer MODULE:FACTORY``) that cannot be loaded or is malformed."""


class ConformanceError(AssertionError):
    """A trainer broke a documented semantic; the message names the semantic and the rule."""


class LaunchError(RuntimeError):
    """A multi-process job (horovod, distributed) failed or timed out before reporting."""
