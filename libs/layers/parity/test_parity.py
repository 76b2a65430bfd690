"""towerkit.layers against tensorpack 0.11, layer by layer, and a tensorpack checkpoint restored.

Each case builds one layer twice, in two graphs: with tensorpack 0.11 and with
towerkit.layers, each inside its own library's tower context. The two graphs must
hold the same variables (names, shapes, dtypes, collections), the same number of
``UPDATE_OPS`` and regularization losses, and an output of the same name and shape.
Then every variable of the tensorpack graph gets a random value, the same value is
loaded by name into the towerkit graph, and the outputs, the gradients (of the input
and of every trainable variable) and the variables after running ``UPDATE_OPS`` are
compared. Run by ``nox -s layers_parity`` (tensorpack and tf-keras installed there).
"""

from __future__ import annotations

import zlib
from typing import Any

import attrs
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

tf1 = tf.compat.v1
tf1.disable_v2_behavior()

import tensorpack as tp  # noqa: E402
from tensorpack.tfutils.tower import TowerContext as TPTowerContext  # noqa: E402
from tensorpack.tfutils.tower import TrainTowerContext as TPTrainTowerContext  # noqa: E402

import towerkit.layers as tk  # noqa: E402
from towerkit.towers import TowerContext  # noqa: E402

KEYS = (
    tf1.GraphKeys.GLOBAL_VARIABLES,
    tf1.GraphKeys.TRAINABLE_VARIABLES,
    tf1.GraphKeys.MODEL_VARIABLES,
    tf1.GraphKeys.LOCAL_VARIABLES,
)


@attrs.frozen
class In:
    """A placeholder of this shape, given as a positional argument after the layer's input."""

    shape: tuple[int, ...]


@attrs.frozen(kw_only=True)
class Case:
    """One layer call: ``Layer(name, x, *args, **kwargs)`` on an input of `shape`."""

    id: str
    layer: str
    shape: tuple[int, ...]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = attrs.field(factory=dict)
    name: str | None = "layer"
    modes: tuple[bool, ...] = (True, False)
    towers: int = 1
    builder: Any = None
    """A function ``(lib, x, args) -> tensor`` built instead of one layer call."""
    tensorpack_fails: str = ""
    """Why tensorpack 0.11 cannot build this case (then a NumPy oracle checks towerkit)."""


def l2(scale: float) -> Any:
    """A regularizer both libraries take: a function of the variable."""
    return lambda w: scale * tf.nn.l2_loss(w)


def linearwrap_chain(lib: Any, x: Any, args: tuple[Any, ...]) -> Any:
    """A LinearWrap chain of layers, a TensorFlow function and a plain function."""
    del args
    return (
        lib.LinearWrap(x)
        .Conv2D("c0", 4, 3, activation=tf.nn.relu)
        .BatchNorm("bn")
        .MaxPooling("pool", 2)
        .tf.nn.relu()
        .apply(lambda t: t * 2.0)
        .FullyConnected("fc", 3)()
    )


def regularized(lib: Any, x: Any, args: tuple[Any, ...]) -> Any:
    """Two FullyConnected layers and the regularization cost of their weights."""
    del args
    h = lib.FullyConnected("fc0", x, 4)
    y = lib.FullyConnected("fc1", h, 3)
    cost = lib.regularize_cost(".*/W", lib.l2_regularizer(0.1))
    cost = cost + lib.regularize_cost("fc0/.*", lib.l1_regularizer(0.01), name="l1")
    return tf.identity(y + cost, name="out")


NO_ORACLE = {"BilinearUpSample": "tensorpack 0.11 has no BilinearUpSample layer"}
"""Layers of towerkit.layers that tensorpack 0.11 does not have (their own tests cover them)."""

_MAXOUT = "tensorpack 0.11's Maxout reshapes to ch / num_unit, a float on Python 3"


