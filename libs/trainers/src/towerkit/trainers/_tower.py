"""Trainers built from a tower function: predictors, tower handles, single-cost graph building."""

from __future__ import annotations

import abc
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from towerkit.callbacks import Callback
from towerkit.towers import (
    FLOAT32,
    OnlinePredictor,
    Precision,
    TowerContext,
    TowerFn,
    TowerFunc,
    TowerTensorHandle,
    TowerTensorHandles,
    build_placeholders,
    get_current_tower_context,
    precision_policy,
    precision_scope,
    visible_gpu_count,
)
from towerkit.towers.compat import tf1
from towerkit.trainers._base import Trainer
from towerkit.trainers._errors import TrainerStateError, XlaCompileError
from towerkit.trainers._multistep import build_steps_loop, refuse_per_step_feeds
from towerkit.trainers._precision import LossScaleOptimizer, loss_scaled, precision_callbacks
from towerkit.trainers._seams import OptimizerFactory
from towerkit.trainers._xla import compile_cluster, probe_xla, xla_in_effect

if TYPE_CHECKING:
    from towerkit.trainers.inputs._base import InputSource

logger = logging.getLogger("towerkit.trainers")


def call_only_once(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Wrap a no-argument function so it runs once; later calls return the first result.

    Examples:
        >>> calls = []
        >>> f = call_only_once(lambda: calls.append(1) or len(calls))
        >>> f(), f(), calls
        (1, 1, [1])
    """
    result: list[Any] = []

    @functools.wraps(fn)
    def once() -> Any:
        if not result:
            result.append(fn())
        return result[0]

    return once


def predictor_device(device: int, num_gpus: int) -> str:
    """The device string of an inference tower for ``get_predictor(device=...)``.

    ``device >= 0`` is a GPU id, ``-1`` the CPU. Without visible GPUs every predictor
    goes to the CPU.

    Examples:
        >>> predictor_device(1, num_gpus=2)
        '/gpu:1'
        >>> predictor_device(-1, num_gpus=2)
        '/cpu:0'
        >>> predictor_device(0, num_gpus=0)
        '/cpu:0'
    """
    if not isinstance(device, int) or isinstance(device, bool) or device < -1:
        msg = f"'device' must be a GPU id >= 0 or -1 for the CPU; got {device!r}"
        raise ValueError(msg)
    if device == -1 or num_gpus == 0:
        return "/cpu:0"
    if device >= num_gpus:
        msg = f"'device' {device} is not a visible GPU: {num_gpus} visible (ids 0..{num_gpus - 1})"
        raise ValueError(msg)
    return f"/gpu:{device}"


class TowerTrainer(Trainer):
    """A trainer whose model is built by calling a tower function under a tower context.

    Set ``tower_func`` (once) and build the graph with it; the trainer can then
    build more replicas of the model, e.g. inference towers for predictors.
    """

    def __init__(self) -> None:
        super().__init__()
        self._tower_func: TowerFunc | None = None
        self._predictors: dict[tuple[str, tuple[str, ...], tuple[str, ...]], OnlinePredictor] = {}
        self._inference_towers: dict[str, TowerTensorHandle] = {}

    @property
    def tower_func(self) -> TowerFunc | None:
        """The `TowerFunc` of the model, or None before it is set."""
        return self._tower_func

    @tower_func.setter
    def tower_func(self, func: TowerFunc) -> None:
        if not isinstance(func, TowerFunc):
            msg = f"'tower_func' must be a TowerFunc; got {type(func).__name__}"
            raise TypeError(msg)
        if self._tower_func is not None:
            msg = (
                f"'tower_func' can be set only once per trainer; it is already {self._tower_func!r}"
            )
            raise TrainerStateError(msg)
        self._tower_func = func

    @property
    def inputs_desc(self) -> tuple[tf.TensorSpec, ...]:
        """The input signature of the tower function: named ``tf.TensorSpec``s."""
        return self._require_tower_func("inputs_desc").input_signature

    @property
    def towers(self) -> TowerTensorHandles | None:
        """Every tower built with the tower function so far, by index or name; None before."""
        return None if self._tower_func is None else self._tower_func.towers

    def _require_tower_func(self, what: str) -> TowerFunc:
        if self._tower_func is None:
            msg = f"{type(self).__name__}.{what} needs 'tower_func': set it (or call setup_graph) first"
            raise TrainerStateError(msg)
        return self._tower_func

    def get_predictor(
        self, input_names: Sequence[str], output_names: Sequence[str], device: int = 0
    ) -> OnlinePredictor:
        """A callable running the model in inference mode: numpy inputs in, numpy outputs out.

        The first call for a device builds an inference tower there (the tower
        function under ``TowerContext(..., is_training=False)``, reusing the
        training variables, fed by new placeholders); later calls reuse it. Build
        predictors while the graph can change, e.g. in a callback's ``_setup_graph``;
        call them once the session exists (inside the loop the trainer's session is
        the default one).

        Args:
            input_names: names of the input signature, or of any tensor in the tower
                (e.g. a ``placeholder_with_default`` inside the model).
            output_names: tensor names in the tower, without the tower prefix.
            device: GPU id, or -1 for the CPU; without GPUs every tower is on the CPU.

        Returns:
            An `OnlinePredictor`.

        Raises:
            TrainerStateError: no tower function, or the graph is already finalized.
            KeyError: a name not found in the inference tower.
            TypeError: an input name names a variable, which cannot be fed.
        """
        func = self._require_tower_func("get_predictor")
        input_names, output_names = tuple(input_names), tuple(output_names)
        dev = predictor_device(device, visible_gpu_count())
        key = (dev, input_names, output_names)
        if key in self._predictors:
            return self._predictors[key]
        handle = self._inference_towers.get(dev)
        if handle is None:
            if self._graph.finalized:
                msg = (
                    f"get_predictor(device={device}) must build an inference tower, but the graph "
                    "is finalized: call get_predictor in a callback's _setup_graph (or before "
                    "training starts)"
                )
                raise TrainerStateError(msg)
            name = (
                "InferenceTower"
                if dev == "/gpu:0" or (dev == "/cpu:0" and device != -1)
                else (f"InferenceTower{dev.replace('/', '_').replace(':', '')}")
            )
            with self._graph.as_default(), tf1.device(dev), TowerContext(name, is_training=False):
                placeholders = build_placeholders(func.input_signature)
                func(*placeholders)
            handle = func.towers[len(func.towers) - 1]
            self._inference_towers[dev] = handle
        inputs = handle.get_tensors(input_names)
        fixed = [n for n, t in zip(input_names, inputs) if not _feedable(t)]
        if fixed:
            msg = (
                "'input_names' must name tensors that can be fed (inputs of the signature or "
                "any tensor of the tower), not variables or their handles; at fault: "
                f"{', '.join(map(repr, fixed))}"
            )
            raise TypeError(msg)
        predictor = OnlinePredictor(inputs, handle.get_tensors(output_names))
        self._predictors[key] = predictor
        return predictor


def _feedable(t: Any) -> bool:
    """Whether `t` is a tensor that can be fed (not a variable, nor a resource handle)."""
    return isinstance(t, tf.Tensor) and t.dtype not in (tf.resource, tf.variant)


_GATES = {0: 0, 1: 1, 2: 2}
"""GATE_GRADIENTS values (False and True equal 0 and 1) to the optimizer's gating constants."""


class SingleCostTrainer(TowerTrainer, metaclass=abc.ABCMeta):
    """A trainer that minimizes one cost, returned by a tower function.

    ``setup_graph(inputs_desc, input, get_cost_fn, get_opt_fn)`` builds the training
    graph; then ``train`` (or ``train_with_defaults``) runs it.

    Attributes:
        GATE_GRADIENTS: False (no gating), True (gate each op's gradients), or one of
            the optimizer's ``GATE_NONE``/``GATE_OP``/``GATE_GRAPH``; see ``tf.gradients``.
        COLOCATE_GRADIENTS_WITH_OPS: compute each gradient on its forward op's device;
            see ``tf.gradients``.
        AGGREGATION_METHOD: how gradient terms are summed (a
            ``tf.AggregationMethod`` value, or None for the default); see ``tf.gradients``.
        XLA_COMPILE: compile the tower function and its gradients with XLA
            (``tf.xla.experimental.compile``): the class-level spelling of
            ``setup_graph(xla=True)``; an ``xla`` given to ``setup_graph`` (or
            ``TrainConfig``) wins over it. See ``setup_graph`` for what XLA refuses.
        CHECK_TOWER_RULES: before building, check the tower function against the tower
            rules with `towerkit.towers.check_tower_function` and raise on violations.
    """

    GATE_GRADIENTS: bool | int = False
    COLOCATE_GRADIENTS_WITH_OPS: bool = True
    AGGREGATION_METHOD: Any = None
    XLA_COMPILE: bool = False
    CHECK_TOWER_RULES: bool = False

    def __init__(self) -> None:
        super().__init__()
        self._input: InputSource | None = None
        self._precision = FLOAT32
        self._xla_compiled: bool | None = None

    @property
    def precision(self) -> Precision:
        """The mixed-precision policy of the training towers (given to ``setup_graph``)."""
        return self._precision

    @property
    def xla_compiled(self) -> bool:
        """Whether the training towers were built as XLA clusters (decided by ``setup_graph``).

        Before ``setup_graph``: whether they would be, by ``XLA_COMPILE`` alone.

        .. versionadded:: 0.4
        """
        return bool(self.XLA_COMPILE) if self._xla_compiled is None else self._xla_compiled

    @property
    def input_source(self) -> InputSource | None:
        """The input source given to ``setup_graph``, or None before."""
        return self._input

    def setup_graph(
        self,
        inputs_desc: Sequence[tf.TensorSpec],
        input: InputSource,
        get_cost_fn: TowerFn,
        get_opt_fn: OptimizerFactory,
        *,
        steps_per_execution: int = 1,
        precision: str | Precision = FLOAT32,
        xla: bool | str | None = None,
    ) -> list[Callback]:
        """Build the training graph from an input signature, an input, a cost and an optimizer.

        The input is set up in the trainer's graph; the cost function becomes the
        tower function (``self.tower_func``) and must follow the tower rules;
        ``get_opt_fn`` is called once. The input's callbacks and the trainer's own
        are registered, input callbacks first.

        Args:
            inputs_desc: named ``tf.TensorSpec``s, one per input tensor.
            input: an `InputSource`.
            get_cost_fn: input tensors -> scalar cost tensor.
            get_opt_fn: () -> a ``tf.compat.v1.train.Optimizer``.
            steps_per_execution: training steps per session call (K). With K > 1 the
                step is built inside a ``tf.while_loop`` of K iterations, each taking
                its own batch, and ``train_op`` runs the loop; the input must dequeue
                in the graph and the trainer must support it
                (``SUPPORTS_STEPS_PER_EXECUTION``). ``train`` then runs K steps per call.
            precision: a mixed-precision policy (``"float32"``, ``"mixed_bfloat16"``,
                ``"mixed_float16"``): the training towers compute in its dtype under
                `towerkit.towers.precision_scope`, the cost is cast to float32 and
                variables stay float32; ``"mixed_float16"`` wraps the optimizer in
                `LossScaleOptimizer` and reports ``loss_scale`` every epoch. A
                subclass's ``_setup_graph`` gets the tower function bound to the
                policy (`TowerFunc.under_precision`): its towers follow it (the
                cost it gets may be in the compute dtype).
            xla: compile each training tower's cost and gradients as one XLA cluster:
                False (the plain graph), True, ``"auto"``, or None (the default: the
                class's ``XLA_COMPILE``, False unless a subclass sets it). With True or
                ``"auto"`` the tower is first built and compiled once in a scratch
                graph, fed zeros (`probe_xla`): a tower XLA cannot compile (``py_func``,
                ``numpy_function``, string ops, summaries, ops whose output shape
                depends on values) raises `XlaCompileError` naming its ops under True,
                and is built plain under ``"auto"``, with one warning saying why.
                ``xla_compiled`` says which was built. Works with K > 1 (each of the K
                steps runs the cluster) and with every precision policy; tensors inside
                the cluster cannot be fetched (a predictor can compute them).

        .. versionchanged:: 0.2
           ``steps_per_execution``, ``precision``.

        .. versionchanged:: 0.4
           ``xla``.

        Returns:
            The callbacks registered.

        Raises:
            TypeError: bad arguments, or a cost that is not a scalar float tensor.
            ValueError: an `xla` other than False, True, ``"auto"`` or None.
            XlaCompileError: ``xla=True`` and XLA cannot compile the tower.
            TrainerStateError: called after callbacks were set up.
        """
        self._require_phase("setup_graph", "new")
        xla_mode = xla_in_effect(xla, self.XLA_COMPILE)
        for what, fn in (("get_cost_fn", get_cost_fn), ("get_opt_fn", get_opt_fn)):
            if not callable(fn):
                msg = f"{what!r} must be callable; got {type(fn).__name__}"
                raise TypeError(msg)
        for method in ("setup", "get_input_tensors", "get_callbacks"):
            if not callable(getattr(input, method, None)):
                msg = (
                    f"'input' must be an InputSource (with setup, get_input_tensors, "
                    f"get_callbacks); got {type(input).__name__} without {method}()"
                )
                raise TypeError(msg)
        func = (
            get_cost_fn
            if isinstance(get_cost_fn, TowerFunc)
            else TowerFunc(get_cost_fn, inputs_desc)
        )
        self._precision = precision_policy(precision)
        if self.CHECK_TOWER_RULES:
            self._check_tower_rules(func)
        self._xla_compiled = bool(xla_mode) and self._xla_compiles(func, input, xla_mode)
        get_opt_fn = call_only_once(loss_scaled(get_opt_fn, self._precision))
        k = self._set_steps_per_execution(steps_per_execution)
        refuse_per_step_feeds(input, k)
        with self._graph.as_default():
            self._ensure_global_step()
            input.setup(func.input_signature)
            self._input = input
            # the trainer's own tower function is the bound one too: a custom _setup_graph
            # calling self.tower_func (tensorpack's idiom), get_predictor and the
            # InferenceRunner towers all build under the policy
            bound = func.under_precision(self._precision)
            self.tower_func = bound
            if k == 1:
                own = self._setup_graph(input, bound, get_opt_fn)
            else:
                built: list[list[Callback]] = []

                def one_step() -> Any:
                    built.append(self._setup_graph(input, bound, get_opt_fn))
                    return self.train_op

                self.train_op = build_steps_loop(self._graph, k, one_step)
                own = built[0]
            own = [
                *own,
                *self._finish_graph(),
                *precision_callbacks(get_opt_fn, self._precision, len(bound.towers)),
            ]
            input_cbs = input.get_callbacks()
        cbs = [*input_cbs, *own]
        self.register_callback(cbs)
        return cbs

    def _check_tower_rules(self, func: TowerFunc) -> None:
        """Raise `TowerRuleError` listing every rule the tower function breaks; log warnings."""
        from towerkit.towers import TowerRuleError, check_tower_function

        found = check_tower_function(func.tower_fn, func.input_signature)
        for v in found:
            if v.severity != "error":
                logger.warning("tower function %s: %s", func, v)
        errors = [str(v) for v in found if v.severity == "error"]
        if errors:
            msg = f"the tower function {func} breaks the tower rules:\n  " + "\n  ".join(errors)
            raise TowerRuleError(msg)

    def _xla_compiles(self, func: TowerFunc, input: InputSource, mode: bool | str) -> bool:
        """Whether XLA compiles the tower (`probe_xla`); refuse it under ``xla=True``."""
        batch = getattr(input, "batch_size", None)
        # a tower function of its own: the probe's tower is not one of the trainer's
        probed = TowerFunc(func.tower_fn, func.input_signature).under_precision(self._precision)
        found = probe_xla(
            _float32_cost(probed, self._precision),
            func.input_signature,
            batch_size=batch if isinstance(batch, int) and batch > 0 else 2,
        )
        if found is None:
            return True
        reason, xla_failed = found
        if mode == "auto":
            logger.warning("xla='auto': training without XLA: %s", reason)
            return False
        if xla_failed:
            msg = (
                f"xla=True (or XLA_COMPILE) for {type(self).__name__}: {reason}; remove "
                "those ops from the tower function, or pass xla='auto' (XLA where it "
                "compiles) or xla=False"
            )
            raise XlaCompileError(msg)
        logger.info("xla=True: the check at setup could not run the tower on zeros (%s)", reason)
        return True

    def _finish_graph(self) -> list[Callback]:
        """Build what runs outside the training step, once it exists; return more callbacks.

        Called right after ``_setup_graph`` (after the K-step loop with several steps
        per call): ops built here can be run on their own.
        """
        return []

    @abc.abstractmethod
    def _setup_graph(
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
    ) -> list[Callback]:
        """Build the towers and the train op; return the trainer's own callbacks."""

    def _default_steps_per_epoch(self) -> int:
        if self._input is None:
            return super()._default_steps_per_epoch()
        return self._input.size()

    def _make_get_grad_fn(
        self, input: InputSource, get_cost_fn: TowerFunc, get_opt_fn: OptimizerFactory
    ) -> Callable[[], list[tuple[Any, Any]]]:
        """A function that builds one tower from `input` and returns its (gradient, variable) pairs.

        Call it under a training tower context. Honours ``GATE_GRADIENTS``,
        ``COLOCATE_GRADIENTS_WITH_OPS``, ``AGGREGATION_METHOD`` and ``xla_compiled``.
        """
        gate = _GATES.get(self.GATE_GRADIENTS)
        if gate is None:
            msg = f"'GATE_GRADIENTS' must be a bool or 0, 1, 2; got {self.GATE_GRADIENTS!r}"
            raise ValueError(msg)
        colocate = bool(self.COLOCATE_GRADIENTS_WITH_OPS)
        aggregation = self.AGGREGATION_METHOD

        get_cost = _float32_cost(get_cost_fn, self._precision)
        compiled = self.xla_compiled

        fetched: list[Any] = []  # the ops of the previous tower's input, in this graph
        in_order = bool(getattr(input, "TOWERS_IN_ORDER", True))

        def get_grads() -> list[tuple[Any, Any]]:
            # each tower takes its batch after the previous one took its own, so which
            # batch goes to which tower does not depend on how the ops were scheduled
            graph = tf1.get_default_graph()
            after = [op for op in fetched if op.graph is graph]
            with tf1.control_dependencies(after):
                inputs = input.get_input_tensors()
            if in_order:
                fetched[:] = [t.op for t in inputs if hasattr(t, "op")]
            opt = get_opt_fn()
            if compiled:
                if not isinstance(opt, LossScaleOptimizer):
                    return _xla_grads(get_cost, inputs, colocate, aggregation, gate)

                def scaled(*xs: Any) -> Any:
                    return opt.scale_loss(get_cost(*xs))

                return opt.unscale(_xla_grads(scaled, inputs, colocate, aggregation, gate))
            cost = get_cost(*inputs)
            grads = opt.compute_gradients(
                cost,
                var_list=_own_trainable_variables(),
                gate_gradients=gate,
                colocate_gradients_with_ops=colocate,
                aggregation_method=aggregation,
            )
            return _drop_none(grads)

        return get_grads


def _float32_cost(get_cost_fn: Callable[..., Any], policy: Precision) -> Callable[..., Any]:
    """`get_cost_fn` built under `policy`, its checked cost cast to float32."""

    def get_cost(*inputs: Any) -> Any:
        with precision_scope(policy):
            cost = check_cost(get_cost_fn(*inputs))
        return cost if cost.dtype.base_dtype == tf.float32 else tf.cast(cost, tf.float32)

    return get_cost


def check_cost(cost: Any) -> Any:
    """`cost` if it is a scalar floating tensor; TypeError otherwise."""
    if not isinstance(cost, (tf.Tensor, tf.Variable)):
        msg = f"the cost function must return a scalar tf.Tensor; got {type(cost).__name__}"
        raise TypeError(msg)
    if not cost.dtype.is_floating or cost.shape.rank not in (0, None):
        msg = (
            f"the cost must be a scalar floating tensor; got {cost.name} with dtype "
            f"{cost.dtype.name} and shape {cost.shape}"
        )
        raise TypeError(msg)
    return cost


def _own_trainable_variables() -> list[Any] | None:
    """The trainable variables of a tower that has its own variable scope; None for others.

    A training tower built under its own variable scope (``vs_name``, one copy of
    the model per tower) trains only its own copy; any other tower trains every
    trainable variable.
    """
    ctx = get_current_tower_context()
    if ctx is None or not ctx.vs_name:
        return None
    prefix = ctx.vs_name + "/"
    own = [v for v in tf1.trainable_variables() if v.op.name.startswith(prefix)]
    if not own:
        msg = (
            f"tower {ctx.ns_name!r} has its own variable scope {ctx.vs_name!r} but created no "
            "trainable variable under it: nothing to train"
        )
        raise ValueError(msg)
    return own


def _drop_none(grads: Sequence[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The pairs that have a gradient; ValueError when none does."""
    kept = [(g, v) for g, v in grads if g is not None]
    if not kept:
        names = [v.op.name for _, v in grads]
        msg = f"the cost depends on none of the trainable variables {names}: nothing to train"
        raise ValueError(msg)
    missing = [v.op.name for g, v in grads if g is None]
    if missing:
        logger.warning("no gradient for trainable variables %s: they are not trained", missing)
    return kept


def _xla_grads(
    get_cost: Callable[..., Any], inputs: Sequence[Any], colocate: bool, aggregation: Any, gate: int
) -> list[tuple[Any, Any]]:
    """Cost and gradients computed inside one XLA cluster."""
    holder: dict[str, Any] = {}

    def compiled(*xs: Any) -> list[Any]:
        cost = get_cost(*xs)
        own = _own_trainable_variables()
        variables = tf1.trainable_variables() if own is None else own
        grads = tf1.gradients(
            cost,
            variables,
            gate_gradients=gate == 1,
            colocate_gradients_with_ops=colocate,
            aggregation_method=aggregation,
        )
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        holder["vars"] = [v for _, v in pairs]
        holder["all"] = variables
        return [g for g, _ in pairs]

    outs = compile_cluster(compiled, inputs)
    if not holder["vars"]:
        msg = f"the cost depends on none of the trainable variables {[v.op.name for v in holder['all']]}: nothing to train"
        raise ValueError(msg)
    return list(zip(outs, holder["vars"]))
