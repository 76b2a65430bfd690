"""The trainers lib's input sources: where the towers' tensors come from.

Internal: every public name of these modules is imported from `towerkit.trainers`
(``from towerkit.trainers import FeedInput``), and this package exports nothing of
its own, so a name has one public path. To add an input source, subclass
`towerkit.trainers.InputSource` (``_base``) here and list it in the lib's
``__init__``; the loop reaches every source through the same hook, never by kind
(``explain_failure`` of its callbacks, see ``_callbacks.input_failure``). Whether a
Python datapoint fits is decided by the one rule that inference shares, in
`towerkit.callbacks.plumbing` (``conform_datapoint``).

- ``_base``: the `InputSource` protocol, its checks against the tower's signature.
- ``_callbacks``: the callbacks an input source gives the trainer.
- ``_feed``: feeding Python datapoints to a session (feeder threads, queues).
- ``_python``: `FeedInput`, `IterableInput`, `DummyConstantInput`.
- ``_sources``: `NumpyInput`, `TFDatasetInput`.
- ``_staging``: `StagingInput`, and the default prefetching of a trainer's input.
- ``_tensor``: `TensorInput`, tensors built by a function of the program.
"""
