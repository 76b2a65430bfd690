"""One step of a fused layer, forward and backward: TensorFlow 1's LSTM and GRU, by hand.

A layer's kernels are split into their rows for the inputs and for ``h``. A step is
given its inputs' products with the rows for the inputs, biases added: made before the
loop for every step at once (the bottom layer, unless its inputs are dropped), or in
the step, as products of their own (never a concatenation of ``[x, h]``: the product
with ``x`` can start before the layer's previous step ends). Each kind gives:

- ``params(cell)``: the layer's weights, in the order the loop passes them;
- ``fold(params, forget)``: the same with constants folded in (an LSTM's forget bias
  added to its bias once, not at each step);
- ``split(params, width)``: ``(x_kernels, h_params)``, the kernels' rows that multiply
  the inputs, and the parameters a step reads;
- ``biases(params)``: the biases added to the inputs' products (one per kernel of
  ``x_kernels``);
- ``step(state, h_params, products, keep)``: the step the cell computes, given the
  inputs' products, as ``(h, new_state, records)``: ``records`` are what the backward
  step and the weights' gradients read (none without `keep`), the previous ``h`` first;
- ``back_weights(params, width)``: what `back` multiplies by, made once before the
  loops from the layer's own parameters (not folded): the kernels' rows for ``h``, each
  a `BackKernel` (large ones transposed);
- ``back(records, dh, d_rest, weights)``: the gradients of one step, given the gradient
  of its ``h`` and of its other state tensors (an LSTM's ``c``), as
  ``(d_previous_state, writes)``: ``writes`` are the gradients of the inputs' products
  (one array, the gates side by side), what the inputs' and the weights' gradients are
  made of;
- ``input_weights(x_kernels)``: what `input_grads` (the same for both kinds) multiplies
  the writes by for the inputs' gradient, of one step or of all steps at once;
- ``weight_grads(records, writes, inputs)``: the weights' gradients over all steps at
  once (each record, write and input stacked over time, ``[time * batch, size]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from towerkit.towers.compat import tf1


def lstm_params(cell: Any) -> list[Any]:
    return [cell._kernel, cell._bias]


def lstm_split(params: Any, width: int) -> tuple[list[Any], list[Any]]:
    kernel, bias = params
    return [kernel[:width]], [kernel[width:], bias]


def lstm_biases(params: Any) -> list[Any]:
    return [params[1]]


def lstm_fold(params: Any, forget: float) -> list[Any]:
    kernel, bias = params
    if not forget:
        return [kernel, bias]
    units = int(bias.shape[-1]) // 4
    offset = [0.0] * (2 * units) + [float(forget)] * units + [0.0] * units
    return [kernel, bias + tf1.constant(offset, bias.dtype.base_dtype)]


def lstm_step(state: Any, params: Any, products: Any, keep: bool = True) -> tuple[Any, Any, Any]:
    c_prev, h_prev = state
    z = tf1.matmul(h_prev, params[0]) + products[0]  # the bias: in the products
    i, j, f, o = tf1.split(z, 4, axis=1)
    si, tj, so = tf1.sigmoid(i), tf1.tanh(j), tf1.sigmoid(o)
    sf = tf1.sigmoid(f)  # the forget bias: in the bias (`lstm_fold`)
    c = c_prev * sf + si * tj
    tc = tf1.tanh(c)
    h = tc * so
    if not keep:  # forward only: nothing made for a gradient
        return h, [c, h], []
    # the factors the backward step multiplies by, made here off its critical path: c's
    # gradient is dc + dh * o tanh'(c); the gates' are c_grad, c_grad, c_grad and dh times
    # theirs (each kept apart: side by side, they would be copied into one more array)
    return (
        h,
        [c, h],
        [
            h_prev,
            tanh_times(tc, so),
            sf,
            sigmoid_times(si, tj),
            tanh_times(tj, si),
            sigmoid_times(sf, c_prev),
            sigmoid_times(so, tc),
        ],
    )


def tanh_times(y: Any, x: Any) -> Any:
    """``x * (1 - y^2)``: `x` times tanh's derivative where tanh gave `y`, as one op."""
    return tf1.raw_ops.TanhGrad(y=y, dy=x)


def sigmoid_times(y: Any, x: Any) -> Any:
    """``x * y (1 - y)``: `x` times the sigmoid's derivative where it gave `y`, as one op."""
    return tf1.raw_ops.SigmoidGrad(y=y, dy=x)


def column_sums(t: Any) -> Any:
    """The sums of `t`'s columns (``[n, k]`` to ``[k]``), as one product with a row of ones.

    A product: oneDNN's matrix product adds the ``[time * batch]`` rows about 4x as fast
    as ``reduce_sum(t, 0)``'s reduction on this kind of CPU (2 cores).
    """
    ones = tf1.ones(tf1.stack([1, tf1.shape(t)[0]]), t.dtype)
    return tf1.reshape(tf1.matmul(ones, t), [-1])


