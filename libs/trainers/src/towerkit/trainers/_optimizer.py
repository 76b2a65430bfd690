"""Optimizer wrappers: gradient processors, post-update ops, and gradient accumulation."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.callbacks.plumbing import whole_number
from towerkit.towers.compat import tf1
from towerkit.trainers._gradproc import GradientProcessor, chain

__all__ = [
    "ProxyOptimizer",
    "PostProcessOptimizer",
    "VariableAssignmentOptimizer",
    "AccumGradOptimizer",
    "apply_grad_processors",
]


_Optimizer: Any = tf1.train.Optimizer


def _check_optimizer(opt: Any) -> None:
    if not isinstance(opt, tf1.train.Optimizer):
        msg = (
            f"'opt' must be a tf.compat.v1.train.Optimizer (e.g. tf.compat.v1.train.AdamOptimizer); "
            f"got {type(opt).__name__}"
        )
        raise TypeError(msg)


class ProxyOptimizer(_Optimizer):  # type: ignore[misc]  # TensorFlow has no types
    """An optimizer that forwards everything to another one; the base of optimizer wrappers.

    ``compute_gradients``, ``apply_gradients``, ``get_slot``, ``get_slot_names`` and
    ``variables`` go to the wrapped optimizer; ``minimize`` is the base class's, so it
    goes through this wrapper's ``compute_gradients`` and ``apply_gradients``.

    Args:
        opt: the wrapped ``tf.compat.v1.train.Optimizer``.
        name: name of this wrapper, used for its own ops and variables.

    Raises:
        TypeError: `opt` is not a ``tf.compat.v1.train.Optimizer``.
    """

    def __init__(self, opt: Any, name: str = "ProxyOptimizer") -> None:
        _check_optimizer(opt)
        super().__init__(False, name)
        self._opt = opt

    @property
    def opt(self) -> Any:
        """The wrapped optimizer."""
        return self._opt

    def compute_gradients(self, *args: Any, **kwargs: Any) -> Any:
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, *args: Any, **kwargs: Any) -> Any:
        return self._opt.apply_gradients(*args, **kwargs)

    def get_slot(self, *args: Any, **kwargs: Any) -> Any:
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> Any:
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self) -> list[Any]:
        variables: list[Any] = self._opt.variables()
        return variables

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._opt!r})"


class _GradProcOptimizer(ProxyOptimizer):
    """Runs a chain of gradient processors in ``apply_gradients``."""

    def __init__(self, opt: Any, procs: Sequence[GradientProcessor]) -> None:
        super().__init__(opt, name=getattr(opt, "_name", "ProxyOptimizer"))
        self._chain = chain(*procs)

    @property
    def gradprocs(self) -> tuple[GradientProcessor, ...]:
        """The processors, in the order they run."""
        return self._chain.procs

    def apply_gradients(
        self, grads_and_vars: Any, global_step: Any = None, name: Any = None
    ) -> Any:
        grads = self._chain.process(list(grads_and_vars))
        return self._opt.apply_gradients(grads, global_step=global_step, name=name)

    def __repr__(self) -> str:
        return f"apply_grad_processors({self._opt!r}, {list(self._chain.procs)!r})"


def apply_grad_processors(opt: Any, gradprocs: Sequence[GradientProcessor]) -> ProxyOptimizer:
    """Wrap `opt` so that `gradprocs` process the gradients before each update.

    The processors run in ``apply_gradients``, in the order given, on the gradients the
    trainer applies (after averaging across towers, in multi-tower trainers).

    Args:
        opt: a ``tf.compat.v1.train.Optimizer``.
        gradprocs: gradient processors, applied left to right.

    Returns:
        A :class:`ProxyOptimizer` around `opt`.

    Raises:
        TypeError: `opt` is not an optimizer, or `gradprocs` is not a list of processors.
    """
    _check_optimizer(opt)
    if isinstance(gradprocs, GradientProcessor):
        msg = (
            f"'gradprocs' must be a list of gradient processors; got a single "
            f"{type(gradprocs).__name__}: wrap it in a list"
        )
        raise TypeError(msg)
    if isinstance(gradprocs, (str, bytes)) or not isinstance(gradprocs, Sequence):
        msg = f"'gradprocs' must be a list of gradient processors; got {type(gradprocs).__name__}"
        raise TypeError(msg)
    return _GradProcOptimizer(opt, list(gradprocs))


class PostProcessOptimizer(ProxyOptimizer):
    """An optimizer that runs ``func(var)`` for each updated variable after the update.

    Args:
        opt: the wrapped optimizer.
        func: ``tf.Variable -> tf.Operation or None``, called once per updated variable
            (those with a gradient) while building the graph; the ops it returns run
            after the update, in the same step.
        colocate: build each variable's op on the device of the variable.

    Raises:
        TypeError: `opt` is not an optimizer, or `func` is not callable.
    """

    def __init__(self, opt: Any, func: Callable[[Any], Any], colocate: bool = True) -> None:
        super().__init__(opt, name="PostProcessOptimizer")
        if not callable(func):
            msg = f"'func' must be callable (variable -> op or None); got {type(func).__name__}"
            raise TypeError(msg)
        self._func = func
        self._colocate = bool(colocate)

    def apply_gradients(
        self, grads_and_vars: Any, global_step: Any = None, name: Any = None
    ) -> Any:
        pairs = list(grads_and_vars)
        update = self._opt.apply_gradients(pairs, global_step=global_step, name=name)
        ops = []
        with tf1.control_dependencies([update]), tf1.name_scope(self._name):
            for g, v in pairs:
                if g is None:
                    continue
                where = v.graph.colocate_with(v) if self._colocate else contextlib.nullcontext()
                with where:
                    op = self._func(v)
                if op is not None:
                    ops.append(op)
        if not ops:
            return update
        return tf.group(update, *ops)


class VariableAssignmentOptimizer(PostProcessOptimizer):
    """An optimizer that assigns ``func(var)`` to each updated variable after the update.

    Useful for clipping or quantizing weights: ``func`` sees the updated value.

    Args:
        opt: the wrapped optimizer.
        func: ``tf.Variable -> tf.Tensor or None``; None leaves the variable as updated.
    """

    def __init__(self, opt: Any, func: Callable[[Any], Any]) -> None:
        if not callable(func):
            msg = f"'func' must be callable (variable -> tensor or None); got {type(func).__name__}"
            raise TypeError(msg)

        def assign(var: Any) -> Any:
            value = func(var)
            if value is None:
                return None
            return tf1.assign(var, value).op

        super().__init__(opt, assign)
        self._name = "VariableAssignmentOptimizer"


class AccumGradOptimizer(ProxyOptimizer):
    """Accumulate gradients over `niter` executions and apply their SUM every `niter`-th one.

    Each run of the op from ``apply_gradients`` (or ``minimize``) adds the gradients to
    one accumulator per variable (a slot named ``accum_grad``) and increments a counter;
    the run that brings the counter to a multiple of `niter` then applies the summed
    gradients with the wrapped optimizer and zeroes the accumulators. The variables
    change only on those runs.

    Summing makes `niter` steps on micro-batches of size ``b`` (with a loss that is a
    mean over the batch) equal to one step of the wrapped optimizer on the batch of
    size ``niter * b`` with a learning rate `niter` times larger, exactly for SGD and
    momentum; Adam, invariant to the scale of the gradient, matches the plain
    learning rate up to its epsilon.

    The counter and accumulators are variables (saved in checkpoints, so an
    accumulation resumes where it stopped). A ``global_step`` given to
    ``apply_gradients`` is incremented on every run. Needs resource variables (the
    default in TensorFlow 2): the update runs inside ``tf.cond``.

    Args:
        opt: the wrapped optimizer; its slots are created with the accumulators.
        niter: number of runs to accumulate, >= 1.

    Raises:
        TypeError: `opt` is not an optimizer, or `niter` is not an int.
        ValueError: `niter` < 1.

    Examples:
        ``AccumGradOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01), niter=5)``
    """

    SLOT = "accum_grad"
    COUNTER = "AccumGrad/counter"

    def __init__(self, opt: Any, niter: int) -> None:
        super().__init__(opt, name="AccumGrad")
        given, niter = niter, whole_number(niter)  # type: ignore[assignment]
        if niter is None:  # tensorpack took int(niter): '4' and 4.0 too
            msg = f"'niter' must be an int >= 1; got {type(given).__name__} {given!r}"
            raise TypeError(msg)
        if niter < 1:
            msg = f"'niter' must be >= 1; got {niter}"
            raise ValueError(msg)
        self._niter = int(niter)

    @property
    def niter(self) -> int:
        """Runs accumulated per update."""
        return self._niter

    def get_slot(self, var: Any, name: str) -> Any:
        if name == self.SLOT:
            return _Optimizer.get_slot(self, var, name)
        return self._opt.get_slot(var, name)

    def get_slot_names(self) -> list[str]:
        return [self.SLOT, *self._opt.get_slot_names()]

    def variables(self) -> list[Any]:
        variables: list[Any] = _Optimizer.variables(self) + self._opt.variables()
        return variables

    def counter(self, graph: Any = None) -> Any:
        """The counter variable of `graph` (the default graph when None), or None."""
        graph = graph if graph is not None else tf1.get_default_graph()
        return self._get_non_slot_variable(self.COUNTER, graph=graph)

    def _create_slots(self, var_list: list[Any]) -> None:
        for v in var_list:
            self._zeros_slot(v, self.SLOT, self._name)
        first = min(var_list, key=lambda v: v.name)
        self._create_non_slot_variable(
            initial_value=np.int64(0), name=self.COUNTER, colocate_with=first
        )

    def apply_gradients(
        self, grads_and_vars: Any, global_step: Any = None, name: Any = None
    ) -> Any:
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            msg = "AccumGradOptimizer.apply_gradients: no variable has a gradient"
            raise ValueError(msg)
        var_list = [v for _, v in pairs]
        with tf1.init_scope():
            self._create_slots(var_list)
        counter = self.counter(var_list[0].graph)
        with tf1.name_scope(name, self._name):
            adds = []
            for g, v in pairs:
                acc = self.get_slot(v, self.SLOT)
                if isinstance(g, tf.IndexedSlices):
                    adds.append(tf1.scatter_add(acc, g.indices, g.values))
                else:
                    adds.append(tf1.assign_add(acc, g))
            with tf1.control_dependencies(adds):
                count = tf1.assign_add(counter, np.int64(1))
            apply_now = tf.equal(tf.math.floormod(count, np.int64(self._niter)), 0)

            def update() -> Any:
                accs = [self.get_slot(v, self.SLOT) for v in var_list]
                summed = [tf.identity(a.read_value()) for a in accs]
                applied = self._opt.apply_gradients(list(zip(summed, var_list)))
                with tf1.control_dependencies([applied]):
                    zeroed = [tf1.assign(a, tf.zeros_like(a)) for a in accs]
                with tf1.control_dependencies(zeroed):
                    return tf.constant(True)

            def skip() -> Any:
                return tf.constant(False)

            applied = tf1.cond(apply_now, update, skip, name="apply_every_niter")
            ops = [applied]
            if global_step is not None:
                with tf1.control_dependencies([applied]):
                    ops.append(tf1.assign_add(global_step, 1))
            return tf.group(*ops, name="accum_grad_step")

    def __repr__(self) -> str:
        return f"AccumGradOptimizer({self._opt!r}, niter={self._niter})"
