"""The process sum of the TensorFlow-cluster trainers: refused, with what to use instead."""

from __future__ import annotations

from towerkit.callbacks import CallbackError
from towerkit.trainers._process_sum import ProcessSumFn


class RefuseProcessSum:
    """``make_process_sum`` of trainers whose workers never meet (ps/worker clusters)."""

    def make_process_sum(self, name: str) -> ProcessSumFn:
        """Refused: the workers of a cluster step on their own (asynchronously).

        Raises:
            CallbackError: always, naming what to use instead.

        .. versionadded:: 0.2
        """
        msg = (
            f"the process sum {name!r} (an InferenceRunner with reduce=True) is not supported "
            f"on {type(self).__name__}: its workers step on their own, with no point where "
            "all of them meet; evaluate on the chief alone with reduce=False over all the "
            "data (an InferenceRunner is chief-only), or evaluate the checkpoint with "
            "HorovodTrainer and reduce=True"
        )
        raise CallbackError(msg)
