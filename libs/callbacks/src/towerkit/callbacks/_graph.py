"""Callbacks that run ops or fetch tensors of the graph: RunOp, update ops, tensor dumps, numerics."""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from towerkit.callbacks._base import Callback
from towerkit.callbacks._errors import CallbackError
from towerkit.callbacks._paths import check_file_name
from towerkit.callbacks._png import encode_png
from towerkit.sessinit import atomic_write_bytes, remove_stale_temporaries
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")

_DUMP_FILE = re.compile(r"DumpTensors-\d+\.npz")
"""The files DumpTensors writes: one per trigger, named by the global step."""


def tensor_names(names: str | Sequence[str], what: str = "names") -> tuple[str, ...]:
    """``names`` (one name or a sequence of names) as a non-empty tuple of strings.

    Args:
        names: a tensor name or a sequence of them.
        what: the argument's name, for error messages.

    Raises:
        TypeError: not a string nor a sequence of strings; lists the entries at fault.
        ValueError: empty.

    Examples:
        >>> tensor_names("loss")
        ('loss',)
        >>> tensor_names(["a", "b:0"])
        ('a', 'b:0')
    """
    if isinstance(names, str):
        return (names,)
    if isinstance(names, bytes) or not isinstance(names, Sequence):
        msg = f"{what!r} must be a tensor name or a sequence of names; got {type(names).__name__}"
        raise TypeError(msg)
    wrong = [f"#{i}: {type(n).__name__}" for i, n in enumerate(names) if not isinstance(n, str)]
    if wrong:
        msg = f"{what!r} must hold strings; entries at fault: {', '.join(wrong)}"
        raise TypeError(msg)
    if not names:
        msg = f"{what!r} is empty: expected at least one tensor name"
        raise ValueError(msg)
    return tuple(names)


def fetchable_tensors(cb: Callback, names: Sequence[str]) -> list[Any]:
    """The tensors named ``names`` (see ``Callback.get_tensors_maybe_in_tower``), as values to fetch.

    The name of a resource variable (``"w"``, ``"w:0"``) is its handle, which has
    no value to fetch: the variable's value is fetched instead, read by an op
    made here (so call it while the graph can still grow, e.g. in ``setup_graph``).
    """
    tensors = cb.get_tensors_maybe_in_tower(names)
    if not any(t.dtype == tf.resource for t in tensors):
        return tensors
    graph = cb.graph
    variables = graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES) + graph.get_collection(
        tf1.GraphKeys.LOCAL_VARIABLES
    )
    by_handle = {v.handle.ref(): v for v in variables if hasattr(v, "handle")}
    out = []
    for t in tensors:
        var = by_handle.get(t.ref()) if t.dtype == tf.resource else None
        out.append(t if var is None else var.value())
    return out


def _need_logdir(cb: Callback) -> str:
    logdir = cb.trainer.logdir
    if logdir is None:
        msg = (
            f"{cb} writes files under the trainer's logdir, but the trainer has none (logdir=None)"
        )
        raise CallbackError(msg)
    return logdir


def _runnable(op: Any) -> Any:
    """``op`` as an operation or tensor to run; the ``.op`` of a variable update; else None."""
    if isinstance(op, (tf.Operation, tf.Tensor)):
        return op
    if isinstance(op, tf.Variable) and isinstance(getattr(op, "op", None), tf.Operation):
        return op.op
    return None


