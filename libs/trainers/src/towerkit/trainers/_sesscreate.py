"""Session creators: a new initialized session, an existing session, or a wrapped one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from towerkit.towers.compat import tf1
from towerkit.trainers._tf_lines import tensorflow_lines_hidden
from towerkit.trainers._tfutils import get_default_sess_config

__all__ = ["NewSessionCreator", "ReuseSessionCreator", "SessionCreatorAdapter"]

logger = logging.getLogger("towerkit.trainers")

if TYPE_CHECKING:
    _SessionCreator = object
else:
    _SessionCreator = tf1.train.SessionCreator
"""``tf.compat.v1.train.SessionCreator``: the base of the creators (TensorFlow has no types)."""


class SessionCreatorLike(Protocol):
    """What trainers take as a ``session_creator``: anything with ``create_session()``.

    The creators here, ``tf.compat.v1.train.SessionCreator`` subclasses and any object
    with that method.
    """

    def create_session(self) -> Any:
        """A ``tf.compat.v1.Session`` on the default graph."""
        ...


def _initializer_ops(graph: Any) -> list[Any]:
    """The initializers of every global and local variable and table in `graph`.

    They are ops that already exist, so this works on a finalized graph.
    """
    with graph.as_default():
        variables = tf1.global_variables() + tf1.local_variables()
        tables = tf1.get_collection(tf1.GraphKeys.TABLE_INITIALIZERS)
    return [v.initializer for v in variables] + list(tables)


class NewSessionCreator(_SessionCreator):
    """Create a new session on the default graph and initialize its variables.

    ``create_session`` opens a ``tf.compat.v1.Session`` on the graph that is the default
    when it is called, then runs the initializer of every global and local variable and
    of every table. A trainer then runs its ``session_init`` (e.g. a checkpoint restore)
    on top, so variables a checkpoint lacks keep their initial values.

    Args:
        target: the execution engine to connect to, as in ``tf.compat.v1.Session``
            (``""`` for in-process).
        config: a ``tf.compat.v1.ConfigProto``; defaults to ``get_default_sess_config()``.

    Raises:
        TypeError: `target` is not a string, or `config` is not a ConfigProto.
    """

    def __init__(self, target: str = "", config: Any = None) -> None:
        if not isinstance(target, str):
            msg = f"'target' must be a str (e.g. '' or 'grpc://host:port'); got {type(target).__name__}"
            raise TypeError(msg)
        if config is None:
            config = get_default_sess_config()
        elif not isinstance(config, tf1.ConfigProto):
            msg = (
                f"'config' must be a tf.compat.v1.ConfigProto or None; got {type(config).__name__}"
            )
            raise TypeError(msg)
        self._target = target
        self._config = config

    @property
    def target(self) -> str:
        """The execution engine the session connects to."""
        return self._target

    @property
    def config(self) -> Any:
        """The session's ``ConfigProto``."""
        return self._config

    def create_session(self) -> Any:
        """A new session on the default graph, with every variable and table initialized.

        TensorFlow's C++ lines printed meanwhile (devices, the CUDA probe, the MLIR
        pass) are hidden; ``TOWERKIT_VERBOSE=1`` shows them.
        """
        graph = tf1.get_default_graph()
        # TensorFlow prints a second block of start-up lines here (devices, CUDA probe,
        # MLIR): hidden unless TOWERKIT_VERBOSE=1.
        with tensorflow_lines_hidden():
            sess = tf1.Session(target=self._target, graph=graph, config=self._config)
            try:
                ops = _initializer_ops(graph)
                if ops:
                    sess.run(ops)
            except BaseException:
                sess.close()
                raise
        logger.info("created a session and initialized %d variables and tables", len(ops))
        return sess

    def __repr__(self) -> str:
        return f"NewSessionCreator(target={self._target!r})"


class ReuseSessionCreator(_SessionCreator):
    """Return an existing session, as it is (nothing is initialized).

    Args:
        sess: the ``tf.compat.v1.Session`` to return.

    Raises:
        TypeError: `sess` is not a session.
    """

    def __init__(self, sess: Any) -> None:
        if not isinstance(sess, tf1.Session):
            msg = f"'sess' must be a tf.compat.v1.Session; got {type(sess).__name__}"
            raise TypeError(msg)
        self._sess = sess

    def create_session(self) -> Any:
        """The session given at construction."""
        return self._sess

    def __repr__(self) -> str:
        return f"ReuseSessionCreator({self._sess!r})"


class SessionCreatorAdapter(_SessionCreator):
    """Apply a function to the session another creator makes (e.g. to wrap it for debugging).

    Args:
        session_creator: the creator whose session is passed to `func`.
        func: takes that session and returns the session to use.

    Raises:
        TypeError: `session_creator` has no ``create_session`` or `func` is not callable.
    """

    def __init__(self, session_creator: SessionCreatorLike, func: Callable[[Any], Any]) -> None:
        if not callable(getattr(session_creator, "create_session", None)):
            msg = (
                f"'session_creator' must have a create_session() method; "
                f"got {type(session_creator).__name__}"
            )
            raise TypeError(msg)
        if not callable(func):
            msg = f"'func' must be callable (session -> session); got {type(func).__name__}"
            raise TypeError(msg)
        self._creator = session_creator
        self._func = func

    def create_session(self) -> Any:
        """``func(session_creator.create_session())``."""
        return self._func(self._creator.create_session())

    def __repr__(self) -> str:
        return f"SessionCreatorAdapter({self._creator!r}, {self._func!r})"


def default_session_creator(session_config: Any = None) -> NewSessionCreator:
    """A ``NewSessionCreator`` with `session_config`, else the default session config."""
    return NewSessionCreator(
        config=session_config if session_config is not None else get_default_sess_config()
    )
