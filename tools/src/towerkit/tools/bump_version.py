"""bump-version: bump one lib's version and rewrite its dependents' compatible ranges.

Each towerkit distribution has its own version in ``src/towerkit/<lib>/_version.py``
and depends on the libs below it through compatible ranges (``towerkit-towers>=0.1,<0.2``;
for 1.0 and later ``>=1.2,<2``). ``bump`` changes one version, rewrites every range on
it in the workspace's ``pyproject.toml`` files, and opens a changelog entry;
``check`` verifies that every range admits the version it names and is no ``==`` pin.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from towerkit.sessinit import atomic_write_text
from towerkit.tools._files import ToolError, fail
from towerkit.tools._workspace import Dist, find_root, load_dists, pick, version_line

__all__ = [
    "PARTS",
    "Change",
    "bump",
    "check_requirements",
    "compatible_range",
    "main",
    "parse_version",
    "plan_bump",
    "requirement_spec",
    "rewrite_requirements",
    "satisfies",
]

PARTS = ("major", "minor", "patch")
"""The version parts ``bump`` can increase."""

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_CLAUSE = re.compile(r"^\s*(~=|==|!=|<=|>=|<|>)\s*([0-9][0-9.]*)\s*$")


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.2.1"`` -> ``(0, 2, 1)``.

    Raises:
        ValueError: not three dot-separated numbers.

    Examples:
        >>> parse_version("0.12.3")
        (0, 12, 3)
        >>> parse_version("1.0")
        Traceback (most recent call last):
        ...
        ValueError: version '1.0' is not of the form 'MAJOR.MINOR.PATCH'
    """
    match = _VERSION.match(text)
    if match is None:
        msg = f"version {text!r} is not of the form 'MAJOR.MINOR.PATCH'"
        raise ValueError(msg)
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def bump(version: str, part_or_version: str) -> str:
    """The next version: `version` with one part increased, or an explicit higher version.

    Raises:
        ValueError: unknown part, a malformed version, or an explicit one not higher.

    Examples:
        >>> bump("0.1.3", "patch"), bump("0.1.3", "minor"), bump("0.1.3", "major")
        ('0.1.4', '0.2.0', '1.0.0')
        >>> bump("0.2.0", "0.1.9")
        Traceback (most recent call last):
        ...
        ValueError: new version '0.1.9' must be higher than the current '0.2.0'
    """
    major, minor, patch = parse_version(version)
    if part_or_version == "major":
        return f"{major + 1}.0.0"
    if part_or_version == "minor":
        return f"{major}.{minor + 1}.0"
    if part_or_version == "patch":
        return f"{major}.{minor}.{patch + 1}"
    if not _VERSION.match(part_or_version):
        msg = f"expected one of {list(PARTS)} or a version 'MAJOR.MINOR.PATCH'; got {part_or_version!r}"
        raise ValueError(msg)
    if parse_version(part_or_version) <= (major, minor, patch):
        msg = f"new version {part_or_version!r} must be higher than the current {version!r}"
        raise ValueError(msg)
    return part_or_version


def compatible_range(version: str) -> str:
    """The range dependents declare on `version`: same minor before 1.0, same major after.

    Examples:
        >>> compatible_range("0.2.0"), compatible_range("0.2.5"), compatible_range("1.3.0")
        ('>=0.2,<0.3', '>=0.2,<0.3', '>=1.3,<2')
    """
    major, minor, _ = parse_version(version)
    upper = f"0.{minor + 1}" if major == 0 else f"{major + 1}"
    return f">={major}.{minor},<{upper}"