class RunOp(Callback):
    """Run an op before training, on every ``trigger`` and/or with every step.

    The DQN example uses it to update the target network. It runs in every training
    process (``chief_only`` is False), as model updates such as batch-norm statistics
    must; use ``set_chief_only()`` for an op only the chief should run.

    Args:
        op: a ``tf.Operation``, a tensor, a variable update (what ``assign_add``
            returns: its op is run), or a function taking no argument that returns
            one; the function is called in ``setup_graph``, inside the callback's
            name scope.
        run_before: run the op once in ``before_train``.
        run_as_trigger: run the op on every ``trigger`` (after each epoch by default).
        run_step: run the op with every ``hooked_sess.run`` (in the same session call).
        verbose: log each run of the op (not the per-step runs).

    Raises:
        TypeError: ``op`` is neither an op, a tensor nor a callable.
        ValueError: ``run_before``, ``run_as_trigger`` and ``run_step`` are all False.
    """

    _chief_only = False

    def __init__(
        self,
        op: Any,
        run_before: bool = True,
        run_as_trigger: bool = True,
        run_step: bool = False,
        verbose: bool = False,
    ) -> None:
        if _runnable(op) is None and not callable(op):
            msg = (
                f"'op' must be a tf.Operation, a tensor or a function returning one; "
                f"got {type(op).__name__}"
            )
            raise TypeError(msg)
        if not (run_before or run_as_trigger or run_step):
            msg = (
                f"{type(self).__name__} would never run: one of 'run_before', 'run_as_trigger' "
                f"and 'run_step' must be True; got {run_before}, {run_as_trigger}, {run_step}"
            )
            raise ValueError(msg)
        self._op_arg = op
        self._run_before = bool(run_before)
        self._run_as_trigger = bool(run_as_trigger)
        self._run_step = bool(run_step)
        self._verbose = bool(verbose)
        self._op: Any = None
        self._args: Any = None
        self._set_up = False

    @property
    def op(self) -> Any:
        """What the callback runs (None before ``setup_graph``, or when there is nothing to run)."""
        return self._op

    def _make_op(self) -> Any:
        """The op or tensor to run; None when there is nothing to run."""
        op = _runnable(self._op_arg)
        if op is None:
            made = self._op_arg()
            op = _runnable(made)
            if op is None:
                msg = (
                    f"the function given to {type(self).__name__} as 'op' must return a "
                    f"tf.Operation or a tensor; it returned {type(made).__name__}"
                )
                raise TypeError(msg)
        return op

    def _setup_graph(self) -> None:
        self._op = self._make_op()
        self._set_up = True
        if self._op is not None and self._run_step:
            self._args = tf1.train.SessionRunArgs(fetches=self._op)

    def has_hook(self, method: str) -> bool:
        active = super().has_hook(method)
        nothing = self._set_up and self._op is None
        if method == "_before_train":
            return active and self._run_before and not nothing
        if method in ("_trigger", "_trigger_epoch"):
            return active and self._run_as_trigger and not nothing
        if method == "_before_run":
            return active and self._run_step and not nothing
        if method == "_after_run":
            checks = type(self)._check is not RunOp._check
            return active and checks and self._run_step and not nothing
        return active

    def _run(self) -> None:
        if self._op is None:
            return
        if self._verbose:
            logger.info("%s: running %s", self, self._op.name)
        self._check(self.trainer.sess.run(self._op))

    def _check(self, value: Any) -> None:
        """Look at the value of a run (None for an op); subclasses may raise here."""
        del value

    def _before_train(self) -> None:
        if self._run_before:
            self._run()

    def _trigger(self) -> None:
        if self._run_as_trigger:
            self._run()

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        return self._args

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context
        if self._args is not None:
            self._check(run_values.results)


class RunUpdateOps(RunOp):
    """Run the ops of a collection (``UPDATE_OPS`` by default) with every ``hooked_sess.run``.

    The ops, grouped into one, are fetched along with each step's session call.
    With an empty collection the callback adds nothing to the session calls. Mind
    models with several sub-networks: not every update may belong to every step.

    Args:
        collection: the collection of ops; ``tf.compat.v1.GraphKeys.UPDATE_OPS`` when None.
    """

    def __init__(self, collection: str | None = None) -> None:
        if collection is not None and not isinstance(collection, str):
            msg = f"'collection' must be a collection name or None; got {type(collection).__name__}"
            raise TypeError(msg)
        self._collection = collection or tf1.GraphKeys.UPDATE_OPS
        super().__init__(self._group, run_before=False, run_as_trigger=False, run_step=True)

    def _group(self) -> Any:
        ops = self.graph.get_collection(self._collection)
        if not ops:
            logger.debug("%s: collection %r is empty; nothing to run", self, self._collection)
            return None
        logger.info("%s: running %d op(s) of %r with every step", self, len(ops), self._collection)
        return tf.group(*ops, name="update_ops")

    def _make_op(self) -> Any:
        return self._group()


def _numerics_op(variables: Sequence[Any]) -> Any:
    """A [n, 2] bool tensor: for each variable, whether it holds a NaN and whether an Inf."""
    rows = []
    for var in variables:
        value = tf.convert_to_tensor(var)
        rows.append(
            tf.stack(
                [
                    tf.reduce_any(tf.math.is_nan(value)),
                    tf.reduce_any(tf.math.is_inf(value)),
                ]
            )
        )
    return tf.stack(rows, name="nan_inf")


