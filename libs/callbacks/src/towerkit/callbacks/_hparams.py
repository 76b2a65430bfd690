"""`HParamsMonitor`: a run's parameters and end status for TensorBoard's HParams dashboard.

TensorBoard's HParams plugin reads two summaries from a run's event files: the session
start (the run's hyper-parameters) and the session end (its status). Their content is
the plugin's ``HParamsPluginData`` protocol buffer; its message types are declared here
(the wire format of ``tensorboard/plugins/hparams/plugin_data.proto``), so writing them
needs neither TensorBoard nor a tracker package: only protobuf, which TensorFlow has.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from towerkit.callbacks._tracking import TrackerMonitor
from towerkit.callbacks._tracking_core import EndStatus, Scalar
from towerkit.callbacks._writers import require_logdir
from towerkit.towers.compat import tf1

PLUGIN_NAME = "hparams"
"""The plugin name TensorBoard looks the summaries up by."""

SESSION_START_TAG = "_hparams_/session_start_info"
SESSION_END_TAG = "_hparams_/session_end_info"

HPARAMS_STATUS = {"FINISHED": 1, "FAILED": 2}
"""The plugin's ``Status`` of a run's end: ``STATUS_SUCCESS``, ``STATUS_FAILURE``.

A ``KILLED`` run (preempted, Ctrl-C) gets no session end: TensorBoard keeps the first
end status it reads for ever, and the resumed run continues the same session.
"""

_PROTO_PACKAGE = "towerkit.callbacks.hparams_plugin"


@functools.cache
def plugin_messages() -> dict[str, Any]:
    """The message classes ``HParamsPluginData``, ``SessionStartInfo``, ``SessionEndInfo``.

    Built once from a descriptor of the plugin's wire format, in a pool of their own.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, struct_pb2

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="towerkit/callbacks/hparams_plugin.proto",
        package=_PROTO_PACKAGE,
        syntax="proto3",
        dependency=["google/protobuf/struct.proto"],
    )

    def field(
        msg: Any,
        name: str,
        number: int,
        kind: int,
        type_name: str = "",
        repeated: bool = False,
        oneof: int | None = None,
    ) -> None:
        fd = msg.field.add(name=name, number=number, type=kind)
        fd.label = f.LABEL_REPEATED if repeated else f.LABEL_OPTIONAL
        if type_name:
            fd.type_name = type_name
        if oneof is not None:
            fd.oneof_index = oneof

    start = fdp.message_type.add(name="SessionStartInfo")
    entry = start.nested_type.add(name="HparamsEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, f.TYPE_STRING)
    field(entry, "value", 2, f.TYPE_MESSAGE, ".google.protobuf.Value")
    field(
        start,
        "hparams",
        1,
        f.TYPE_MESSAGE,
        f".{_PROTO_PACKAGE}.SessionStartInfo.HparamsEntry",
        repeated=True,
    )
    field(start, "model_uri", 2, f.TYPE_STRING)
    field(start, "monitor_url", 3, f.TYPE_STRING)
    field(start, "group_name", 4, f.TYPE_STRING)
    field(start, "start_time_secs", 5, f.TYPE_DOUBLE)
    end = fdp.message_type.add(name="SessionEndInfo")
    field(end, "status", 1, f.TYPE_INT32)  # the plugin's Status enum: a varint on the wire
    field(end, "end_time_secs", 2, f.TYPE_DOUBLE)
    data = fdp.message_type.add(name="HParamsPluginData")
    data.oneof_decl.add(name="data")
    field(data, "version", 1, f.TYPE_INT32)
    field(
        data,
        "session_start_info",
        3,
        f.TYPE_MESSAGE,
        f".{_PROTO_PACKAGE}.SessionStartInfo",
        oneof=0,
    )
    field(data, "session_end_info", 4, f.TYPE_MESSAGE, f".{_PROTO_PACKAGE}.SessionEndInfo", oneof=0)

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(struct_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(fdp)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{_PROTO_PACKAGE}.{name}")
        )
        for name in ("HParamsPluginData", "SessionStartInfo", "SessionEndInfo")
    }


def _summary(tag: str, content: bytes) -> Any:
    """A ``tf.compat.v1.Summary`` holding the plugin's `content` under `tag`."""
    meta = tf1.SummaryMetadata(
        plugin_data=tf1.SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=content)
    )
    tensor = tf1.make_tensor_proto(0.0)
    return tf1.Summary(value=[tf1.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])


