"""Recurrent stacks over time with a gradient of their own: the weights' gradients in one product.

``dynamic_rnn`` runs a stack of plain LSTMs and GRUs (`_rnn_fused_plan`: TensorFlow 1's
cells, each maybe in a `DropoutWrapper`, alone or in a `MultiRNNCell`), with or
without ``sequence_length``, through `fused_stack`. The forward loop computes what
the cells compute (each product with a kernel made as two: its rows for the inputs,
its rows for ``h``): a wrapper's masks are drawn by the same dropout ops
with the same seeds, one draw per step as the wrapper's; past an example's length its
state is carried and its output is zeros, as the cells' loop does. It keeps for each
step and layer what the backward step and the weights' gradients read (the previous
``h``, the gates' factors, the inputs: `_rnn_fused_cells`) and the masks. The
backward loop walks time in reverse, writing each step's gate gradients; each
kernel's gradient is then one matrix product over all steps, where differentiating
the loop would add a kernel-sized product into an accumulator at every step. Same
variables, same values, same gradients (to float rounding). Both loops make `UNROLL`
steps an iteration where they can (the loop's own ops paid once for them).

In an inference tower (``is_training=False``: no gradient, no dropout) the same forward
loop runs alone, keeping nothing.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from towerkit.layers._rnn_fused_cells import (
    BACK_READS,
    KINDS,
    input_grads,
    record_widths,
    write_widths,
)
from towerkit.layers._rnn_fused_plan import (
    FusedLayer,
    dropout_seeds,
    dropped_leaf,
    fusable_layers,
    fused_plan,
    state_leaves,
    variational_masks,
)
from towerkit.layers._rnn_nest import LSTMStateTuple
from towerkit.layers._rnn_wrappers import MultiRNNCell
from towerkit.towers import get_current_tower_context
from towerkit.towers.compat import tf1

__all__ = ["fusable_layers", "fused_applies", "fused_stack"]


UNROLL = 2
"""Steps each iteration of the fused loops makes, where the number of steps is known when
the graph is built (a Python int): each iteration pays the loop's own ops (a few per loop
variable) once for that many steps. A number of steps not divisible by it runs its first
steps before the loop. Not the forward loop of a stack that draws dropout masks at each
step: one random op draws them all, in step order, as the cells' loop does."""


