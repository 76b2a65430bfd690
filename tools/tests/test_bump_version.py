"""Tests of bump-version: versions, ranges, and rewriting a real workspace on disk."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.tools.bump_version import (
    bump,
    compatible_range,
    main,
    parse_version,
    requirement_spec,
    rewrite_requirements,
    satisfies,
)

VERSIONS = st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30)).map(
    lambda t: ".".join(map(str, t))
)


class TestVersions:
    """Pure version arithmetic."""

    @given(VERSIONS, st.sampled_from(["major", "minor", "patch"]))
    def test_bump_increases(self, version, part):
        """A bump always gives a higher version."""
        assert parse_version(bump(version, part)) > parse_version(version)

    @given(VERSIONS)
    def test_range_admits_own_patches_only(self, version):
        """The compatible range admits the version and its patches, not the next breaking one."""
        spec = compatible_range(version)
        assert satisfies(version, spec)
        assert satisfies(bump(version, "patch"), spec)
        breaking = bump(version, "minor" if version.startswith("0.") else "major")
        assert not satisfies(breaking, spec)

    def test_bump_fail(self):
        """A malformed part is refused with the accepted ones."""
        with pytest.raises(
            ValueError, match=r"expected one of \['major', 'minor', 'patch'\] or a version"
        ):
            bump("0.1.0", "next")

    def test_satisfies_bad_clause(self):
        """A clause that is not <op><version> is refused."""
        with pytest.raises(ValueError, match="specifier clause 'about 1' is not"):
            satisfies("1.0.0", ">=1,about 1")

    def test_requirement_spec_with_extras(self):
        """Extras are not part of the specifier."""
        assert requirement_spec("towerkit-x[cpu]>=0.1,<0.2", "towerkit-x") == ">=0.1,<0.2"

    @given(VERSIONS)
    def test_rewrite_is_idempotent(self, version):
        """Rewriting twice with the same range changes nothing the second time."""
        text = 'dependencies = [\n  "towerkit-a>=0.1,<0.2",\n  "numpy>=1",\n]\n'
        once, n1 = rewrite_requirements(text, "towerkit-a", compatible_range(version))
        twice, n2 = rewrite_requirements(once, "towerkit-a", compatible_range(version))
        assert (n1, n2, once) == (1, 1, twice)
        assert '"numpy>=1"' in twice


def make_workspace(root: Path, b_requires: str = "towerkit-a>=0.1,<0.2") -> Path:
    """A workspace of two libs, b depending on a, laid out like this repository."""
    (root / "pyproject.toml").write_text('[tool.uv.workspace]\nmembers = ["libs/*"]\n')
    for name, deps in (("a", ["numpy>=1"]), ("b", ["numpy>=1", b_requires])):
        lib = root / "libs" / name
        (lib / "src" / "towerkit" / name).mkdir(parents=True)
        (lib / "src" / "towerkit" / name / "_version.py").write_text('__version__ = "0.1.0"\n')
        (lib / "CHANGELOG.md").write_text(f"# towerkit-{name} changelog\n\n## 0.1.0\n\n- First.\n")
        quoted = ", ".join(f'"{d}"' for d in deps)
        (lib / "pyproject.toml").write_text(
            textwrap.dedent(
                f"""\
                [project]
                name = "towerkit-{name}"
                dynamic = ["version"]
                dependencies = [{quoted}]

                [project.optional-dependencies]
                extra = ["towerkit-a[cpu]>=0.1,<0.2"]

                [tool.hatch.version]
                path = "src/towerkit/{name}/_version.py"
                """
            )
        )
    return root


class TestMain:
    """The command line on a workspace on disk."""

    def test_bump_minor(self, tmp_path, capsys):
        """Bumping a rewrites its version, its changelog and every range on it."""
        root = make_workspace(tmp_path)
        assert main(["--root", str(root), "bump", "a", "minor"]) == 0
        assert (root / "libs/a/src/towerkit/a/_version.py").read_text() == '__version__ = "0.2.0"\n'
        b = (root / "libs/b/pyproject.toml").read_text()
        assert '"towerkit-a>=0.2,<0.3"' in b
        assert '"towerkit-a[cpu]>=0.2,<0.3"' in b
        assert (root / "libs/a/CHANGELOG.md").read_text().split("\n")[2] == "## 0.2.0 (unreleased)"
        assert 'name = "towerkit-a"' in (root / "libs/a/pyproject.toml").read_text()
        assert main(["--root", str(root), "check"]) == 0
        capsys.readouterr()

    def test_dry_run_writes_nothing(self, tmp_path, capsys):
        """--dry-run prints the changes and leaves every file as it was."""
        root = make_workspace(tmp_path)
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
        assert main(["--root", str(root), "bump", "towerkit-a", "1.0.0", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert (
            "would change libs/b/pyproject.toml: towerkit-b: requires towerkit-a>=1.0,<2 (2 requirements)"
            in out
        )
        assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before

    def test_check_finds_excluded(self, tmp_path, capsys):
        """check reports a range that excludes the current version; list shows the ranges."""
        root = make_workspace(tmp_path)
        (root / "libs/a/src/towerkit/a/_version.py").write_text('__version__ = "0.3.0"\n')
        assert main(["--root", str(root), "check"]) == 1
        out = capsys.readouterr().out
        assert (
            "towerkit-b requires 'towerkit-a>=0.1,<0.2', which excludes towerkit-a 0.3.0 (expected '>=0.3,<0.4')"
            in out
        )
        assert main(["--root", str(root), "list"]) == 0
        assert "towerkit-b 0.1.0  towerkit-a>=0.1,<0.2" in capsys.readouterr().out

    def test_check_finds_pin(self, tmp_path, capsys):
        """check reports an == pin even when it admits the version."""
        root = make_workspace(tmp_path, b_requires="towerkit-a==0.1.0")
        assert main(["--root", str(root), "check"]) == 1
        assert (
            "towerkit-b pins 'towerkit-a==0.1.0': use a compatible range such as '>=0.1,<0.2'"
            in capsys.readouterr().out
        )

    def test_unknown_lib(self, tmp_path, capsys):
        """An unknown lib is named with the known ones."""
        root = make_workspace(tmp_path)
        assert main(["--root", str(root), "bump", "zz", "patch"]) == 2
        assert "no distribution 'zz' in the workspace; known: ['a', 'b']" in capsys.readouterr().err

    def test_lower_version(self, tmp_path, capsys):
        """An explicit version must be higher than the current one."""
        root = make_workspace(tmp_path)
        assert main(["--root", str(root), "bump", "a", "0.0.9"]) == 2
        assert "must be higher than the current '0.1.0'" in capsys.readouterr().err

    def test_no_workspace(self, tmp_path, capsys):
        """A root without a workspace pyproject is refused."""
        assert main(["--root", str(tmp_path), "list"]) == 2
        assert "does not exist" in capsys.readouterr().err

    def test_this_repository_is_consistent(self, capsys):
        """The repository's own ranges admit the versions they name."""
        root = Path(__file__).resolve().parents[2]
        assert main(["--root", str(root), "check"]) == 0, capsys.readouterr().out
