"""The account of tensorpack 0.11's public names and of tf.contrib's: ``tensorpack_api.json``."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any, Literal

import attrs

FATES = ("convert", "keep", "report", "remove")
"""What becomes of a name: converted to a target, kept on tensorpack, reported (left by hand),
or removed (a call of it replaced by its first argument)."""

Kind = Literal["convert", "keep", "report", "remove"]


def _kind(_: Any, __: attrs.Attribute[str], kind: str) -> None:
    if kind not in FATES:
        msg = f"'kind' must be one of {', '.join(FATES)}; got {kind!r}"
        raise ValueError(msg)


@attrs.frozen(kw_only=True)
class Fate:
    """The fate of one name.

    Attributes:
        kind: one of `FATES`.
        target: the dotted name it converts to (``towerkit.towers.TowerFunc``); "" unless
            `kind` is ``convert``.
        why: the reason (keep, report, remove) or a note on the conversion ("" if none).
    """

    kind: Kind = attrs.field(validator=_kind)
    target: str = ""
    why: str = ""

    @property
    def home(self) -> str:
        """The module of a converted name's target (``towerkit.towers``)."""
        return self.target.rpartition(".")[0]

    @property
    def new_name(self) -> str:
        """The last part of a converted name's target (``TowerFunc``)."""
        return self.target.rpartition(".")[2]


def fate_of(entry: object) -> Fate:
    """The `Fate` of a record entry: ``["convert", target(, note)]`` or ``[kind, why]``.

    Raises:
        ValueError: the entry is not one of these forms.

    Examples:
        >>> fate_of(["convert", "towerkit.towers.TowerFunc"]).new_name
        'TowerFunc'
        >>> fate_of(["report", "use tf.print"]).why
        'use tf.print'
    """
    if not isinstance(entry, list) or not all(isinstance(p, str) for p in entry):
        msg = f"a fate must be a list of strings [kind, target or why(, note)]; got {entry!r}"
        raise ValueError(msg)
    if len(entry) == 3 and entry[0] == "convert":
        return Fate(kind="convert", target=entry[1], why=entry[2])
    if len(entry) != 2:
        msg = f"a fate must be [kind, target or why] (a note third for convert); got {entry!r}"
        raise ValueError(msg)
    kind, text = entry
    if kind == "convert":
        return Fate(kind="convert", target=text)
    return Fate(kind=kind, why=text)


@functools.cache
def api_record() -> dict[str, Any]:
    """The record as stored (``towerkit/tools/tensorpack_api.json``)."""
    text = resources.files("towerkit.tools").joinpath("tensorpack_api.json").read_text("utf-8")
    record: dict[str, Any] = json.loads(text)
    return record


@functools.cache
def tensorpack_fates() -> dict[str, dict[str, Fate]]:
    """Module (``tensorpack.tfutils.tower``) to name to `Fate`, for every name of tensorpack 0.11."""
    return {
        module: {name: fate_of(entry) for name, entry in names.items()}
        for module, names in api_record()["tensorpack"].items()
    }


@functools.cache
def contrib_fates() -> dict[str, Fate]:
    """Full dotted name (``tf.contrib.rnn.LSTMBlockCell``) to `Fate`."""
    return {name: fate_of(entry) for name, entry in api_record()["tf.contrib"].items()}


def tensorpack_fate(module: str, name: str) -> Fate | None:
    """The fate of `name` imported from tensorpack's `module`; None if the record lacks it.

    A module the record does not list (``tensorpack.utils.viz``) falls back to the
    package's top level.

    Examples:
        >>> tensorpack_fate("tensorpack.tfutils.tower", "TowerFuncWrapper").target
        'towerkit.towers.TowerFunc'
        >>> tensorpack_fate("tensorpack", "NoSuchName") is None
        True
    """
    fates = tensorpack_fates()
    found = fates.get(module, {}).get(name)
    if found is None and module not in fates:
        found = fates["tensorpack"].get(name)
    return found


def contrib_fate(dotted: str) -> Fate | None:
    """The fate of a ``tf.contrib`` name, or None when the record lacks it.

    A name is looked up whole: ``tf.contrib.framework.nest`` is recorded, and
    ``tf.contrib.framework.nest.flatten`` follows it as an attribute of its target.

    Examples:
        >>> contrib_fate("tf.contrib.layers.l2_regularizer").target
        'towerkit.layers.l2_regularizer'
        >>> contrib_fate("tf.contrib.framework.nest").target
        'tf.nest'
        >>> contrib_fate("tf.nn.relu") is None
        True
    """
    return contrib_fates().get(dotted)
