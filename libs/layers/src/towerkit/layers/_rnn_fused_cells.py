"""One step of a fused layer, forward and backward: TensorFlow 1's LSTM and GRU, by hand.

Each kind gives:

- ``params(cell)``: the layer's weights, in the order the loop passes them;
- ``fold(params, forget)``: the parameters a step reads, constants folded in (an
  LSTM's forget bias added to its bias once, not at each step);
- ``step(x, state, params, keep)``: the step the cell computes (its math, with the
  constants `fold` and `biases` moved out of the loop added there instead), as
  ``(h, new_state, records)``: ``records`` are what the backward step reads (none
  without `keep`);
- ``back_weights(params, width, projected)``: what `back` multiplies by, made once
  before the loops from the layer's own parameters (not folded): the kernels' rows
  for ``h``, and for ``x``, each a `BackKernel` (large ones transposed);
- ``back(records, dh, d_rest, weights, width, projected)``: the gradients of one step, given
  the gradient of its ``h`` and of its other state tensors (an LSTM's ``c``), as
  ``(d_x, d_previous_state, writes)``: ``writes`` are the per-step gradients the
  weights' gradients are made of;
- ``weight_grads(records, writes, width, inputs)``: those gradients over all steps at
  once (each record and write stacked over time, ``[time * batch, size]``);
- ``split(params, width)``: ``(x_kernels, h_params)``, the kernels' rows that multiply
  the inputs, and the parameters a step needs when those products are made before the
  loop, for every step at once (the bottom layer, ``projected``); then a step's first
  record is its ``h`` alone, `back` gives no input gradient (None), `weight_grads`
  takes the stacked inputs, and ``input_grads(writes, x_kernels)`` gives the inputs'
  gradients for all steps at once;
- ``biases(params)``: the biases added to those products (one per kernel of
  ``x_kernels``): made before the loop with them, a projected step adds none.
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


def lstm_step(
    x: Any, state: Any, params: Any, keep: bool = True, projected: Any = None
) -> tuple[Any, Any, Any]:
    c_prev, h_prev = state
    kernel, bias = params
    if projected is None:
        zc = tf1.concat([x, h_prev], 1)
        z = tf1.nn.bias_add(tf1.matmul(zc, kernel), bias)
    else:  # the inputs' product made before the loop; `kernel`: the rows for h
        zc = h_prev
        z = tf1.matmul(h_prev, kernel) + projected[0]  # the bias: in the products
    i, j, f, o = tf1.split(z, 4, axis=1)
    si, tj, so = tf1.sigmoid(i), tf1.tanh(j), tf1.sigmoid(o)
    sf = tf1.sigmoid(f)  # the forget bias: in the bias (`lstm_fold`)
    c = c_prev * sf + si * tj
    tc = tf1.tanh(c)
    h = tc * so
    if not keep:  # forward only: nothing made for a gradient
        return h, [c, h], []
    # each kept as it is (an array of its own holds it without a copy)
    return h, [c, h], [zc, si, tj, sf, so, tc, c_prev]


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


def lstm_back_weights(params: Any, width: int, projected: bool) -> list[Any]:
    kernel = params[0]
    if projected:  # the kernel's rows for h
        return [back_kernel(kernel[width:])]
    return [back_kernel(kernel[:width]), back_kernel(kernel[width:])]


def lstm_back(
    records: Any, dh: Any, d_rest: Any, weights: Any, width: int, projected: bool = False
) -> Any:
    # the step's [x, h] (records[0]) is read by the weights' gradients only
    si, tj, sf, so, tc, c_prev = records[1:]
    (dc,) = d_rest
    dh_so = dh * so
    c_grad = dc + dh_so * (1 - tc * tc)
    c_si, dc_prev = c_grad * si, c_grad * sf  # each a factor of two gradients below
    dz = tf1.concat(
        [
            c_si * tj * (1 - si),  # c_grad tj si (1 - si)
            c_si * (1 - tj * tj),
            dc_prev * c_prev * (1 - sf),  # c_grad c_prev sf (1 - sf)
            dh_so * tc * (1 - so),  # dh tc so (1 - so)
        ],
        1,
    )
    dh_prev = weights[-1].times(dz)
    d_x = None if projected else weights[0].times(dz)
    return d_x, [dc_prev, dh_prev], [dz]


def lstm_weight_grads(records: Any, writes: Any, width: int, inputs: Any = None) -> list[Any]:
    (dz,) = writes
    d_kernel = tf1.matmul(records[0], dz, transpose_a=True)
    if inputs is not None:  # records[0] holds h alone
        d_kernel = tf1.concat([tf1.matmul(inputs, dz, transpose_a=True), d_kernel], 0)
    return [d_kernel, column_sums(dz)]


def lstm_input_grads(writes: Any, x_kernels: Any) -> Any:
    return back_kernel(x_kernels[0]).times(writes[0])


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


def gru_step(
    x: Any, state: Any, params: Any, keep: bool = True, projected: Any = None
) -> tuple[Any, Any, Any]:
    (h_prev,) = state
    gate_kernel, gate_bias, kernel, bias = params
    if projected is None:
        xh = tf1.concat([x, h_prev], 1)
        gates = tf1.sigmoid(tf1.nn.bias_add(tf1.matmul(xh, gate_kernel), gate_bias))
    else:  # the inputs' products made before the loop; the kernels: their rows for h
        xh = h_prev
        gates = tf1.sigmoid(tf1.matmul(h_prev, gate_kernel) + projected[0])
    r, u = tf1.split(gates, 2, axis=1)
    rh = r * h_prev
    if projected is None:
        cand = tf1.tanh(tf1.nn.bias_add(tf1.matmul(tf1.concat([x, rh], 1), kernel), bias))
    else:
        cand = tf1.tanh(tf1.matmul(rh, kernel) + projected[1])
    h = cand + u * (h_prev - cand)  # u h + (1 - u) cand, in 3 ops
    if not keep:
        return h, [h], []
    # [x, h] holds h (or is h, `projected`), and r * h is made again from r and h after
    # the loop: each array kept costs the loop a few ops per step
    return h, [h], [xh, gates, cand]


def gru_back_weights(params: Any, width: int, projected: bool) -> list[Any]:
    gate_kernel, _, kernel, _ = params
    if projected:  # the kernels' rows for h
        return [back_kernel(gate_kernel[width:]), back_kernel(kernel[width:])]
    # the rows for h apart, and those for x side by side: one product gives x's gradient
    x_rows = tf1.concat([gate_kernel[:width], kernel[:width]], 1)
    return [back_kernel(gate_kernel[width:]), back_kernel(kernel[width:]), back_kernel(x_rows)]


def gru_back(
    records: Any, dh: Any, d_rest: Any, weights: Any, width: int, projected: bool = False
) -> Any:
    xh, gates, cand = records
    h_prev = xh if projected else xh[:, width:]
    r, u = tf1.split(gates, 2, axis=1)
    d_cand = dh * (1 - u) * (1 - cand * cand)
    d_rh = weights[1].times(d_cand)
    # both gates' sigmoids at once: d(r, u) * (r, u) * (1 - (r, u))
    d_gates = tf1.concat([d_rh * h_prev, dh * (h_prev - cand)], 1) * (gates * (1 - gates))
    write = tf1.concat([d_gates, d_cand], 1)
    dh_prev = dh * u + d_rh * r + weights[0].times(d_gates)
    d_x = None if projected else weights[2].times(write)
    return d_x, [dh_prev], [write]


def gru_weight_grads(records: Any, writes: Any, width: int, inputs: Any = None) -> list[Any]:
    xh, gates, cand = records
    (d_all,) = writes
    units = int(cand.shape[-1])
    d_gates, d_cand = d_all[:, : 2 * units], d_all[:, 2 * units :]
    x = xh[:, :width] if inputs is None else inputs
    h_prev = xh if inputs is not None else xh[:, width:]  # records[0]: h alone, or [x, h]
    rh = gates[:, :units] * h_prev
    d_gate_kernel = tf1.matmul(xh, d_gates, transpose_a=True)
    if inputs is not None:
        d_gate_kernel = tf1.concat([tf1.matmul(x, d_gates, transpose_a=True), d_gate_kernel], 0)
    d_kernel = tf1.concat(
        [tf1.matmul(x, d_cand, transpose_a=True), tf1.matmul(rh, d_cand, transpose_a=True)], 0
    )
    d_biases = column_sums(d_all)
    return [d_gate_kernel, d_biases[: 2 * units], d_kernel, d_biases[2 * units :]]


def gru_input_grads(writes: Any, x_kernels: Any) -> Any:
    (d_all,) = writes
    units = int(x_kernels[1].shape[-1])
    d_gates, d_cand = d_all[:, : 2 * units], d_all[:, 2 * units :]
    return back_kernel(x_kernels[0]).times(d_gates) + back_kernel(x_kernels[1]).times(d_cand)


# which of a step's records `back` reads (the others: `weight_grads` only)
BACK_READS = {"lstm": (1, 2, 3, 4, 5, 6), "gru": (0, 1, 2)}


@attrs.frozen
class FusedKind:
    """A kind's functions (the module's docstring says what each gives)."""

    params: Callable[[Any], list[Any]]
    step: Callable[..., tuple[Any, Any, Any]]
    back: Callable[..., Any]
    weight_grads: Callable[..., list[Any]]
    split: Callable[[Any, int], tuple[list[Any], list[Any]]]
    input_grads: Callable[[Any, Any], Any]
    biases: Callable[[Any], list[Any]]
    back_weights: Callable[[Any, int, bool], list[Any]]
    fold: Callable[[Any, float], list[Any]]


KINDS = {
    "lstm": FusedKind(
        lstm_params,
        lstm_step,
        lstm_back,
        lstm_weight_grads,
        lstm_split,
        lstm_input_grads,
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
        gru_input_grads,
        gru_biases,
        gru_back_weights,
        gru_fold,
    ),
}


def record_widths(kind: str, depth: int, units: int, projected: bool = False) -> list[int]:
    """The widths of a step's records (what `step` returns for `back` to read).

    The first is the step's ``[x, h]``, or its ``h`` alone where the inputs' products
    are made before the loop (`projected`). An LSTM keeps each gate, ``tanh(c)`` and the
    previous ``c`` apart; a GRU its two gates together (``[r, u]``) and its candidate.

    Examples:
        >>> record_widths("lstm", 3, 2), record_widths("gru", 3, 2)
        ([5, 2, 2, 2, 2, 2, 2], [5, 4, 2])
        >>> record_widths("lstm", 3, 2, projected=True), record_widths("gru", 3, 2, True)
        ([2, 2, 2, 2, 2, 2, 2], [2, 4, 2])
    """
    first = units if projected else depth + units
    if kind == "lstm":
        return [first, *[units] * 6]
    return [first, 2 * units, units]


def write_widths(kind: str, units: int) -> list[int]:
    """The widths of a step's writes (what `back` returns for `weight_grads`).

    Examples:
        >>> write_widths("lstm", 2), write_widths("gru", 2)
        ([8], [6])
    """
    return [4 * units if kind == "lstm" else 3 * units]