TRANSPOSE_FROM = 1 << 18
"""The number of elements from which a kernel that gradients are multiplied by is
transposed once before the loops (`back_kernel`), so that each step's product takes it
untransposed. oneDNN's ``g @ kernel^T`` (``transpose_b=True``) took 8-30% longer than
the same product with the kernel transposed beforehand on 2 cores of an Intel Xeon
(``[128, 1024]`` by ``[1024, 256]``: 220 against 202 us; ``[1024, 512]``: 600 against
455; ``[20, 2600]`` by ``[2600, 650]``: 379 against 339), and no longer below this
size (``[32, 384]`` by ``[384, 128]``: 20 against 22 us), where the transposition
would cost more than the steps gain."""


@attrs.frozen
class BackKernel:
    """A kernel that the backward step multiplies gradients by, transposed (`times`).

    Attributes:
        kernel: the kernel, or its transpose made before the loops (`pre`).
        pre: whether `kernel` is already transposed.
    """

    kernel: Any
    pre: bool

    def times(self, grad: Any) -> Any:
        """``grad @ kernel^T``."""
        if self.pre:
            return tf1.matmul(grad, self.kernel)
        return tf1.matmul(grad, self.kernel, transpose_b=True)


def back_kernel(kernel: Any) -> BackKernel:
    """`kernel` for `BackKernel.times`: transposed now where it has `TRANSPOSE_FROM` elements."""
    pre = (kernel.shape.num_elements() or 0) >= TRANSPOSE_FROM
    return BackKernel(tf1.transpose(kernel) if pre else kernel, pre)


def lstm_back_weights(params: Any, width: int) -> list[Any]:
    return [back_kernel(params[0][width:])]  # the kernel's rows for h


def lstm_back(records: Any, dh: Any, d_rest: Any, weights: Any) -> Any:
    # the previous h (records[0]) is read by the weights' gradients only
    c_factor, sf, *gates = records[1:7]
    (dc,) = d_rest
    c_grad = dc + dh * c_factor
    dz = tf1.concat([c_grad * gates[0], c_grad * gates[1], c_grad * gates[2], dh * gates[3]], 1)
    return [c_grad * sf, weights[0].times(dz)], [dz]


def lstm_input_weights(x_kernels: Any) -> list[Any]:
    return [back_kernel(x_kernels[0])]


def input_grads(writes: Any, weights: Any) -> Any:
    """The inputs' gradient from either kind's writes (one step's, or all steps' stacked).

    The gates' gradients side by side times the kernels' rows for the inputs
    (``input_weights``).
    """
    return weights[0].times(writes[0])


def lstm_weight_grads(records: Any, writes: Any, inputs: Any) -> list[Any]:
    (dz,) = writes
    d_kernel = tf1.concat(
        [tf1.matmul(inputs, dz, transpose_a=True), tf1.matmul(records[0], dz, transpose_a=True)], 0
    )
    return [d_kernel, column_sums(dz)]


def gru_params(cell: Any) -> list[Any]:
    return [cell._gate_kernel, cell._gate_bias, cell._candidate_kernel, cell._candidate_bias]


def gru_split(params: Any, width: int) -> tuple[list[Any], list[Any]]:
    gate_kernel, gate_bias, kernel, bias = params
    return [gate_kernel[:width], kernel[:width]], [
        gate_kernel[width:],
        gate_bias,
        kernel[width:],
        bias,
    ]


def gru_biases(params: Any) -> list[Any]:
    return [params[1], params[3]]


def gru_fold(params: Any, forget: float) -> list[Any]:
    del forget  # a GRU has none
    return list(params)


def gru_step(state: Any, params: Any, products: Any, keep: bool = True) -> tuple[Any, Any, Any]:
    (h_prev,) = state
    gate_kernel, _, kernel, _ = params  # the kernels' rows for h; the biases: in the products
    gates = tf1.sigmoid(tf1.matmul(h_prev, gate_kernel) + products[0])
    r, u = tf1.split(gates, 2, axis=1)
    cand = tf1.tanh(tf1.matmul(r * h_prev, kernel) + products[1])
    keep_back = h_prev - cand
    h = cand + keep_back * u  # u h + (1 - u) cand, in 3 ops
    if not keep:
        return h, [h], []
    # the factors the backward step multiplies by, made here off its critical path:
    # d cand = dh * (1 - u) (1 - cand^2); d [r, u] = [d (r h), dh] * [h, h - cand] * g';
    # r * h is made again after the loop, from r and h, for the kernel's gradient
    cand_factor = tanh_times(cand, 1 - u)
    gate_factor = sigmoid_times(gates, tf1.concat([h_prev, keep_back], 1))
    return h, [h], [h_prev, r, u, cand_factor, gate_factor]


