"""Tests of public-symbols: __all__ read from source, diffed against a real git history."""

from __future__ import annotations

import json
import keyword
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.tools._files import ToolError
from towerkit.tools.public_symbols import diff_names, main, names_in_all, names_in_stub

IDENTS = st.lists(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), unique=True, max_size=10
)

NAMES = IDENTS.filter(lambda names: not any(map(keyword.iskeyword, names)))
"""Identifiers that can be imported (no keyword)."""

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


class TestNamesInAll:
    """Reading __all__ without importing."""

    @given(IDENTS)
    def test_list_round_trip(self, names):
        """A written __all__ reads back unchanged, in order."""
        assert names_in_all(f"__all__ = {names!r}\n") == names

    def test_annotated_and_extended(self):
        """Annotated assignments and += are followed."""
        src = '__all__: list[str] = ["a"]\n__all__ += ["b"]\n'
        assert names_in_all(src) == ["a", "b"]

    def test_not_literal(self):
        """A computed __all__ is refused with its line."""
        with pytest.raises(
            ToolError, match=r"__all__ \(line 2\) must be a list of string literals"
        ):
            names_in_all("x = ['a']\n__all__ = x + ['b']\n", "m.py")

    def test_syntax_error(self):
        """A file that does not parse is named."""
        with pytest.raises(ToolError, match=r"'m\.py' does not parse"):
            names_in_all("def (:\n", "m.py")


class TestNamesInStub:
    """Reading the names an ``__init__.pyi`` imports as themselves."""

    @given(NAMES)
    def test_round_trip(self, names):
        """Each ``from m import N as N`` line declares N, in order."""
        src = "".join(f"from pkg._m{i} import {n} as {n}\n" for i, n in enumerate(names))
        assert names_in_stub(src) == names

    def test_other_imports_declare_nothing(self):
        """A plain import or a renaming alias is not a public name."""
        src = '"""Doc."""\nimport os\nfrom m import a, b as c\nfrom m import (\n    d as d,\n)\n'
        assert names_in_stub(src) == ["d"]

    def test_syntax_error(self):
        """A stub that does not parse is named."""
        with pytest.raises(ToolError, match=r"'s\.pyi' does not parse"):
            names_in_stub("from m import (\n", "s.pyi")


class TestDiff:
    """Added and removed names."""

    @given(IDENTS, IDENTS)
    def test_diff_reconstructs(self, old, new):
        """Applying the diff to the old names gives the new ones."""
        d = diff_names(old, new)
        assert (set(old) | set(d["added"])) - set(d["removed"]) == set(new)


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), *args],
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "HOME": str(root),
            "PATH": "/usr/bin:/bin",
        },
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository holding a workspace of one lib, committed on branch 'main'."""
    (tmp_path / "pyproject.toml").write_text('[tool.uv.workspace]\nmembers = ["libs/*"]\n')
    pkg = tmp_path / "libs" / "a" / "src" / "towerkit" / "a"
    pkg.mkdir(parents=True)
    (tmp_path / "libs" / "a" / "pyproject.toml").write_text('[project]\nname = "towerkit-a"\n')
    (pkg / "__init__.py").write_text('__all__ = ["keep", "gone"]\n')
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


@pytest.mark.procs
@needs_git
class TestMain:
    """The command line against a real git repository."""

    def test_unchanged(self, repo, capsys):
        """No change since the ref passes."""
        assert main(["--root", str(repo), "diff"]) == 0
        assert capsys.readouterr().out == "towerkit-a: unchanged since main\n"

    def test_removed_fails(self, repo, capsys):
        """A removed public name fails (status 1) and is listed; --allow-removals passes."""
        init = repo / "libs/a/src/towerkit/a/__init__.py"
        init.write_text('__all__ = ["keep", "new"]\n')
        assert main(["--root", str(repo), "diff", "--ref", "main"]) == 1
        captured = capsys.readouterr()
        assert captured.out.splitlines() == [
            "towerkit-a: + new",
            "towerkit-a: - gone  (removed: breaks users)",
        ]
        assert "1 public names removed since main" in captured.err
        assert main(["--root", str(repo), "diff", "--allow-removals", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {
            "towerkit-a": {"added": ["new"], "removed": ["gone"]}
        }

    def test_new_lib_is_all_added(self, repo, capsys):
        """A lib absent at the ref counts as all added."""
        pkg = repo / "libs" / "b" / "src" / "towerkit" / "b"
        pkg.mkdir(parents=True)
        (repo / "libs" / "b" / "pyproject.toml").write_text('[project]\nname = "towerkit-b"\n')
        (pkg / "__init__.py").write_text('__all__ = ["x"]\n')
        assert main(["--root", str(repo), "diff", "b"]) == 0
        assert capsys.readouterr().out == "towerkit-b: + x\n"

    def test_list(self, repo, capsys):
        """list prints each lib's names."""
        assert main(["--root", str(repo), "list", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"towerkit-a": ["keep", "gone"]}

    def test_unknown_ref(self, repo, capsys):
        """An unknown ref is a clear error."""
        assert main(["--root", str(repo), "diff", "--ref", "no-such-ref"]) == 2
        err = capsys.readouterr().err
        assert "git show no-such-ref:libs/a/src/towerkit/a/__init__.pyi failed" in err
        assert "invalid object name 'no-such-ref'" in err

    def test_stub_replaces_all(self, repo, capsys):
        """A lib whose names moved from ``__all__`` to an ``__init__.pyi`` is read from the stub."""
        pkg = repo / "libs/a/src/towerkit/a"
        (pkg / "__init__.py").write_text("from towerkit.a._lazy import names\n__all__ = names()\n")
        (pkg / "__init__.pyi").write_text(
            "from towerkit.a._m import keep as keep\nfrom towerkit.a._m import gone as gone\n"
        )
        assert main(["--root", str(repo), "diff"]) == 0
        assert capsys.readouterr().out == "towerkit-a: unchanged since main\n"
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "stub")
        (pkg / "__init__.pyi").write_text("from towerkit.a._m import keep as keep\n")
        assert main(["--root", str(repo), "diff", "--ref", "main"]) == 1
        assert capsys.readouterr().out == "towerkit-a: - gone  (removed: breaks users)\n"
        assert main(["--root", str(repo), "list", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"towerkit-a": ["keep"]}
