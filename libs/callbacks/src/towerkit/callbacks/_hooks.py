"""Adapters between callbacks and ``tf.compat.v1.train.SessionRunHook``, and the tfdbg CLI hook."""

from __future__ import annotations

from typing import Any

from towerkit.callbacks._base import Callback
from towerkit.towers.compat import tf1

_SessionRunHook: Any = tf1.train.SessionRunHook


class CallbackToHook(_SessionRunHook):  # type: ignore[misc]  # TensorFlow's class is untyped
    """A ``SessionRunHook`` that calls a callback's ``before_run``/``after_run``.

    Hooks know less than callbacks, so only these two methods carry over: the
    callback's other methods are never called through the hook. Use it to run a
    callback under a ``MonitoredSession``; towerkit's own loop calls callbacks
    directly.

    Args:
        cb: the callback; it must have been set up (``setup_graph``) already if its
            ``before_run`` uses ops it builds there.
    """

    def __init__(self, cb: Callback) -> None:
        if not isinstance(cb, Callback):
            msg = f"'cb' must be a Callback; got {type(cb).__name__}"
            raise TypeError(msg)
        self._cb = cb

    @property
    def callback(self) -> Callback:
        """The callback the hook calls."""
        return self._cb

    def before_run(self, run_context: Any) -> Any:
        return self._cb.before_run(run_context)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._cb.after_run(run_context, run_values)

    def __repr__(self) -> str:
        return f"CallbackToHook({self._cb})"


class HookToCallback(Callback):
    """A callback that drives a ``tf.compat.v1.train.SessionRunHook``.

    The hook's ``begin`` runs in ``setup_graph`` (inside the callback's name scope),
    ``after_create_session(sess, coord=None)`` in ``before_train`` (there is no
    coordinator: ``coord`` is always None), ``before_run``/``after_run`` around
    every ``hooked_sess.run`` and ``end(sess)`` in ``after_train``. It runs in
    every training process (``chief_only`` is False); use ``set_chief_only()`` for
    a hook only the chief should run (one that writes files, for instance).

    Args:
        hook: the hook.
    """

    _chief_only = False

    def __init__(self, hook: Any) -> None:
        if not isinstance(hook, tf1.train.SessionRunHook):
            msg = f"'hook' must be a tf.compat.v1.train.SessionRunHook; got {type(hook).__name__}"
            raise TypeError(msg)
        self._hook = hook

    @property
    def hook(self) -> Any:
        """The hook this callback drives."""
        return self._hook

    def _setup_graph(self) -> None:
        self._hook.begin()

    def _before_train(self) -> None:
        self._hook.after_create_session(self.trainer.sess, None)

    def _before_run(self, run_context: Any) -> Any:
        return self._hook.before_run(run_context)

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        self._hook.after_run(run_context, run_values)

    def _after_train(self) -> None:
        self._hook.end(self.trainer.sess)

    def __str__(self) -> str:
        return f"HookToCallback({type(self._hook).__name__})"


def _local_cli_debug_hook_class() -> type:
    """TensorFlow's ``LocalCLIDebugHook`` class, or a clear ImportError when it is gone."""
    try:
        from tensorflow.python.debug.wrappers.hooks import LocalCLIDebugHook
    except ImportError as err:  # pragma: no cover - depends on the TensorFlow build
        msg = (
            "TFLocalCLIDebugHook needs tfdbg's LocalCLIDebugHook "
            "(tensorflow.python.debug.wrappers.hooks), which this TensorFlow does not ship: "
            f"{err}"
        )
        raise ImportError(msg) from err
    hook: type = LocalCLIDebugHook
    return hook


class TFLocalCLIDebugHook(HookToCallback):
    """Step through training in tfdbg's command-line debugger (``LocalCLIDebugHook``).

    Before each ``hooked_sess.run`` the debugger's prompt opens on the terminal
    (``run`` continues, ``help`` lists commands). It is meant for an interactive
    terminal; wrap it in a trigger to debug only some steps. TensorFlow 2.x still
    ships the hook as ``tensorflow.python.debug.wrappers.hooks.LocalCLIDebugHook``
    (readline interface only); where a TensorFlow build lacks it, construction
    raises ``ImportError`` naming the missing module.

    Args:
        args: positional arguments of ``LocalCLIDebugHook`` (``ui_type="readline"``,
            ``dump_root``, ``thread_name_filter``, ``config_file_path``).
        kwargs: keyword arguments of ``LocalCLIDebugHook``.

    Raises:
        ImportError: this TensorFlow does not ship ``LocalCLIDebugHook``.
    """

    _chief_only = True  # one interactive prompt, in the chief's terminal

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        hook_class = _local_cli_debug_hook_class()
        super().__init__(hook_class(*args, **kwargs))

    def add_tensor_filter(self, *args: Any, **kwargs: Any) -> None:
        """Register a tensor filter with the debugger (see ``LocalCLIDebugHook.add_tensor_filter``).

        Filters can be added before training starts; the debugger applies them
        once it wraps the session.
        """
        self._hook.add_tensor_filter(*args, **kwargs)