def _cases() -> list[Case]:
    c: list[Case] = []
    for fmt, shape in (("channels_last", (3, 6, 6, 4)), ("channels_first", (3, 4, 6, 6))):
        f = "NHWC" if fmt == "channels_last" else "NCHW"
        c += [
            Case(id=f"BatchNorm-{f}", layer="BatchNorm", shape=shape, kwargs={"data_format": fmt}),
            Case(
                id=f"BatchNorm-{f}-aliases",
                layer="BatchNorm",
                shape=shape,
                kwargs={"data_format": f, "decay": 0.8, "use_scale": False, "use_bias": False},
            ),
            Case(
                id=f"BatchNorm-{f}-internal",
                layer="BatchNorm",
                shape=shape,
                kwargs={"data_format": fmt, "ema_update": "internal", "epsilon": 1e-3},
            ),
            Case(
                id=f"BatchNorm-{f}-skip",
                layer="BatchNorm",
                shape=shape,
                kwargs={"data_format": fmt, "ema_update": "skip"},
            ),
            Case(
                id=f"BatchNorm-{f}-virtual",
                layer="BatchNorm",
                shape=(4, *shape[1:]),
                kwargs={"data_format": fmt, "virtual_batch_size": 2},
            ),
            Case(
                id=f"BatchNorm-{f}-sync1",
                layer="BatchNorm",
                shape=shape,
                kwargs={"data_format": fmt, "sync_statistics": "nccl"},
            ),
            Case(
                id=f"BatchNorm-{f}-2towers",
                layer="BatchNorm",
                shape=shape,
                kwargs={"data_format": fmt},
                modes=(True,),
                towers=2,
            ),
            Case(
                id=f"BatchRenorm-{f}",
                layer="BatchRenorm",
                shape=shape,
                kwargs={
                    "data_format": fmt,
                    "rmax": 1.5,
                    "dmax": 0.5,
                    "gamma_initializer": tf1.ones_initializer(),
                },
            ),
            Case(id=f"LayerNorm-{f}", layer="LayerNorm", shape=shape, kwargs={"data_format": fmt}),
            Case(
                id=f"LayerNorm-{f}-noaffine",
                layer="LayerNorm",
                shape=shape,
                kwargs={"data_format": fmt, "use_scale": False, "use_bias": False},
            ),
            Case(
                id=f"InstanceNorm-{f}",
                layer="InstanceNorm",
                shape=shape,
                kwargs={"data_format": fmt},
            ),
            Case(
                id=f"InstanceNorm-{f}-noaffine",
                layer="InstanceNorm",
                shape=shape,
                kwargs={"data_format": fmt, "center": False, "scale": False},
            ),
            Case(
                id=f"Conv2D-{f}",
                layer="Conv2D",
                shape=shape,
                args=(5, 3),
                kwargs={"data_format": fmt},
            ),
            Case(
                id=f"Conv2D-{f}-valid-stride",
                layer="Conv2D",
                shape=shape,
                args=(4, (3, 2)),
                kwargs={
                    "data_format": fmt,
                    "strides": 2,
                    "padding": "valid",
                    "activation": tf.nn.relu,
                    "kernel_regularizer": l2(0.1),
                },
            ),
            Case(
                id=f"Conv2D-{f}-split",
                layer="Conv2D",
                shape=shape,
                args=(4, 3),
                kwargs={"data_format": fmt, "split": 2, "use_bias": False},
            ),
            Case(
                id=f"Conv2D-{f}-dilated",
                layer="Conv2D",
                shape=shape,
                args=(2, 3),
                kwargs={"data_format": fmt, "dilation_rate": 2},
            ),
            Case(
                id=f"Conv2DTranspose-{f}",
                layer="Conv2DTranspose",
                shape=shape,
                args=(3, 3, 2),
                kwargs={"data_format": fmt},
            ),
            Case(
                id=f"Conv2DTranspose-{f}-valid",
                layer="Conv2DTranspose",
                shape=shape,
                args=(3, 4, 2),
                kwargs={"data_format": fmt, "padding": "valid", "use_bias": False},
            ),
            Case(
                id=f"MaxPooling-{f}",
                layer="MaxPooling",
                shape=shape,
                args=(2,),
                kwargs={"data_format": fmt},
            ),
            Case(
                id=f"MaxPooling-{f}-same",
                layer="MaxPooling",
                shape=shape,
                args=(3, 2),
                kwargs={"data_format": fmt, "padding": "same"},
            ),
            Case(
                id=f"AvgPooling-{f}",
                layer="AvgPooling",
                shape=shape,
                args=(3, 1),
                kwargs={"data_format": fmt},
            ),
            Case(
                id=f"GlobalAvgPooling-{f}",
                layer="GlobalAvgPooling",
                shape=shape,
                kwargs={"data_format": fmt},
            ),
            Case(
                id=f"FixedUnPooling-{f}",
                layer="FixedUnPooling",
                shape=shape,
                args=(2,),
                kwargs={"data_format": fmt},
            ),
            Case(
                id=f"FixedUnPooling-{f}-mat",
                layer="FixedUnPooling",
                shape=shape,
                args=(3,),
                kwargs={
                    "data_format": fmt,
                    "unpool_mat": np.arange(9, dtype=np.float32).reshape(3, 3),
                },
            ),
            Case(id=f"BNReLU-{f}", layer="BNReLU", shape=shape, name="bnrelu"),
        ]
    c += [
        Case(id="BatchNorm-NC", layer="BatchNorm", shape=(5, 7)),
        Case(
            id="BatchNorm-NC-internal",
            layer="BatchNorm",
            shape=(5, 7),
            kwargs={"ema_update": "internal"},
        ),
        Case(
            id="BatchNorm-NC-training-given",
            layer="BatchNorm",
            shape=(5, 7),
            kwargs={"training": True},
        ),
        Case(
            id="BatchNorm-NHWC-use_local_stat",
            layer="BatchNorm",
            shape=(3, 4, 4, 2),
            kwargs={"use_local_stat": False},
        ),
        Case(id="LayerNorm-NC", layer="LayerNorm", shape=(5, 7)),
        Case(id="FullyConnected", layer="FullyConnected", shape=(4, 6), args=(5,)),
        Case(
            id="FullyConnected-4d",
            layer="FullyConnected",
            shape=(2, 3, 3, 2),
            args=(4,),
            kwargs={"activation": tf.nn.tanh, "use_bias": False, "kernel_regularizer": l2(0.5)},
        ),
        Case(
            id="FullyConnected-aliases",
            layer="FullyConnected",
            shape=(4, 6),
            kwargs={"out_dim": 3, "nl": tf.nn.relu, "W_init": tf1.ones_initializer()},
        ),
        Case(id="BNReLU-NC", layer="BNReLU", shape=(5, 7), name=None),
        Case(id="PReLU", layer="PReLU", shape=(3, 4, 4, 2)),
        Case(id="PReLU-init", layer="PReLU", shape=(4, 6), kwargs={"init": 0.3}),
        Case(
            id="Maxout-4d", layer="Maxout", shape=(2, 3, 3, 6), args=(3,), tensorpack_fails=_MAXOUT
        ),
        Case(
            id="Maxout-2d",
            layer="Maxout",
            shape=(4, 6),
            args=(2,),
            name=None,
            tensorpack_fails=_MAXOUT,
        ),
        Case(
            id="ConcatWith",
            layer="ConcatWith",
            shape=(2, 3, 3, 2),
            args=(In((2, 3, 3, 4)), 3),
            name=None,
        ),
        Case(
            id="ConcatWith-list",
            layer="ConcatWith",
            shape=(4, 2),
            args=([In((4, 3)), In((4, 1))], 1),
            name=None,
        ),
        Case(
            id="BatchRenorm-default-gamma",
            layer="BatchRenorm",
            shape=(2, 3, 3, 40),
            kwargs={"rmax": 2.0, "dmax": 1.0},
        ),
        Case(id="BatchNorm-NHWC-odd", layer="BatchNorm", shape=(5, 3, 7, 1)),
        Case(
            id="BatchNorm-NCHW-odd",
            layer="BatchNorm",
            shape=(2, 5, 1, 3),
            kwargs={"data_format": "NCHW", "momentum": 0.5},
        ),
        Case(id="BatchNorm-NC-wide", layer="BatchNorm", shape=(2, 33), kwargs={"epsilon": 1e-3}),
        Case(id="Deconv2D", layer="Deconv2D", shape=(2, 3, 3, 2), args=(4, 3, 2)),
        Case(id="LinearWrap", layer="LinearWrap", shape=(2, 6, 6, 3), builder=linearwrap_chain),
        Case(id="regularize_cost", layer="regularize_cost", shape=(4, 5), builder=regularized),
        Case(
            id="Dropout-inference",
            layer="Dropout",
            shape=(4, 6),
            kwargs={"rate": 0.3},
            modes=(False,),
        ),
        Case(id="Dropout-keep1", layer="Dropout", shape=(4, 6), args=(1.0,), name="drop"),
        Case(
            id="Dropout-rate0",
            layer="Dropout",
            shape=(4, 6),
            kwargs={"rate": 0.0, "training": True},
        ),
    ]
    return c


