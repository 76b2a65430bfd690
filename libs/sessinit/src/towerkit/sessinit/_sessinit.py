"""SessionInit shells: each computes a restore plan, checks it, and executes it in a session."""

from __future__ import annotations

import abc
import functools
import logging
import os
import types
import weakref
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

from towerkit.sessinit._compat import tf1
from towerkit.sessinit._ema import ema_sources
from towerkit.sessinit._errors import NothingToRestoreError, RestoreMismatchError
from towerkit.sessinit._execute import (
    checkpoint_restore_op,
    graph_var_infos,
    graph_variables,
    prepare_value_restore,
    run_checkpoint_restore,
    run_value_restore,
)
from towerkit.sessinit._npz import index_npz
from towerkit.sessinit._npz_read import read_npz
from towerkit.sessinit._paths import checkpoint_prefix_of, resolve_checkpoint
from towerkit.sessinit._plan import (
    RestorePlan,
    VarInfo,
    _ignore_set,
    _normalize_prefix,
    plan_restore,
    render_mismatches,
    render_names,
    render_nothing_restored,
    restores_nothing,
)
from towerkit.sessinit._varmanip import as_arrays, list_checkpoint_vars

logger = logging.getLogger("towerkit.sessinit")


class SessionInit:
    """Base class of everything that loads values into an existing session.

    How trainers (and users) drive it:

    1. ``setup_graph()`` (or ``_setup_graph()`` with the graph as default), while the
       graph can still change: builds the ops the restore will run and raises mismatch
       errors early. Trainers call it before they finalize the graph.
    2. ``init(sess)`` (or ``_run_init(sess)``), once the session exists: loads the
       values, in one ``session.run`` (a constant number at worst).

    ``init(sess)`` alone also works: it sets up first when the graph is not finalized.
    In a finalized graph that was never set up, values are fed through ops the graph
    already has (the variables' initializers), so nothing is added to it.

    Subclasses override ``_setup_graph(self)`` and ``_run_init(self, sess)``.
    """

    def _ready_graphs(self) -> weakref.WeakSet[Any]:
        ready = self.__dict__.get("_ready")
        if ready is None:
            ready = self.__dict__["_ready"] = weakref.WeakSet()
        return ready

    def setup_graph(self, graph: Any = None) -> None:
        """Build what the restore needs in `graph` (default: the default graph) before it is finalized.

        Raises:
            RuntimeError: `graph` is already finalized.
            RestoreMismatchError: A restore of this kind would fail on this graph.
        """
        graph = tf1.get_default_graph() if graph is None else graph
        if graph.finalized:
            msg = (
                f"{type(self).__name__}.setup_graph() needs a graph that is not finalized: "
                "call it before the graph is finalized, or call init(sess) directly"
            )
            raise RuntimeError(msg)
        with graph.as_default():
            self._setup_graph()
        self._ready_graphs().add(graph)

    def init(self, sess: Any) -> None:
        """Load the values into `sess` (its graph is made the default while doing so).

        Args:
            sess: A ``tf.compat.v1.Session`` whose variables are to be filled.
        """
        graph = sess.graph
        with graph.as_default():
            if graph not in self._ready_graphs() and not graph.finalized:
                self.setup_graph(graph)
            self._run_init(sess)

    def _setup_graph(self) -> None:
        """Build ops in the default graph; nothing by default."""

    def _run_init(self, sess: Any) -> None:
        """Load values into `sess`; nothing by default."""
        del sess


class JustCurrentSession(SessionInit):
    """Leaves the session as it is: a no-op placeholder."""

    def __repr__(self) -> str:
        return "JustCurrentSession()"


class ChainInit(SessionInit):
    """Runs several SessionInits one after another, in the order given.

    Useful to compose a model from several files: later ones overwrite earlier ones
    where they restore the same variable.

    Args:
        sess_inits: The SessionInit instances.

    Raises:
        TypeError: An entry is not a SessionInit (every such index is listed).
    """

    def __init__(self, sess_inits: Sequence[SessionInit]) -> None:
        inits = tuple(sess_inits)
        bad = {i: type(s).__name__ for i, s in enumerate(inits) if not isinstance(s, SessionInit)}
        if bad:
            msg = f"'sess_inits' entries at {bad} are not SessionInit instances (index: type)"
            raise TypeError(msg)
        self._inits = inits

    @property
    def sess_inits(self) -> tuple[SessionInit, ...]:
        """The chained SessionInits."""
        return self._inits

    def _setup_graph(self) -> None:
        for child in self._inits:
            child._setup_graph()

    def _run_init(self, sess: Any) -> None:
        for child in self._inits:
            child._run_init(sess)

    def __repr__(self) -> str:
        return f"ChainInit({list(self._inits)!r})"


