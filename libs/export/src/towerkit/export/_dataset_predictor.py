"""Predictors over a DataFlow, and one model replicated on several devices in one session."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from towerkit.export._build import open_session, resolve_inputs, resolve_outputs
from towerkit.export._config import PredictConfig
from towerkit.export._predictor import OfflinePredictor
from towerkit.towers import (
    OnlinePredictor,
    TowerContext,
    build_placeholders,
    precision_scope,
    resolve_devices,
    session_config_for_devices,
)
from towerkit.towers.compat import tf1


def _check_dataset(dataset: Any) -> Any:
    if not hasattr(dataset, "__iter__"):
        msg = (
            "'dataset' must be a re-iterable of datapoints (a DataFlow, a list of lists of "
            f"arrays, one array per input name); got {type(dataset).__name__}"
        )
        raise TypeError(msg)
    if iter(dataset) is dataset:
        msg = (
            f"'dataset' is an iterator ({type(dataset).__name__}), which gives one pass "
            "only: give an object whose __iter__ starts a new pass (a DataFlow, a list)"
        )
        raise TypeError(msg)
    return dataset


class SimpleDatasetPredictor:
    """Run an `OfflinePredictor` on every datapoint of a DataFlow, one call per datapoint.

    A datapoint holds one array per input name of the config (a batch, usually: the
    DataFlow batches). Before each pass the dataset's ``reset_state()`` is called
    when it has one, as tensorpack does.

    Args:
        config: the `PredictConfig` to build the predictor from.
        dataset: a re-iterable of datapoints (a DataFlow, a list).

    Raises:
        TypeError: `config` is not a `PredictConfig`, or `dataset` is not re-iterable.

    Examples:
        ``outputs = SimpleDatasetPredictor(config, df).get_all_result()`` gives one list
        of output arrays per datapoint.

    .. versionadded:: 0.2
    """

    def __init__(self, config: PredictConfig, dataset: Any) -> None:
        self._dataset = _check_dataset(dataset)
        self._predictor = OfflinePredictor(config)

    @property
    def predictor(self) -> OfflinePredictor:
        """The predictor called on each datapoint."""
        return self._predictor

    @property
    def dataset(self) -> Any:
        """The datapoints predicted."""
        return self._dataset

    def get_result(self) -> Iterator[Any]:
        """The predictor's result for each datapoint, in the dataset's order (lazily).

        Raises:
            ValueError: a datapoint that is not a list or tuple of one array per input.
        """
        reset = getattr(self._dataset, "reset_state", None)
        if callable(reset):
            reset()
        names = list(self._predictor.config.input_names)
        for index, dp in enumerate(self._dataset):
            if not isinstance(dp, (list, tuple)) or len(dp) != len(names):
                got = (
                    f"{len(dp)} component(s)"
                    if isinstance(dp, (list, tuple))
                    else type(dp).__name__
                )
                msg = (
                    f"datapoint #{index} (0-based) must be a list or tuple of {len(names)} "
                    f"arrays, one per input name {names}; got {got}"
                )
                raise ValueError(msg)
            yield self._predictor(*dp)

    def get_all_result(self) -> list[Any]:
        """Every result of `get_result`, as a list."""
        return list(self.get_result())

    def close(self) -> None:
        """Close the predictor's session."""
        self._predictor.close()


class MultiTowerOfflinePredictor(OnlinePredictor):
    """One model, one inference tower per device, in one graph and session.

    Tower ``k`` (0-based) is built under ``TowerContext("towerp{k}", is_training=False)``
    on the `k`-th device of `towers` (GPU ids; logical CPU devices on a machine
    without GPUs, see `towerkit.towers.resolve_devices`), on placeholders of its own;
    every tower shares the variables, which ``config.session_init`` loads once.
    Called directly, it runs tower 0; ``get_predictor(k)`` and ``get_predictors()``
    give a predictor per tower, e.g. one per thread.

    Args:
        config: the `PredictConfig` to build from.
        towers: GPU ids, one per tower (default ``[0]``).

    Raises:
        TypeError: `config` is not a `PredictConfig`.
        ValueError: bad `towers` (see `resolve_devices`).

    .. versionadded:: 0.2
    """

    def __init__(self, config: PredictConfig, towers: Sequence[int] = (0,)) -> None:
        if not isinstance(config, PredictConfig):
            msg = f"'config' must be a PredictConfig; got {type(config).__name__}"
            raise TypeError(msg)
        devices = resolve_devices(list(towers))
        graph = tf1.Graph()
        io: list[tuple[list[Any], list[Any]]] = []
        with graph.as_default():
            tower_func = config.tower_func
            for k, device in enumerate(devices):
                with (
                    tf1.device(device),
                    TowerContext(f"towerp{k}", is_training=False),
                    precision_scope(config.precision),
                ):
                    tower_func(*build_placeholders(config.input_signature))
                handle = tower_func.towers[k]
                io.append(
                    (
                        resolve_inputs(handle, config.input_names),
                        resolve_outputs(handle, config.output_names),
                    )
                )
            config.session_init.setup_graph(graph)
        sess = open_session(config, graph, session_config_for_devices(devices))
        graph.finalize()
        self._config = config
        self._devices = devices
        self._predictors = [
            OnlinePredictor(i, o, return_input=config.return_input, sess=sess) for i, o in io
        ]
        super().__init__(*io[0], return_input=config.return_input, sess=sess)

    @property
    def graph(self) -> Any:
        """The predictor's own (finalized) graph, holding every tower."""
        return self._graph

    @property
    def devices(self) -> tuple[str, ...]:
        """The device of each tower."""
        return self._devices

    def get_predictor(self, n: int) -> OnlinePredictor:
        """The predictor of tower ``n % number of towers`` (0-based)."""
        return self._predictors[n % len(self._predictors)]

    def get_predictors(self) -> list[OnlinePredictor]:
        """One predictor per tower, in tower order."""
        return list(self._predictors)

    def close(self) -> None:
        """Close the session shared by the towers."""
        self.sess.close()
