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
- ``weight_grads(records, writes, width)``: those gradients over all steps at once
  (each record and write stacked over time, ``[time * batch, size]``).
"""

from __future__ import annotations

from typing import Any

from towerkit.towers.compat import tf1


def lstm_params(cell: Any) -> list[Any]:
    return [cell._kernel, cell._bias]


def lstm_step(
    x: Any, state: Any, params: Any, forget: float, keep: bool = True
) -> tuple[Any, Any, Any]:
    c_prev, h_prev = state
    kernel, bias = params
    zc = tf1.concat([x, h_prev], 1)
    z = tf1.nn.bias_add(tf1.matmul(zc, kernel), bias)
    i, j, f, o = tf1.split(z, 4, axis=1)
    si, tj, so = tf1.sigmoid(i), tf1.tanh(j), tf1.sigmoid(o)
    sf = tf1.sigmoid(f + tf1.cast(forget, x.dtype))
    c = c_prev * sf + si * tj
    tc = tf1.tanh(c)
    h = tc * so
    if not keep:  # forward only: nothing made for a gradient
        return h, [c, h], []
    # each kept as it is (an array of its own holds it without a copy)
    return h, [c, h], [zc, si, tj, sf, so, tc, c_prev]


def lstm_back(records: Any, dh: Any, d_rest: Any, params: Any, width: int) -> Any:
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
    dzc = tf1.matmul(dz, params[0], transpose_b=True)
    return dzc[:, :width], [c_grad * sf, dzc[:, width:]], [dz]


def lstm_weight_grads(records: Any, writes: Any, width: int) -> list[Any]:
    (dz,) = writes
    return [tf1.matmul(records[0], dz, transpose_a=True), tf1.reduce_sum(dz, 0)]


def gru_params(cell: Any) -> list[Any]:
    return [cell._gate_kernel, cell._gate_bias, cell._candidate_kernel, cell._candidate_bias]


def gru_step(
    x: Any, state: Any, params: Any, forget: float, keep: bool = True
) -> tuple[Any, Any, Any]:
    (h_prev,) = state
    gate_kernel, gate_bias, kernel, bias = params
    xh = tf1.concat([x, h_prev], 1)
    gates = tf1.sigmoid(tf1.nn.bias_add(tf1.matmul(xh, gate_kernel), gate_bias))
    r, u = tf1.split(gates, 2, axis=1)
    rh = r * h_prev
    cand = tf1.tanh(tf1.nn.bias_add(tf1.matmul(tf1.concat([x, rh], 1), kernel), bias))
    h = u * h_prev + (1 - u) * cand
    if not keep:
        return h, [h], []
    return h, [h], [xh, r, u, cand, rh, h_prev]


def gru_back(records: Any, dh: Any, d_rest: Any, params: Any, width: int) -> Any:
    _, r, u, cand, _, h_prev = records  # [x, h] and r * h: the weights' gradients only
    d_cand = dh * (1 - u) * (1 - cand * cand)
    d_xrh = tf1.matmul(d_cand, params[2], transpose_b=True)
    d_rh = d_xrh[:, width:]
    d_gates = tf1.concat([d_rh * h_prev * r * (1 - r), dh * (h_prev - cand) * u * (1 - u)], 1)
    d_xh = tf1.matmul(d_gates, params[0], transpose_b=True)
    d_x = d_xrh[:, :width] + d_xh[:, :width]
    dh_prev = dh * u + d_rh * r + d_xh[:, width:]
    return d_x, [dh_prev], [tf1.concat([d_gates, d_cand], 1)]


def gru_weight_grads(records: Any, writes: Any, width: int) -> list[Any]:
    xh, rh = records[0], records[4]
    (d_all,) = writes
    units = int(rh.shape[-1])
    d_gates, d_cand = d_all[:, : 2 * units], d_all[:, 2 * units :]
    d_kernel = tf1.concat(
        [
            tf1.matmul(xh[:, :width], d_cand, transpose_a=True),
            tf1.matmul(rh, d_cand, transpose_a=True),
        ],
        0,
    )
    return [
        tf1.matmul(xh, d_gates, transpose_a=True),
        tf1.reduce_sum(d_gates, 0),
        d_kernel,
        tf1.reduce_sum(d_cand, 0),
    ]


# which of a step's records `back` reads (the others: `weight_grads` only)
BACK_READS = {"lstm": (1, 2, 3, 4, 5, 6), "gru": (1, 2, 3, 5)}

# kind -> (params, step, back, weight_grads)
KIND_STEPS: dict[str, Any] = {
    "lstm": (lstm_params, lstm_step, lstm_back, lstm_weight_grads),
    "gru": (gru_params, gru_step, gru_back, gru_weight_grads),
}


def record_widths(kind: str, depth: int, units: int) -> list[int]:
    """The widths of a step's records (what `step` returns for `back` to read).

    Examples:
        >>> record_widths("lstm", 3, 2), record_widths("gru", 3, 2)
        ([5, 2, 2, 2, 2, 2, 2], [5, 2, 2, 2, 2, 2])
    """
    return [depth + units, *[units] * (6 if kind == "lstm" else 5)]


def write_widths(kind: str, units: int) -> list[int]:
    """The widths of a step's writes (what `back` returns for `weight_grads`).

    Examples:
        >>> write_widths("lstm", 2), write_widths("gru", 2)
        ([8], [6])
    """
    return [4 * units if kind == "lstm" else 3 * units]
