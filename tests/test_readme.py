"""Every README runs as written: its Python blocks as one program, its command lines at least --help.

The Python blocks of a README, in order, make one program (a block may use what an
earlier block of the same README defined or wrote); it runs in an empty directory in
a fresh process, as a user who pastes them would. A block that needs horovod runs in
the horovod session only. Command lines in the other blocks are checked as far as is
cheap: each tool and script shown answers ``--help``, each ``nox -s`` session exists,
each ``pip install`` path and extra exists.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import prefork
import pytest
from example_modules import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

READMES = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("libs/*/README.md")),
    "tools/README.md",
    "conformance/README.md",
    "benchmarks/README.md",
    "examples/mnist1d/README.md",
]
"""Every README of the repository."""

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.S | re.M)

NEEDS_HOROVOD = "launch_horovod_job"
"""A Python block using this runs only where horovod is installed (``nox -s horovod``)."""


def blocks(readme: str) -> list[tuple[str, str]]:
    """The fenced blocks of `readme`: ``(info string, text)``, in order."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(text)]


def python_program(readme: str) -> str:
    """The Python blocks of `readme` that run anywhere, joined in order."""
    return "\n".join(
        code for info, code in blocks(readme) if info == "python" and NEEDS_HOROVOD not in code
    )


def run_python(code: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """Run `code` as a script in `cwd`, as a fresh interpreter would (`prefork`)."""
    script = cwd / "readme_blocks.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return prefork.run([sys.executable, str(script)], cwd=cwd, env=env, timeout=timeout)


def quick_start() -> str:
    """The first Python code block of README.md."""
    return next(code for info, code in blocks("README.md") if info == "python")


@pytest.mark.procs
def test_every_readme_found():
    """The list covers every README.md of the repository (outside venvs and build folders)."""
    found = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "dist")]
        if "README.md" in files:
            found.add(str((Path(folder) / "README.md").relative_to(ROOT)))
    assert found == set(READMES)


@pytest.mark.parametrize("readme", READMES)
def test_blocks_are_closed(readme):
    """Fences pair up: an odd count would turn prose into code and hide a block."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    assert len(re.findall(r"^```", text, re.M)) % 2 == 0


@pytest.mark.procs
def test_quick_start_is_short():
    """The quick start stays about 20 lines of code."""
    code = [line for line in quick_start().splitlines() if line.strip()]
    assert len(code) <= 22


def section(title: str) -> str:
    """The text of README.md's section `title` (``## title``), up to the next ``## ``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def setup_commands() -> list[str]:
    """The command lines of README.md's "Set up" section, in order."""
    blocks_ = FENCE.finditer(section("Set up"))
    return [m.group(2).strip() for m in blocks_ if m.group(1).strip() in ("", "sh", "shell")][:2]


VENV_FIRST = (
    'python3 -m venv .venv && . .venv/bin/activate && pip install "nox[uv]>=2026.10.20" && nox '
)
"""How both set-up commands start: a venv first (a stock Debian or Ubuntu Python refuses
``pip install`` outside one), then nox from it."""


def test_setup_commands_make_a_venv():
    """Each set-up command is one line that makes and enters a venv before pip installs nox."""
    demo, ci = setup_commands()
    assert demo == VENV_FIRST + "-s demo"
    assert ci == VENV_FIRST + "-t ci -j 2"


