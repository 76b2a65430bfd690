"""A session whose ``run`` calls the callbacks' before_run/after_run, at the cost of a callable."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from towerkit.callbacks._base import Callback
from towerkit.towers.compat import tf1

SessionRunArgs = tf1.train.SessionRunArgs
SessionRunContext = tf1.train.SessionRunContext
SessionRunValues = tf1.train.SessionRunValues

_MAX_ID_ENTRIES = 512

_Active = tuple[tuple[Callback, Any], ...]
"""The hooks asking for something in one call: each callback with its ``SessionRunArgs``."""


def _scalar(value: Any) -> Any:
    """A 0-d array as its numpy scalar, as ``Session.run`` returns it."""
    return value[()] if type(value) is np.ndarray and value.ndim == 0 else value


def _packer(structure: Any, slots: Sequence[int]) -> Callable[[Sequence[Any]], Any]:
    """A function rebuilding ``structure`` from a callable's outputs.

    ``slots`` gives, for each flattened element of ``structure``, its index in the
    outputs, or -1 for an operation (whose value is None).
    """
    if structure is None:
        return lambda out: None
    if not tf.nest.is_nested(structure):
        (slot,) = slots
        return (lambda out: None) if slot < 0 else (lambda out: _scalar(out[slot]))

    def pack(out: Sequence[Any]) -> Any:
        flat = [None if i < 0 else _scalar(out[i]) for i in slots]
        return tf.nest.pack_sequence_as(structure, flat)

    return pack


def _flatten(structure: Any) -> list[Any]:
    return [] if structure is None else tf.nest.flatten(structure)


class _Entry:
    """A compiled call: one session callable for the main fetches plus the active hooks'."""

    __slots__ = ("call", "feed_dtypes", "feeds", "main", "pieces", "refs", "with_metadata")

    def __init__(
        self,
        call: Callable[..., Any],
        feeds: tuple[Any, ...],
        feed_dtypes: tuple[npt.DTypeLike, ...],
        main: Callable[[Sequence[Any]], Any],
        pieces: list[Callable[[Sequence[Any]], Any]],
        refs: tuple[Any, ...],
        with_metadata: bool,
    ) -> None:
        self.call = call
        self.feeds = feeds
        self.feed_dtypes = feed_dtypes
        self.main = main
        self.pieces = pieces
        self.refs = refs
        self.with_metadata = with_metadata


