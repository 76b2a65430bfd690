"""FeedfreePredictor: the inference tower of a PredictConfig on the tensors of an input source."""

from __future__ import annotations

from typing import Any

from towerkit.export._build import open_session, resolve_outputs
from towerkit.export._config import PredictConfig
from towerkit.towers import TowerContext, precision_scope
from towerkit.towers.compat import tf1

SOURCE_METHODS = ("setup", "get_input_tensors", "get_callbacks")
"""What FeedfreePredictor calls on its input source (`towerkit.trainers`' sources have them)."""


class _SourceDriver:
    """What the callbacks of an input source read of a trainer, for a predictor that drives them.

    A source's callbacks initialize iterators, start the threads that fill queues and
    feed placeholders; they read the graph and the session, and (for statistics) the
    monitors, which a predictor does not keep. The loop counters stay at the first step.
    """

    epoch_num = 1
    global_step = 0
    local_step = 0
    steps_per_epoch = 1
    starting_epoch = 1
    max_epoch = 1
    is_chief = True

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.sess: Any = None
        self.hooked_sess: Any = None
        self.monitors = _NoMonitors()


class _NoMonitors:
    """Statistics a source's callbacks report are dropped: a predictor writes no stats."""

    def put_scalar(self, name: str, value: float) -> None:
        del name, value


def _check_source(source: Any) -> None:
    missing = [m for m in SOURCE_METHODS if not callable(getattr(source, m, None))]
    if missing:
        msg = (
            "'input_source' must be an input source (towerkit.trainers: IterableInput, "
            f"TFDatasetInput, TensorInput, ...); got {type(source).__name__}, which lacks "
            f"{', '.join(missing)}"
        )
        raise TypeError(msg)


class FeedfreePredictor:
    """Runs the inference tower of a `PredictConfig` on the tensors of an input source.

    Nothing is fed: each call ``predictor()`` runs the outputs once, the source giving
    the next batch (a dataset's iterator, a queue that a thread fills from a DataFlow,
    tensors of the program's own). The tower is built in a graph of its own under
    ``TowerContext('', is_training=False)``; the source's callbacks are driven as a
    trainer drives them: set up with the graph, started once the values are loaded, and
    asked before each call for what to feed or fetch along.

    ``config.input_names`` are not used (the source gives every input of the
    signature) and ``return_input`` is refused: the inputs are not seen.

    Args:
        config: the model (or tower function), output names and values to load.
        input_source: an input source of `towerkit.trainers`, not yet set up.

    Raises:
        TypeError: `config` is not a `PredictConfig`, or `input_source` is not an input source.
        ValueError: ``config.return_input`` is set.
        UnknownTensorError: an output name names no tensor of the tower.

    Examples:
        ``predictor = FeedfreePredictor(config, IterableInput(df))`` then ``prob, =
        predictor()``, once per batch; ``predictor.close()`` (or a ``with`` block) stops
        the source's threads. The sources of `towerkit.trainers` start another pass
        after their last batch, as in training: a program that wants one pass makes
        ``size()`` calls.
    """

    def __init__(self, config: PredictConfig, input_source: Any) -> None:
        if not isinstance(config, PredictConfig):
            msg = f"'config' must be a PredictConfig; got {type(config).__name__}"
            raise TypeError(msg)
        _check_source(input_source)
        if config.return_input:
            msg = (
                "FeedfreePredictor cannot return its inputs (return_input=True): they come "
                "from the input source, not from the call; use OfflinePredictor to see them"
            )
            raise ValueError(msg)
        self._config = config
        self._source = input_source
        self.graph = tf1.Graph()
        self._driver = _SourceDriver(self.graph)
        with self.graph.as_default():
            input_source.setup(config.input_signature)
            tower_func = config.tower_func
            with TowerContext("", is_training=False), precision_scope(config.precision):
                tower_func(*input_source.get_input_tensors())
            self._outputs = resolve_outputs(tower_func.towers[0], config.output_names)
            self._callbacks = list(input_source.get_callbacks())
            for cb in self._callbacks:
                cb.setup_graph(self._driver)
            config.session_init.setup_graph(self.graph)
        self.sess = open_session(config, self.graph)
        self.graph.finalize()
        self._driver.sess = self.sess
        self._started: list[Any] = []
        try:
            for cb in self._callbacks:
                cb.before_train()
                self._started.append(cb)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return (
            f"FeedfreePredictor(input_source={self._source}, "
            f"output_names={list(self._config.output_names)})"
        )

    @property
    def config(self) -> PredictConfig:
        """The config the predictor was built from."""
        return self._config

    def __call__(self) -> list[Any]:
        """The outputs on the source's next batch, one numpy array per output name.

        Raises:
            TypeError: arguments were given (the inputs come from the source).
            RuntimeError: the predictor is closed.
        """
        if self.sess is None:
            msg = f"{self!r} is closed"
            raise RuntimeError(msg)
        context = tf1.train.SessionRunContext(
            original_args=tf1.train.SessionRunArgs(self._outputs), session=self.sess
        )
        fetching: dict[int, Any] = {}  # id(callback) -> what it asked to fetch
        feed: dict[Any, Any] = {}
        for cb in self._callbacks:
            args = cb.before_run(context)
            if args is None:
                continue
            if not isinstance(args, tf1.train.SessionRunArgs):
                args = tf1.train.SessionRunArgs(args)
            if args.fetches is not None:
                fetching[id(cb)] = args.fetches
            feed.update(args.feed_dict or {})
        outputs, extra = self.sess.run(
            [list(self._outputs), list(fetching.values())], feed_dict=feed or None
        )
        values = dict(zip(fetching, extra))
        for cb in self._callbacks:
            cb.after_run(context, tf1.train.SessionRunValues(values.get(id(cb)), None, None))
        return list(outputs)

    def close(self) -> None:
        """Stop the source's callbacks (their ``after_train``), then close the session."""
        started, self._started = self._started, []
        try:
            for cb in started:
                cb.after_train()
        finally:
            if self.sess is not None:
                self.sess.close()
                self.sess = None

    def __enter__(self) -> FeedfreePredictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
