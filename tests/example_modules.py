"""Load the example scripts under ``examples/`` as modules, as the cross-lib tests need them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
"""The repository root."""


def example_path(name: str) -> Path:
    """The script of example `name` (``examples/<name>/train.py``)."""
    return ROOT / "examples" / name / "train.py"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>/train.py`` as module ``example_<name>`` (once per process)."""
    module_name = f"example_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, example_path(name))
    if spec is None or spec.loader is None:
        msg = f"cannot load {example_path(name)}"
        raise ImportError(msg)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
