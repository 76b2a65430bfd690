"""Pure decisions of data-parallel training: reduction modes, tower variables, device loads."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import attrs

from towerkit.trainers._errors import TowerVariableMismatchError

__all__ = [
    "ALLREDUCE_MODES",
    "AllReduceChoice",
    "TowerVariableMismatchError",
    "check_allreduce_mode",
    "choose_allreduce_mode",
    "device_key",
    "hierarchical_groups",
    "least_loaded",
    "match_tower_variables",
    "missing_devices",
    "replica_index",
    "replica_sources",
    "tower_variable_key",
]

ALLREDUCE_MODES = ("nccl", "hierarchical", "cpu")
"""How replicated towers all-reduce their gradients."""

_TOWER_PREFIX = re.compile(r"^tower(\d+)/")
_DEVICE_PART = re.compile(r"^(job|replica|task|device|cpu|gpu)(?::(.*))?$", re.I)


def check_allreduce_mode(mode: str | None) -> str | None:
    """`mode` if it names an all-reduce mode (or is None, for the automatic choice).

    Examples:
        >>> check_allreduce_mode("cpu")
        'cpu'
        >>> check_allreduce_mode("gloo")
        Traceback (most recent call last):
        ...
        ValueError: 'mode' must be None (automatic) or one of ('nccl', 'hierarchical', 'cpu'); got 'gloo'
    """
    if mode is None:
        return None
    if not isinstance(mode, str):
        msg = f"'mode' must be None or a str in {ALLREDUCE_MODES}; got {type(mode).__name__}"
        raise TypeError(msg)
    if mode.lower() not in ALLREDUCE_MODES:
        msg = f"'mode' must be None (automatic) or one of {ALLREDUCE_MODES}; got {mode!r}"
        raise ValueError(msg)
    return mode.lower()


@attrs.frozen(kw_only=True)
class AllReduceChoice:
    """The all-reduce mode a replicated trainer uses, and why.

    Attributes:
        mode: one of `ALLREDUCE_MODES`.
        reason: one sentence saying why, for the log.
        fallback: whether the mode differs from the one asked for.

    Examples:
        >>> AllReduceChoice(mode="cpu", reason="towers on CPU devices")
        AllReduceChoice(mode='cpu', reason='towers on CPU devices', fallback=False)
    """

    mode: str = attrs.field(validator=attrs.validators.in_(ALLREDUCE_MODES))
    reason: str = attrs.field(validator=attrs.validators.instance_of(str))
    fallback: bool = attrs.field(default=False, converter=bool)


def choose_allreduce_mode(
    requested: str | None, num_towers: int, num_gpu_towers: int, nccl_available: bool
) -> AllReduceChoice:
    """The all-reduce mode for replicated towers.

    The automatic choice (``requested=None``): ``'hierarchical'`` for 8 towers on 8
    GPUs (the layout it was designed for, DGX-like machines), ``'nccl'`` for other
    all-GPU layouts when TensorFlow has NCCL, and ``'cpu'`` otherwise (towers on CPU
    devices, mixed devices, or no NCCL). An explicit ``'nccl'`` that cannot run (a
    tower not on a GPU, or no NCCL in this TensorFlow) falls back to ``'cpu'``;
    ``'hierarchical'`` and ``'cpu'`` run on any devices.

    Args:
        requested: the ``mode`` argument of the trainer, checked by `check_allreduce_mode`.
        num_towers: towers (>= 1).
        num_gpu_towers: how many of them are on GPUs.
        nccl_available: whether this TensorFlow build has NCCL kernels.

    Examples:
        >>> choose_allreduce_mode(None, 8, 8, nccl_available=True).mode
        'hierarchical'
        >>> choose_allreduce_mode(None, 2, 2, nccl_available=True).mode
        'nccl'
        >>> choose_allreduce_mode(None, 2, 0, nccl_available=False).mode
        'cpu'
        >>> c = choose_allreduce_mode("nccl", 2, 0, nccl_available=False)
        >>> c.mode, c.fallback
        ('cpu', True)
        >>> c.reason
        "mode 'nccl' needs every tower on a GPU and a TensorFlow built with NCCL (0 of 2 towers on GPUs, NCCL missing): falling back to 'cpu'"
    """
    requested = check_allreduce_mode(requested)
    if num_towers < 1 or not 0 <= num_gpu_towers <= num_towers:
        msg = (
            f"'num_towers' must be >= 1 and 'num_gpu_towers' in [0, num_towers]; got "
            f"{num_towers} and {num_gpu_towers}"
        )
        raise ValueError(msg)
    all_gpu = num_gpu_towers == num_towers
    nccl_ok = all_gpu and nccl_available
    where = (
        f"{num_gpu_towers} of {num_towers} towers on GPUs, "
        f"NCCL {'available' if nccl_available else 'missing'}"
    )
    if requested == "nccl" and not nccl_ok:
        return AllReduceChoice(
            mode="cpu",
            reason=(
                "mode 'nccl' needs every tower on a GPU and a TensorFlow built with NCCL "
                f"({where}): falling back to 'cpu'"
            ),
            fallback=True,
        )
    if requested is not None:
        note = ""
        if requested == "hierarchical" and not (num_towers == 8 and all_gpu):
            note = "; it was designed for 8 GPUs and gives no gain here"
        return AllReduceChoice(
            mode=requested, reason=f"mode {requested!r} as asked ({where}){note}"
        )
    if nccl_ok and num_towers == 8:
        return AllReduceChoice(mode="hierarchical", reason=f"automatic: 8 GPU towers ({where})")
    if nccl_ok:
        return AllReduceChoice(mode="nccl", reason=f"automatic: every tower on a GPU ({where})")
    return AllReduceChoice(mode="cpu", reason=f"automatic: not every tower can use NCCL ({where})")


def hierarchical_groups(
    num_towers: int, group_size: int | None = None
) -> tuple[tuple[int, ...], ...]:
    """Split towers ``0..num_towers-1`` into consecutive groups for a two-level reduction.

    Each group sums on its first tower (its leader), the leaders' sums are summed,
    and the total goes back the same way. The default group size is half the
    towers (4 of 8) from 4 towers on, and all towers in one group below.

    Examples:
        >>> hierarchical_groups(8)
        ((0, 1, 2, 3), (4, 5, 6, 7))
        >>> hierarchical_groups(5)
        ((0, 1), (2, 3), (4,))
        >>> hierarchical_groups(2)
        ((0, 1),)
    """
    if isinstance(num_towers, bool) or not isinstance(num_towers, int) or num_towers < 1:
        msg = f"'num_towers' must be an int >= 1; got {num_towers!r}"
        raise ValueError(msg)
    if group_size is None:
        group_size = num_towers // 2 if num_towers >= 4 else num_towers
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        msg = f"'group_size' must be an int >= 1; got {group_size!r}"
        raise ValueError(msg)
    return tuple(
        tuple(range(start, min(start + group_size, num_towers)))
        for start in range(0, num_towers, group_size)
    )


def replica_index(name: str) -> int | None:
    """The tower index of a variable named under a ``tower<k>/`` scope, else None.

    Examples:
        >>> replica_index("tower1/fc/W")
        1
        >>> replica_index("fc/W") is None
        True
        >>> replica_index("towers/fc/W") is None
        True
    """
    m = _TOWER_PREFIX.match(name)
    return int(m.group(1)) if m else None


def tower_variable_key(name: str) -> str:
    """A variable's name without its ``tower<k>/`` scope and ``:0`` suffix: what pairs copies.

    Examples:
        >>> tower_variable_key("tower3/fc/W:0")
        'fc/W'
        >>> tower_variable_key("fc/W")
        'fc/W'
    """
    name = name[:-2] if name.endswith(":0") else name
    return _TOWER_PREFIX.sub("", name, count=1)


def match_tower_variables(names_per_tower: Sequence[Sequence[str]]) -> tuple[tuple[int, ...], ...]:
    """Pair each tower's variables (by `tower_variable_key`) with tower 0's.

    Args:
        names_per_tower: for each tower, the names of the variables it has gradients
            for, in the order of its (gradient, variable) pairs.

    Returns:
        One row per variable of tower 0, in tower 0's order; row ``i`` holds, for each
        tower ``t``, the position in ``names_per_tower[t]`` of that variable.

    Raises:
        TowerVariableMismatchError: a tower has a name twice, or the towers do not
            hold the same variables; the message lists every variable at fault with
            the towers that have it.

    Examples:
        >>> match_tower_variables([["fc/W", "fc/b"], ["tower1/fc/b", "tower1/fc/W"]])
        ((0, 1), (1, 0))
        >>> match_tower_variables([["fc/W", "fc/b"], ["tower1/fc/W"]])
        Traceback (most recent call last):
        ...
        towerkit.trainers.TowerVariableMismatchError: towers train different variables: 'fc/b' in towers [0] only (of 2)
    """
    if isinstance(names_per_tower, (str, bytes)) or not names_per_tower:
        msg = f"'names_per_tower' must be a non-empty list of name lists; got {names_per_tower!r}"
        raise ValueError(msg)
    keys = [[tower_variable_key(n) for n in names] for names in names_per_tower]
    dups = [
        f"tower {t}: {sorted(k for k, c in Counter(ks).items() if c > 1)}"
        for t, ks in enumerate(keys)
        if len(set(ks)) != len(ks)
    ]
    if dups:
        msg = f"a tower has the same variable twice: {'; '.join(dups)}"
        raise TowerVariableMismatchError(msg)
    n = len(keys)
    where: dict[str, list[int]] = {}
    for t, ks in enumerate(keys):
        for k in ks:
            where.setdefault(k, []).append(t)
    wrong = [f"{k!r} in towers {ts} only (of {n})" for k, ts in where.items() if len(ts) != n]
    if wrong:
        msg = f"towers train different variables: {', '.join(wrong)}"
        raise TowerVariableMismatchError(msg)
    positions = [{k: i for i, k in enumerate(ks)} for ks in keys]
    return tuple(tuple(pos[k] for pos in positions) for k in keys[0])


def replica_sources(
    master_names: Sequence[str], replica_names: Sequence[str]
) -> tuple[int | None, ...]:
    """For each replica variable, the position of the master variable it copies, or None.

    A replica is a variable of tower ``k >= 1`` (``tower<k>/...``); its master is the
    variable with the same `tower_variable_key` that is not a replica (tower 0's,
    whether named plainly or under ``tower0/``).

    Examples:
        >>> replica_sources(["fc/W", "tower0/count"], ["tower1/fc/W", "tower1/count", "tower1/x"])
        (0, 1, None)
    """
    masters: dict[str, int] = {}
    for i, name in enumerate(master_names):
        masters.setdefault(tower_variable_key(name), i)
    return tuple(masters.get(tower_variable_key(name)) for name in replica_names)


def least_loaded(loads: Sequence[float]) -> int:
    """The index of the smallest load (the first one on ties): where the next variable goes.

    Examples:
        >>> least_loaded([40, 12, 12])
        1
    """
    if not loads:
        msg = "'loads' is empty: expected one load per device"
        raise ValueError(msg)
    return min(range(len(loads)), key=lambda i: (loads[i], i))


def device_key(device: str) -> tuple[str, int, str, int]:
    """A device string as (job, task, type, index), with the defaults of a local session.

    Only the parts named are read: a missing job is ``localhost``, a missing task 0, a
    missing device ``CPU:0``. Types are upper case.

    Examples:
        >>> device_key("/cpu:1")
        ('localhost', 0, 'CPU', 1)
        >>> device_key("/job:worker/replica:0/task:1/device:GPU:0")
        ('worker', 1, 'GPU', 0)
    """
    job, task, kind, index = "localhost", 0, "CPU", 0
    for part in device.strip().strip("/").split("/"):
        if not part:
            continue
        m = _DEVICE_PART.match(part)
        if m is None:
            msg = f"cannot read device string {device!r}: unknown part {part!r}"
            raise ValueError(msg)
        head, value = m.group(1).lower(), m.group(2)
        if head == "job":
            job = value or job
        elif head == "task":
            task = int(value or 0)
        elif head == "device":
            kind_s, _, idx = (value or "CPU:0").partition(":")
            kind, index = kind_s.upper(), int(idx or 0)
        elif head in ("cpu", "gpu"):
            kind, index = head.upper(), int(value or 0)
    return job, task, kind, index


def missing_devices(wanted: Sequence[str], available: Sequence[str]) -> list[str]:
    """The devices of `wanted` that a session listing `available` does not have.

    Examples:
        >>> have = ["/job:localhost/replica:0/task:0/device:CPU:0"]
        >>> missing_devices(["/cpu:0", "/cpu:1"], have)
        ['/cpu:1']
    """
    have = {device_key(d) for d in available}
    return [d for d in wanted if device_key(d) not in have]
