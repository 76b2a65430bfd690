"""The workspace's distributions: where they live, their names, versions and dependencies."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import attrs

from towerkit.tools._files import ToolError, read_toml

_VERSION_LINE = re.compile(r"""^__version__\s*=\s*(["'])([^"']+)\1\s*$""", re.MULTILINE)


@attrs.frozen(kw_only=True)
class Dist:
    """One distribution of the workspace.

    Attributes:
        name: the distribution name (``towerkit-callbacks``).
        path: its folder (holding ``pyproject.toml``).
        version_file: the file holding ``__version__``, or None when none is declared.
        package: the import name (``towerkit.callbacks``), or None when not a towerkit one.
        dependencies: the requirement strings of ``[project] dependencies``.
    """

    name: str
    path: Path
    version_file: Path | None
    package: str | None
    dependencies: tuple[str, ...] = attrs.field(converter=tuple)

    @property
    def short(self) -> str:
        """The name without ``towerkit-``."""
        return self.name.removeprefix("towerkit-")

    def read_version(self) -> str:
        """The version in `version_file`.

        Raises:
            ToolError: there is no version file, or it has no ``__version__ = "..."`` line.
        """
        if self.version_file is None:
            msg = f"{self.name}: pyproject.toml declares no [tool.hatch.version] path"
            raise ToolError(msg)
        match = _VERSION_LINE.search(self.version_file.read_text(encoding="utf-8"))
        if match is None:
            msg = f"{self.name}: {str(self.version_file)!r} has no '__version__ = \"x.y.z\"' line"
            raise ToolError(msg)
        return match.group(2)


def version_line(text: str) -> re.Match[str] | None:
    r"""The ``__version__ = "..."`` line of a version file's text.

    Examples:
        >>> version_line('__version__ = "0.1.0"\n').group(2)
        '0.1.0'
    """
    return _VERSION_LINE.search(text)


def find_root(start: str | os.PathLike[str] | None = None) -> Path:
    """The nearest folder at or above `start` whose ``pyproject.toml`` declares a uv workspace.

    Raises:
        ToolError: none is found.
    """
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "workspace" in read_toml(pyproject).get("tool", {}).get(
            "uv", {}
        ):
            return folder
    msg = f"no workspace root (a pyproject.toml with [tool.uv.workspace]) at or above {str(here)!r}; pass --root"
    raise ToolError(msg)


def load_dists(root: str | os.PathLike[str]) -> list[Dist]:
    """The distributions listed by the workspace's ``[tool.uv.workspace] members`` globs.

    Raises:
        ToolError: `root` has no workspace pyproject, or a member's pyproject is broken.
    """
    root = Path(root)
    config = read_toml(root / "pyproject.toml")
    members = config.get("tool", {}).get("uv", {}).get("workspace", {}).get("members")
    if not members:
        msg = f"{str(root / 'pyproject.toml')!r} lists no [tool.uv.workspace] members"
        raise ToolError(msg)
    dists = []
    for pattern in members:
        for folder in sorted(glob.glob(str(root / pattern))):
            pyproject = Path(folder) / "pyproject.toml"
            if not pyproject.is_file():
                continue
            data = read_toml(pyproject)
            project = data.get("project", {})
            name = project.get("name")
            if not isinstance(name, str):
                msg = f"{str(pyproject)!r} has no [project] name"
                raise ToolError(msg)
            rel = data.get("tool", {}).get("hatch", {}).get("version", {}).get("path")
            version_file = Path(folder) / rel if rel else None
            package = None
            if name.startswith("towerkit-"):
                package = "towerkit." + name.removeprefix("towerkit-").replace("-", "_")
            dists.append(
                Dist(
                    name=name,
                    path=Path(folder),
                    version_file=version_file,
                    package=package,
                    dependencies=project.get("dependencies", []),
                )
            )
    return dists


def pick(dists: list[Dist], name: str) -> Dist:
    """The distribution called `name` (``callbacks`` or ``towerkit-callbacks``).

    Raises:
        ToolError: no such distribution (the known ones are listed).
    """
    for dist in dists:
        if name in (dist.name, dist.short):
            return dist
    msg = f"no distribution {name!r} in the workspace; known: {[d.short for d in dists]}"
    raise ToolError(msg)