class HookedSession:
    """Run a session the way the training loop does: with every callback's hooks.

    ``run(fetches, feed_dict)`` calls ``before_run`` on the callbacks that have one,
    runs the main fetches together with what the hooks asked for in ONE session call,
    counts the call, then calls ``after_run`` with each hook's results. A session
    callable is built once per combination of (main fetches, active hook fetches,
    feed keys) and reused, so a step whose hooks ask for the same things as before
    costs one Python call into the session; callbacks that do nothing around runs are
    never called.

    Args:
        sess: the ``tf.compat.v1.Session`` to run.
        callbacks: the callbacks whose ``before_run``/``after_run`` to call, in order.
        step_op: an op run with every call (the trainer's global-step increment), or None.

    Attributes:
        run_calls: ``run`` calls that returned, since construction.
    """

    def __init__(
        self, sess: Any, callbacks: Sequence[Callback] = (), *, step_op: Any = None
    ) -> None:
        self.sess = sess
        self._before = tuple(cb for cb in callbacks if cb.has_hook("_before_run"))
        self._after = tuple(cb for cb in callbacks if cb.has_hook("_after_run"))
        self._hooked = bool(self._before or self._after)
        self._step = [] if step_op is None else [step_op]
        self._by_id: dict[tuple[Any, ...], _Entry] = {}
        self._by_structure: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self._stop = False
        # A placeholder no fetches can match (its reference is a fresh object), so its
        # functions are never called: the first run looks up a real entry.
        self._last = _Entry(_nothing_to_run, (), (), _nothing_to_run, [], (object(),), False)
        self.run_calls = 0

    @property
    def graph(self) -> Any:
        """The session's graph."""
        return self.sess.graph

    def should_stop(self) -> bool:
        """Whether a hook called ``run_context.request_stop()``."""
        return self._stop

    def request_stop(self) -> None:
        """Ask the loop to stop after the current step, as a hook's ``request_stop()`` does.

        Safe to call from another thread (e.g. a watch that found a dead process).
        """
        self._stop = True

    def run(
        self,
        fetches: Any,
        feed_dict: dict[Any, Any] | None = None,
        options: Any = None,
        run_metadata: Any = None,
    ) -> Any:
        """Run ``fetches`` like ``Session.run``, calling the hooks around it.

        Returns:
            The values of ``fetches``, in their structure.
        """
        if not self._hooked:
            last = self._last
            if (
                fetches is last.refs[0]
                and feed_dict is None
                and options is None
                and run_metadata is None
            ):
                out = last.call()
            else:
                last = self._last = self._lookup(fetches, feed_dict, options, ())
                out = self._call(last, feed_dict, run_metadata, ())
            self.run_calls += 1
            return last.main(out)
        ctx = SessionRunContext(SessionRunArgs(fetches, feed_dict, options), self.sess)
        wanted: list[tuple[Callback, Any]] = []
        for cb in self._before:
            args = cb.before_run(ctx)
            if args is not None:
                if not isinstance(args, SessionRunArgs):
                    args = SessionRunArgs(args)
                wanted.append((cb, args))
        active = tuple(wanted)
        entry = self._lookup(fetches, feed_dict, options, active)
        metadata = run_metadata
        if entry.with_metadata and metadata is None:
            metadata = tf1.RunMetadata()
        out = self._call(entry, feed_dict, metadata, active)
        self.run_calls += 1
        if self._after:
            results = {id(cb): piece(out) for (cb, _), piece in zip(active, entry.pieces)}
            for cb in self._after:
                cb.after_run(
                    ctx,
                    SessionRunValues(
                        results=results.get(id(cb)), options=options, run_metadata=metadata
                    ),
                )
        if ctx.stop_requested:
            self._stop = True
        return entry.main(out)

    # -- compiled calls ---------------------------------------------------------------

    def _call(
        self, entry: _Entry, feed_dict: dict[Any, Any] | None, run_metadata: Any, active: _Active
    ) -> Any:
        values: Sequence[Any] = ()
        if entry.feeds:
            merged = dict(feed_dict or {})
            for _, args in active:
                if args.feed_dict:
                    merged.update(args.feed_dict)
            values = [
                v if type(v) is np.ndarray and v.dtype == dt else np.asarray(v, dtype=dt)
                for v, dt in zip((merged[k] for k in entry.feeds), entry.feed_dtypes)
            ]
        if entry.with_metadata:
            return entry.call(*values, run_metadata=run_metadata)
        return entry.call(*values)

    def _lookup(
        self, fetches: Any, feed_dict: dict[Any, Any] | None, options: Any, active: _Active
    ) -> _Entry:
        key = (
            id(fetches),
            tuple(feed_dict) if feed_dict else (),
            None if options is None else options.SerializeToString(),
            tuple(
                (
                    id(cb),
                    id(a.fetches),
                    tuple(a.feed_dict) if a.feed_dict else (),
                    None if a.options is None else a.options.SerializeToString(),
                )
                for cb, a in active
            ),
        )
        entry = self._by_id.get(key)
        if (
            entry is not None
            and entry.refs[0] is fetches
            and all(r is a.fetches for r, (_, a) in zip(entry.refs[1:], active))
        ):
            return entry
        entry = self._compile(fetches, feed_dict, options, active)
        if len(self._by_id) >= _MAX_ID_ENTRIES:
            self._by_id.clear()
        self._by_id[key] = entry
        return entry

    def _compile(
        self, fetches: Any, feed_dict: dict[Any, Any] | None, options: Any, active: _Active
    ) -> _Entry:
        graph = self.sess.graph
        structures = [fetches, *(a.fetches for _, a in active)]
        flats = [[_resolve(graph, f) for f in _flatten(s)] for s in structures]
        tensors: list[Any] = []
        targets: list[Any] = []
        slot_of: dict[Any, int] = {}
        all_slots = []
        for flat in flats:
            slots = []
            for el in flat:
                if isinstance(el, tf.Operation):
                    if el not in targets:
                        targets.append(el)
                    slots.append(-1)
                else:
                    key = el.ref()
                    if key not in slot_of:
                        slot_of[key] = len(tensors)
                        tensors.append(el)
                    slots.append(slot_of[key])
            all_slots.append(slots)
        for step in self._step:
            op = step if isinstance(step, tf.Operation) else _resolve(graph, step).op
            if op not in targets:
                targets.append(op)
        feed_keys: list[Any] = list(feed_dict or ())
        for _, args in active:
            feed_keys += [k for k in args.feed_dict or () if k not in feed_keys]
        feeds = [_resolve(graph, k) for k in feed_keys]
        # A fed tensor that is also fetched comes back as its fed value, as in Session.run:
        # the callable returns it after the fetched outputs.
        fed_slots = {f.ref(): i for i, f in enumerate(feeds)}
        fed_fetched = [t for t in tensors if t.ref() in fed_slots]
        if fed_fetched:
            kept = [t for t in tensors if t.ref() not in fed_slots]
            remap = {t.ref(): i for i, t in enumerate(kept)}
            for t in fed_fetched:
                remap[t.ref()] = len(kept) + fed_slots[t.ref()]
            all_slots = [
                [-1 if i < 0 else remap[tensors[i].ref()] for i in slots] for slots in all_slots
            ]
            tensors = kept
        run_options = tf1.RunOptions()
        for opts in [options, *(a.options for _, a in active)]:
            if opts is not None:
                run_options.MergeFrom(opts)
        structure_key = (
            tuple(t.name for t in tensors),
            tuple(t.name for t in targets),
            tuple(f.name for f in feeds),
            run_options.SerializeToString(),
        )
        call = self._by_structure.get(structure_key)
        if call is None and not tensors and not targets:
            call = self._by_structure[structure_key] = _nothing_to_run
        if call is None:
            opts = config_pb2.CallableOptions()
            opts.fetch.extend(t.name for t in tensors)
            opts.target.extend(op.name for op in targets)
            opts.feed.extend(f.name for f in feeds)
            opts.run_options.CopyFrom(run_options)
            call = self._by_structure[structure_key] = self.sess._make_callable_from_options(opts)
        pieces = [_packer(s, slots) for s, slots in zip(structures, all_slots)]
        if fed_fetched:
            call = _returning_feeds(call)

        return _Entry(
            call,
            tuple(feed_keys),
            tuple(f.dtype.as_numpy_dtype for f in feeds),
            pieces[0],
            pieces[1:],
            tuple(structures),
            run_options.trace_level > 0
            or run_options.report_tensor_allocations_upon_oom
            or run_options.output_partition_graphs,
        )


def _returning_feeds(inner: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a callable so its outputs are followed by the values fed to it."""

    def call(*values: Any, **kwargs: Any) -> list[Any]:
        return [*inner(*values, **kwargs), *values]

    return call


def _nothing_to_run(*values: Any, **kwargs: Any) -> list[Any]:
    """The callable of a call that only fetches what it feeds: the session has nothing to do."""
    del values, kwargs
    return []


def _resolve(graph: Any, element: Any) -> Any:
    """The graph element (tensor or operation) that fetching or feeding ``element`` means."""
    try:
        return graph.as_graph_element(element, allow_tensor=True, allow_operation=True)
    except (TypeError, ValueError, KeyError) as err:
        msg = f"cannot fetch or feed {element!r}: {err}"
        raise TypeError(msg) from err