def numerics_report(names: Sequence[str], flags: Any) -> list[str]:
    """The variables at fault, each as ``'name' (NaN)``, ``(Inf)`` or ``(NaN, Inf)``.

    Args:
        names: variable names.
        flags: for each name, a pair (has NaN, has Inf).

    Examples:
        >>> numerics_report(["w:0", "b:0", "c:0"], [[True, False], [False, False], [True, True]])
        ["'w:0' (NaN)", "'c:0' (NaN, Inf)"]
    """
    out = []
    for name, (nan, inf) in zip(names, flags):
        kinds = [k for k, bad in (("NaN", nan), ("Inf", inf)) if bad]
        if kinds:
            out.append(f"{name!r} ({', '.join(kinds)})")
    return out


class CheckNumerics(RunOp):
    """Check every floating-point global variable for NaN and Inf; raise if one has some.

    Args:
        run_as_trigger: check on every ``trigger`` (after each epoch by default).
        run_step: check with every ``hooked_sess.run`` (fetched in the same call).

    Raises:
        FloatingPointError: (when checking) some variables hold NaN or Inf; the
            message lists every such variable.
    """

    _chief_only = True

    def __init__(self, run_as_trigger: bool = True, run_step: bool = False) -> None:
        super().__init__(
            self._build, run_before=False, run_as_trigger=run_as_trigger, run_step=run_step
        )
        self._names: tuple[str, ...] = ()

    def _build(self) -> Any:
        variables = [v for v in tf1.global_variables() if v.dtype.base_dtype.is_floating]
        if not variables:
            logger.info("%s: the graph has no floating-point variables; nothing to check", self)
            return None
        self._names = tuple(v.name for v in variables)
        return _numerics_op(variables)

    def _make_op(self) -> Any:
        return self._build()

    def _check(self, value: Any) -> None:
        bad = numerics_report(self._names, np.asarray(value))
        if bad:
            msg = (
                f"{self}: {len(bad)} variable(s) hold NaN or Inf at global step "
                f"{self.trainer.global_step}: {', '.join(bad)}"
            )
            raise FloatingPointError(msg)


