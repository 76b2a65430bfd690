"""GraphProfiler: trace session calls and write chrome traces, run metadata and events."""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from tensorflow.core.util import event_pb2

from towerkit.callbacks._base import Callback
from towerkit.callbacks._errors import CallbackError
from towerkit.sessinit import atomic_write_bytes, remove_stale_temporaries
from towerkit.towers.compat import tf1

logger = logging.getLogger("towerkit.callbacks")


def profile_file_names(global_step: int) -> dict[str, str]:
    """The file names GraphProfiler writes for the call that brought the global step to ``global_step``.

    Examples:
        >>> profile_file_names(12)
        {'tracing': 'chrome-trace-12.json', 'metadata': 'runmetadata-12.pb'}
    """
    return {
        "tracing": f"chrome-trace-{global_step}.json",
        "metadata": f"runmetadata-{global_step}.pb",
    }


_PROFILE_FILE = re.compile(r"chrome-trace-\d+\.json|runmetadata-\d+\.pb")


class GraphProfiler(Callback):
    """Trace every ``hooked_sess.run`` (``FULL_TRACE``) and write what the trace holds.

    After the call that brings the global step to ``k`` it writes, under the
    trainer's logdir: ``chrome-trace-<k>.json`` (open it in ``chrome://tracing``
    or Perfetto), ``runmetadata-<k>.pb`` (a serialized ``RunMetadata`` for
    tfprof), and/or an event with the tagged run metadata through
    ``trainer.monitors.put_event`` (shown by TensorBoard). Files are written
    atomically.

    Tracing every step is expensive: schedule it, e.g.
    ``EnableCallbackIf(GraphProfiler(), lambda self: 20 < self.trainer.global_step < 30)``.

    Args:
        dump_metadata: write the ``RunMetadata`` files.
        dump_tracing: write the chrome trace files.
        dump_event: put a ``tf.compat.v1.Event`` with the run metadata to the monitors.

    Raises:
        ValueError: all three are False.
        CallbackError: (in ``setup_graph``) files are asked for and the trainer has no logdir.
    """

    def __init__(
        self, dump_metadata: bool = False, dump_tracing: bool = True, dump_event: bool = False
    ) -> None:
        if not (dump_metadata or dump_tracing or dump_event):
            msg = "GraphProfiler would write nothing: set one of 'dump_metadata', 'dump_tracing', 'dump_event'"
            raise ValueError(msg)
        self._metadata = bool(dump_metadata)
        self._tracing = bool(dump_tracing)
        self._event = bool(dump_event)
        self._dir = ""
        self._args = tf1.train.SessionRunArgs(
            fetches=None, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        )

    def _setup_graph(self) -> None:
        if self._metadata or self._tracing:
            logdir = self.trainer.logdir
            if logdir is None:
                msg = f"{self} writes files under the trainer's logdir, but the trainer has none"
                raise CallbackError(msg)
            self._dir = logdir
            remove_stale_temporaries(
                logdir, lambda n: _PROFILE_FILE.fullmatch(n) is not None, what="profile"
            )

    def _before_run(self, run_context: Any) -> Any:
        del run_context
        return self._args

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        del run_context
        metadata = run_values.run_metadata
        step = self.trainer.global_step
        names = profile_file_names(step)
        if self._tracing:
            from tensorflow.python.client import timeline

            trace = timeline.Timeline(step_stats=metadata.step_stats).generate_chrome_trace_format()
            atomic_write_bytes(os.path.join(self._dir, names["tracing"]), trace.encode("utf-8"))
        if self._metadata:
            atomic_write_bytes(
                os.path.join(self._dir, names["metadata"]), metadata.SerializeToString()
            )
        if self._event:
            tagged = event_pb2.TaggedRunMetadata(
                tag=f"trace-{step}", run_metadata=metadata.SerializeToString()
            )
            self.trainer.monitors.put_event(event_pb2.Event(tagged_run_metadata=tagged))
