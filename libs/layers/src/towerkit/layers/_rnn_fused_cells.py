"""One step of a fused layer, forward and backward: TensorFlow 1's LSTM and GRU, by hand.

Each kind gives:

- ``params(cell)``: the layer's weights, in the order the loop passes them;
- ``step(x, state, params, forget, keep)``: the step the cell computes (op for op), as
  ``(h, new_state, records)``: ``records`` are what the backward step reads (none
  without `keep`);
- ``back(records, dh, d_rest, params, width)``: the gradients of one step, given
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
  gradients for all steps at once.
"""

from __future__ import annotations

from typing import Any

from towerkit.towers.compat import tf1


def lstm_params(cell: Any) -> list[Any]:
    return [cell._kernel, cell._bias]


def lstm_split(params: Any, width: int) -> tuple[list[Any], list[Any]]:
    kernel, bias = params
    return [kernel[:width]], [kernel[width:], bias]


def lstm_step(
    x: Any, state: Any, params: Any, forget: float, keep: bool = True, projected: Any = None
) -> tuple[Any, Any, Any]:
    c_prev, h_prev = state
    kernel, bias = params
    if projected is None:
        zc = tf1.concat([x, h_prev], 1)
        z = tf1.nn.bias_add(tf1.matmul(zc, kernel), bias)
    else:  # the inputs' product made before the loop; `kernel`: the rows for h
        zc = h_prev
        z = tf1.nn.bias_add(tf1.matmul(h_prev, kernel) + projected[0], bias)
    i, j, f, o = tf1.split(z, 4, axis=1)
    si, tj, so = tf1.sigmoid(i), tf1.tanh(j), tf1.sigmoid(o)
    sf = tf1.sigmoid(f + tf1.cast(forget, z.dtype))
    c = c_prev * sf + si * tj
    tc = tf1.tanh(c)
    h = tc * so
    if not keep:  # forward only: nothing made for a gradient
        return h, [c, h], []
    # each kept as it is (an array of its own holds it without a copy)
    return h, [c, h], [zc, si, tj, sf, so, tc, c_prev]


def lstm_back(
    records: Any, dh: Any, d_rest: Any, params: Any, width: int, projected: bool = False
) -> Any:
    # the step's [x, h] (records[0]) is read by the weights' gradients only
    si, tj, sf, so, tc, c_prev = records[1:]
    (dc,) = d_rest
    c_grad = dc + dh * so * (1 - tc * tc)
    dz = tf1.concat(
        [
            c_grad * tj * si * (1 - si),
            c_grad * si * (1 - tj * tj),
            c_grad * c_prev * sf * (1 - sf),
            dh * tc * so * (1 - so),
        ],
        1,
    )
    if projected:  # params[0]: the kernel's rows for h
        return None, [c_grad * sf, tf1.matmul(dz, params[0], transpose_b=True)], [dz]
    dzc = tf1.matmul(dz, params[0], transpose_b=True)
    return dzc[:, :width], [c_grad * sf, dzc[:, width:]], [dz]


def lstm_weight_grads(records: Any, writes: Any, width: int, inputs: Any = None) -> list[Any]:
    (dz,) = writes
    d_kernel = tf1.matmul(records[0], dz, transpose_a=True)
    if inputs is not None:  # records[0] holds h alone
        d_kernel = tf1.concat([tf1.matmul(inputs, dz, transpose_a=True), d_kernel], 0)
    return [d_kernel, tf1.reduce_sum(dz, 0)]


def lstm_input_grads(writes: Any, x_kernels: Any) -> Any:
    return tf1.matmul(writes[0], x_kernels[0], transpose_b=True)


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


def gru_step(
    x: Any, state: Any, params: Any, forget: float, keep: bool = True, projected: Any = None
) -> tuple[Any, Any, Any]:
    (h_prev,) = state
    gate_kernel, gate_bias, kernel, bias = params
    if projected is None:
        xh = tf1.concat([x, h_prev], 1)
        gates = tf1.sigmoid(tf1.nn.bias_add(tf1.matmul(xh, gate_kernel), gate_bias))
    else:  # the inputs' products made before the loop; the kernels: their rows for h
        xh = h_prev
        z = tf1.matmul(h_prev, gate_kernel) + projected[0]
        gates = tf1.sigmoid(tf1.nn.bias_add(z, gate_bias))
    r, u = tf1.split(gates, 2, axis=1)
    rh = r * h_prev
    if projected is None:
        cand = tf1.tanh(tf1.nn.bias_add(tf1.matmul(tf1.concat([x, rh], 1), kernel), bias))
    else:
        cand = tf1.tanh(tf1.nn.bias_add(tf1.matmul(rh, kernel) + projected[1], bias))
    h = u * h_prev + (1 - u) * cand
    if not keep:
        return h, [h], []
    return h, [h], [xh, r, u, cand, rh, h_prev]