MODE_FREE = frozenset(
    {
        "Conv2D",
        "Conv2DTranspose",
        "Deconv2D",
        "FullyConnected",
        "MaxPooling",
        "AvgPooling",
        "GlobalAvgPooling",
        "FixedUnPooling",
        "PReLU",
        "Maxout",
        "ConcatWith",
        "LayerNorm",
        "InstanceNorm",
    }
)
"""Layers that never read the tower context: one tower kind (training) is enough, unless a
regularizer makes the case depend on the tower (regularization losses)."""


def _one_mode(case: Case) -> Case:
    if case.layer in MODE_FREE and not any("regularizer" in k for k in case.kwargs):
        return attrs.evolve(case, modes=(True,))
    return case


CASES = [_one_mode(c) for c in _cases()]

SESSION_CONFIG = tf1.ConfigProto(
    graph_options=tf1.GraphOptions(
        rewrite_options=rewriter_config_pb2.RewriterConfig(disable_meta_optimizer=True)
    )
)
"""Sessions that run the graph as built: the two graphs compare op for op, and tiny graphs
start faster without grappler."""


def _random(name: str, shape: Any, positive: bool) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    value = rng.normal(size=shape).astype(np.float32)
    return np.abs(value) + 0.5 if positive else value


def _materialize(arg: Any, made: list[Any], k: list[int]) -> Any:
    if isinstance(arg, In):
        k[0] += 1
        ph = tf1.placeholder(tf.float32, (None, *arg.shape[1:]), name=f"in{k[0]}")
        made.append((ph, arg.shape))
        return ph
    if isinstance(arg, list):
        return [_materialize(a, made, k) for a in arg]
    return arg


