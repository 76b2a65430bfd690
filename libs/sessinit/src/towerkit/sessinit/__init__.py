"""towerkit.sessinit: load values into a TensorFlow session from checkpoints, npz files and dicts.

The session initializers and the checkpoint readers and writers import TensorFlow when
first used; the atomic writes, checkpoint names, npz files and restore plans do not, so
tools import them without TensorFlow.
"""

from typing import TYPE_CHECKING, Any

from towerkit.sessinit._aside import (
    ASIDE_PREFIX,
    back_up_file,
    backup_name,
    is_aside_name,
    move_checkpoints_aside,
    put_back_aside,
)
from towerkit.sessinit._atomic import (
    atomic_checkpoint_prefix,
    atomic_path,
    atomic_save_checkpoint,
    atomic_write_bytes,
    atomic_write_text,
    remove_stale_temporaries,
    write_checkpoint_state,
)
from towerkit.sessinit._ema import EMA_SUFFIX, ema_sources
from towerkit.sessinit._errors import (
    CheckpointNotFoundError,
    CheckpointVanishedError,
    CorruptCheckpointError,
    GlobPathError,
    NotACheckpointError,
    NothingToRestoreError,
    RestoreMismatchError,
)
from towerkit.sessinit._npz import list_npz_vars
from towerkit.sessinit._npz_read import load_npz, verify_npz
from towerkit.sessinit._paths import (
    GLOB_CHARACTERS,
    checkpoint_step,
    get_all_checkpoints,
    glob_characters,
    require_globless,
    resolve_checkpoint,
    state_entry_inside,
)
from towerkit.sessinit._plan import (
    Assignment,
    RestorePlan,
    VarInfo,
    plan_restore,
    restores_nothing,
)
from towerkit.sessinit._unused import describe_unused, unused_kinds
from towerkit.sessinit._version import __version__

if TYPE_CHECKING:
    from towerkit.sessinit._sessinit import (
        ChainInit,
        DictRestore,
        JustCurrentSession,
        SaverRestore,
        SaverRestoreRelaxed,
        SessionInit,
        SmartInit,
        get_model_loader,
    )
    from towerkit.sessinit._varmanip import (
        dump_session_params,
        list_checkpoint_vars,
        load_checkpoint_vars,
        save_checkpoint_vars,
    )

_NEEDS_TENSORFLOW = {
    "ChainInit": "_sessinit",
    "DictRestore": "_sessinit",
    "JustCurrentSession": "_sessinit",
    "SaverRestore": "_sessinit",
    "SaverRestoreRelaxed": "_sessinit",
    "SessionInit": "_sessinit",
    "SmartInit": "_sessinit",
    "get_model_loader": "_sessinit",
    "dump_session_params": "_varmanip",
    "list_checkpoint_vars": "_varmanip",
    "load_checkpoint_vars": "_varmanip",
    "save_checkpoint_vars": "_varmanip",
}


def __getattr__(name: str) -> Any:
    """The names that need TensorFlow, imported from their module on first use (PEP 562)."""
    module = _NEEDS_TENSORFLOW.get(name)
    if module is None:
        msg = f"module 'towerkit.sessinit' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    value = getattr(importlib.import_module(f"towerkit.sessinit.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NEEDS_TENSORFLOW))


__all__ = [
    "__version__",
    # session initializers
    "SessionInit",
    "ChainInit",
    "SaverRestore",
    "SaverRestoreRelaxed",
    "DictRestore",
    "JustCurrentSession",
    "SmartInit",
    "get_model_loader",
    # variables as data
    "dump_session_params",
    "load_checkpoint_vars",
    "save_checkpoint_vars",
    "get_all_checkpoints",
    "list_checkpoint_vars",
    "list_npz_vars",
    "load_npz",
    "verify_npz",
    # restore plans (pure)
    "VarInfo",
    "Assignment",
    "RestorePlan",
    "plan_restore",
    "restores_nothing",
    "unused_kinds",
    "describe_unused",
    "EMA_SUFFIX",
    "ema_sources",
    # checkpoint names and paths
    "checkpoint_step",
    "resolve_checkpoint",
    "state_entry_inside",
    "GLOB_CHARACTERS",
    "glob_characters",
    "require_globless",
    # checkpoints moved aside
    "ASIDE_PREFIX",
    "is_aside_name",
    "move_checkpoints_aside",
    "put_back_aside",
    "backup_name",
    "back_up_file",
    # atomic writes
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_checkpoint_prefix",
    "atomic_save_checkpoint",
    "write_checkpoint_state",
    "remove_stale_temporaries",
    # errors
    "RestoreMismatchError",
    "NothingToRestoreError",
    "CheckpointNotFoundError",
    "NotACheckpointError",
    "CorruptCheckpointError",
    "CheckpointVanishedError",
    "GlobPathError",
]
