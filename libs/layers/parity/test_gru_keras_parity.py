"""``GRUCell(reset_after=True)`` against tf-keras's ``GRUCell(reset_after=True)``.

Keras's GRU (its default), cuDNN's and PyTorch's apply the reset gate after the
state's product. Both cells run over the same sequence with the same weights, in
separate graphs: towerkit's under `dynamic_rnn`, tf-keras's under its ``RNN`` layer.
Keras keeps an input and a recurrent bias for every gate (``bias`` ``[2, 3n]``, gates
``z, r, h``); towerkit one bias per gate, their sum. The outputs, the final state and
the gradients (of the input and of every weight, mapped) must agree. Run by ``nox -s
layers_parity`` (which installs tf-keras).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_v2_behavior()

keras = pytest.importorskip("tf_keras", reason="tf-keras not installed: nox -s layers_parity")

from towerkit.layers import rnn as tk  # noqa: E402
from towerkit.towers import TowerContext  # noqa: E402

BATCH, TIME, DEPTH, UNITS = 3, 6, 4, 5


def towerkit_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    d, n = DEPTH, UNITS
    p = "rnn/gru_cell/"
    return {
        p + "gates/kernel": rng.uniform(-0.6, 0.6, [d + n, 2 * n]),
        p + "gates/bias": rng.uniform(-0.6, 0.6, [2 * n]),
        p + "candidate/input_kernel": rng.uniform(-0.6, 0.6, [d, n]),
        p + "candidate/input_bias": rng.uniform(-0.6, 0.6, [n]),
        p + "candidate/hidden_kernel": rng.uniform(-0.6, 0.6, [n, n]),
        p + "candidate/hidden_bias": rng.uniform(-0.6, 0.6, [n]),
    }


def as_keras(w: dict[str, np.ndarray], split: np.ndarray) -> dict[str, np.ndarray]:
    """Keras's kernel, recurrent kernel and bias for towerkit's weights `w`.

    Keras's gates are ordered ``z, r, h`` (``z`` is towerkit's ``u``); each gate bias is
    split between Keras's input row (`split` of it) and recurrent row (the rest).
    """
    d, n = DEPTH, UNITS
    p = "rnn/gru_cell/"
    gk, gb = w[p + "gates/kernel"], w[p + "gates/bias"]
    r_in, u_in, r_h, u_h = gk[:d, :n], gk[:d, n:], gk[d:, :n], gk[d:, n:]
    r_b, u_b = gb[:n], gb[n:]
    kernel = np.concatenate([u_in, r_in, w[p + "candidate/input_kernel"]], 1)
    recurrent = np.concatenate([u_h, r_h, w[p + "candidate/hidden_kernel"]], 1)
    first = np.concatenate([u_b * split[:n], r_b * split[n:], w[p + "candidate/input_bias"]])
    second = np.concatenate(
        [u_b * (1 - split[:n]), r_b * (1 - split[n:]), w[p + "candidate/hidden_bias"]]
    )
    return {"kernel": kernel, "recurrent_kernel": recurrent, "bias": np.stack([first, second])}


def loss_of(outputs, state):
    weights = tf1.constant(np.linspace(-1, 1, UNITS), tf.float32)
    return tf1.reduce_sum(outputs * weights) + tf1.reduce_sum(state * weights[::-1])


def run_towerkit(w, x):
    g = tf1.Graph()
    with g.as_default(), TowerContext("", is_training=True):
        xt = tf1.constant(x)
        cell = tk.GRUCell(UNITS, reset_after=True)
        outputs, state = tk.dynamic_rnn(cell, xt, dtype=tf.float32, scope="rnn")
        variables = {v.op.name: v for v in tf1.global_variables()}
        assert set(variables) == set(w)
        names = sorted(variables)
        grads = tf1.gradients(loss_of(outputs, state), [xt, *(variables[k] for k in names)])
        with tf1.Session(graph=g) as sess:
            for name, v in variables.items():
                v.load(w[name].astype(np.float32), sess)
            out, st, gr = sess.run([outputs, state, grads])
    return out, st, gr[0], dict(zip(names, gr[1:], strict=True))


def run_keras(kw, x):
    g = tf1.Graph()
    with g.as_default():
        xt = tf1.constant(x)
        cell = keras.layers.GRUCell(UNITS, reset_after=True)
        layer = keras.layers.RNN(cell, return_sequences=True, return_state=True)
        outputs, state = layer(xt)
        grads = tf1.gradients(
            loss_of(outputs, state), [xt, cell.kernel, cell.recurrent_kernel, cell.bias]
        )
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            cell.kernel.load(kw["kernel"].astype(np.float32), sess)
            cell.recurrent_kernel.load(kw["recurrent_kernel"].astype(np.float32), sess)
            cell.bias.load(kw["bias"].astype(np.float32), sess)
            out, st, gr = sess.run([outputs, state, grads])
    return out, st, gr[0], dict(zip(["kernel", "recurrent_kernel", "bias"], gr[1:], strict=True))


@pytest.mark.parametrize("seed", [0, 1])
def test_same_outputs_states_and_gradients_as_keras(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal([BATCH, TIME, DEPTH]).astype(np.float32)
    w = towerkit_weights(rng)
    kw = as_keras(w, rng.uniform(0, 1, 2 * UNITS))
    out, state, dx, dw = run_towerkit(w, x)
    k_out, k_state, k_dx, k_dw = run_keras(kw, x)
    close = {"rtol": 1e-5, "atol": 1e-5}
    np.testing.assert_allclose(out, k_out, **close)
    np.testing.assert_allclose(state, k_state, **close)
    np.testing.assert_allclose(dx, k_dx, **close)
    # Keras's weights' gradients, mapped to towerkit's variables: the gradient of a bias
    # that is the sum of Keras's two is the gradient of either of them.
    p = "rnn/gru_cell/"
    d, n = DEPTH, UNITS
    mapped = {
        p + "gates/kernel": np.concatenate(
            [
                np.concatenate([k_dw["kernel"][:, n : 2 * n], k_dw["kernel"][:, :n]], 1),
                np.concatenate(
                    [k_dw["recurrent_kernel"][:, n : 2 * n], k_dw["recurrent_kernel"][:, :n]], 1
                ),
            ]
        ),
        p + "gates/bias": np.concatenate([k_dw["bias"][0, n : 2 * n], k_dw["bias"][0, :n]]),
        p + "candidate/input_kernel": k_dw["kernel"][:, 2 * n :],
        p + "candidate/input_bias": k_dw["bias"][0, 2 * n :],
        p + "candidate/hidden_kernel": k_dw["recurrent_kernel"][:, 2 * n :],
        p + "candidate/hidden_bias": k_dw["bias"][1, 2 * n :],
    }
    assert mapped[p + "gates/kernel"].shape == (d + n, 2 * n)
    np.testing.assert_allclose(k_dw["bias"][0, : 2 * n], k_dw["bias"][1, : 2 * n], **close)
    for name, want in mapped.items():
        np.testing.assert_allclose(dw[name], want, err_msg=name, **close)


def test_reset_before_differs_from_keras():
    """TensorFlow 1's cell (the default) is another function of the same weights: the
    comparison above can tell the two apart."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal([BATCH, TIME, DEPTH]).astype(np.float32)
    w = towerkit_weights(rng)
    kw = as_keras(w, np.full(2 * UNITS, 0.5))
    k_out = run_keras(kw, x)[0]
    p = "rnn/gru_cell/"
    before = {
        p + "gates/kernel": w[p + "gates/kernel"],
        p + "gates/bias": w[p + "gates/bias"],
        p + "candidate/kernel": np.concatenate(
            [w[p + "candidate/input_kernel"], w[p + "candidate/hidden_kernel"]]
        ),
        p + "candidate/bias": w[p + "candidate/input_bias"] + w[p + "candidate/hidden_bias"],
    }
    g = tf1.Graph()
    with g.as_default(), TowerContext("", is_training=True):
        outputs, _ = tk.dynamic_rnn(
            tk.GRUCell(UNITS), tf1.constant(x), dtype=tf.float32, scope="rnn"
        )
        with tf1.Session(graph=g) as sess:
            for v in tf1.global_variables():
                v.load(before[v.op.name].astype(np.float32), sess)
            out = sess.run(outputs)
    assert np.abs(out - k_out).max() > 1e-3