def _loop(
    cond: Any, body: Any, start: Any, steps: Any, loop: Any, unroll: int, whole: bool = False
) -> Any:
    """``tf.while_loop(cond, body, start)`` over `steps` steps, `unroll` steps an iteration.

    Unrolled where `steps` is an int (its first ``steps % unroll`` steps made before the
    loop) or, `whole`, a tensor that is a multiple of `unroll`; `cond` must hold before
    each step as it does before each iteration.
    """
    if unroll > 1 and isinstance(steps, int):
        for _ in range(steps % unroll):
            start = body(*start)
    elif not (unroll > 1 and whole):
        return tf1.while_loop(cond, body, start, maximum_iterations=steps, **loop)

    def unrolled(*carry: Any) -> Any:
        for _ in range(unroll):
            carry = body(*carry)
        return carry

    return tf1.while_loop(cond, unrolled, start, maximum_iterations=steps // unroll, **loop)


def training_tower() -> bool:
    """Whether the graph is built for training: no tower context, or a training tower."""
    ctx = get_current_tower_context()
    return ctx is None or bool(ctx.is_training)


def fused_applies(cell: Any, inputs: Any, state: Any, lengths: Any) -> Any:
    """The plan (`FusedLayer` records) to run fused, or None for the cells' loop.

    Fused: a stack `fused_plan` accepts over one input tensor of known depth, every
    state tensor of the input's dtype.
    """
    if not isinstance(inputs, tf.Tensor):
        return None
    if inputs.shape.rank != 3 or inputs.shape[-1] is None or not inputs.dtype.is_floating:
        return None
    plan = fused_plan(cell, dropout=training_tower())
    if plan is None or any(layer.cell._dtype not in (None, inputs.dtype) for layer in plan):
        return None
    states = state if type(cell) is MultiRNNCell else (state,)
    leaves = [t for s, layer in zip(states, plan, strict=True) for t in _leaves(s, layer)]
    if any(getattr(t, "dtype", None) != inputs.dtype for t in leaves):
        return None
    return plan


def _leaves(state: Any, layer: FusedLayer) -> list[Any]:
    return list(state) if layer.kind == "lstm" else [state]


def _build(cell: Any, plan: Any, depth: int, dtype: Any) -> list[list[Any]]:
    """Create (or reuse) the layers' variables under the scopes the cells' own calls use."""
    layers = [layer.cell for layer in plan]
    if type(cell) is not MultiRNNCell:
        layers[0].ensure_built(depth, layers[0]._dtype or dtype)
    else:
        with cell.scoped(None):
            for k, layer in enumerate(layers):
                with tf1.variable_scope(f"cell_{k}"):
                    layer.ensure_built(depth, layer._dtype or dtype)
                depth = int(layer.output_size)
        cell._built = True
    return [
        [tf1.convert_to_tensor(p) for p in KINDS[layer.kind].params(layer.cell)] for layer in plan
    ]


def _mask(like: Any, keep: Any, seed: int | None) -> Any:
    """The wrapper's dropout of `like`, as the factor it multiplies by (0 or 1 / keep)."""
    return tf1.nn.dropout(tf1.ones_like(like), rate=1 - keep, seed=seed)


def _factor(fixed: Any, drawn: list[Any], which: int, like: Any, keep: Any, seeds: Any) -> Any:
    """A layer's input (0), state (1) or output (2) mask as a factor.

    Its variational one (`fixed`), or one drawn now for this step (appended to `drawn`).
    """
    if fixed is not None:
        return fixed[which]
    drawn.append(_mask(like, keep, seeds[which]))
    return drawn[-1]


class _Stack:
    """The shapes and choices of one fused run (built once, read by both loops)."""

    def __init__(
        self,
        plan: Any,
        weights: Any,
        inputs: Any,
        lengths: Any,
        steps: Any,
        loop: Any,
        whole: bool = False,
    ) -> None:
        self.plan = plan
        self.n = len(plan)
        self.dtype = inputs.dtype.base_dtype
        self.batch = inputs.shape[1]
        self.units = [layer.units for layer in plan]
        self.depths = [int(inputs.shape[-1]), *self.units[:-1]]
        self.lengths = lengths
        self.steps = steps
        self.whole = whole  # `steps`, a tensor, is a multiple of UNROLL
        self.seeds = [dropout_seeds(layer.seed, layer.kind) for layer in plan]
        self.loop = loop
        # variational layers: their masks, the same at every step
        self.fixed: list[Any] = [variational_masks(layer) for layer in plan]
        # the layers with per-step dropout, each with its slot in the arrays of masks
        self.dropping = [k for k, layer in enumerate(plan) if layer.drops and self.fixed[k] is None]
        # the bottom layer's products with the inputs are made before the loop, for all
        # steps at once (and their gradient after it), unless its inputs are dropped;
        # the other layers' in each step, from the layer below's output
        self.projected = plan[0].input_keep is None
        self.x_kernels: list[list[Any]] = []  # folded, for the forward products
        self.x_biases: list[list[Any]] = []
        self.step_weights: list[list[Any]] = []  # the rows for h, and the biases
        self.input_weights: list[list[Any]] = []  # the layer's own, for the inputs' gradient
        self.back_weights: list[list[Any]] = []
        for layer, w, depth in zip(plan, weights, self.depths, strict=True):
            kind = KINDS[layer.kind]
            folded = kind.fold(w, layer.forget_bias)
            x_kernels, h_params = kind.split(folded, depth)
            self.x_kernels.append(x_kernels)
            self.x_biases.append(kind.biases(folded))
            self.step_weights.append(h_params)
            self.input_weights.append(kind.input_weights(kind.split(w, depth)[0]))
            self.back_weights.append(kind.back_weights(w, depth))

        # a step's products with several kernels (a GRU's): one product, then split
        self.joined = [
            (tf1.concat(k, 1), tf1.concat(b, 0), [int(w.shape[-1]) for w in k])
            if len(k) > 1 and not self.before(i)
            else None
            for i, (k, b) in enumerate(zip(self.x_kernels, self.x_biases, strict=True))
        ]

    def products(self, k: int, x: Any) -> list[Any]:
        """Layer `k`'s inputs `x` (``[rows, depth]``) times its kernels' rows for x, biases added."""
        joined = self.joined[k]
        if joined is not None:
            kernel, bias, widths = joined
            return list(tf1.split(tf1.nn.bias_add(tf1.matmul(x, kernel), bias), widths, axis=1))
        return [
            tf1.nn.bias_add(tf1.matmul(x, kernel), bias)
            for kernel, bias in zip(self.x_kernels[k], self.x_biases[k], strict=True)
        ]

    def before(self, k: int) -> bool:
        """Whether layer `k`'s inputs' products are made before the loop."""
        return k == 0 and self.projected

    def widths(self, k: int) -> list[int]:
        """The widths of layer `k`'s records."""
        layer = self.plan[k]
        return record_widths(layer.kind, self.depths[k], layer.units, self.before(k))

    def array(self, width: int, kept: bool = False, size: Any = None) -> Any:
        # `kept`: the forward arrays that the gradient reads. TensorFlow runs the
        # gradient once per gradient taken through the loop (two `tf.gradients` fetched
        # in one run, or a gradient of a gradient), and each run reads them again; with
        # TensorFlow 1's control flow an element read once is freed unless the array
        # says otherwise. (TensorFlow 2's arrays are values, never freed.)
        return tf1.TensorArray(
            self.dtype,
            size=self.steps if size is None else size,
            element_shape=[self.batch, width],
            clear_after_read=not kept,
        )

    def mask_widths(self, k: int) -> list[int]:
        if self.fixed[k] is not None:
            return []
        layer = self.plan[k]
        keeps = (layer.input_keep, layer.state_keep, layer.output_keep)
        widths = (self.depths[k], self.units[k], self.units[k])
        return [w for w, keep in zip(widths, keeps, strict=True) if keep is not None]

    def done(self, t: Any) -> Any:
        return None if self.lengths is None else t >= self.lengths


def _forward(s: _Stack, x: Any, states: list[list[Any]], keep: bool) -> Any:
    """The forward loop over `x` (``[steps, batch, depth]``) from `states` (per layer).

    Returns ``(outputs, final states, records, masks)``; without `keep`, records and
    masks are empty (nothing is kept for a gradient).
    """
    xs = None
    projections: list[Any] = []
    if s.projected:
        shape = tf1.concat([tf1.shape(x)[:2], [-1]], 0)
        projections = [
            tf1.reshape(p, shape) for p in s.products(0, tf1.reshape(x, [-1, s.depths[0]]))
        ]
    else:
        xs = x

    def step(t: Any, out: Any, records: Any, masks: Any, states: Any) -> Any:
        below = None if xs is None else xs[t]
        done = s.done(t)
        records, masks, new_states = list(records), list(masks), []
        for k, layer in enumerate(s.plan):
            drawn: list[Any] = []
            fixed, seeds = s.fixed[k], s.seeds[k]

            if layer.input_keep is not None:
                # after the previous step's (a step's inputs do not depend on it): the
                # masks are drawn in step order, as the cells' loop draws them with
                # parallel_iterations=1 (with more, its iterations may draw out of order)
                with tf1.control_dependencies(states[k]):
                    below = below * _factor(fixed, drawn, 0, below, layer.input_keep, seeds)
            if s.before(k):
                products = [a[t] for a in projections]
            else:
                products = s.products(k, below)
            h, new, kept = KINDS[layer.kind].step(states[k], s.step_weights[k], products, keep)
            if keep and not s.before(k):
                kept = [*kept, below]  # for the kernels' gradient
            if layer.state_keep is not None:
                leaf = dropped_leaf(layer.kind)
                new[leaf] = new[leaf] * _factor(fixed, drawn, 1, h, layer.state_keep, seeds)
            if layer.output_keep is not None:
                h = h * _factor(fixed, drawn, 2, h, layer.output_keep, seeds)
            if done is not None:
                new = [tf1.where(done, old, v) for old, v in zip(states[k], new, strict=True)]
            if keep:
                records[k] = [a.write(t, r) for a, r in zip(records[k], kept, strict=True)]
                if drawn:
                    slot = s.dropping.index(k)
                    masks[slot] = masks[slot].write(t, tf1.concat(drawn, 1))
            new_states.append(new)
            below = h
        if done is not None:
            below = tf1.where(done, tf1.zeros_like(below), below)
        return t + 1, out.write(t, below), records, masks, new_states

    records: list[list[Any]] = [[] for _ in s.plan]
    masks: list[Any] = []
    if keep:
        records = [[s.array(w, kept=True) for w in s.widths(k)] for k in range(s.n)]
        masks = [s.array(sum(s.mask_widths(k)), kept=True) for k in s.dropping]
    start = (tf1.constant(0, tf1.int32), s.array(s.units[-1]), records, masks, states)
    unroll = 1 if s.dropping else UNROLL
    _, out, records, masks, finals = _loop(
        lambda t, *_: t < s.steps, step, start, s.steps, s.loop, unroll, s.whole
    )
    return out.stack(), finals, records, masks


def _backward(s: _Stack, x: Any, d_out: Any, d_final: Any, records: Any, masks: Any) -> Any:
    """The backward loop: the gradients of the inputs, weights and initial states."""

    def back(t: Any, writes: Any, dxs: Any, d_states: Any) -> Any:
        t = t - 1
        writes, prev = list(writes), [None] * s.n
        above = d_out[t]
        live = None
        if s.lengths is not None:
            live = tf1.cast(tf1.expand_dims(t < s.lengths, 1), s.dtype)
            above = above * live
        for k in reversed(range(s.n)):
            layer = s.plan[k]
            d_state = list(d_states[k])
            carry = None
            if live is not None:
                carry = [d * (1 - live) for d in d_state]
                d_state = [d * live for d in d_state]
            widths, fixed = s.mask_widths(k), s.fixed[k]
            if fixed is not None:
                in_mask, state_mask, out_mask = fixed
            else:
                drawn = []
                if widths:
                    drawn = tf1.split(masks[s.dropping.index(k)].read(t), widths, axis=1)
                in_mask = drawn.pop(0) if layer.input_keep is not None else None
                state_mask = drawn.pop(0) if layer.state_keep is not None else None
                out_mask = drawn.pop(0) if layer.output_keep is not None else None
            leaf = dropped_leaf(layer.kind)
            dh = d_state[leaf] if state_mask is None else d_state[leaf] * state_mask
            dh = dh + (above if out_mask is None else above * out_mask)
            rest = d_state[:leaf]
            kept = [
                a.read(t) if i in BACK_READS[layer.kind] else None for i, a in enumerate(records[k])
            ]
            kind = KINDS[layer.kind]
            d_prev, step_writes = kind.back(kept, dh, rest, s.back_weights[k])
            d_x = None if s.before(k) else input_grads(step_writes, s.input_weights[k])
            writes[k] = [a.write(t, w) for a, w in zip(writes[k], step_writes, strict=True)]
            if carry is not None:
                d_prev = [d + c for d, c in zip(d_prev, carry, strict=True)]
            prev[k] = d_prev
            if d_x is not None:
                above = d_x if in_mask is None else d_x * in_mask
        if s.projected:  # the inputs' gradient: after the loop, for all steps at once
            return t, writes, dxs, prev
        return t, writes, dxs.write(t, above), prev

    start = (
        tf1.convert_to_tensor(s.steps),
        [[s.array(w) for w in write_widths(layer.kind, layer.units)] for layer in s.plan],
        tf1.TensorArray(s.dtype, size=s.steps, element_shape=[s.batch, s.depths[0]]),
        d_final,
    )
    _, writes, dxs, d_initial = _loop(
        lambda t, *_: t > 0, back, start, s.steps, s.loop, UNROLL, s.whole
    )
    d_weights, d_x = [], None
    for k, layer in enumerate(s.plan):
        stacked = [tf1.reshape(a.stack(), [-1, w]) for a, w in zip(records[k], s.widths(k))]
        done = [
            tf1.reshape(a.stack(), [-1, w])
            for a, w in zip(writes[k], write_widths(layer.kind, layer.units))
        ]
        if s.before(k):  # the inputs' gradient: after the loop, for all steps at once
            inputs = tf1.reshape(x, [-1, s.depths[0]])
            d_x = input_grads(done, s.input_weights[0])
        else:
            inputs = stacked.pop()
        d_weights.append(KINDS[layer.kind].weight_grads(stacked, done, inputs))
    return dxs.stack() if d_x is None else d_x, d_weights, d_initial


def fused_stack(
    cell: Any,
    plan: Any,
    inputs: Any,
    state: Any,
    lengths: Any,
    steps: Any,
    parallel_iterations: int,
    swap_memory: bool,
) -> tuple[Any, Any]:
    """Run the layers of `plan` over time-major `inputs`; ``(outputs, final state)``.

    `state` is shaped as ``cell.state_size``; `lengths` is None or the ``[batch]``
    int32 lengths; `steps` is the number of steps (an int or a scalar tensor). The
    variables are created as the cells' own first call creates them.
    """
    dtype = inputs.dtype.base_dtype
    weights = _build(cell, plan, int(inputs.shape[-1]), dtype)
    states = list(state) if type(cell) is MultiRNNCell else [state]
    initial = [_leaves(st, layer) for st, layer in zip(states, plan, strict=True)]
    x = inputs
    bound = loop_steps = steps
    if lengths is not None:
        # the cells' loop stops after the longest sequence (and runs one step at least)
        bound = tf1.minimum(steps, tf1.maximum(1, tf1.reduce_max(lengths)))
        x = inputs[:bound]
        # the loops' steps rounded up to a multiple of UNROLL: a step past the longest
        # sequence changes nothing (every sequence is done: states carried, outputs
        # zeros, no gradient), and its outputs are cut off after the loops
        loop_steps = (bound + UNROLL - 1) // UNROLL * UNROLL
        x = tf1.pad(x, [[0, loop_steps - bound], [0, 0], [0, 0]])
    sizes = [len(w) for w in weights]
    counts = [state_leaves(layer.kind) for layer in plan]

    def stack_for(x: Any, weights: Any) -> _Stack:
        loop = {"parallel_iterations": parallel_iterations, "swap_memory": swap_memory}
        return _Stack(plan, weights, x, lengths, loop_steps, loop, lengths is not None)

    def split(flat: list[Any], counts: list[int]) -> list[list[Any]]:
        out, at = [], 0
        for c in counts:
            out.append(list(flat[at : at + c]))
            at += c
        return out

    if not training_tower():
        with tf1.name_scope("fused_rnn"):
            outputs, finals, _, _ = _forward(stack_for(x, weights), x, initial, keep=False)
    else:

        @tf.custom_gradient  # type: ignore[untyped-decorator]
        def run(x: Any, *params: Any) -> Any:
            nw = sum(sizes)
            s = stack_for(x, split(list(params[:nw]), sizes))
            outputs, finals, records, masks = _forward(
                s, x, split(list(params[nw:]), counts), keep=True
            )
            flat_finals = [t for f in finals for t in f]
            forward_scope = tf1.get_default_graph().get_name_scope()

            def grad(*d_all: Any) -> Any:
                if tf1.control_flow_v2_enabled():
                    return _grad(*d_all)
                # TensorFlow 1's control flow: the gradient of a TensorArray's read or
                # write goes to an accumulator array named after the last "gradients..."
                # part of the gradient's op names. Built under tf.gradients' scope
                # ("gradients/..."), the ops below would get their own second-order
                # accumulators ("gradients_1/gradients"), apart from those of the forward
                # loop's arrays ("gradients_1"), and the terms through the saved gates
                # would be lost.
                with tf1.name_scope(None), tf1.name_scope(forward_scope + "_grad"):
                    return _grad(*d_all)

            def _grad(d_out: Any, *d_finals: Any) -> Any:
                d_out = _zeros_if_none(d_out, outputs)
                d_flat = [_zeros_if_none(g, f) for g, f in zip(d_finals, flat_finals, strict=True)]
                d_x, d_weights, d_initial = _backward(
                    s, x, d_out, split(d_flat, counts), records, masks
                )
                # a reshape: its gradient, made here, names the accumulator of `dxs` as above
                d_x = tf1.reshape(d_x, tf1.shape(x))
                return (
                    d_x,
                    *[g for gs in d_weights for g in gs],
                    *[g for gs in d_initial for g in gs],
                )

            return (outputs, *flat_finals), grad

        flat_weights = [w for ws in weights for w in ws]
        flat_initial = [t for st in initial for t in st]
        with tf1.name_scope("fused_rnn"):
            result = run(x, *flat_weights, *flat_initial)
        outputs, finals = result[0], split(list(result[1:]), counts)
    if lengths is not None:
        outputs = tf1.pad(outputs[:bound], [[0, steps - bound], [0, 0], [0, 0]])
    final = [
        LSTMStateTuple(*f) if layer.kind == "lstm" else f[0]
        for f, layer in zip(finals, plan, strict=True)
    ]
    return outputs, (tuple(final) if type(cell) is MultiRNNCell else final[0])


def _zeros_if_none(grad: Any, like: Any) -> Any:
    return tf1.zeros_like(like) if grad is None else grad
