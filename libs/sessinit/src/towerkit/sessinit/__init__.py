"""towerkit.sessinit: load values into a TensorFlow session from checkpoints, npz files and dicts."""

from towerkit.sessinit._atomic import (
    atomic_checkpoint_prefix,
    atomic_path,
    atomic_save_checkpoint,
    atomic_write_bytes,
    atomic_write_text,
    write_checkpoint_state,
)
from towerkit.sessinit._errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    NotACheckpointError,
    RestoreMismatchError,
)
from towerkit.sessinit._npz import list_npz_vars, load_npz
from towerkit.sessinit._paths import (
    checkpoint_step,
    get_all_checkpoints,
    parse_checkpoint_state,
    resolve_checkpoint,
    sort_checkpoints,
)
from towerkit.sessinit._plan import (
    Assignment,
    RestorePlan,
    VarInfo,
    can_reshape,
    can_upcast,
    normalize_name,
    plan_restore,
    render_mismatches,
    render_names,
    target_name,
)
from towerkit.sessinit._sessinit import (
    ChainInit,
    DictRestore,
    JustCurrentSession,
    SaverRestore,
    SaverRestoreRelaxed,
    SessionInit,
    SmartInit,
)
from towerkit.sessinit._varmanip import (
    dump_session_params,
    list_checkpoint_vars,
    load_checkpoint_vars,
    save_checkpoint_vars,
)
from towerkit.sessinit._version import __version__

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
    # variables as data
    "dump_session_params",
    "load_checkpoint_vars",
    "save_checkpoint_vars",
    "get_all_checkpoints",
    "list_checkpoint_vars",
    "list_npz_vars",
    "load_npz",
    # restore plans (pure)
    "VarInfo",
    "Assignment",
    "RestorePlan",
    "plan_restore",
    "normalize_name",
    "target_name",
    "can_upcast",
    "can_reshape",
    "render_mismatches",
    "render_names",
    # checkpoint names and paths
    "checkpoint_step",
    "sort_checkpoints",
    "parse_checkpoint_state",
    "resolve_checkpoint",
    # atomic writes
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_checkpoint_prefix",
    "atomic_save_checkpoint",
    "write_checkpoint_state",
    # errors
    "RestoreMismatchError",
    "CheckpointNotFoundError",
    "NotACheckpointError",
    "CorruptCheckpointError",
]
