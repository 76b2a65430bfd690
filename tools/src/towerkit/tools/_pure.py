"""The callbacks lib's pure modules (loop, triggers, schedules, timeline), imported without TensorFlow."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

PURE_MODULES = ("_loop", "_triggers", "_schedules", "_timeline")
"""The modules of ``towerkit.callbacks`` that need only attrs and the standard library."""

PACKAGE = "towerkit.callbacks"


def pure_callbacks() -> dict[str, types.ModuleType]:
    """Import the pure modules of ``towerkit.callbacks`` without running its ``__init__``.

    The package's ``__init__`` imports every callback, and with them TensorFlow; the
    loop, trigger, schedule and timeline modules import only attrs. When the package is not yet
    imported, an empty stand-in package with the real search path is registered just
    long enough to import those modules, then removed, so a later ``import
    towerkit.callbacks`` runs the real ``__init__`` (which reuses the modules already
    loaded). When the package is already imported, its modules are returned as they are.

    Returns:
        ``{"_loop": module, "_triggers": module, ...}``, one entry per `PURE_MODULES` name.

    Raises:
        ImportError: towerkit-callbacks is not installed.
    """
    if PACKAGE in sys.modules:
        return {name: importlib.import_module(f"{PACKAGE}.{name}") for name in PURE_MODULES}
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.submodule_search_locations is None:
        msg = f"{PACKAGE!r} is not installed: pip install towerkit-callbacks"
        raise ImportError(msg)
    stand_in = types.ModuleType(PACKAGE, "stand-in used to import the pure modules only")
    stand_in.__path__ = list(spec.submodule_search_locations)
    sys.modules[PACKAGE] = stand_in
    try:
        return {name: importlib.import_module(f"{PACKAGE}.{name}") for name in PURE_MODULES}
    finally:
        if sys.modules.get(PACKAGE) is stand_in:
            del sys.modules[PACKAGE]
