"""The conformance suite's errors."""

from __future__ import annotations


class EntryError(ValueError):
    """A trainer entry (``--trainer MODULE:FACTORY``) that cannot be loaded or is malformed."""


class ConformanceError(AssertionError):
    """A trainer broke a documented semantic; the message names the semantic and the rule."""


class LaunchError(RuntimeError):
    """A multi-process job (horovod, distributed) failed or timed out before reporting."""


# Every error here is public: tracebacks and pickles name it where users import it from
# (``towerkit.<lib>.SomeError``), not by this private module.
for _error in [
    v for v in list(globals().values()) if isinstance(v, type) and v.__module__ == __name__
]:
    _error.__module__ = __name__.rpartition(".")[0]
del _error
