"""Domain errors of towerkit.towers."""

from __future__ import annotations


class TowerContextError(RuntimeError):
    """A tower context is missing, nested, or used where it cannot be."""


class TowerRuleError(ValueError):
    """A tower function breaks one or more of the tower-function rules."""


class TowerCheckError(RuntimeError):
    """The tower-rule checker could not build the tower function even once."""


class LayersUnavailableError(ImportError):
    """``tf.compat.v1.layers`` cannot be used: tf-keras is missing, of another version, or not routed."""


# Every error here is public: tracebacks and pickles name it where users import it from
# (``towerkit.<lib>.SomeError``), not by this private module.
for _error in [
    v for v in list(globals().values()) if isinstance(v, type) and v.__module__ == __name__
]:
    _error.__module__ = __name__.rpartition(".")[0]
del _error
