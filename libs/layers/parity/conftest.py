"""The parity suite runs next to tensorpack 0.11, whose layers need tf-keras: Keras names go to it."""

from __future__ import annotations

import os

# Before TensorFlow is imported: tensorpack's layers are tf.compat.v1.layers (tf-keras).
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