def _call(lib: Any, case: Case, x: Any, args: tuple[Any, ...]) -> Any:
    if case.builder is not None:
        return case.builder(lib, x, args)
    layer = getattr(lib, case.layer)
    if case.name is None:
        return layer(x, *args, **case.kwargs)
    return layer(case.name, x, *args, **case.kwargs)


@attrs.frozen(kw_only=True)
class Built:
    """What one library built for a case, and what its session computed."""

    output_names: tuple[str, ...]
    output_shapes: tuple[Any, ...]
    collections: dict[str, list[tuple[str, tuple[int, ...], str]]]
    update_ops: int
    reg_losses: int
    values: dict[str, np.ndarray]
    initial: dict[str, np.ndarray]


def build(
    tensorpack: bool, case: Case, training: bool, values: dict[str, np.ndarray] | None
) -> Built:
    """Build `case` with one library in a fresh graph, load `values` (or random ones), run it."""
    lib = tp if tensorpack else tk
    context = TPTowerContext if tensorpack else TowerContext
    graph = tf1.Graph()
    with graph.as_default():
        tf1.set_random_seed(1)
        x = tf1.placeholder(tf.float32, (None, *case.shape[1:]), name="x")
        made: list[Any] = [(x, case.shape)]
        args = tuple(_materialize(a, made, [0]) for a in case.args)
        outputs = []
        for t in range(case.towers):
            if case.towers == 1:
                ctx = context("", is_training=training)
            elif tensorpack:
                ctx = TPTrainTowerContext(f"tower{t}", index=t, total=case.towers)
            else:
                ctx = context(f"tower{t}", is_training=training, index=t, total=case.towers)
            # tensorpack's trainers open the reuse scope of later towers themselves
            reuse = tf1.variable_scope(tf1.get_variable_scope(), reuse=True if t else None)
            with reuse, ctx:
                outputs.append(_call(lib, case, x, args))
        collections = {
            key: [
                (v.name, tuple(v.shape.as_list()), v.dtype.base_dtype.name)
                for v in graph.get_collection(key)
            ]
            for key in KEYS
        }
        update_ops = graph.get_collection(tf1.GraphKeys.UPDATE_OPS)
        reg = graph.get_collection(tf1.GraphKeys.REGULARIZATION_LOSSES)
        y = outputs[0]
        trainable = tf1.trainable_variables()
        loss = tf.reduce_sum(tf.sin(y) + 0.25 * y * y)
        if reg:
            loss += tf.add_n(reg)
        wrt = [m[0] for m in made] + trainable
        grads = tf.gradients(loss, wrt)
        feed = {ph: _random(ph.op.name, shape, False) for ph, shape in made}
        with tf1.Session(graph=graph, config=SESSION_CONFIG) as sess:
            sess.run(tf1.global_variables_initializer())
            initial = {v.op.name: sess.run(v) for v in tf1.global_variables()}
            for v in tf1.global_variables():
                name = v.op.name
                value = (
                    values[name]
                    if values is not None
                    else _random(name, v.shape.as_list(), "variance" in name or "stddev" in name)
                )
                v.load(value, sess)
            # one run: a layer whose forward pass moves variables (BatchRenorm) moves them once
            fetches = {f"output{i}": out for i, out in enumerate(outputs)}
            fetches.update({f"grad:{t.op.name}": g for t, g in zip(wrt, grads) if g is not None})
            if reg:
                fetches["reg"] = tf.add_n(reg)
            computed: dict[str, Any] = sess.run(fetches, feed)
            computed.update({f"grad:{t.op.name}": None for t, g in zip(wrt, grads) if g is None})
            sess.run(update_ops, feed)
            for v in tf1.global_variables():
                computed[v.op.name] = sess.run(v)
    return Built(
        output_names=tuple(o.name for o in outputs),
        output_shapes=tuple(tuple(o.shape.as_list()) for o in outputs),
        collections=collections,
        update_ops=len(update_ops),
        reg_losses=len(reg),
        values=computed,
        initial=initial,
    )


