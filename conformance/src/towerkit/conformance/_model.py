"""The suite's model: a tiny linear regression, its data, and a NumPy reference of one SGD step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from towerkit.conformance._sizes import INPUT_DIM, LEARNING_RATE

BATCH_SIZE = 2
"""Datapoints per batch (per tower)."""

DATAPOINTS = 16
"""Datapoints per data shard (a process reads its own shard)."""

VARIABLES = ("linear/w", "linear/b")
"""The model's variables, as a single-tower graph names them."""

SHAPES = {"linear/w": (INPUT_DIM, 1), "linear/b": (1,)}

_TRUE_W = np.array([[1.0], [-2.0], [0.5]], dtype=np.float32)


def shard_data(shard: int) -> tuple[np.ndarray, np.ndarray]:
    """The datapoints ``(x, y)`` of data shard `shard` (deterministic).

    Examples:
        >>> x, y = shard_data(0)
        >>> x.shape, y.shape, bool((shard_data(1)[0] != x).any())
        ((16, 3), (16, 1), True)
    """
    rng = np.random.default_rng(1000 + shard)
    x = rng.normal(size=(DATAPOINTS, INPUT_DIM)).astype(np.float32)
    y = (x @ _TRUE_W + 0.3 + 0.1 * rng.normal(size=(DATAPOINTS, 1))).astype(np.float32)
    return x, y


def first_batches(shard: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first `count` batches an unshuffled input of shard `shard` produces, in order.

    Examples:
        >>> [b[0].shape for b in first_batches(0, 2)]
        [(2, 3), (2, 3)]
    """
    x, y = shard_data(shard)
    n = DATAPOINTS // BATCH_SIZE
    return [
        (
            x[(i % n) * BATCH_SIZE : (i % n + 1) * BATCH_SIZE],
            y[(i % n) * BATCH_SIZE : (i % n + 1) * BATCH_SIZE],
        )
        for i in range(count)
    ]


def step_batches(step: int, num_towers: int, processes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The batches of step `step` (0-based): each process's towers read their shard in order.

    Examples:
        >>> [b[0].shape for b in step_batches(1, num_towers=2, processes=2)]
        [(2, 3), (2, 3), (2, 3), (2, 3)]
    """
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for shard in range(processes):
        out += first_batches(shard, (step + 1) * num_towers)[step * num_towers :]
    return out


def gradients(
    params: Mapping[str, np.ndarray], batch: tuple[np.ndarray, np.ndarray], kind: str
) -> dict[str, np.ndarray]:
    """The gradient of the suite's cost on one batch, in float64.

    ``"quadratic"``: ``mean((x w + b - y)^2)``; ``"linear"``: ``mean((x w + b) y)``,
    whose gradient does not depend on the variables.

    Examples:
        >>> p = {"linear/w": np.zeros((3, 1)), "linear/b": np.zeros(1)}
        >>> batch = (np.ones((2, 3)), np.full((2, 1), 2.0))
        >>> gradients(p, batch, "quadratic")["linear/b"]
        array([-4.])
        >>> gradients(p, batch, "linear")["linear/b"]
        array([2.])
    """
    x = batch[0].astype(np.float64)
    y = batch[1].astype(np.float64)
    w = np.asarray(params["linear/w"], np.float64).reshape(INPUT_DIM, 1)
    b = np.asarray(params["linear/b"], np.float64).reshape(1)
    n = len(x)
    if kind == "quadratic":
        residual = x @ w + b - y
        return {"linear/w": 2.0 / n * x.T @ residual, "linear/b": 2.0 / n * residual.sum(0)}
    if kind == "linear":
        return {"linear/w": x.T @ y / n, "linear/b": y.sum(0) / n}
    msg = f"'kind' must be 'quadratic' or 'linear'; got {kind!r}"
    raise ValueError(msg)


def gradient_magnitudes(
    params: Mapping[str, np.ndarray], batch: tuple[np.ndarray, np.ndarray], kind: str
) -> dict[str, np.ndarray]:
    """`gradients` with every term taken by its absolute value: what rounding error scales with.

    A gradient computed in a low precision is off by a few units of that precision's
    rounding times this, not times the gradient itself (terms may cancel).

    Examples:
        >>> p = {"linear/w": np.ones((3, 1)), "linear/b": np.ones(1)}
        >>> batch = (np.ones((2, 3)), np.full((2, 1), 4.0))
        >>> gradients(p, batch, "quadratic")["linear/b"], gradient_magnitudes(p, batch, "quadratic")["linear/b"]
        (array([0.]), array([16.]))
    """
    x = np.abs(batch[0].astype(np.float64))
    y = np.abs(batch[1].astype(np.float64))
    n = len(x)
    if kind == "quadratic":
        w = np.abs(np.asarray(params["linear/w"], np.float64).reshape(INPUT_DIM, 1))
        b = np.abs(np.asarray(params["linear/b"], np.float64).reshape(1))
        terms = x @ w + b + y
        return {"linear/w": 2.0 / n * x.T @ terms, "linear/b": 2.0 / n * terms.sum(0)}
    if kind == "linear":
        return {"linear/w": x.T @ y / n, "linear/b": y.sum(0) / n}
    msg = f"'kind' must be 'quadratic' or 'linear'; got {kind!r}"
    raise ValueError(msg)


def sgd_step(
    params: Mapping[str, np.ndarray],
    batches: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    kind: str,
    combine: Literal["average", "sum"],
    learning_rate: float = LEARNING_RATE,
) -> dict[str, np.ndarray]:
    """One plain SGD step from `params` with the towers' gradients averaged or summed.

    With ``"average"`` and batches of one size, this is one step on the
    concatenation of the batches: the single-tower reference of a data-parallel step.

    Examples:
        >>> p = {"linear/w": np.zeros((3, 1)), "linear/b": np.zeros(1)}
        >>> b1 = (np.ones((2, 3)), np.full((2, 1), 2.0))
        >>> b2 = (np.ones((2, 3)), np.full((2, 1), 4.0))
        >>> sgd_step(p, [b1, b2], kind="linear", combine="average")["linear/b"]
        array([-0.3])
        >>> sgd_step(p, [b1, b2], kind="linear", combine="sum")["linear/b"]
        array([-0.6])
    """
    grads = [gradients(params, b, kind) for b in batches]
    out = {}
    for name in VARIABLES:
        total: np.ndarray = np.sum([g[name] for g in grads], axis=0)
        if combine == "average":
            total = total / len(grads)
        out[name] = (
            np.asarray(params[name], np.float64).reshape(SHAPES[name]) - learning_rate * total
        )
    return out


def predict(params: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    """The model's output ``x w + b`` (the tensor named ``pred``).

    Examples:
        >>> predict({"linear/w": np.ones((3, 1)), "linear/b": [1.0]}, np.ones((1, 3)))
        array([[4.]])
    """
    w = np.asarray(params["linear/w"], np.float64).reshape(INPUT_DIM, 1)
    b = np.asarray(params["linear/b"], np.float64).reshape(1)
    return np.asarray(x, np.float64) @ w + b


MODEL_KINDS = ("quadratic", "linear", "layers")
"""The suite's models (`SuiteModel`'s ``kind``)."""

PROBE_INPUTS = np.array(
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, -0.5, 2.0], [-1.0, 2.0, 1.0]], dtype=np.float32
)
"""What the suite feeds a predictor."""