@functools.lru_cache(maxsize=32)
def _plan(
    sources: tuple[VarInfo, ...],
    graph_vars: tuple[VarInfo, ...],
    prefix: str | None,
    ignore: tuple[str, ...],
    relaxed: bool,
) -> RestorePlan:
    """`plan_restore`, remembered: repeated restores of one source into one graph plan once."""
    return plan_restore(sources, graph_vars, prefix=prefix, ignore=ignore, relaxed=relaxed)


class _PlannedRestore(SessionInit, abc.ABC):
    """A restore from a listed source through a `RestorePlan`."""

    _prefix: str | None = None
    _ignore: tuple[str, ...] = ()
    _relaxed: bool = False
    _ignore_mismatch: bool = False
    _hint: str = ""

    @abc.abstractmethod
    def _source_vars(self) -> tuple[VarInfo, ...]:
        """Implemented by each kind of source."""

    @abc.abstractmethod
    def _label(self) -> str:
        """Implemented by each kind of source."""

    def plan(self, graph: Any = None) -> RestorePlan:
        """The plan of restoring into `graph` (default: the default graph); touches no session."""
        graph = tf1.get_default_graph() if graph is None else graph
        return self._plan_for(graph_variables(graph))

    def _plan_for(self, variables: Mapping[str, Any]) -> RestorePlan:
        return _plan(
            self._source_vars(),
            graph_var_infos(variables),
            self._prefix,
            self._ignore,
            self._relaxed,
        )

    def _checked_plan(self, graph: Any, *, log: bool) -> tuple[RestorePlan, dict[str, Any]]:
        variables = graph_variables(graph)
        plan = self._plan_for(variables)
        if restores_nothing(plan):
            raise NothingToRestoreError(render_nothing_restored(plan, self._label()))
        if plan.at_fault:
            message = render_mismatches(plan, self._label())
            if not self._ignore_mismatch:
                msg = f"{message}\n{self._hint}"
                raise RestoreMismatchError(msg)
            if log:
                logger.warning("%s\nThey are skipped; the rest is restored.", message)
        if log:
            self._log(plan)
        return plan, variables

    def _log(self, plan: RestorePlan) -> None:
        label = self._label()
        converted = plan.converted
        if converted:
            lines = "\n".join(f"  {a.describe()} ({' and '.join(a.fixes)})" for a in converted)
            logger.warning("Converting %d values from %s:\n%s", len(converted), label, lines)
        if plan.missing:
            many = len(plan.missing) != 1
            logger.warning(
                "%d graph %s not in %s and %s:\n%s",
                len(plan.missing),
                "variables are" if many else "variable is",
                label,
                "keep their values" if many else "keeps its value",
                render_names(plan.missing),
            )
        if plan.unused:
            # Optimizer slots and moving averages left out of an inference graph: expected,
            # and counted in the summary line; the list is there for debugging.
            many = len(plan.unused) != 1
            logger.debug(
                "%d %s of %s %s no graph variable:\n%s",
                len(plan.unused),
                "entries" if many else "entry",
                label,
                "match" if many else "matches",
                render_names(plan.unused),
            )
        logger.info("Restoring from %s: %s.", label, plan.summary())

    def _setup_graph(self) -> None:
        graph = tf1.get_default_graph()
        plan, variables = self._checked_plan(graph, log=False)
        self._prepare(graph, plan, variables)

    def _run_init(self, sess: Any) -> None:
        plan, variables = self._checked_plan(sess.graph, log=True)
        self._execute(sess, plan, variables)

    @abc.abstractmethod
    def _prepare(self, graph: Any, plan: RestorePlan, variables: Mapping[str, Any]) -> None:
        """Implemented by each kind of source."""

    @abc.abstractmethod
    def _execute(self, sess: Any, plan: RestorePlan, variables: Mapping[str, Any]) -> None:
        """Implemented by each kind of source."""