def maxout_oracle(x: np.ndarray, num_unit: int) -> np.ndarray:
    """Maxout in NumPy: the max over consecutive groups of `num_unit` channels."""
    return x.reshape(*x.shape[:-1], x.shape[-1] // num_unit, num_unit).max(axis=-1)


def _check_initial_values(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> None:
    """The initializers agree: constants exactly, random ones in scale (large variables)."""
    for name, want in ref.items():
        have = got[name]
        if np.all(want == want.flat[0]):
            np.testing.assert_array_equal(have, want, err_msg=f"initial value of {name}")
        elif want.size >= 32:
            assert abs(have.mean() - want.mean()) < 0.5 * want.std() + 1e-6, name
            assert 0.7 < have.std() / want.std() < 1.4, f"initial scale of {name}"


RUNS = [
    pytest.param(case, training, id=f"{case.id}-{'training' if training else 'inference'}")
    for case in CASES
    for training in case.modes
]


@pytest.mark.parametrize(("case", "training"), RUNS)
def test_layer_parity(case: Case, training: bool) -> None:
    """Same variables, collections, output name and shape, outputs, gradients and updates."""
    if case.tensorpack_fails:
        with pytest.raises(TypeError):
            build(True, case, training, None)
        got = build(False, case, training, None)
        x = _random("x", case.shape, False)
        want = maxout_oracle(x, case.args[0])
        np.testing.assert_allclose(got.values["output0"], want, rtol=1e-6)
        assert got.collections[tf1.GraphKeys.GLOBAL_VARIABLES] == []
        return
    ref = build(True, case, training, None)
    got = build(False, case, training, None)
    assert got.collections == ref.collections
    assert got.output_names == ref.output_names
    assert got.output_shapes == ref.output_shapes
    assert got.update_ops == ref.update_ops
    assert got.reg_losses == ref.reg_losses
    assert sorted(got.values) == sorted(ref.values)
    _check_initial_values(ref.initial, got.initial)
    for key, want in ref.values.items():
        have = got.values[key]
        if want is None or have is None:
            assert have is None, f"{key}: towerkit has a gradient, tensorpack none"
            assert want is None, f"{key}: tensorpack has a gradient, towerkit none"
            continue
        np.testing.assert_allclose(have, want, rtol=2e-5, atol=2e-5, err_msg=f"{case.id}: {key}")


def test_every_layer_is_compared() -> None:
    """Each registered layer exported by towerkit.layers has a case, or no tensorpack oracle."""
    layers = {n for n in tk.__all__ if tk.get_registered_layer(n) is not None}
    covered = {c.layer for c in CASES}
    assert layers - covered - set(NO_ORACLE) == set()
    assert not hasattr(tp, "BilinearUpSample"), "tensorpack has BilinearUpSample: compare it"
