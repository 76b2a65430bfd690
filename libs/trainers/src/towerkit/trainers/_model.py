"""`ModelDesc`: a model described by its inputs, its graph-building function and its optimizer."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from towerkit.towers import get_current_tower_context, validate_input_signature


class ModelDescBase:
    """A model for inference or training: its input signature and how to build its graph.

    Subclasses override ``inputs()`` and ``build_graph(*inputs)``.
    """

    def inputs(self) -> list[tf.TensorSpec]:
        """The model's inputs: a list of named ``tf.TensorSpec``.

        Override this; it is called once per model.
        """
        msg = (
            f"{type(self).__name__} must override inputs() to return a list of named tf.TensorSpec"
        )
        raise TypeError(msg)

    def get_input_signature(self) -> tuple[tf.TensorSpec, ...]:
        """``inputs()``, validated and cached.

        Raises:
            TypeError: ``inputs()`` is not overridden or returns something else than
                ``tf.TensorSpec``s.
            ValueError: unnamed or repeated names.
        """
        cached = self.__dict__.get("_input_signature")
        if cached is None:
            specs = self.inputs()
            if isinstance(specs, tf.TensorSpec):
                specs = [specs]
            cached = self.__dict__["_input_signature"] = validate_input_signature(specs)
        return cached

    @property
    def input_names(self) -> list[str]:
        """The names of the inputs, in order."""
        return [s.name for s in self.get_input_signature()]

    @property
    def training(self) -> bool:
        """Whether the tower being built is a training tower (as ``build_graph`` reads it).

        True in the training tower(s), False in inference towers (``InferenceRunner``,
        predictors, exports): the current tower context's ``is_training``.

        Raises:
            RuntimeError: read outside a tower context (outside ``build_graph``).

        .. versionadded:: 0.2
        """
        ctx = get_current_tower_context()
        if ctx is None:
            msg = (
                f"{type(self).__name__}.training is read outside a tower context: it is only "
                "defined while build_graph runs (in a training or an inference tower)"
            )
            raise RuntimeError(msg)
        return ctx.is_training

    def build_graph(self, *args: Any) -> Any:
        """Build the model from one tensor per input (in the order of ``inputs()``).

        Override this. In a training tower it returns the cost to minimize (a scalar
        tensor). It is a tower function: it may be called several times (training and
        inference towers) and must follow the tower rules.
        """
        del args
        msg = f"{type(self).__name__} must override build_graph(*inputs)"
        raise TypeError(msg)


class ModelDesc(ModelDescBase):
    """A trainable model: ``inputs()``, ``build_graph(*inputs) -> cost`` and ``optimizer()``."""

    def optimizer(self) -> Any:
        """The optimizer to minimize the cost with (a ``tf.compat.v1.train.Optimizer``).

        Override this; it is called once per model, through ``get_optimizer``.
        """
        msg = f"{type(self).__name__} must override optimizer() to return a tf.compat.v1.train.Optimizer"
        raise TypeError(msg)

    def get_optimizer(self) -> Any:
        """``optimizer()``, called once and cached: every caller gets the same optimizer.

        Raises:
            TypeError: ``optimizer()`` returned something without ``compute_gradients``
                and ``apply_gradients`` (not a ``tf.compat.v1.train.Optimizer``).
        """
        if "_optimizer" not in self.__dict__:
            opt = self.optimizer()
            missing = [
                m
                for m in ("compute_gradients", "apply_gradients")
                if not callable(getattr(opt, m, None))
            ]
            if missing:
                msg = (
                    f"{type(self).__name__}.optimizer() must return a "
                    f"tf.compat.v1.train.Optimizer; got {type(opt).__name__} {opt!r:.60}, "
                    f"which has no {' or '.join(missing)}"
                )
                raise TypeError(msg)
            self.__dict__["_optimizer"] = opt
        return self.__dict__["_optimizer"]