class SaverRestore(_PlannedRestore):
    """Restore a TensorFlow checkpoint (as written by ``tf.compat.v1.train.Saver`` or ModelSaver).

    Every graph variable with an entry of the same name (after `prefix`) is restored; a
    variable whose shape or dtype differs from its entry is an error. Graph variables
    missing from the checkpoint keep their values (a warning lists them).

    The restore runs as one op group built once per graph (RestoreV2 plus one assign
    per variable), in one ``session.run``. See `SessionInit` for when it is built.

    Args:
        model_path: A checkpoint prefix (``"train_log/model-1000"``), one of its files
            (``.index``...), or a directory (its latest checkpoint).
        prefix: Entry ``name`` of the checkpoint restores into graph variable ``prefix/name``.
        ignore: Names (with or without ``:0``) to skip, whether they name checkpoint
            entries or graph variables; e.g. ``("learning_rate",)``.
        ema: Restore the exponential moving averages the checkpoint holds as the
            weights: a variable ``x`` is restored from the entry
            ``x/ExponentialMovingAverage`` when there is one (written by
            ``EMAOptimizer`` or ``tf.compat.v1.train.ExponentialMovingAverage``), and
            from ``x`` otherwise (`ema_sources`). Use it to predict, export or
            evaluate with the averaged weights. The values are read with a checkpoint
            reader and fed.

            .. versionadded:: 0.2

    Raises:
        CheckpointNotFoundError: Nothing exists at `model_path`.
        NotACheckpointError: `model_path` exists but is not a checkpoint.
        RestoreMismatchError: At setup or init, when shapes or dtypes differ; the message
            lists every variable at fault with both shapes and dtypes.
    """

    _hint = (
        "List them in 'ignore' to skip them, or use SaverRestoreRelaxed to convert the "
        "fixable ones and skip the rest."
    )

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        prefix: str | None = None,
        ignore: Sequence[str] = (),
        ema: bool = False,
    ) -> None:
        if not isinstance(ema, bool):
            msg = f"'ema' must be a bool; got {type(ema).__name__} {ema!r}"
            raise TypeError(msg)
        self._path = resolve_checkpoint(model_path)
        self._vars = list_checkpoint_vars(self._path)
        self._prefix = _normalize_prefix(prefix) or None
        self._ignore = tuple(sorted(_ignore_set(ignore)))
        self._ema = ema
        self._read_from: dict[str, str] = {}
        if ema:
            self._vars, self._read_from = ema_sources(self._vars)

    @property
    def model_path(self) -> str:
        """The checkpoint prefix restored from (resolved at construction)."""
        return self._path

    @property
    def prefix(self) -> str | None:
        """The prefix added to each checkpoint name to find its graph variable."""
        return self._prefix

    @property
    def ignore(self) -> tuple[str, ...]:
        """The names skipped."""
        return self._ignore

    @property
    def ema(self) -> bool:
        """Whether moving averages are restored as the weights.

        .. versionadded:: 0.2
        """
        return self._ema

    def _source_vars(self) -> tuple[VarInfo, ...]:
        return self._vars

    def _label(self) -> str:
        averages = " (moving averages as the weights)" if self._ema else ""
        return f"checkpoint {self._path!r}{averages}"

    def _prepare(self, graph: Any, plan: RestorePlan, variables: Mapping[str, Any]) -> None:
        if not plan.restored:
            return
        if self._read_from:
            prepare_value_restore([variables[a.target.name] for a in plan.restored])
        else:
            checkpoint_restore_op(graph, plan.restored, variables)

    def _execute(self, sess: Any, plan: RestorePlan, variables: Mapping[str, Any]) -> None:
        run_checkpoint_restore(
            sess, self._path, plan.restored, variables, read_from=self._read_from
        )

    def __repr__(self) -> str:
        ema = ", ema=True" if self._ema else ""
        return f"{type(self).__name__}({self._path!r}, prefix={self._prefix!r}, ignore={self._ignore!r}{ema})"


