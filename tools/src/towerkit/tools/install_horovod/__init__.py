"""install-horovod: build horovod from its sdist against the installed TensorFlow (or take a cached wheel), check it.

One job per module:

- `_records`: what to build and with what (`BuildOptions`, `Installer`, `Step`, `Probe`),
  the constants and the errors.
- `_plan`: the build as a plan of commands and environment, computed without running
  any (`plan_install`, `patch_cmakelists`, `build_env`, `render_plan`).
- `_checks`: reading what the target Python reports (`parse_probe`, `rebuild_reason`,
  `missing_build_tools`, `check_verify_output`).
- `_cache`: the wheel cache (`cache_key`, `find_cached_wheel`, `store_wheel`,
  `evict_cached_wheel`).
- `_run`: running the plan, each step in its own process.
- `_cli`: the command line (`main`); ``python -m towerkit.tools.install_horovod`` and the
  ``install-horovod`` script run it.
"""

from __future__ import annotations

from towerkit.tools.install_horovod._cache import (
    cache_key,
    evict_cached_wheel,
    find_cached_wheel,
    store_wheel,
)
from towerkit.tools.install_horovod._checks import (
    check_verify_output,
    missing_build_tools,
    parse_cmake_version,
    parse_probe,
    rebuild_reason,
)
from towerkit.tools.install_horovod._cli import main
from towerkit.tools.install_horovod._plan import (
    build_env,
    choose_installer,
    merged_env,
    patch_cmakelists,
    plan_install,
    render_plan,
)
from towerkit.tools.install_horovod._records import (
    BUILD_REQUIREMENTS,
    DEFAULT_VERSION,
    RUNTIME_REQUIREMENTS,
    WHEEL_CACHE_ENV,
    BuildOptions,
    HorovodInstallError,
    HorovodPatchError,
    Installer,
    Probe,
    Step,
)

__all__ = [
    "DEFAULT_VERSION",
    "RUNTIME_REQUIREMENTS",
    "BUILD_REQUIREMENTS",
    "WHEEL_CACHE_ENV",
    "HorovodInstallError",
    "HorovodPatchError",
    "BuildOptions",
    "Installer",
    "Probe",
    "Step",
    "patch_cmakelists",
    "build_env",
    "merged_env",
    "choose_installer",
    "plan_install",
    "parse_probe",
    "rebuild_reason",
    "parse_cmake_version",
    "missing_build_tools",
    "check_verify_output",
    "render_plan",
    "cache_key",
    "find_cached_wheel",
    "store_wheel",
    "evict_cached_wheel",
    "main",
]
