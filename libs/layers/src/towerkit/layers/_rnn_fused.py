"""LSTM layers over time with a gradient of their own: the weights' gradients in one product.

``dynamic_rnn`` runs a plain LSTM (`BasicLSTMCell`, `LSTMCell` without peepholes,
clipping or projection, `LSTMBlockCell` without peepholes or clipping, or a
`MultiRNNCell` of them) through `lstm_stack` when it
trains. The forward loop computes what the cells compute, op for op, and keeps for
each step and layer the step's ``[x, h]`` and one tensor of its gates, ``tanh(c)`` and
the previous ``c``. The backward loop walks time in reverse, writing each step's
gate gradient; the kernels' gradients are then one matrix product over all steps
(``[x, h]^T dz``), where differentiating the loop would add a kernel-sized product
into an accumulator at every step. Same variables, same values, same gradients
(to float rounding); 1.1-1.2x the steps per second of the differentiated loop on
2 CPU cores (``benchmarks/bench_rnn.py``).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from towerkit.layers._rnn_block import LSTMBlockCell
from towerkit.layers._rnn_cells import BasicLSTMCell, LSTMCell
from towerkit.layers._rnn_nest import LSTMStateTuple
from towerkit.layers._rnn_wrappers import MultiRNNCell
from towerkit.towers import get_current_tower_context
from towerkit.towers.compat import tf1

__all__ = ["fusable_layers", "lstm_stack"]


def _plain_lstm(cell: Any) -> bool:
    """Whether `cell` is an LSTM the fused loop computes exactly (TensorFlow 1's math)."""
    kind = type(cell)
    if kind not in (BasicLSTMCell, LSTMCell, LSTMBlockCell):
        return False
    forget = cell._forget_bias
    if isinstance(forget, bool) or not isinstance(forget, (int, float)):
        return False
    plain = cell._state_is_tuple and cell._activation is tf1.tanh
    if kind is not BasicLSTMCell:
        # an LSTMBlockCell is an LSTMCell with contrib's arguments and names
        plain = plain and not cell._use_peepholes and cell._num_proj is None
        plain = plain and cell._cell_clip is None and cell._proj_clip is None
    return bool(plain)


def fusable_layers(cell: Any) -> list[Any] | None:
    """The LSTM layers of `cell` when the fused loop can run it, else None.

    `cell` qualifies when it is a plain LSTM (`BasicLSTMCell`, `LSTMCell` or
    `LSTMBlockCell` with a numeric forget bias, ``tanh``, a tuple state, and for the
    last two no peepholes, clipping or projection) or a `MultiRNNCell` with a tuple
    state of such cells;
    subclasses and wrappers do not (their step may differ).
    """
    if type(cell) is MultiRNNCell:
        layers = list(cell._cells)
        if not cell._state_is_tuple or not all(_plain_lstm(c) for c in layers):
            return None
        return layers
    return [cell] if _plain_lstm(cell) else None


def fused_applies(cell: Any, inputs: Any, state: Any, lengths: Any) -> list[Any] | None:
    """The layers to run fused, or None for the differentiated loop.

    Fused: a plain LSTM stack (`fusable_layers`) over one input tensor of known depth,
    no `sequence_length`, every state tensor of the input's dtype, outside an
    inference tower (there no gradient is taken, and the forward loop alone is cheaper).
    """
    if lengths is not None or not isinstance(inputs, tf.Tensor):
        return None
    if inputs.shape.rank != 3 or inputs.shape[-1] is None or not inputs.dtype.is_floating:
        return None
    ctx = get_current_tower_context()
    if ctx is not None and not ctx.is_training:
        return None
    layers = fusable_layers(cell)
    if layers is None or any(c._dtype not in (None, inputs.dtype) for c in layers):
        return None
    states = state if type(cell) is MultiRNNCell else (state,)
    leaves = [t for s in states for t in s]
    if any(getattr(t, "dtype", None) != inputs.dtype for t in leaves):
        return None
    return layers


def _build(cell: Any, layers: list[Any], depth: int, dtype: Any) -> list[tuple[Any, Any]]:
    """Create (or reuse) the layers' variables under the scopes the cells' own calls use."""
    if type(cell) is not MultiRNNCell:
        cell.ensure_built(depth, cell._dtype or dtype)
        return [(cell._kernel, cell._bias)]
    with cell.scoped(None):
        for k, layer in enumerate(layers):
            with tf1.variable_scope(f"cell_{k}"):
                layer.ensure_built(depth, layer._dtype or dtype)
            depth = int(layer.output_size)
    cell._built = True
    return [(layer._kernel, layer._bias) for layer in layers]


def lstm_stack(
    cell: Any,
    layers: list[Any],
    inputs: Any,
    state: Any,
    steps: Any,
    parallel_iterations: int,
    swap_memory: bool,
) -> tuple[Any, Any]:
    """Run the LSTM `layers` of `cell` over time-major `inputs`; ``(outputs, final state)``.

    `state` is shaped as ``cell.state_size``; `steps` is the number of steps (an int or
    a scalar tensor). The variables are created as the cells' own first call creates
    them.
    """
    dtype = inputs.dtype.base_dtype
    weights = _build(cell, layers, int(inputs.shape[-1]), dtype)
    kernels = [tf1.convert_to_tensor(k) for k, _ in weights]
    biases = [tf1.convert_to_tensor(b) for _, b in weights]
    forgets = [float(layer._forget_bias) for layer in layers]
    units = [int(layer._num_units) for layer in layers]
    depths = [int(k.shape[0]) for k in kernels]
    states = list(state) if type(cell) is MultiRNNCell else [state]
    c0 = [s[0] for s in states]
    h0 = [s[1] for s in states]
    n = len(layers)
    loop = {"parallel_iterations": parallel_iterations, "swap_memory": swap_memory}
    batch = inputs.shape[1]

    def array(width: int) -> Any:
        return tf1.TensorArray(dtype, size=steps, element_shape=[batch, width])

    @tf.custom_gradient  # type: ignore[untyped-decorator]
    def run(x: Any, *params: Any) -> Any:
        ks, bs = params[:n], params[n : 2 * n]
        cs0, hs0 = params[2 * n : 3 * n], params[3 * n :]
        xs = tf1.TensorArray(dtype, size=steps, element_shape=x.shape[1:]).unstack(x)

        def step(t: Any, out: Any, zcs: Any, saved: Any, cs: Any, hs: Any) -> Any:
            below = xs.read(t)
            zcs, saved, new_c, new_h = list(zcs), list(saved), [], []
            for k in range(n):
                zc = tf1.concat([below, hs[k]], 1)
                z = tf1.nn.bias_add(tf1.matmul(zc, ks[k]), bs[k])
                i, j, f, o = tf1.split(z, 4, axis=1)
                si, tj, so = tf1.sigmoid(i), tf1.tanh(j), tf1.sigmoid(o)
                sf = tf1.sigmoid(f + tf1.cast(forgets[k], dtype))
                c = cs[k] * sf + si * tj
                tc = tf1.tanh(c)
                below = tc * so
                zcs[k] = zcs[k].write(t, zc)
                saved[k] = saved[k].write(t, tf1.concat([si, tj, sf, so, tc, cs[k]], 1))
                new_c.append(c)
                new_h.append(below)
            return t + 1, out.write(t, below), zcs, saved, new_c, new_h

        start = (
            tf1.constant(0, tf1.int32),
            array(units[-1]),
            [array(d) for d in depths],
            [array(6 * u) for u in units],
            list(cs0),
            list(hs0),
        )
        _, out, zcs, saved, cs, hs = tf1.while_loop(
            lambda t, *_: t < steps, step, start, maximum_iterations=steps, **loop
        )
        outputs = out.stack()

        def grad(d_out: Any, *d_final: Any) -> Any:
            d_c = [_zeros_if_none(g, c) for g, c in zip(d_final[:n], cs, strict=True)]
            d_h = [_zeros_if_none(g, h) for g, h in zip(d_final[n:], hs, strict=True)]
            d_outs = array(units[-1]).unstack(_zeros_if_none(d_out, outputs))

            def back(t: Any, dzs: Any, dxs: Any, dc: Any, dh: Any) -> Any:
                t = t - 1
                dzs, new_dc, new_dh = list(dzs), [None] * n, [None] * n
                above = d_outs.read(t)
                for k in reversed(range(n)):
                    h_grad = dh[k] + above
                    si, tj, sf, so, tc, c_prev = tf1.split(saved[k].read(t), 6, axis=1)
                    c_grad = dc[k] + h_grad * so * (1 - tc * tc)
                    dz = tf1.concat(
                        [
                            c_grad * tj * si * (1 - si),
                            c_grad * si * (1 - tj * tj),
                            c_grad * c_prev * sf * (1 - sf),
                            h_grad * tc * so * (1 - so),
                        ],
                        1,
                    )
                    dzs[k] = dzs[k].write(t, dz)
                    dzc = tf1.matmul(dz, ks[k], transpose_b=True)
                    width = depths[k] - units[k]
                    above, new_dh[k] = dzc[:, :width], dzc[:, width:]
                    new_dc[k] = c_grad * sf
                return t, dzs, dxs.write(t, above), new_dc, new_dh

            dx_array = tf1.TensorArray(dtype, size=steps, element_shape=x.shape[1:])
            _, dzs, dxs, dc0, dh0 = tf1.while_loop(
                lambda t, *_: t > 0,
                back,
                (tf1.convert_to_tensor(steps), [array(4 * u) for u in units], dx_array, d_c, d_h),
                maximum_iterations=steps,
                **loop,
            )
            d_kernels, d_biases = [], []
            for k in range(n):
                dz = tf1.reshape(dzs[k].stack(), [-1, 4 * units[k]])
                zc = tf1.reshape(zcs[k].stack(), [-1, depths[k]])
                d_kernels.append(tf1.matmul(zc, dz, transpose_a=True))
                d_biases.append(tf1.reduce_sum(dz, 0))
            return (dxs.stack(), *d_kernels, *d_biases, *dc0, *dh0)

        return (outputs, *cs, *hs), grad

    with tf1.name_scope("fused_lstm"):
        result = run(inputs, *kernels, *biases, *c0, *h0)
    outputs, finals = result[0], result[1:]
    final = [LSTMStateTuple(finals[k], finals[n + k]) for k in range(n)]
    return outputs, (tuple(final) if type(cell) is MultiRNNCell else final[0])


def _zeros_if_none(grad: Any, like: Any) -> Any:
    return tf1.zeros_like(like) if grad is None else grad