class SuiteModel:
    """The model every trainer of the suite trains: linear regression on 3 features.

    A trainer factory that builds its own graph gets one (see `TrainerEntry`): use
    `input_signature`, `make_input`, `build_cost` (the tower function) and
    `make_optimizer`, or `as_model_desc` with ``launch_train_with_config``.

    The tower function creates ``linear/w`` (random initial values: replicated
    copies differ until a trainer makes them equal) and ``linear/b``, the output
    ``pred`` and the scalar ``cost``.

    Args:
        kind: ``"quadratic"`` (mean squared error), ``"linear"``, or ``"layers"``
            (the same regression through towerkit.layers' ``BatchNorm`` and
            ``FullyConnected``: see ``towerkit.conformance._layers_model``).
        shard: which data shard the input reads (a process's rank).
        ema_decay: wrap the optimizer in ``EMAOptimizer`` with this decay (None: plain SGD).
    """

    def __init__(
        self, kind: str = "quadratic", shard: int = 0, ema_decay: float | None = None
    ) -> None:
        if kind not in MODEL_KINDS:
            msg = f"'kind' must be one of {', '.join(map(repr, MODEL_KINDS))}; got {kind!r}"
            raise ValueError(msg)
        self.kind = kind
        self.shard = shard
        self.ema_decay = ema_decay
        self.tower_calls = 0
        self._signature: tuple[Any, ...] | None = None

    @property
    def input_signature(self) -> tuple[Any, ...]:
        """``x`` (float32 [None, 3]) and ``y`` (float32 [None, 1]), as named ``tf.TensorSpec``."""
        if self._signature is None:
            import tensorflow as tf

            self._signature = (
                tf.TensorSpec([None, INPUT_DIM], tf.float32, "x"),
                tf.TensorSpec([None, 1], tf.float32, "y"),
            )
        return self._signature

    def make_input(self) -> Any:
        """An unshuffled ``NumpyInput`` of this model's shard, `BATCH_SIZE` per batch."""
        from towerkit.trainers import NumpyInput

        return NumpyInput(list(shard_data(self.shard)), BATCH_SIZE, shuffle=False)

    def build_cost(self, x: Any, y: Any) -> Any:
        """The tower function: the model and its cost (calls are counted in `tower_calls`)."""
        import tensorflow as tf

        from towerkit.towers.compat import tf1

        self.tower_calls += 1
        if self.kind == "layers":
            from towerkit.conformance._layers_model import build_layers_cost

            return build_layers_cost(x, y)
        with tf1.variable_scope("linear"):
            w = tf1.get_variable("w", [INPUT_DIM, 1], initializer=tf1.glorot_uniform_initializer())
            b = tf1.get_variable("b", [1], initializer=tf1.constant_initializer(0.1))
        pred = tf.identity(tf.matmul(x, w) + b, name="pred")
        if self.kind == "quadratic":
            return tf.reduce_mean(tf.square(pred - y), name="cost")
        return tf.reduce_mean(pred * y, name="cost")

    def make_optimizer(self) -> Any:
        """Plain SGD with `LEARNING_RATE` (in an ``EMAOptimizer`` when `ema_decay` is set)."""
        from towerkit.towers.compat import tf1

        opt = tf1.train.GradientDescentOptimizer(LEARNING_RATE)
        if self.ema_decay is None:
            return opt
        from towerkit.trainers import EMAOptimizer

        return EMAOptimizer(opt, decay=self.ema_decay)

    def as_model_desc(self) -> Any:
        """This model as a ``ModelDesc`` (for ``launch_train_with_config``)."""
        from towerkit.trainers import ModelDesc

        model = self

        class ConformanceModel(ModelDesc):
            def inputs(self) -> list[Any]:
                return list(model.input_signature)

            def build_graph(self, x: Any, y: Any) -> Any:
                return model.build_cost(x, y)

            def optimizer(self) -> Any:
                return model.make_optimizer()

        return ConformanceModel()

    def __repr__(self) -> str:
        return f"SuiteModel(kind={self.kind!r}, shard={self.shard})"
