"""The export lib's errors, each refining a builtin."""

from __future__ import annotations


class UnknownTensorError(ValueError):
    """An output name names no tensor of the inference tower."""


class InferenceOptimizationError(RuntimeError):
    """TensorFlow's optimize-for-inference cannot transform the frozen graph."""


# Every error here is public: tracebacks and pickles name it where users import it from
# (``towerkit.<lib>.SomeError``), not by this private module.
for _error in [
    v for v in list(globals().values()) if isinstance(v, type) and v.__module__ == __name__
]:
    _error.__module__ = __name__.rpartition(".")[0]
del _error
