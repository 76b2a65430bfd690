"""install-horovod: build horovod against the installed TensorFlow, or take a cached wheel.

The pure part lives in ``_core``, the shell (steps, wheel cache, command line) in ``_install``.
"""

from __future__ import annotations

from towerkit.tools.install_horovod._core import (
    DEFAULT_VERSION,
    WHEEL_CACHE_ENV,
    BuildOptions,
    HorovodInstallError,
    HorovodPatchError,
    Probe,
    build_env,
    cache_key,
    patch_cmakelists,
    rebuild_reason,
)
from towerkit.tools.install_horovod._install import (
    main,
)

__all__ = [
    "DEFAULT_VERSION",
    "WHEEL_CACHE_ENV",
    "HorovodInstallError",
    "HorovodPatchError",
    "BuildOptions",
    "Probe",
    "patch_cmakelists",
    "build_env",
    "rebuild_reason",
    "cache_key",
    "main",
]
