"""The suite's model built from towerkit.layers, and its NumPy reference.

``x`` goes through ``BatchNorm('bn', x)`` then ``FullyConnected('fc', h, 1)``, with a
mean squared error cost: the smallest model in which the layers' tower rules
matter. In a training tower, ``BatchNorm`` normalizes the tower's own batch by that
batch's statistics; only the main training tower (of each process) updates the
moving averages, once per step, through ``UPDATE_OPS``. The reference below
computes what that gives with plain SGD, from the variables' starting values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from towerkit.conformance._sizes import INPUT_DIM, LEARNING_RATE

TRAINABLE = ("bn/gamma", "bn/beta", "fc/W", "fc/b")
"""The layers model's trainable variables, as tensorpack's layers name them."""

STATISTICS = ("bn/mean/EMA", "bn/variance/EMA")
"""Its batch-norm moving averages (not trainable)."""

LAYER_VARIABLES = TRAINABLE + STATISTICS

LAYER_SHAPES = {
    "bn/gamma": (INPUT_DIM,),
    "bn/beta": (INPUT_DIM,),
    "fc/W": (INPUT_DIM, 1),
    "fc/b": (1,),
    "bn/mean/EMA": (INPUT_DIM,),
    "bn/variance/EMA": (INPUT_DIM,),
}

INITIAL_STATISTICS = {"bn/mean/EMA": 0.0, "bn/variance/EMA": 1.0}
"""The moving averages' initial values (zeros and ones, as ``BatchNorm`` makes them)."""

MOMENTUM = 0.9
"""The moving averages' momentum (``BatchNorm``'s default)."""

EPSILON = 1e-5
"""``BatchNorm``'s default epsilon."""


def build_layers_cost(x: Any, y: Any) -> Any:
    """The tower function of the layers model: ``pred`` and the scalar ``cost``."""
    import tensorflow as tf

    from towerkit.layers import BatchNorm, FullyConnected

    h = BatchNorm("bn", x)
    pred = tf.identity(FullyConnected("fc", h, 1), name="pred")
    return tf.reduce_mean(tf.square(pred - y), name="cost")


