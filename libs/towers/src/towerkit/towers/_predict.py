"""Online prediction: run a tower's output tensors from numpy inputs in a live session."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from towerkit.towers._tower import TowerTensorHandle
from towerkit.towers.compat import tf1


class OnlinePredictor:
    """A callable that feeds numpy arrays to input tensors and returns output values.

    The session callable is made once per session (``sess.make_callable``), so a
    call costs no more than a bare callable run.
    """

    def __init__(
        self,
        input_tensors: Sequence[Any],
        output_tensors: Sequence[Any],
        return_input: bool = False,
        sess: Any = None,
    ) -> None:
        """Keep the tensors to feed and fetch.

        Args:
            input_tensors: tensors to feed, one per positional argument of a call.
            output_tensors: tensors (or variables) to fetch.
            return_input: also return the inputs, as ``(inputs, outputs)``.
            sess: the session to run in; ``None`` uses the default session at call time.

        Raises:
            ValueError: no output tensors, or tensors from several graphs.
        """
        self._inputs = tuple(input_tensors)
        self._outputs = tuple(output_tensors)
        if not self._outputs:
            msg = "'output_tensors' is empty: an OnlinePredictor needs at least one output"
            raise ValueError(msg)
        graphs = {id(t.graph): t.graph for t in (*self._inputs, *self._outputs)}
        if len(graphs) != 1:
            msg = (
                "input and output tensors must live in one graph; got tensors of "
                f"{len(graphs)} graphs: {[t.name for t in (*self._inputs, *self._outputs)]}"
            )
            raise ValueError(msg)
        self._graph = next(iter(graphs.values()))
        self._return_input = bool(return_input)
        self._sess = sess
        self._callables: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return (
            f"OnlinePredictor(inputs={[t.name for t in self._inputs]}, "
            f"outputs={[t.name for t in self._outputs]})"
        )

    @property
    def input_tensors(self) -> tuple[Any, ...]:
        """The tensors fed, in call order."""
        return self._inputs

    @property
    def output_tensors(self) -> tuple[Any, ...]:
        """The tensors fetched, in output order."""
        return self._outputs

    @property
    def sess(self) -> Any:
        """The session given at construction (None: the default session at call time)."""
        return self._sess

    def _session(self) -> Any:
        sess = self._sess if self._sess is not None else tf1.get_default_session()
        if sess is None:
            msg = "OnlinePredictor has no session: pass sess=... or call it under `with sess.as_default():`"
            raise RuntimeError(msg)
        if sess.graph is not self._graph:
            msg = "OnlinePredictor's session runs another graph than its tensors"
            raise ValueError(msg)
        return sess

    def __call__(self, *inputs: Any) -> Any:
        """Run the outputs for one value per input tensor.

        Returns:
            A list with one numpy value per output tensor, or ``(inputs, outputs)``
            when built with ``return_input=True``.

        Raises:
            TypeError: the number of inputs differs from the number of input tensors.
        """
        if len(inputs) != len(self._inputs):
            msg = (
                f"predictor takes {len(self._inputs)} inputs "
                f"({[t.name for t in self._inputs]}); got {len(inputs)}"
            )
            raise TypeError(msg)
        sess = self._session()
        run = self._callables.get(sess)
        if run is None:
            run = sess.make_callable(list(self._outputs), feed_list=list(self._inputs))
            self._callables[sess] = run
        outputs = list(run(*inputs))
        return (list(inputs), outputs) if self._return_input else outputs


def handle_to_predictor(
    handle: TowerTensorHandle,
    input_names: Sequence[str],
    output_names: Sequence[str],
    sess: Any = None,
) -> OnlinePredictor:
    """An `OnlinePredictor` over a tower's tensors, found by `TowerTensorHandle.get_tensors`.

    Args:
        handle: the tower (usually an inference tower).
        input_names: input-signature names or tensor names without the tower prefix.
        output_names: tensor names without the tower prefix.
        sess: the session (None: the default session at call time).
    """
    return OnlinePredictor(
        handle.get_tensors(input_names), handle.get_tensors(output_names), sess=sess
    )