def externally_managed_python() -> str | None:
    """A system Python that refuses ``pip install`` outside a venv (Debian 12, Ubuntu 24.04)."""
    for candidate in ("/usr/bin/python3",):
        if os.path.isfile(candidate):
            stdlib = subprocess.run(
                [candidate, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            probe = subprocess.run(
                [candidate, "-c", "import ensurepip, venv"], capture_output=True, check=False
            )
            if stdlib and Path(stdlib, "EXTERNALLY-MANAGED").is_file() and probe.returncode == 0:
                return candidate
    return None


@pytest.mark.procs
@pytest.mark.slow
@pytest.mark.timeout(400)  # a venv and pip install of nox on 2 shared cores: 1-2 min
def test_setup_command_runs_in_a_fresh_venv(tmp_path):
    """The set-up command, run by bash as written, makes the venv, installs nox and runs it.

    ``python3`` is a stock Debian/Ubuntu Python where there is one (checked first to
    refuse a bare ``pip install``); the session run is ``nox -l`` instead of the demo
    (the demo itself runs in ``nox -s demo``), in a folder holding the noxfile.
    """
    (demo, _) = setup_commands()
    for name in ("noxfile.py", "pyproject.toml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    system = externally_managed_python()
    (bin_dir / "python3").symlink_to(system or sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    if system is not None:
        refused = subprocess.run(
            ["python3", "-m", "pip", "install", "nox[uv]"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert refused.returncode != 0
        assert "externally-managed-environment" in refused.stdout + refused.stderr
    command = demo.removesuffix("nox -s demo") + "nox -l"
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert re.search(r"^- demo -> ", done.stdout, re.M), done.stdout[-2000:]
    assert (tmp_path / ".venv" / "bin" / "nox").is_file()


def test_quick_start_installs_what_it_names():
    """Its install line makes a venv first and installs the tools with matplotlib (plot-stats)."""
    text = section("Quick start")
    lines = [
        w for m in FENCE.finditer(text) if m.group(1).strip() == "" for w in m.group(2).splitlines()
    ]
    assert lines[0] == "python3 -m venv .venv && . .venv/bin/activate"
    targets = pip_targets(shlex.split(lines[1]))
    named = {t for t in TOOLS if f"`{t} " in text}
    assert named == {"plot-stats"}
    assert "./tools[plot]" in targets


@pytest.mark.procs
@pytest.mark.slow
@pytest.mark.timeout(600)  # three TensorFlow programs in a row on 2 shared cores
def test_quick_start_trains(tmp_path):
    """Run as a script in an empty directory, it learns the weights and writes its logdir;
    plot-stats plots it; run a second time, it stops with a short error naming the logdir."""
    done = run_python(
        quick_start()
        + "\nr = tf.train.load_checkpoint('train_log/linear')\n"
        + "print('weights', r.get_tensor('w').ravel().round(2).tolist())\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "weights [1.0, -2.0, 0.5]" in done.stdout
    logdir = tmp_path / "train_log" / "linear"
    assert (logdir / "checkpoint").is_file()
    stats = json.loads((logdir / "stats.json").read_text())
    costs = [entry["cost"] for entry in stats]
    assert len(costs) == 20
    assert costs[-1] < 0.01 * costs[0], "the loss falls"
    lines = [
        re.fullmatch(r"epoch (\d+)/20  \d+\.\d s  cost (\S+)", line)
        for line in done.stderr.splitlines()
    ]
    shown = [(int(m.group(1)), float(m.group(2))) for m in lines if m is not None]
    assert [e for e, _ in shown] == list(range(1, 21)), "one line per epoch"
    assert [c for _, c in shown] == pytest.approx(costs, rel=1e-3), "each epoch's cost, 4 digits"
    assert "1 trainable variable, 3 parameters (12 bytes)" in done.stderr
    assert "MLIR" not in done.stderr, "TensorFlow's second block of start-up lines is hidden"

    plotted = subprocess.run(
        [sys.executable, "-m", "towerkit.tools.plot_stats", "train_log/linear", "--log"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert plotted.returncode == 0, plotted.stderr
    assert (logdir / "stats.png").stat().st_size > 0

    again = run_python(quick_start(), tmp_path)
    assert again.returncode == 1
    shown_error = again.stderr[again.stderr.index("Traceback") :].splitlines()
    assert len(shown_error) <= 6, "fits on a screen: the user's line, the message, the note"
    assert shown_error[1].endswith(", in <module>")
    assert shown_error[2].strip() == "launch_train_with_config(config, SimpleTrainer())"
    message = shown_error[3]
    assert message.startswith("towerkit.trainers.LogdirNotEmptyError: the logdir ")
    assert repr(str(logdir)) in message
    assert "logdir_action='overwrite'" in message
    assert len(message) < 600
    assert "TOWERKIT_TRACEBACK=full" in shown_error[-1]
    assert (logdir / "checkpoint").is_file(), "the first run's files are untouched"


WITH_PYTHON = [r for r in READMES if python_program(r)]


@pytest.mark.procs
def test_each_lib_readme_has_an_example():
    """Every lib's README shows a Python example."""
    libs = {r for r in READMES if r.startswith("libs/")}
    assert libs <= set(WITH_PYTHON)


@pytest.mark.procs
@pytest.mark.slow
@pytest.mark.parametrize("readme", WITH_PYTHON)
def test_python_blocks_run(readme, tmp_path):
    """The README's Python blocks, pasted in order into one script, run without error."""
    done = run_python(python_program(readme), tmp_path)
    assert done.returncode == 0, f"{readme}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


HOROVOD_TRAIN = """\
import horovod.tensorflow as hvd

hvd.init()
print(f"rank {hvd.rank()} of {hvd.size()}")
"""
"""The ``train.py`` the README's horovod block launches: any horovod script does."""


@pytest.mark.procs
@pytest.mark.horovod
def test_horovod_block_runs(tmp_path):
    """The README's horovod block launches a 2-process job that succeeds."""
    pytest.importorskip("horovod.tensorflow", reason="horovod not installed: run nox -s horovod")
    (code,) = [c for i, c in blocks("README.md") if i == "python" and NEEDS_HOROVOD in c]
    (tmp_path / "train.py").write_text(HOROVOD_TRAIN)
    code = code.replace('["python", ', f"[{sys.executable!r}, ")
    done = run_python(code + "\nassert job.ok, job.output\n", tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "True False" in done.stdout


@pytest.mark.procs
def test_conformance_example_is_the_tested_file():
    """The trainers module shown in conformance/README.md is the file its tests run."""
    shown = [c for i, c in blocks("conformance/README.md") if i == "python"]
    tested = (ROOT / "conformance" / "tests" / "example_trainers.py").read_text()
    assert len(shown) == 1
    assert shown[0].strip() in tested


# Command lines ------------------------------------------------------------------------------

with open(ROOT / "tools" / "pyproject.toml", "rb") as _f:
    TOOLS = sorted(tomllib.load(_f)["project"]["scripts"])
"""The console scripts of towerkit-tools."""


def command_lines(readme: str) -> list[list[str]]:
    """The shell command lines of `readme`'s non-Python blocks, split into words.

    A leading ``$ `` is dropped, comments are removed, ``&&`` splits a line; lines of
    output (blocks whose lines do not start with a known command) are left out.
    """
    out = []
    for info, text in blocks(readme):
        if info not in ("", "sh", "shell", "console", "bash"):
            continue
        for raw in text.splitlines():
            line = raw.removeprefix("$ ").strip()
            for part in line.split("&&"):
                try:
                    words = shlex.split(part, comments=True)
                except ValueError:
                    continue
                if words and (words[0] in (*TOOLS, "pip", "nox", "python", "pytest")):
                    out.append(words)
    return out


ALL_COMMANDS = [(r, w) for r in READMES for w in command_lines(r)]


def test_commands_found():
    """The extraction sees the commands of the root README and the tools README."""
    firsts = {w[0] for _, w in ALL_COMMANDS}
    assert {"pip", "nox", "ls-checkpoint", "install-horovod", "bump-version"} <= firsts


def nox_sessions() -> set[str]:
    """The sessions noxfile.py defines, with ``NAME(ID)`` for those parametrized over the libs."""
    text = (ROOT / "noxfile.py").read_text()
    names = set(re.findall(r"@nox\.session[^\n]*\n(?:@[^\n]*\n)*def (\w+)\(", text))
    per_lib = set(
        re.findall(
            r"@nox\.session[^\n]*\n@nox\.parametrize\([^\n]*(?:LIBS|TESTS_ORDER)[^\n]*\n(?:@[^\n]*\n)*def (\w+)\(",
            text,
        )
    )
    libs = [p.name for p in (ROOT / "libs").iterdir() if (p / "pyproject.toml").is_file()]
    return (names - per_lib) | {f"{name}({lib})" for name in per_lib for lib in libs}


@pytest.mark.parametrize(
    ("readme", "words"),
    [(r, w) for r, w in ALL_COMMANDS if w[0] == "nox"],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_nox_sessions_exist(readme, words):
    """Each ``nox -s NAME`` shown names a session of noxfile.py; ``-t`` a tag in use."""
    del readme
    sessions = nox_sessions()
    for flag, value in itertools.pairwise(words):
        if flag == "-s":
            assert value in sessions, (value, sorted(sessions))
        if flag == "-t":
            assert f'"{value}"' in (ROOT / "noxfile.py").read_text()


def pip_targets(words: list[str]) -> list[str]:
    """The requirements of a ``pip install`` line (options and their values left out)."""
    out, skip = [], False
    for word in words[2:]:
        if skip:
            skip = False
        elif word in ("--find-links", "-f", "-p", "--python"):
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


def declared_extras(dist: str) -> set[str]:
    """The extras of a towerkit distribution, from its pyproject."""
    folder = ROOT / (
        "tools" if dist == "tools" else "conformance" if dist == "conformance" else f"libs/{dist}"
    )
    with open(folder / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["project"].get("optional-dependencies", {}))


@pytest.mark.procs
@pytest.mark.parametrize(
    ("readme", "words"),
    [(r, w) for r, w in ALL_COMMANDS if w[:2] == ["pip", "install"]],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_pip_install_lines(readme, words):
    """Each towerkit requirement is a folder of the clone or a dist name with --find-links dist."""
    del readme
    for target in pip_targets(words):
        match = re.fullmatch(
            r"(?:\./)?(libs/\w+|tools|conformance|towerkit-(\w+))(?:\[([\w,]+)\])?", target
        )
        if match is None:
            assert not target.startswith(("towerkit", "./")), target
            continue
        path, name, extras = match.groups()
        if name is not None:
            assert "--find-links" in words, f"{target}: towerkit is not on an index"
            dist = name
        else:
            assert (ROOT / path / "pyproject.toml").is_file(), path
            dist = path.removeprefix("libs/")
        for extra in (extras or "").split(","):
            if extra:
                assert extra in declared_extras(dist), (target, extra)


TOOL_OR_SCRIPT = sorted(
    {w[0] for _, w in ALL_COMMANDS if w[0] in TOOLS}
    | {w[1] for _, w in ALL_COMMANDS if w[0] == "python" and w[1:2] and w[1].endswith(".py")}
)


@pytest.mark.procs
@pytest.mark.slow
@pytest.mark.parametrize("command", TOOL_OR_SCRIPT)
def test_commands_answer_help(command, tmp_path):
    """Each tool and script shown answers --help with status 0."""
    if command.endswith(".py"):
        args = [sys.executable, str(ROOT / command), "--help"]
    else:
        module = command.replace("-", "_").removeprefix("towerkit_")
        args = [sys.executable, "-m", f"towerkit.tools.{module}", "--help"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        args, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:200]


@pytest.mark.procs
@pytest.mark.slow
def test_timeline_example_output(tmp_path):
    """The timeline run.toml of tools/README.md prints the lines shown under it."""
    found = blocks("tools/README.md")
    index = next(i for i, (info, _) in enumerate(found) if info == "toml")
    (tmp_path / "run.toml").write_text(found[index][1])
    shown = found[index + 1][1].splitlines()
    assert shown[0] == "$ timeline run.toml"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "towerkit.tools.timeline", "run.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    for line in shown[1:]:
        if line != "...":
            assert line in printed, line