def session_start_summary(
    values: Mapping[str, Scalar], group_name: str, model_uri: str, start_time: float
) -> Any:
    """The session start summary of a run with hyper-parameters `values` (None values are left out)."""
    msgs = plugin_messages()
    info = msgs["SessionStartInfo"](
        group_name=group_name, model_uri=model_uri, start_time_secs=start_time
    )
    for name, value in values.items():
        if value is None:
            continue
        slot = info.hparams[name]
        if isinstance(value, bool):
            slot.bool_value = value
        elif isinstance(value, int | float):
            slot.number_value = float(value)
        else:
            slot.string_value = str(value)
    data = msgs["HParamsPluginData"](version=0, session_start_info=info)
    return _summary(SESSION_START_TAG, data.SerializeToString())


def session_end_summary(status: int, end_time: float) -> Any:
    """The session end summary with the plugin's `status` (`HPARAMS_STATUS`)."""
    msgs = plugin_messages()
    info = msgs["SessionEndInfo"](status=status, end_time_secs=end_time)
    data = msgs["HParamsPluginData"](version=0, session_end_info=info)
    return _summary(SESSION_END_TAG, data.SerializeToString())


class HParamsMonitor(TrackerMonitor):
    """Write the run's hyper-parameters and end status for TensorBoard's HParams dashboard.

    On the chief only. Before training it writes the HParams plugin's session start
    (the parameters: what the trainer knows, the plain-valued options of `config`,
    then `params`, as `MLflowMonitor` finds them, numbers as numbers) to an event file
    of its own in the logdir (``*.hparams``), which TensorBoard reads as part of the
    same run; after training, the session end: ``STATUS_SUCCESS`` when the run
    finished or a callback stopped it, ``STATUS_FAILURE`` on an error. A preempted or
    interrupted run gets no end (TensorBoard keeps a run's first end status), and a
    run resumed in that logdir continues the same session, writing no second start.
    The metrics the dashboard shows are the run's scalar summaries (``TFEventWriter``).

    Needs no package beyond TensorFlow. Like the other trackers' monitors, a failure
    to write logs one warning and training goes on.

    Args:
        params: more hyper-parameters (they win over those found); nested mappings
            are flattened to ``outer/inner`` names.
        config: the ``TrainConfig`` of the run, to record its options too.
        group_name: the session group (runs of one group share hyper-parameters);
            by default the logdir's name.

    .. versionadded:: 0.2
    """

    TRACKER = "hparams"

    def __init__(
        self,
        params: Mapping[str, Any] | None = None,
        config: Any = None,
        group_name: str | None = None,
    ) -> None:
        super().__init__(params=params, config=config, artifacts=(), timeout=None)
        if group_name is not None and not (isinstance(group_name, str) and group_name):
            msg = (
                f"HParamsMonitor: 'group_name' must be a non-empty str or None; got {group_name!r}"
            )
            raise TypeError(msg)
        self._group = group_name
        self._writer: Any = None

    def _setup_graph(self) -> None:
        self._logdir = require_logdir(self)

    def _open(self) -> Any:
        if self._writer is None:
            with self.graph.as_default():
                self._writer = tf1.summary.FileWriter(
                    self._logdir, filename_suffix=f".{os.getpid()}.hparams"
                )
        return self._writer

    def _open_run(self, params: dict[str, Scalar], resume_id: str | None) -> str:
        if resume_id is not None:
            return resume_id
        now = time.time()
        group = self._group or os.path.basename(os.path.normpath(str(self._logdir)))
        writer = self._open()
        writer.add_summary(
            session_start_summary(params, group, str(self._logdir), now), self.trainer.global_step
        )
        writer.flush()
        return f"{socket.gethostname()}-{os.getpid()}-{int(now)}"

    def _send_metrics(self, rows: list[tuple[str, float, int, int]]) -> None:
        """Nothing: the dashboard reads the run's scalar summaries from its event files."""

    def _send_file(self, path: str) -> None:
        """Nothing: TensorBoard reads the logdir itself."""

    def _end_run(self, status: EndStatus) -> None:
        code = HPARAMS_STATUS.get(status)
        if code is not None:
            self._open().add_summary(
                session_end_summary(code, time.time()), self.trainer.global_step
            )
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _run_entry(self) -> dict[str, str]:
        return {}
