"""The export lib's errors, each refining a builtin."""

from __future__ import annotations


class UnknownTensorError(ValueError):
    """An output name names no tensor of the inference tower."""


class InferenceOptimizationError(RuntimeError):
    """TensorFlow's optimize-for-inference cannot transform the frozen graph."""