def _forward(params: Mapping[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, ...]:
    x = np.asarray(x, np.float64)
    mean, var = x.mean(0), x.var(0)
    xhat = (x - mean) / np.sqrt(var + EPSILON)
    h = xhat * params["bn/gamma"] + params["bn/beta"]
    return xhat, h, h @ params["fc/W"] + params["fc/b"], mean, var


def layers_gradients(
    params: Mapping[str, np.ndarray], batch: tuple[np.ndarray, np.ndarray]
) -> dict[str, np.ndarray]:
    """The gradient of the layers model's cost on one batch, in a training tower (float64).

    Examples:
        >>> p = {"bn/gamma": np.ones(3), "bn/beta": np.zeros(3),
        ...      "fc/W": np.zeros((3, 1)), "fc/b": np.zeros(1)}
        >>> batch = (np.array([[1.0, 2, 3], [3, 2, 1]]), np.array([[1.0], [3.0]]))
        >>> g = layers_gradients(p, batch)
        >>> g["fc/b"], g["bn/gamma"]
        (array([-4.]), array([0., 0., 0.]))
    """
    xhat, h, pred, _, _ = _forward(params, batch[0])
    g = 2.0 / len(pred) * (pred - np.asarray(batch[1], np.float64))
    dh = g @ np.asarray(params["fc/W"], np.float64).T
    return {
        "fc/W": h.T @ g,
        "fc/b": g.sum(0),
        "bn/gamma": (dh * xhat).sum(0),
        "bn/beta": dh.sum(0),
    }


def moving_update(
    stats: Mapping[str, np.ndarray], x: np.ndarray, momentum: float = MOMENTUM
) -> dict[str, np.ndarray]:
    """The moving averages after one update from the 2-D batch `x`.

    For a 2-D input, ``BatchNorm`` takes the batch's moments as ``tf.nn.moments``
    gives them: the variance is the biased one (as tensorpack's layer does).

    Examples:
        >>> s = {"bn/mean/EMA": np.zeros(1), "bn/variance/EMA": np.ones(1)}
        >>> out = moving_update(s, np.array([[1.0], [3.0]]))
        >>> np.round(out["bn/mean/EMA"], 6), np.round(out["bn/variance/EMA"], 6)
        (array([0.2]), array([1.]))
    """
    x = np.asarray(x, np.float64)
    batch = {"bn/mean/EMA": x.mean(0), "bn/variance/EMA": x.var(0)}
    return {
        k: np.asarray(stats[k], np.float64)
        - (np.asarray(stats[k], np.float64) - batch[k]) * (1.0 - momentum)
        for k in STATISTICS
    }


def layers_sgd_step(
    params: Mapping[str, np.ndarray],
    batches: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    combine: Literal["average", "sum"],
    learning_rate: float = LEARNING_RATE,
) -> dict[str, np.ndarray]:
    """One plain SGD step of the trainable variables, the towers' gradients combined.

    Examples:
        >>> p = {"bn/gamma": np.ones(3), "bn/beta": np.zeros(3),
        ...      "fc/W": np.zeros((3, 1)), "fc/b": np.zeros(1)}
        >>> batch = (np.array([[1.0, 2, 3], [3, 2, 1]]), np.array([[1.0], [3.0]]))
        >>> layers_sgd_step(p, [batch, batch], combine="sum")["fc/b"]
        array([0.8])
    """
    grads = [layers_gradients(params, b) for b in batches]
    out = {}
    for name in TRAINABLE:
        total: np.ndarray = np.sum([g[name] for g in grads], axis=0)
        if combine == "average":
            total = total / len(grads)
        out[name] = np.asarray(params[name], np.float64).reshape(
            LAYER_SHAPES[name]
        ) - learning_rate * total.reshape(LAYER_SHAPES[name])
    return out


Updates = Sequence[Sequence[np.ndarray]]
"""One process's moving-average updates in order: per update, the batches it may use."""


def moving_sequences(
    start: Mapping[str, np.ndarray],
    queues: Sequence[Updates],
    own: int | None,
    *,
    stale_reads: bool = False,
) -> Iterator[dict[str, np.ndarray]]:
    """The moving averages after every order of `queues`' updates that ends `own`'s.

    Each queue's updates land in their order, interleaved with the other queues'
    in any way; every update may use any of its batches. A result is yielded as soon
    as queue `own` is exhausted, so the other queues may be applied part-way (a
    worker reading a shared copy before the others are done). With `own` None, a
    result is yielded at every point, the start included (a copy that a process
    reads while any of them may still be on the way).

    With `stale_reads`, the queues are processes that update one shared copy
    concurrently: an update reads the copy, computes its decrement from what it
    read, and subtracts it later, so another process's update may land in between.
    Each update then reads any value the copy held since its own process's
    previous update landed (it cannot read older ones: a process's updates run
    one after another).

    Examples:
        >>> s = {"bn/mean/EMA": np.zeros(1), "bn/variance/EMA": np.ones(1)}
        >>> a, b = np.array([[1.0], [3.0]]), np.array([[5.0], [7.0]])
        >>> [round(float(r["bn/mean/EMA"][0]), 4) for r in moving_sequences(s, [[[a, b]]], 0)]
        [0.2, 0.6]
        >>> len(list(moving_sequences(s, [[[a]], [[b]]], 0)))  # a; a then b; b then a
        3
        >>> len(list(moving_sequences(s, [[[a]], [[b]]], None)))  # and none; b
        5
        >>> both = moving_sequences(s, [[[a]], [[b]]], None, stale_reads=True)
        >>> sorted({round(float(r["bn/mean/EMA"][0]), 4) for r in both})  # 0.2 + 0.6: both read 0
        [0.0, 0.2, 0.6, 0.74, 0.78, 0.8]
    """
    first = {k: np.asarray(v, np.float64) for k, v in start.items()}
    yield from _sequences(first, [first], queues, own, [0] * len(queues), stale_reads)


def _sequences(
    current: dict[str, np.ndarray],
    history: list[dict[str, np.ndarray]],
    queues: Sequence[Updates],
    own: int | None,
    since: list[int],
    stale_reads: bool,
) -> Iterator[dict[str, np.ndarray]]:
    if own is None or not queues[own]:
        yield current
    for q, queue in enumerate(queues):
        if not queue:
            continue
        rest = [*queues[:q], queue[1:], *queues[q + 1 :]]
        reads = history[since[q] :] if stale_reads else [current]
        for x in queue[0]:
            for read in reads:
                if read is current:
                    new = moving_update(current, x)
                else:
                    moved = moving_update(read, x)
                    new = {k: current[k] + (moved[k] - read[k]) for k in STATISTICS}
                after = [*history, new] if stale_reads else history
                landed = [*since[:q], len(after) - 1, *since[q + 1 :]]
                yield from _sequences(new, after, rest, own, landed, stale_reads)