def gru_back(
    records: Any, dh: Any, d_rest: Any, params: Any, width: int, projected: bool = False
) -> Any:
    _, r, u, cand, _, h_prev = records  # [x, h] and r * h: the weights' gradients only
    d_cand = dh * (1 - u) * (1 - cand * cand)
    d_xrh = tf1.matmul(d_cand, params[2], transpose_b=True)
    d_rh = d_xrh if projected else d_xrh[:, width:]
    d_gates = tf1.concat([d_rh * h_prev * r * (1 - r), dh * (h_prev - cand) * u * (1 - u)], 1)
    d_xh = tf1.matmul(d_gates, params[0], transpose_b=True)
    writes = [tf1.concat([d_gates, d_cand], 1)]
    if projected:  # the kernels: their rows for h; no input gradient here
        return None, [dh * u + d_rh * r + d_xh], writes
    d_x = d_xrh[:, :width] + d_xh[:, :width]
    dh_prev = dh * u + d_rh * r + d_xh[:, width:]
    return d_x, [dh_prev], writes


def gru_weight_grads(records: Any, writes: Any, width: int, inputs: Any = None) -> list[Any]:
    xh, rh = records[0], records[4]
    (d_all,) = writes
    units = int(rh.shape[-1])
    d_gates, d_cand = d_all[:, : 2 * units], d_all[:, 2 * units :]
    x = xh[:, :width] if inputs is None else inputs
    d_gate_kernel = tf1.matmul(xh, d_gates, transpose_a=True)
    if inputs is not None:  # records[0] holds h alone
        d_gate_kernel = tf1.concat([tf1.matmul(x, d_gates, transpose_a=True), d_gate_kernel], 0)
    d_kernel = tf1.concat(
        [tf1.matmul(x, d_cand, transpose_a=True), tf1.matmul(rh, d_cand, transpose_a=True)], 0
    )
    return [d_gate_kernel, tf1.reduce_sum(d_gates, 0), d_kernel, tf1.reduce_sum(d_cand, 0)]


def gru_input_grads(writes: Any, x_kernels: Any) -> Any:
    (d_all,) = writes
    units = int(x_kernels[1].shape[-1])
    d_gates, d_cand = d_all[:, : 2 * units], d_all[:, 2 * units :]
    return tf1.matmul(d_gates, x_kernels[0], transpose_b=True) + tf1.matmul(
        d_cand, x_kernels[1], transpose_b=True
    )


# which of a step's records `back` reads (the others: `weight_grads` only)
BACK_READS = {"lstm": (1, 2, 3, 4, 5, 6), "gru": (1, 2, 3, 5)}

# kind -> (params, step, back, weight_grads, split, input_grads)
KIND_STEPS: dict[str, Any] = {
    "lstm": (lstm_params, lstm_step, lstm_back, lstm_weight_grads, lstm_split, lstm_input_grads),
    "gru": (gru_params, gru_step, gru_back, gru_weight_grads, gru_split, gru_input_grads),
}


def record_widths(kind: str, depth: int, units: int, projected: bool = False) -> list[int]:
    """The widths of a step's records (what `step` returns for `back` to read).

    The first is the step's ``[x, h]``, or its ``h`` alone where the inputs' products
    are made before the loop (`projected`).

    Examples:
        >>> record_widths("lstm", 3, 2), record_widths("gru", 3, 2)
        ([5, 2, 2, 2, 2, 2, 2], [5, 2, 2, 2, 2, 2])
        >>> record_widths("lstm", 3, 2, projected=True)
        [2, 2, 2, 2, 2, 2, 2]
    """
    return [units if projected else depth + units, *[units] * (6 if kind == "lstm" else 5)]


def write_widths(kind: str, units: int) -> list[int]:
    """The widths of a step's writes (what `back` returns for `weight_grads`).

    Examples:
        >>> write_widths("lstm", 2), write_widths("gru", 2)
        ([8], [6])
    """
    return [4 * units if kind == "lstm" else 3 * units]