class ProcessTensors(Callback):
    """Fetch tensors with every ``hooked_sess.run`` and call a function on their values.

    Examples:
        ``ProcessTensors(["cost1", "cost2"], lambda c1, c2: print(c1, c2, c1 + c2))``

    Args:
        names: tensor names (found in the graph, else in the first training tower).
        fn: called after each run with one value per name, in order.

    Raises:
        TypeError: ``names`` is not a name or a sequence of names, or ``fn`` is not callable.
        ValueError: ``names`` is empty.
    """

    _chief_only = False

    def __init__(self, names: str | Sequence[str], fn: Callable[..., Any]) -> None:
        self._names = tensor_names(names)
        if not callable(fn):
            msg = f"'fn' must be callable; got {type(fn).__name__}"
            raise TypeError(msg)
        self._fn = fn
        self._args: Any = None

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the fetched tensors."""
        return self._names

    def _setup_graph(self) -> None:
        self._args = tf1.train.SessionRunArgs(fetches=fetchable_tensors(self, self._names))

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        return self._args

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context
        self._fn(*run_values.results)


class DumpTensors(ProcessTensors):
    """Fetch tensors with every step and write their values to an npz file per step.

    After the run that brings the global step to ``k``, the file
    ``<logdir>/DumpTensors-<k>.npz`` holds one array per name, keyed by the name
    as given. Load it with ``dict(np.load(path).items())``. Each file is written
    under a temporary name and renamed, so a file under its final name is complete.

    Args:
        names: tensor names.

    Raises:
        CallbackError: (in ``setup_graph``) the trainer has no logdir.
    """

    _chief_only = True

    def __init__(self, names: str | Sequence[str]) -> None:
        super().__init__(names, self._dump)
        self._dir = ""

    def _setup_graph(self) -> None:
        self._dir = _need_logdir(self)
        remove_stale_temporaries(
            self._dir, lambda n: _DUMP_FILE.fullmatch(n) is not None, what="DumpTensors"
        )
        super()._setup_graph()

    def _dump(self, *values: Any) -> None:
        buf = io.BytesIO()
        np.savez(buf, **dict(zip(self._names, values)))
        path = os.path.join(self._dir, f"DumpTensors-{self.trainer.global_step}.npz")
        atomic_write_bytes(path, buf.getvalue(), fsync=False)


def to_images(value: Any, scale: float = 255) -> list[np.ndarray]:
    """Split ``value`` into uint8 images [h, w, c]: ``value * scale``, rounded and clipped to [0, 255].

    A list (or tuple) holds one image per entry; a 4-d array is a batch [n, h, w, c];
    a 2-d or 3-d array is one image. A 2-d image gets one channel.

    Raises:
        ValueError: an array that is not 2-, 3- or 4-d, or an image with a bad shape.

    Examples:
        >>> [im[:, :, 0].tolist() for im in to_images(np.array([[0.0, 0.5], [1.0, 2.0]]))]
        [[[0, 128], [255, 255]]]
        >>> len(to_images(np.zeros((3, 4, 4, 1)))), to_images([np.ones((1, 1))], scale=7)[0].shape
        (3, (1, 1, 1))
    """
    if isinstance(value, (list, tuple)):
        items = [np.asarray(v) for v in value]
    else:
        arr = np.asarray(value)
        if arr.ndim == 4:
            items = list(arr)
        elif arr.ndim in (2, 3):
            items = [arr]
        else:
            msg = f"expected an image [h, w] / [h, w, c], a batch [n, h, w, c] or a list; got shape {arr.shape}"
            raise ValueError(msg)
    images = []
    for i, im in enumerate(items):
        if im.ndim == 2:
            im = im[:, :, None]
        if im.ndim != 3 or im.shape[2] not in (1, 2, 3, 4) or 0 in im.shape:
            msg = (
                f"image #{i} must have shape [h, w] or [h, w, c] with c in 1..4 and h, w > 0; "
                f"got {items[i].shape}"
            )
            raise ValueError(msg)
        images.append(np.clip(np.rint(im.astype(np.float64) * scale), 0, 255).astype(np.uint8))
    return images


class DumpTensorAsImage(Callback):
    """On every ``trigger``, evaluate a tensor and write it as PNG image(s) under the logdir.

    The tensor must be evaluable alone: it may depend on variables, or on an
    input pipeline that needs no feeding (then it takes a datapoint from it), but
    not on placeholders. Files are named
    ``<logdir>/<prefix>-ep<epoch, 3 digits>-step<global step>-<index>.png``, the
    index counting images from 0 within the value.

    Args:
        tensor_name: the tensor's name (found in the graph, else in the first training tower).
        prefix: the file name prefix, without directories (the files stay in the
            logdir); the op name (``/`` turned into ``-``) by default.
        map_func: maps the value to an image or a list of images of shape [h, w]
            or [h, w, c] (c in 1..4); identity when None. A 4-d value is a batch of images.
        scale: the pixel values' multiplier, applied after ``map_func``; values are
            then rounded and clipped to [0, 255].

    Raises:
        TypeError: ``map_func`` is not callable, or ``prefix`` not a string.
        ValueError: ``prefix`` holds a path separator or is ``..`` (it would write
            outside the logdir).
    """

    def __init__(
        self,
        tensor_name: str,
        prefix: str | None = None,
        map_func: Callable[[Any], Any] | None = None,
        scale: float = 255,
    ) -> None:
        (self._name,) = tensor_names(tensor_name, "tensor_name")
        if prefix is not None and not isinstance(prefix, str):
            msg = f"'prefix' must be a string or None; got {type(prefix).__name__}"
            raise TypeError(msg)
        if prefix:
            check_file_name("prefix", prefix)
        if map_func is not None and not callable(map_func):
            msg = f"'map_func' must be callable or None; got {type(map_func).__name__}"
            raise TypeError(msg)
        self._prefix = prefix
        self._map = map_func
        self._scale = float(scale)
        self._tensor: Any = None
        self._dir = ""

    def _setup_graph(self) -> None:
        self._dir = _need_logdir(self)
        (self._tensor,) = fetchable_tensors(self, [self._name])
        if self._prefix is None:
            self._prefix = re.sub(r"[/:]", "-", self._tensor.op.name)
        images = re.compile(re.escape(self._prefix) + r"-ep\d+-step\d+-\d+\.png")
        remove_stale_temporaries(self._dir, lambda n: images.fullmatch(n) is not None, what="image")

    def _trigger(self) -> None:
        value = self.trainer.sess.run(self._tensor)
        if self._map is not None:
            value = self._map(value)
        stem = f"{self._prefix}-ep{self.trainer.epoch_num:03d}-step{self.trainer.global_step}"
        for idx, image in enumerate(to_images(value, self._scale)):
            atomic_write_bytes(
                os.path.join(self._dir, f"{stem}-{idx}.png"), encode_png(image), fsync=False
            )
