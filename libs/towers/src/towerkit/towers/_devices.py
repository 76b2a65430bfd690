"""Devices for towers: GPUs when visible, logical CPU devices otherwise."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from towerkit.towers.compat import tf1

_CPU = re.compile(r"^/(?:job:[^/]+/(?:replica:\d+/)?(?:task:\d+/)?)?(?:device:)?cpu:(\d+)$", re.I)


def _gpu_ids(gpus: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(gpus, bool):
        msg = f"'gpus' must be an int or a sequence of ints; got {gpus!r}"
        raise TypeError(msg)
    if isinstance(gpus, int):
        if gpus < 1:
            msg = f"'gpus' as a count must be >= 1; got {gpus}"
            raise ValueError(msg)
        return tuple(range(gpus))
    if isinstance(gpus, (str, bytes)) or not isinstance(gpus, Sequence):
        msg = f"'gpus' must be an int or a sequence of ints; got {type(gpus).__name__}"
        raise TypeError(msg)
    ids = tuple(gpus)
    if not ids:
        msg = "'gpus' is empty: expected at least one device id"
        raise ValueError(msg)
    wrong = [repr(i) for i in ids if isinstance(i, bool) or not isinstance(i, int)]
    if wrong:
        msg = f"'gpus' must hold ints; entries at fault: {', '.join(wrong)}"
        raise TypeError(msg)
    negative = [str(i) for i in ids if i < 0]
    if negative:
        msg = f"'gpus' ids must be >= 0; got {', '.join(negative)}"
        raise ValueError(msg)
    dups = sorted({i for i in ids if ids.count(i) > 1})
    if dups:
        msg = f"'gpus' ids must be unique; repeated: {', '.join(map(str, dups))}"
        raise ValueError(msg)
    return ids


def visible_gpu_count() -> int:
    """How many GPUs TensorFlow sees (without creating a CUDA context)."""
    return len(tf.config.list_physical_devices("GPU"))


def resolve_devices(
    gpus: int | Sequence[int], *, num_visible_gpus: int | None = None
) -> tuple[str, ...]:
    """The device of each tower for the documented ``gpus`` argument.

    With GPUs visible, ``gpus=n`` means GPUs ``0..n-1`` and a list means those
    GPU ids. Without any GPU, tower ``k`` (0-based) goes to the logical CPU
    device ``/cpu:k``; `session_config_for_devices` makes a session that has them.

    Args:
        gpus: a number of towers (>= 1) or a list of distinct GPU ids (>= 0).
        num_visible_gpus: GPUs to assume visible; ``None`` asks TensorFlow
            (`visible_gpu_count`).

    Returns:
        One device string per tower.

    Raises:
        TypeError: `gpus` is neither an int nor a sequence of ints.
        ValueError: a bad count or id, or ids beyond the visible GPUs.

    Examples:
        >>> resolve_devices(2, num_visible_gpus=4)
        ('/gpu:0', '/gpu:1')
        >>> resolve_devices([1, 3], num_visible_gpus=4)
        ('/gpu:1', '/gpu:3')
        >>> resolve_devices([1, 3], num_visible_gpus=0)
        ('/cpu:0', '/cpu:1')
    """
    ids = _gpu_ids(gpus)
    visible = visible_gpu_count() if num_visible_gpus is None else num_visible_gpus
    if visible < 0:
        msg = f"'num_visible_gpus' must be >= 0; got {visible}"
        raise ValueError(msg)
    if visible == 0:
        return tuple(f"/cpu:{k}" for k in range(len(ids)))
    beyond = [str(i) for i in ids if i >= visible]
    if beyond:
        msg = f"GPU ids {', '.join(beyond)} are not visible: only {visible} GPU(s), ids 0..{visible - 1}"
        raise ValueError(msg)
    return tuple(f"/gpu:{i}" for i in ids)


def cpu_devices_needed(devices: Sequence[str]) -> int:
    """How many logical CPU devices a session needs to hold `devices` (at least 1).

    Examples:
        >>> cpu_devices_needed(["/cpu:0", "/cpu:2"])
        3
        >>> cpu_devices_needed(["/gpu:0", "/device:CPU:1"])
        2
        >>> cpu_devices_needed([])
        1
    """
    indices = [int(m.group(1)) for d in devices if (m := _CPU.match(d.strip()))]
    return max([0, *indices]) + 1


def session_config_for_devices(devices: Sequence[str], base_config: Any = None) -> Any:
    """A session config in which every device of `devices` exists.

    It asks for as many logical CPU devices as the highest ``/cpu:k`` needs and
    allows soft placement (ops without a kernel on a device fall back to one that
    has it). `base_config` is copied, never changed.

    Args:
        devices: device strings, e.g. from `resolve_devices`.
        base_config: a ``tf.compat.v1.ConfigProto`` to start from.

    Returns:
        A new ``tf.compat.v1.ConfigProto``.
    """
    config = tf1.ConfigProto()
    if base_config is not None:
        config.CopyFrom(base_config)
    need = cpu_devices_needed(devices)
    config.device_count["CPU"] = max(need, config.device_count.get("CPU", 1))
    config.allow_soft_placement = True
    return config