class SaverRestoreRelaxed(SaverRestore):
    """Like `SaverRestore`, but repairs what it can and skips the rest instead of failing.

    A value whose dtype widens losslessly into the variable's (float16 to float32, for
    example) is upcast; a value with the same number of elements in another shape is
    reshaped; each conversion is logged. Mismatches that neither fixes are logged as a
    warning with both shapes and dtypes, and skipped.

    Like `SaverRestore`, it runs one op group (RestoreV2, the conversions, the assigns),
    built once per graph and plan and shared with `SaverRestore` where the plans agree.
    In a finalized graph that was not set up, it adds no op at all: values are read with
    a checkpoint reader and fed into the variables' initializer ops.

    Args:
        model_path: As in `SaverRestore`.
        prefix: As in `SaverRestore`.
        ignore: As in `SaverRestore`.
    """

    _relaxed = True
    _ignore_mismatch = True


class _ValueRestore(_PlannedRestore):
    """A restore of values held in memory or in an npz file, fed in one ``session.run``."""

    _hint = "Pass ignore_mismatch=True to convert the fixable ones and skip the rest."

    @abc.abstractmethod
    def _values(self, plan: RestorePlan) -> Mapping[str, Any]:
        """The values to load, by checkpoint name, for the variables `plan` matched."""

    def _prepare(self, graph: Any, plan: RestorePlan, variables: Mapping[str, Any]) -> None:
        del graph
        prepare_value_restore([variables[a.target.name] for a in plan.restored])

    def _execute(self, sess: Any, plan: RestorePlan, variables: Mapping[str, Any]) -> None:
        if not plan.restored:
            return
        values = self._values(plan)
        run_value_restore(sess, plan.restored, variables, lambda a: values[a.source.name])

    @property
    def ignore_mismatch(self) -> bool:
        """Whether mismatches are converted where possible and otherwise skipped with a warning."""
        return self._ignore_mismatch


class DictRestore(_ValueRestore):
    """Restore variables from a ``{name: array}`` dict.

    Args:
        variable_dict: ``{name: value}``; names with or without ``:0``; values are NumPy
            arrays (or what ``np.asarray`` turns into a numeric or string array).
        ignore_mismatch: If False, a value whose shape or dtype differs from its variable's
            raises `RestoreMismatchError` listing every such variable. If True, lossless
            upcasts and reshapes are applied, and the other mismatches are logged as a
            warning and skipped.

    Raises:
        TypeError: `variable_dict` is not a mapping of names to arrays.
        ValueError: Two keys name the same variable (``"a"`` and ``"a:0"``).
    """

    def __init__(self, variable_dict: Mapping[str, Any], ignore_mismatch: bool = False) -> None:
        self._arrays = as_arrays(variable_dict, "'variable_dict'")
        self._vars = tuple(
            VarInfo(name=k, shape=a.shape, dtype=a.dtype) for k, a in self._arrays.items()
        )
        self._ignore_mismatch = bool(ignore_mismatch)
        self._relaxed = self._ignore_mismatch

    @property
    def variable_dict(self) -> Mapping[str, Any]:
        """The values, by name without ``:0`` (read-only view)."""
        return types.MappingProxyType(self._arrays)

    def _source_vars(self) -> tuple[VarInfo, ...]:
        return self._vars

    def _label(self) -> str:
        return "the dict"

    def _values(self, plan: RestorePlan) -> Mapping[str, Any]:
        del plan
        return self._arrays

    def __repr__(self) -> str:
        return (
            f"DictRestore(<{len(self._arrays)} entries>, ignore_mismatch={self._ignore_mismatch})"
        )


class _NpzRestore(_ValueRestore):
    """Restore from an npz file: entries listed at construction, read at init."""

    def __init__(self, path: str | os.PathLike[str], ignore_mismatch: bool = False) -> None:
        self._path = os.fspath(path)
        self._index = index_npz(self._path)
        self._vars = self._index.infos
        self._ignore_mismatch = bool(ignore_mismatch)
        self._relaxed = self._ignore_mismatch

    @property
    def path(self) -> str:
        """The npz file."""
        return self._path

    def _source_vars(self) -> tuple[VarInfo, ...]:
        if not self._index.is_current():
            self._index = index_npz(self._path)
            self._vars = self._index.infos
        return self._vars

    def _label(self) -> str:
        return f"npz file {self._path!r}"

    def _values(self, plan: RestorePlan) -> Mapping[str, Any]:
        return read_npz(self._index, [a.source.name for a in plan.restored])

    def __repr__(self) -> str:
        return f"SmartInit({self._path!r}, ignore_mismatch={self._ignore_mismatch})"