def gru_back_weights(params: Any, width: int) -> list[Any]:
    gate_kernel, _, kernel, _ = params
    return [back_kernel(gate_kernel[width:]), back_kernel(kernel[width:])]  # the rows for h


def gru_back(records: Any, dh: Any, d_rest: Any, weights: Any) -> Any:
    del d_rest  # a GRU's state is h alone
    _, r, u, cand_factor, gate_factor = records[:5]
    d_cand = dh * cand_factor
    d_rh = weights[1].times(d_cand)
    d_gates = tf1.concat([d_rh, dh], 1) * gate_factor
    dh_prev = tf1.add_n([dh * u, d_rh * r, weights[0].times(d_gates)])
    return [dh_prev], [tf1.concat([d_gates, d_cand], 1)]


def gru_input_weights(x_kernels: Any) -> list[Any]:
    # the rows for x side by side: one product with the gates' gradients gives x's
    return [back_kernel(tf1.concat(x_kernels, 1))]


def gru_weight_grads(records: Any, writes: Any, inputs: Any) -> list[Any]:
    h_prev, r = records[:2]
    (d_all,) = writes
    units = int(h_prev.shape[-1])
    d_gates, d_cand = d_all[:, : 2 * units], d_all[:, 2 * units :]
    d_gate_kernel = tf1.concat(
        [
            tf1.matmul(inputs, d_gates, transpose_a=True),
            tf1.matmul(h_prev, d_gates, transpose_a=True),
        ],
        0,
    )
    rh = r * h_prev
    d_kernel = tf1.concat(
        [tf1.matmul(inputs, d_cand, transpose_a=True), tf1.matmul(rh, d_cand, transpose_a=True)], 0
    )
    d_biases = column_sums(d_all)
    return [d_gate_kernel, d_biases[: 2 * units], d_kernel, d_biases[2 * units :]]


# which of a step's records `back` reads (the others: `weight_grads` only)
BACK_READS = {"lstm": (1, 2, 3, 4, 5, 6), "gru": (1, 2, 3, 4)}


@attrs.frozen
class FusedKind:
    """A kind's functions (the module's docstring says what each gives)."""

    params: Callable[[Any], list[Any]]
    step: Callable[..., tuple[Any, Any, Any]]
    back: Callable[..., Any]
    weight_grads: Callable[..., list[Any]]
    split: Callable[[Any, int], tuple[list[Any], list[Any]]]
    input_weights: Callable[[Any], list[Any]]
    biases: Callable[[Any], list[Any]]
    back_weights: Callable[[Any, int], list[Any]]
    fold: Callable[[Any, float], list[Any]]


KINDS = {
    "lstm": FusedKind(
        lstm_params,
        lstm_step,
        lstm_back,
        lstm_weight_grads,
        lstm_split,
        lstm_input_weights,
        lstm_biases,
        lstm_back_weights,
        lstm_fold,
    ),
    "gru": FusedKind(
        gru_params,
        gru_step,
        gru_back,
        gru_weight_grads,
        gru_split,
        gru_input_weights,
        gru_biases,
        gru_back_weights,
        gru_fold,
    ),
}


def record_widths(kind: str, depth: int, units: int, projected: bool = False) -> list[int]:
    """The widths of a step's records, and of its inputs where the loop keeps them.

    A step keeps its previous ``h`` first. An LSTM keeps its ``c`` gradient's factor,
    its forget gate and each gate's factor (4, apart); a GRU its two gates (apart:
    together, the backward step would split them again), its candidate's factor and
    its gates' factor (``[r, u]``'s, together). The loop keeps
    a step's inputs last, unless their products are made before the loop (`projected`),
    where the inputs are at hand.

    Examples:
        >>> record_widths("lstm", 3, 2), record_widths("gru", 3, 2)
        ([2, 2, 2, 2, 2, 2, 2, 3], [2, 2, 2, 2, 4, 3])
        >>> record_widths("lstm", 3, 2, projected=True), record_widths("gru", 3, 2, True)
        ([2, 2, 2, 2, 2, 2, 2], [2, 2, 2, 2, 4])
    """
    own = [units] * 7 if kind == "lstm" else [units, units, units, units, 2 * units]
    return own if projected else [*own, depth]


def write_widths(kind: str, units: int) -> list[int]:
    """The widths of a step's writes (what `back` returns for `weight_grads`).

    Examples:
        >>> write_widths("lstm", 2), write_widths("gru", 2)
        ([8], [6])
    """
    return [4 * units if kind == "lstm" else 3 * units]