def _vtuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p != "")


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def satisfies(version: str, spec: str) -> bool:
    """Whether `version` meets a specifier such as ``>=0.1,<0.2`` (no pre-releases).

    Raises:
        ValueError: a clause is not ``<op><version>``.

    Examples:
        >>> satisfies("0.1.4", ">=0.1,<0.2"), satisfies("0.2.0", ">=0.1,<0.2")
        (True, False)
        >>> satisfies("1.4.2", "~=1.4"), satisfies("2.0.0", "~=1.4"), satisfies("1.0.0", "")
        (True, False, True)
    """
    v = _vtuple(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = _CLAUSE.match(clause)
        if match is None:
            msg = f"specifier clause {clause!r} is not of the form '<op><version>'"
            raise ValueError(msg)
        op, bound = match.group(1), _vtuple(match.group(2))
        c = _cmp(v, bound)
        if op == "~=":
            prefix = bound[:-1] if len(bound) > 1 else bound
            ok = c >= 0 and v[: len(prefix)] == prefix
        else:
            ok = {
                "==": c == 0,
                "!=": c != 0,
                "<=": c <= 0,
                ">=": c >= 0,
                "<": c < 0,
                ">": c > 0,
            }[op]
        if not ok:
            return False
    return True


def _requirement_pattern(dist: str) -> re.Pattern[str]:
    return re.compile(
        r"(?P<q>[\"'])(?P<name>" + re.escape(dist) + r")(?P<extras>\[[^\]\"']*\])?"
        r"(?P<spec>(?:\s*[<>=!~][^\"';]*)?)(?P<marker>;(?:(?!(?P=q)).)*)?(?P=q)"
    )


def requirement_spec(requirement: str, dist: str) -> str | None:
    """The version specifier of a requirement on `dist`, or None when it names another.

    Examples:
        >>> requirement_spec("towerkit-towers>=0.1,<0.2", "towerkit-towers")
        '>=0.1,<0.2'
        >>> requirement_spec("towerkit-towers-extra>=1", "towerkit-towers") is None
        True
    """
    match = _requirement_pattern(dist).fullmatch(f'"{requirement}"')
    return match.group("spec").strip() if match else None


def rewrite_requirements(text: str, dist: str, spec: str) -> tuple[str, int]:
    r"""Replace the specifier of every requirement on `dist` in a pyproject's text.

    Only quoted strings that are elements of an array (after ``[`` or ``,``) count, so
    ``name = "towerkit-x"`` is left alone. Extras and environment markers are kept.

    Returns:
        The new text and the number of requirements rewritten.

    Examples:
        >>> text = 'dependencies = [\n  "towerkit-towers>=0.1,<0.2",\n  "towerkit-towers-x>=1",\n]'
        >>> new, n = rewrite_requirements(text, "towerkit-towers", ">=0.2,<0.3")
        >>> n, new.splitlines()[1]
        (1, '  "towerkit-towers>=0.2,<0.3",')
        >>> rewrite_requirements('x = ["towerkit-a[cpu] >=0.1,<0.2; python_version>\'3\'"]', "towerkit-a", ">=0.2,<0.3")[0]
        'x = ["towerkit-a[cpu]>=0.2,<0.3; python_version>\'3\'"]'
        >>> rewrite_requirements('name = "towerkit-a"', "towerkit-a", ">=0.2,<0.3")
        ('name = "towerkit-a"', 0)
    """
    count = 0

    def repl(match: re.Match[str]) -> str:
        nonlocal count
        if text[: match.start()].rstrip()[-1:] not in ("[", ","):
            return match.group(0)
        count += 1
        q = match.group("q")
        return (
            f"{q}{match.group('name')}{match.group('extras') or ''}{spec}"
            f"{match.group('marker') or ''}{q}"
        )

    return _requirement_pattern(dist).sub(repl, text), count


@attrs.frozen(kw_only=True)
class Change:
    """A file to rewrite.

    Attributes:
        path: the file.
        old: its text now.
        new: its text after the change.
        summary: one line saying what changes.
    """

    path: Path
    old: str
    new: str
    summary: str


def _changelog_entry(text: str, version: str) -> str | None:
    if re.search(rf"^##\s+{re.escape(version)}\b", text, re.MULTILINE):
        return None
    lines = text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    entry = f"## {version} (unreleased)\n\n- \n\n"
    return "".join([*lines[:at], entry, *lines[at:]])


def plan_bump(
    dists: Sequence[Dist], target: Dist, new_version: str, texts: Mapping[Path, str]
) -> list[Change]:
    """The file changes that bump `target` to `new_version`.

    Args:
        dists: every distribution of the workspace.
        target: the one to bump.
        new_version: its new version.
        texts: the current text of each file involved (version file, changelog,
            every ``pyproject.toml``), keyed by path.

    Returns:
        The version file, the changelog (when it has no entry for the version yet), and
        every dependent ``pyproject.toml`` whose ranges change, in that order.
    """
    if target.version_file is None:
        msg = f"{target.name}: pyproject.toml declares no [tool.hatch.version] path"
        raise ToolError(msg)
    old_text = texts[target.version_file]
    match = version_line(old_text)
    if match is None:
        msg = f"{str(target.version_file)!r} has no '__version__ = \"x.y.z\"' line"
        raise ToolError(msg)
    old_version = match.group(2)
    new_text = old_text[: match.start(2)] + new_version + old_text[match.end(2) :]
    changes = [
        Change(
            path=target.version_file,
            old=old_text,
            new=new_text,
            summary=f"{target.name}: {old_version} -> {new_version}",
        )
    ]
    changelog = target.path / "CHANGELOG.md"
    if changelog in texts:
        updated = _changelog_entry(texts[changelog], new_version)
        if updated is not None:
            changes.append(
                Change(
                    path=changelog,
                    old=texts[changelog],
                    new=updated,
                    summary=f"{target.name}: CHANGELOG.md gets a '## {new_version} (unreleased)' entry",
                )
            )
    spec = compatible_range(new_version)
    for dist in dists:
        pyproject = dist.path / "pyproject.toml"
        text = texts[pyproject]
        rewritten, count = rewrite_requirements(text, target.name, spec)
        if count and rewritten != text:
            changes.append(
                Change(
                    path=pyproject,
                    old=text,
                    new=rewritten,
                    summary=f"{dist.name}: requires {target.name}{spec} ({count} requirement{'s' if count > 1 else ''})",
                )
            )
    return changes


def check_requirements(dists: Sequence[Dist], versions: Mapping[str, str]) -> list[str]:
    """Every requirement between workspace distributions that is a pin or misses the version.

    Args:
        dists: the distributions.
        versions: ``{name: current version}``.

    Returns:
        One line per problem (empty when all is well).

    Examples:
        >>> from pathlib import Path
        >>> a = Dist(name="towerkit-a", path=Path("a"), version_file=None, package=None, dependencies=[])
        >>> b = Dist(name="towerkit-b", path=Path("b"), version_file=None, package=None,
        ...          dependencies=["towerkit-a>=0.1,<0.2"])
        >>> check_requirements([a, b], {"towerkit-a": "0.2.0", "towerkit-b": "0.1.0"})
        ["towerkit-b requires 'towerkit-a>=0.1,<0.2', which excludes towerkit-a 0.2.0 (expected '>=0.2,<0.3')"]
    """
    problems = []
    for dist in dists:
        for req in dist.dependencies:
            for other in dists:
                spec = requirement_spec(req, other.name)
                if spec is None:
                    continue
                version = versions[other.name]
                expected = compatible_range(version)
                if "==" in spec or spec.startswith("==="):
                    problems.append(
                        f"{dist.name} pins {req!r}: use a compatible range such as {expected!r}"
                    )
                elif not satisfies(version, spec):
                    problems.append(
                        f"{dist.name} requires {req!r}, which excludes {other.name} {version} "
                        f"(expected {expected!r})"
                    )
    return problems


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bump-version",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument("--root", help="the workspace root (default: found from the current dir)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print each distribution's version and its towerkit requirements")
    sub.add_parser("check", help="exit 1 when a range excludes the version it names or pins it")
    b = sub.add_parser("bump", help="bump one distribution and rewrite its dependents' ranges")
    b.add_argument("lib", help="the distribution: 'callbacks' or 'towerkit-callbacks'")
    b.add_argument("part", help="'major', 'minor', 'patch', or an explicit 'X.Y.Z'")
    b.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    return parser


def _versions(dists: Sequence[Dist]) -> dict[str, str]:
    return {d.name: d.read_version() for d in dists if d.version_file is not None}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 1 when ``check`` finds problems, 2 on a usage or workspace error.
    """
    args = _parser().parse_args(argv)
    try:
        root = Path(args.root) if args.root else find_root()
        dists = load_dists(root)
        versions = _versions(dists)
        if args.command == "list":
            for dist in dists:
                reqs = [r for r in dist.dependencies if r.startswith("towerkit-")]
                print(f"{dist.name} {versions.get(dist.name, '?')}  {', '.join(reqs)}".rstrip())
            return 0
        if args.command == "check":
            problems = check_requirements([d for d in dists if d.name in versions], versions)
            for line in problems:
                print(f"bump-version: {line}")
            if not problems:
                print(
                    f"bump-version: {len(dists)} distributions, every towerkit range is consistent"
                )
            return 1 if problems else 0
        target = pick(dists, args.lib)
        try:
            new_version = bump(target.read_version(), args.part)
        except ValueError as err:
            raise ToolError(str(err)) from None
        paths = [d.path / "pyproject.toml" for d in dists]
        paths += [p for p in (target.version_file, target.path / "CHANGELOG.md") if p]
        texts = {p: p.read_text(encoding="utf-8") for p in paths if p.is_file()}
        changes = plan_bump(dists, target, new_version, texts)
    except ToolError as err:
        return fail("bump-version", err)
    for change in changes:
        prefix = "would change" if args.dry_run else "changed"
        print(f"bump-version: {prefix} {change.path.relative_to(root)}: {change.summary}")
        if not args.dry_run:
            atomic_write_text(change.path, change.new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
