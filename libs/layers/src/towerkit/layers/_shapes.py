"""ConcatWith: ``tf.concat`` as a layer, for `LinearWrap` chains."""

from __future__ import annotations

from typing import Any

from towerkit.layers._registry import layer_register
from towerkit.towers.compat import tf1


@layer_register(use_scope=None)
def ConcatWith(x: Any, tensor: Any, dim: int) -> Any:
    """``tf.concat([x, *tensor], dim)``: `x` first, then `tensor` (a tensor or a list of them)."""
    others = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
    return tf1.concat([x, *others], dim)
