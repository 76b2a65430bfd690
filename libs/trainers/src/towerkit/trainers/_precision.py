"""Mixed precision in the trainers: dynamic loss scaling for float16, and its statistic.

The core is `LossScaleSchedule` and `next_loss_scale` (pure); `LossScaleOptimizer`
builds the same rule in the graph around any ``tf.compat.v1.train.Optimizer``, and
`LossScaleMonitor` reports the scale every epoch.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import tensorflow as tf
from tensorflow.python.framework import kernels

from towerkit.callbacks import Callback
from towerkit.towers import Precision, low_precision_variables
from towerkit.towers.compat import tf1
from towerkit.trainers._errors import LossScaleError
from towerkit.trainers._optimizer import ProxyOptimizer
from towerkit.trainers._seams import OptimizerFactory

__all__ = [
    "LOSS_SCALE_NAME",
    "SKIPPED_STEPS_NAME",
    "LossScaleMonitor",
    "LossScaleOptimizer",
    "LossScaleSchedule",
    "built_in_refusal",
    "loss_scaled",
    "next_loss_scale",
    "next_stuck_steps",
    "ops_without_half_kernels",
    "precision_callbacks",
]

logger = logging.getLogger("towerkit.trainers")

#: The name of the loss-scale variable (a float32 scalar, saved in checkpoints).
LOSS_SCALE_NAME = "loss_scale"

#: The statistic (and the int64 variable) counting the steps skipped for non-finite
#: gradients: per epoch in the monitors and ``stats.json``, in total in the variable.
SKIPPED_STEPS_NAME = "loss_scale_skipped_steps"

_STUCK_MARK = "towerkit: the loss scale sits at its minimum and every step is skipped"


def _positive(_: Any, attribute: Any, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        msg = f"LossScaleSchedule.{attribute.name} must be a finite number > 0; got {value!r}"
        raise ValueError(msg)


def _growth(_: Any, attribute: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"LossScaleSchedule.{attribute.name} must be an int >= 1; got {value!r}"
        raise ValueError(msg)


def _factor(_: Any, attribute: Any, value: float) -> None:
    _positive(_, attribute, value)
    if value <= 1:
        msg = f"LossScaleSchedule.{attribute.name} must be > 1; got {value!r}"
        raise ValueError(msg)


@attrs.frozen
class LossScaleSchedule:
    """How a dynamic loss scale moves.

    The loss is multiplied by the scale before differentiating and the gradients
    divided by it. After `growth_interval` steps in a row with finite gradients the
    scale is multiplied by `factor`; a step with a non-finite gradient is skipped
    and divides it by `factor` (not below `minimum`). When the steps go on being
    skipped at the minimum scale (inputs beyond float16's range, NaN in the data) no
    step trains: after `max_skipped_at_minimum` such steps in a row, training fails
    with `LossScaleError`, as ``CheckNumerics`` would fail a float32 run.

    Attributes:
        initial: the scale of the first step.
        growth_interval: finite steps in a row before the scale grows.
        factor: how much it grows or shrinks at once (> 1).
        minimum: the smallest scale.
        max_skipped_at_minimum: steps in a row skipped at the `minimum` scale before
            training fails (>= 1).

            .. versionadded:: 0.2
    """

    initial: float = attrs.field(default=2.0**15, validator=_positive)
    growth_interval: int = attrs.field(default=2000, validator=_growth)
    factor: float = attrs.field(default=2.0, validator=_factor)
    minimum: float = attrs.field(default=1.0, validator=_positive)
    max_skipped_at_minimum: int = attrs.field(default=200, validator=_growth)

    def __attrs_post_init__(self) -> None:
        if self.initial < self.minimum:
            msg = (
                f"LossScaleSchedule: 'initial' {self.initial!r} is below 'minimum' {self.minimum!r}"
            )
            raise ValueError(msg)


def next_loss_scale(
    scale: float, good_steps: int, finite: bool, schedule: LossScaleSchedule
) -> tuple[float, int]:
    """The scale and the count of finite steps in a row after one step.

    >>> s = LossScaleSchedule(initial=8.0, growth_interval=2)
    >>> next_loss_scale(8.0, 0, True, s), next_loss_scale(8.0, 1, True, s)
    ((8.0, 1), (16.0, 0))
    >>> next_loss_scale(8.0, 1, False, s)
    (4.0, 0)
    """
    if not finite:
        return max(scale / schedule.factor, schedule.minimum), 0
    if good_steps + 1 >= schedule.growth_interval:
        return scale * schedule.factor, 0
    return scale, good_steps + 1


def next_stuck_steps(stuck: int, scale: float, finite: bool, schedule: LossScaleSchedule) -> int:
    """The steps skipped in a row at the minimum scale, after a step taken at `scale`.

    Training fails (`LossScaleError`) once it reaches ``schedule.max_skipped_at_minimum``.

    >>> s = LossScaleSchedule(initial=4.0, minimum=1.0)
    >>> next_stuck_steps(0, 2.0, False, s), next_stuck_steps(3, 1.0, False, s)
    (0, 4)
    >>> next_stuck_steps(3, 1.0, True, s)
    0

    .. versionadded:: 0.2
    """
    return stuck + 1 if not finite and scale <= schedule.minimum else 0


def _graph_update(
    state: tuple[Any, Any, Any, Any], finite: Any, schedule: LossScaleSchedule
) -> Any:
    """`next_loss_scale` and `next_stuck_steps` as ops assigning the variables of `state`."""
    scale, good, skipped, stuck = state
    grown = good + 1 >= schedule.growth_interval
    new_scale = tf.where(
        finite,
        tf.where(grown, scale * schedule.factor, scale),
        tf.maximum(scale / schedule.factor, schedule.minimum),
    )
    new_good = tf.where(
        tf.logical_and(finite, tf.logical_not(grown)), good + 1, tf.zeros_like(good)
    )
    new_stuck = tf.where(
        tf.logical_and(tf.logical_not(finite), scale <= schedule.minimum),
        stuck + 1,
        tf.zeros_like(stuck),
    )
    check = tf.debugging.Assert(
        new_stuck < schedule.max_skipped_at_minimum,
        [_STUCK_MARK, new_stuck, skipped + 1],
        name="loss_scale_stuck_check",
    )
    with tf1.control_dependencies([check]):
        return tf.group(
            scale.assign(new_scale, read_value=False),
            good.assign(new_good, read_value=False),
            skipped.assign_add(tf.cast(tf.logical_not(finite), tf.int64), read_value=False),
            stuck.assign(new_stuck, read_value=False),
            name="update_loss_scale",
        )


def _values(grad: Any) -> Any:
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _times(grad: Any, factor: Any) -> Any:
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * factor, grad.indices, grad.dense_shape)
    return grad * factor


class LossScaleOptimizer(ProxyOptimizer):
    """An optimizer with dynamic loss scaling (mixed float16 training).

    ``compute_gradients`` differentiates ``loss * scale`` and returns the gradients
    divided by the scale, in float32: gradient processors and ``CheckNumerics`` in the
    wrapped optimizer see unscaled values. ``apply_gradients`` applies them only when
    all are finite (otherwise the step is skipped: no variable or slot changes) and
    moves the scale by `schedule` (`next_loss_scale`). Several ``apply_gradients``
    calls in one step (one per tower) move it once.

    The scale is the float32 variable ``loss_scale`` (with ``loss_scale_good_steps``),
    global and not trainable: saved in checkpoints, restored on resume.

    Args:
        opt: the wrapped ``tf.compat.v1.train.Optimizer``.
        schedule: how the scale moves (default `LossScaleSchedule()`).
    """

    def __init__(self, opt: Any, schedule: LossScaleSchedule | None = None) -> None:
        super().__init__(opt, name="LossScaleOptimizer")
        schedule = LossScaleSchedule() if schedule is None else schedule
        if not isinstance(schedule, LossScaleSchedule):
            msg = f"'schedule' must be a LossScaleSchedule; got {type(schedule).__name__}"
            raise TypeError(msg)
        self.schedule = schedule
        self._state: tuple[Any, Any, Any, Any] | None = None
        self._update: Any = None

    @property
    def loss_scale(self) -> Any:
        """The ``loss_scale`` variable (made on first use, next to the global step)."""
        return self._variables()[0]

    @property
    def skipped_steps(self) -> Any:
        """The int64 variable counting the steps skipped for non-finite gradients (in total)."""
        return self._variables()[2]

    def _variables(self) -> tuple[Any, Any, Any, Any]:
        if self._state is None:
            step = tf1.train.get_global_step()  # its device: a parameter server in a cluster
            with (
                tf.init_scope(),
                tf1.name_scope(None),
                tf1.device(None if step is None else step.device),
            ):
                scale = tf1.Variable(
                    float(self.schedule.initial),
                    trainable=False,
                    dtype=tf.float32,
                    name=LOSS_SCALE_NAME,
                )
                good, skipped, stuck = (
                    tf1.Variable(0, trainable=False, dtype=tf.int64, name=name)
                    for name in (
                        f"{LOSS_SCALE_NAME}_good_steps",
                        SKIPPED_STEPS_NAME,
                        f"{LOSS_SCALE_NAME}_stuck_steps",
                    )
                )
            self._state = (scale, good, skipped, stuck)
        return self._state

    def scale_loss(self, loss: Any) -> Any:
        """`loss` times the current scale (what is differentiated)."""
        scale = self._variables()[0]
        return loss * tf.cast(scale, loss.dtype)

    def unscale(self, grads_and_vars: Sequence[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """The pairs with each gradient divided by the current scale."""
        inverse = 1.0 / self._variables()[0]
        return [
            (None if g is None else _times(g, tf.cast(inverse, g.dtype)), v)
            for g, v in grads_and_vars
        ]

    def compute_gradients(self, loss: Any, *args: Any, **kwargs: Any) -> Any:
        return self.unscale(self._opt.compute_gradients(self.scale_loss(loss), *args, **kwargs))

    def apply_gradients(
        self, grads_and_vars: Sequence[tuple[Any, Any]], global_step: Any = None, name: Any = None
    ) -> Any:
        pairs = list(grads_and_vars)
        grads = [_values(g) for g, _ in pairs if g is not None]
        with tf1.name_scope("loss_scale_check"):
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])

        def apply() -> Any:
            return tf.group(self._opt.apply_gradients(pairs, global_step=global_step))

        applied = tf.cond(finite, apply, tf.no_op, name="apply_if_finite")
        if self._update is not None:
            return tf.group(applied, name=name)
        with tf1.control_dependencies([applied]):
            self._update = _graph_update(self._variables(), finite, self.schedule)
        return tf.group(applied, self._update, name=name)


class LossScaleMonitor(Callback):
    """Report the loss scale (``loss_scale`` in the monitors, ``stats.json``) every epoch.

    Given the optimizer's `skipped` counter, it also reports the steps of the epoch
    skipped for non-finite gradients (``loss_scale_skipped_steps``), warns when an
    epoch applied none of its steps, and turns the graph's failure after too many
    skipped steps at the minimum scale into a `LossScaleError` saying why.

    .. versionchanged:: 0.2
        `skipped` and `schedule`.
    """

    _chief_only = True

    def __init__(
        self, scale: Any, skipped: Any = None, schedule: LossScaleSchedule | None = None
    ) -> None:
        self._scale = scale
        self._skipped = skipped
        self._schedule = LossScaleSchedule() if schedule is None else schedule
        self._skipped_before = 0
        self._step_before = 0

    def _before_epoch(self) -> None:
        if self._skipped is not None:
            self._skipped_before = int(self.trainer.sess.run(self._skipped))
        self._step_before = int(self.trainer.global_step)

    def _trigger_epoch(self) -> None:
        monitors = self.trainer.monitors
        if self._skipped is None:
            monitors.put_scalar(LOSS_SCALE_NAME, float(self.trainer.sess.run(self._scale)))
            return
        scale, total = self.trainer.sess.run([self._scale, self._skipped])
        monitors.put_scalar(LOSS_SCALE_NAME, float(scale))
        skipped = int(total) - self._skipped_before
        monitors.put_scalar(SKIPPED_STEPS_NAME, skipped)
        steps = int(self.trainer.global_step) - self._step_before
        if steps and skipped >= steps:
            logger.warning(
                "precision 'mixed_float16': epoch %d applied none of its %d steps: every "
                "one had non-finite gradients and was skipped (loss scale now %g); look "
                "for inputs beyond float16's range (+-65504) or NaN in the data",
                self.epoch_num,
                steps,
                float(scale),
            )

    def explain_failure(self, err: BaseException) -> BaseException | None:
        """A `LossScaleError` for the graph's check of skipped steps; None for other errors."""
        if not isinstance(err, tf.errors.InvalidArgumentError) or _STUCK_MARK not in str(err):
            return None
        s = self._schedule
        msg = (
            f"precision 'mixed_float16': {s.max_skipped_at_minimum} steps in a row had "
            f"non-finite gradients at the minimum loss scale ({s.minimum:g}) and were "
            "skipped, so nothing trains: look for inputs beyond float16's range (+-65504) "
            "or NaN in the data, cast such inputs or ops to float32, or use "
            "'mixed_bfloat16' (LossScaleSchedule.max_skipped_at_minimum sets how many "
            "skipped steps fail the run)"
        )
        return LossScaleError(msg)


def built_in_refusal(asked: Precision, built: Precision, trainer: str) -> str | None:
    """Why a train call asking for `asked` cannot run a graph `trainer` built in `built`; None when it can.

    Examples:
        >>> from towerkit.towers import FLOAT32, precision_policy
        >>> built_in_refusal(FLOAT32, FLOAT32, "SimpleTrainer") is None
        True
        >>> built_in_refusal(precision_policy("mixed_bfloat16"), FLOAT32, "SimpleTrainer")
        "train(precision='mixed_bfloat16'): the graph of SimpleTrainer was built in 'float32'; pass precision='mixed_bfloat16' to setup_graph (or TrainConfig), which builds the towers"
    """
    if asked == built:
        return None
    return (
        f"train(precision={asked.name!r}): the graph of {trainer} was built in "
        f"{built.name!r}; pass precision={asked.name!r} to setup_graph (or TrainConfig), "
        "which builds the towers"
    )


def loss_scaled(get_opt_fn: OptimizerFactory, policy: Precision) -> Callable[[], Any]:
    """`get_opt_fn`, its optimizer wrapped in `LossScaleOptimizer` when `policy` needs scaling."""
    if not policy.loss_scaling:
        return get_opt_fn

    def get_opt() -> Any:
        opt = get_opt_fn()
        return opt if isinstance(opt, LossScaleOptimizer) else LossScaleOptimizer(opt)

    return get_opt


def precision_callbacks(
    get_opt_fn: OptimizerFactory, policy: Precision, towers: int = 0
) -> list[Callback]:
    """After a mixed graph is built: check it, and the callbacks its policy needs.

    `towers` is how many towers the policy-bound tower function built (none: the
    graph itself must show an op computing in the policy's dtype).

    Warns about variables stored in low precision (made by hand, outside the policy);
    under ``mixed_float16`` refuses ops that have no float16 kernel on their device,
    and reports the loss scale every epoch.

    Raises:
        TypeError: an op computes in float16 on a device with no float16 kernel for it;
            or no op of the graph computes in the policy's dtype (the towers were built
            without it: a tower function called unbound, outside ``precision_scope``).
    """
    if not policy.mixed:
        return []
    opt = get_opt_fn()
    slots = {
        id(opt.get_slot(v, n)) for v in tf1.trainable_variables() for n in opt.get_slot_names()
    }
    low = low_precision_variables([v for v in tf1.global_variables() if id(v) not in slots])
    if low:
        logger.warning(
            "precision %r: variables %s are stored in low precision (made by hand, not "
            "through get_variable): the policy keeps variables in float32; these train "
            "with rounding errors",
            policy.name,
            low,
        )
    shown = None if towers else _policy_shown(tf1.get_default_graph(), policy)
    if shown is not None:
        raise TypeError(shown)
    if not policy.loss_scaling:
        return []
    _warn_float16_on_cpu()
    missing = ops_without_half_kernels(tf1.get_default_graph())
    if missing:
        lines = "; ".join(f"{name} ({kind} on {device})" for name, kind, device in missing[:10])
        msg = (
            f"precision 'mixed_float16': {len(missing)} op(s) compute in float16 where "
            f"TensorFlow has no float16 kernel for them: {lines}. Use 'mixed_bfloat16', or "
            "cast these ops' inputs to float32"
        )
        raise TypeError(msg)
    if not isinstance(opt, LossScaleOptimizer):
        return []
    return [LossScaleMonitor(opt.loss_scale, opt.skipped_steps, opt.schedule)]


_WARNED_CPU: list[bool] = []


def _warn_float16_on_cpu() -> None:
    """Once per process: float16 where TensorFlow sees no GPU runs far slower than float32."""
    if _WARNED_CPU or tf.config.list_physical_devices("GPU"):
        return
    _WARNED_CPU.append(True)
    logger.warning(
        "precision 'mixed_float16' on a machine with no GPU: TensorFlow's CPU kernels for "
        "float16 convolutions and matrix products are slow (a small convolutional net ran "
        "at 0.04 steps/s against 20 in float32 on a 2-core Xeon); on CPUs use "
        "'mixed_bfloat16' (fast where the CPU has AVX512-BF16 or AMX) or 'float32'"
    )


def _policy_shown(graph: Any, policy: Precision) -> str | None:
    """None when an op of `graph` computes in `policy`'s dtype; else the refusal's message.

    The ops of its functions count too (a K-step loop's body is a function).
    """
    dtype = tf.as_dtype(policy.compute_dtype)
    for op in graph.get_operations():
        if any(out.dtype.base_dtype == dtype for out in op.outputs):
            return None
    enum = dtype.as_datatype_enum
    for fn in graph.as_graph_def().library.function:
        for node in fn.node_def:
            if any(a.type == enum or enum in a.list.type for a in node.attr.values()):
                return None
    return (
        f"precision {policy.name!r}: no op of the training graph computes in "
        f"{policy.compute_dtype}: the towers were built in float32 (a tower function "
        "called outside the policy: use the tower function that setup_graph hands to "
        "_setup_graph or self.tower_func, or build under towerkit.towers.precision_scope), "
        "or pass precision='float32'"
    )


_HALF = tf.float16.as_datatype_enum


@functools.cache
def _half_devices(op_type: str, attr: str) -> frozenset[str]:
    """The device types with a kernel of `op_type` that takes float16 for type attr `attr`."""
    found = set()
    for kernel in kernels.get_registered_kernels_for_op(op_type).kernel:
        allowed = {c.name: list(c.allowed_values.list.type) for c in kernel.constraint}
        if attr not in allowed or _HALF in allowed[attr]:
            found.add(kernel.device_type)
    return frozenset(found)


def ops_without_half_kernels(graph: Any) -> list[tuple[str, str, str]]:
    """(name, type, device type) of each op of `graph` set to float16 with no kernel for it."""
    gpu = bool(tf.config.list_physical_devices("GPU"))
    missing = []
    for op in graph.get_operations():
        device = op.device.upper()
        kind = "GPU" if "GPU" in device or (gpu and "CPU" not in device) else "CPU"
        for name, value in op.node_def.attr.items():
            if value.type != _HALF:
                continue
            if kind not in _half_devices(op.type, name):
                missing.append((op.name, op.type, kind))
            break
    return missing
