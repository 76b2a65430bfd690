"""The numbers both models of the suite share: features per datapoint and the SGD learning rate."""

from __future__ import annotations

INPUT_DIM = 3
"""Features per datapoint."""

LEARNING_RATE = 0.1
"""The plain SGD learning rate of the suite's optimizer."""