def _is_npz_path(path: str) -> bool:
    if path.endswith(".npz"):
        return True
    return os.path.isfile(path) and checkpoint_prefix_of(path) == path and zipfile.is_zipfile(path)


_SMART_INIT_HINT = (
    "Pass ignore_mismatch=True to SmartInit to convert the fixable ones and skip the rest."
)
"""The fix a mismatch error offers when SmartInit made the initializer."""


def SmartInit(obj: Any, *, ignore_mismatch: bool = False) -> SessionInit:
    """Make a SessionInit from whatever `obj` is.

    Args:
        obj: One of:

            - a TensorFlow checkpoint: a prefix (``"train_log/model-1000"``), one of its
              files (``.index``...), or a directory (its latest checkpoint);
            - a dict of NumPy arrays;
            - an npz file (a path ending with ``.npz``, or any zip file of ``.npy``
              arrays), read as a dict;
            - ``""`` or None: nothing is loaded;
            - a SessionInit, returned as it is;
            - a list or tuple of the above, loaded one after another.
        ignore_mismatch: If False, a shape or dtype mismatch raises `RestoreMismatchError`
            listing every variable at fault. If True, lossless upcasts and reshapes are
            applied and other mismatches are logged as a warning and skipped (for a
            checkpoint, this is `SaverRestoreRelaxed`).

    Returns:
        The SessionInit.

    Raises:
        TypeError: `obj` is none of the supported kinds.
        CheckpointNotFoundError: A path does not exist.
        NotACheckpointError: A path exists but is neither a checkpoint nor an npz file.
    """
    if obj is None or (isinstance(obj, str) and obj == ""):
        return JustCurrentSession()
    if isinstance(obj, SessionInit):
        return obj
    if isinstance(obj, (list, tuple)):
        return ChainInit([SmartInit(o, ignore_mismatch=ignore_mismatch) for o in obj])
    init: _PlannedRestore
    if isinstance(obj, Mapping):
        init = DictRestore(obj, ignore_mismatch=ignore_mismatch)
    elif isinstance(obj, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(obj))
        if _is_npz_path(path):
            init = _NpzRestore(path, ignore_mismatch=ignore_mismatch)
        elif ignore_mismatch:
            init = SaverRestoreRelaxed(path)
        else:
            init = SaverRestore(path)
    else:
        msg = (
            f"SmartInit cannot load a {type(obj).__name__}: expected a checkpoint path or "
            "directory, an npz path, a dict of arrays, a SessionInit, None or '', or a list of these"
        )
        raise TypeError(msg)
    # The fix offered on a mismatch is the one SmartInit's caller can apply.
    init._hint = _SMART_INIT_HINT
    return init


def get_model_loader(filename: str | os.PathLike[str]) -> SessionInit:
    """The session initializer of a model file, as tensorpack programs ask for it.

    The same as ``SmartInit(filename)`` for a path: a checkpoint (prefix, one of its
    files, or a directory) or an npz file.

    Raises:
        TypeError: `filename` is not a path.
        ValueError: a ``.npy`` file: a pickled dict, which is not unpickled here.
        CheckpointNotFoundError: the path does not exist.

    .. versionadded:: 0.2
    """
    if not isinstance(filename, (str, os.PathLike)):
        msg = (
            f"'filename' must be a path to a checkpoint or npz file; got {type(filename).__name__}"
        )
        raise TypeError(msg)
    path = os.fspath(filename)
    if path.endswith(".npy"):
        msg = (
            f"'filename' {path!r} is a .npy file, a pickled dict of arrays that towerkit does "
            "not unpickle (unpickling runs code from the file); convert it once, from a source "
            "you trust, with `np.savez(out_npz, **np.load(path, allow_pickle=True).item())` "
            "and load the .npz"
        )
        raise ValueError(msg)
    return SmartInit(path)
