# /// script
# dependencies = ["nox>=2026.10.20"]
# ///
"""Every way to run towerkit: tests, conformance, lint, typecheck, build, demo, bench, horovod, recipes.

Each lib's tests run in a virtual environment holding only that lib, the
towerkit libs it declares, and their dependencies: a missing declaration fails
here. `nox -t ci -j 2` is what CI runs.

Sessions run two at a time (``-j 2``, nox's ``--parallel``; ``-j 1`` or none: one after
another), each in its own nox process, its output printed as one block when it ends.
They start in the order they are defined here, the longest first (horovod, crosslib,
conformance, hosts, the trainers lib's tests...), so the short ones fill the end; a
session that mostly waits on processes (hosts, horovod) overlaps with one that
computes. ``ci_summary`` runs alone, after all of them. Sessions must not share files
outside their own venv and report: the horovod wheel cache has its own lock.

How a test run is laid out (where a new test goes)
--------------------------------------------------
A session's tests run in one pytest run, in parallel on pytest-xdist workers (one per
core, at least 2: ``TOWERKIT_TEST_WORKERS``, a number or ``auto``), in two tiers told
apart by a marker:

- the in-process tier, ``-m "not procs"``: tests that run TensorFlow in the pytest
  process itself. Most tests belong here.
- the process tier, ``-m procs``: tests that start processes (a training script, a
  TensorFlow server, horovod ranks, a venv, a terminal) and mostly wait on them; they
  share the workers with the first tier, so their waits overlap with its work. On 2
  cores more workers than cores made the run slower: each worker and each fresh process
  imports TensorFlow (4 s of CPU there, from compiled bytecode; see below).

Every Python process of a session reads and writes compiled bytecode in one cache,
``.nox/.pycache`` (``PYTHONPYCACHEPREFIX``), whatever ``PYTHONDONTWRITEBYTECODE`` the
caller has set: the venvs are installed without bytecode, and importing TensorFlow from
source costs 12 s of CPU where its bytecode costs 4, paid by every worker, script,
server and rank a test starts. Before its tests, a session links into its venv's part of
the cache the bytecode that other venvs compiled from the same (hard-linked) files
(``share_bytecode``), so TensorFlow is compiled once per run, not once per session.

A test that starts a Python program importing TensorFlow starts it with
``prefork.run`` or ``prefork.popen`` (``tests/plugins/prefork.py``, importable from
every test folder): the program is a fork of a server that imported TensorFlow once per
pytest worker, with its own pid, streams, environment and exit status, so it does not
pay the import again; a test that reads TensorFlow's start-up lines uses `subprocess`.

A test that starts a process gets ``@pytest.mark.procs`` (or a module-level
``pytestmark``): the guard ``tests/plugins/towerkit_tiers.py``, loaded in every tiered
run, fails a test that starts one without the mark. A module whose tests share an
expensive module fixture (one training run that every test reads) keeps them on one
worker with ``pytest.mark.xdist_group(NAME)``. Every test runs under a default timeout
of 240 s (the root pyproject); one that needs more says so with
``@pytest.mark.timeout(N)``. Tests must not share fixed paths or ports: two workers run
them at the same time.

Each pytest run writes a JUnit report under ``reports/ci/junit/`` and each session its
time and the CPU time of its processes to ``reports/ci/sessions.jsonl``; the last
session of ``nox -t ci``, ``ci_summary``, prints the 25 slowest tests of the run and
each session's times, so a change that slows CI shows in its own run.
``-- -m "not procs"`` after a session's name runs its fast tier alone.
"""

from __future__ import annotations

import functools
import json
import os
import re
import resource
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import nox

nox.needs_version = ">=2026.10.20"  # --parallel (-j)
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
nox.options.allow_parallel = True  # under -j N; ci_summary alone waits for the others
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")

# Compiled bytecode for every process the sessions start (see the module docstring).
PYCACHE = ROOT / ".nox" / ".pycache"
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(PYCACHE))

LIBS = ["sessinit", "towers", "callbacks", "trainers", "export", "layers"]
"""The libs in dependency order: each depends only on libs before it."""

TESTS_ORDER = ["trainers", "callbacks", "sessinit", "towers", "export", "layers"]
"""The order of the libs' test sessions in ``nox -t ci``: the longest first (see the docstring)."""
assert sorted(TESTS_ORDER) == sorted(LIBS), "TESTS_ORDER must list each lib once"

DISTS = {f"towerkit-{lib}": ROOT / "libs" / lib for lib in LIBS}
DISTS["towerkit-conformance"] = ROOT / "conformance"
DISTS["towerkit-tools"] = ROOT / "tools"

TF_EXTRA = os.environ.get("TOWERKIT_TF_EXTRA", "cpu")
"""Which TensorFlow the test venvs get: `cpu` (tensorflow-cpu), `gpu`, `tf`, or `none`."""

HOROVOD_VENV = ROOT / ".nox" / "horovod"


def _declared_towerkit_deps(path: Path) -> list[str]:
    """The towerkit distributions that the pyproject at `path` depends on."""
    data = nox.project.load_toml(path / "pyproject.toml")
    names = [
        re.split(r"[ <>=!~;\[]", dep, maxsplit=1)[0] for dep in data["project"]["dependencies"]
    ]
    return [n for n in names if n.startswith("towerkit-")]


def local_closure(dist: str) -> list[Path]:
    """`dist`'s folder and the folders of every towerkit lib it needs, dependencies first."""
    seen: list[Path] = []

    def visit(name: str) -> None:
        path = DISTS[name]
        for dep in _declared_towerkit_deps(path):
            visit(dep)
        if path not in seen:
            seen.append(path)

    visit(dist)
    return seen


def install_local(session: nox.Session, *dists: str, tensorflow: bool = True) -> None:
    """Install `dists` and their in-repo dependencies (not editable) with the TF extra.

    With ``tensorflow=False`` no extra is asked for, so no TensorFlow is installed.

    Our own libs are reinstalled every time, so a reused venv tests the tree as it is now.
    """
    paths: list[Path] = []
    for dist in dists:
        paths += [p for p in local_closure(dist) if p not in paths]
    extra = "" if TF_EXTRA == "none" or not tensorflow else f"[{TF_EXTRA}]"
    args = [f"{p}{extra}" for p in paths]
    if session.venv_backend == "uv":
        for path in paths:
            args += ["--reinstall-package", DISTS_BY_PATH[path]]
        session.install(*args)
    else:
        session.install(*args)
        session.install("--force-reinstall", "--no-deps", *map(str, paths))


DISTS_BY_PATH = {path: name for name, path in DISTS.items()}


def share_bytecode(session: nox.Session) -> int:
    """Link into this venv's bytecode cache what other venvs compiled from the same files.

    uv hard-links each installed file from its cache, so TensorFlow's sources in two venvs
    are one file on disk, and bytecode compiled from one is valid for the other (Python
    checks the source's size and time, and names the importing path in tracebacks). A
    file is shared only when both venvs' sources are the same inode; the rest is compiled
    on first import as usual. Without this, the first import in each session compiles
    TensorFlow again, in each pytest worker at once (12 s of CPU per process, not 4).

    Returns:
        How many files were linked.
    """
    prefix = Path(os.environ.get("PYTHONPYCACHEPREFIX", ""))
    venvs = PYCACHE / ROOT.relative_to(ROOT.anchor) / ".nox"
    if prefix != PYCACHE or not venvs.is_dir() or session.venv_backend == "none":
        return 0
    here = Path(session.virtualenv.location)
    linked = 0
    for site in here.glob("lib/python3*/site-packages"):
        rel_site = site.relative_to(here)
        mirror = PYCACHE / site.relative_to(site.anchor)
        for other in sorted(venvs.iterdir()):
            other_mirror = other / rel_site
            if other.name == here.name or not other_mirror.is_dir():
                continue
            other_site = Path(other.anchor) / other.relative_to(PYCACHE)
            linked += _link_bytecode(other_mirror, other_site / rel_site, mirror, site)
    if linked:
        session.log(f"linked {linked} compiled files from the other venvs' bytecode")
    return linked


def _link_bytecode(from_cache: Path, from_site: Path, to_cache: Path, to_site: Path) -> int:
    """Link each ``*.pyc`` under `from_cache` whose source is the same file in both sites."""
    linked = 0
    for folder, _, files in os.walk(from_cache):
        rel = Path(folder).relative_to(from_cache)
        for name in files:
            if not name.endswith(".pyc"):
                continue  # a compile in progress (Python renames it into place when done)
            source = rel / (name.split(".", 1)[0] + ".py")  # NAME.cpython-311[.opt-1].pyc
            target = to_cache / rel / name
            try:
                if target.exists() or not (to_site / source).samefile(from_site / source):
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(Path(folder) / name, target)
            except (FileNotFoundError, FileExistsError):
                continue
            linked += 1
    return linked


def without_keras3(session: nox.Session) -> None:
    """Remove Keras 3 (``keras``), which ``tensorflow-cpu`` installs, from the venv.

    When Keras 3 is installed, ``import tensorflow`` imports it at once (TensorFlow looks
    up ``keras._tf_keras`` at start-up), and Keras 3 imports scikit-learn and matplotlib
    when they are installed too: on a 2-core CI machine that is 4 s more CPU per Python
    process that imports TensorFlow, 11 s with both beside it, paid by every training
    script, server and rank that a test starts. No towerkit lib uses Keras 3; the
    `towers` session keeps it, as it tests how ``enable_tf_layers`` leaves ``tf.keras``,
    and so do the sessions with horovod, whose TensorFlow module imports ``tf.keras``
    (without Keras, horovodrun reports that gloo was not built).
    """
    if session.venv_backend == "uv":
        session.run(
            "uv", "pip", "uninstall", "--python", str(Path(session.bin) / "python"), "keras"
        )
    else:
        session.run("python", "-m", "pip", "uninstall", "-y", "keras")


def install_groups(session: nox.Session, *groups: str) -> None:
    """Install PEP 735 dependency groups from the root pyproject."""
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


def install_layers(session: nox.Session) -> None:
    """tf-keras, as the towers lib's ``layers`` extra declares it (the graph-mode layers)."""
    extras = nox.project.load_toml(DISTS["towerkit-towers"] / "pyproject.toml")["project"]
    session.install(*extras["optional-dependencies"]["layers"])


def install_layers_alone(session: nox.Session) -> None:
    """tf-keras for the venv's TensorFlow, without the ``tensorflow`` distribution it requires.

    tf-keras requires ``tensorflow`` of its own version; installed next to
    ``tensorflow-cpu`` it would change which distributions provide TensorFlow, and with
    them the horovod wheel-cache key (one more horovod build). The towers README gives
    users the same advice: pin tf-keras to the installed TensorFlow's major.minor.
    """
    code = (
        "import importlib.metadata as m\n"
        "for d in ('tensorflow-cpu', 'tensorflow'):\n"
        "    try:\n"
        "        print(m.version(d)); break\n"
        "    except m.PackageNotFoundError:\n"
        "        pass\n"
    )
    out = session.run("python", "-c", code, silent=True) or ""
    major, minor = out.strip().split(".")[:2]
    session.install("--no-deps", f"tf-keras~={major}.{minor}.0")


def pytest_env() -> dict[str, str]:
    """Quiet TensorFlow's C++ logging in test runs; oneDNN's kernels on every x86 CPU.

    TensorFlow turns its oneDNN kernels on by itself on Intel CPUs only; without them
    the CPU has no NCHW convolution or pooling, which the layers' tests run. Asking for
    them makes the tests run the same kernels on AMD and Intel machines.
    """
    return {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0", "TF_ENABLE_ONEDNN_OPTS": "1"}


PLUGINS = ROOT / "tests" / "plugins"
"""Where the tier guard (``towerkit_tiers``, loaded in every tiered run) lives."""

CI_REPORTS = ROOT / "reports" / "ci"
"""The JUnit reports of the pytest runs and the sessions' times (``ci_summary`` reads them)."""


def timed(func: Callable[..., None]) -> Callable[..., None]:
    """Record how long the session took in ``reports/ci/sessions.jsonl``, passed or not."""

    @functools.wraps(func)
    def wrapper(session: nox.Session, *args: Any, **kwargs: Any) -> None:
        start, cpu = time.time(), _children_cpu()
        outcome = "failed"
        try:
            func(session, *args, **kwargs)
            outcome = "passed"
        finally:
            if not getattr(session._runner.global_config, "install_only", False):
                CI_REPORTS.mkdir(parents=True, exist_ok=True)
                line = {"session": session.name, "seconds": round(time.time() - start, 1)}
                line |= {"cpu": round(_children_cpu() - cpu, 1)}
                line |= {"outcome": outcome, "ended": round(time.time(), 1)}
                with open(CI_REPORTS / "sessions.jsonl", "a", encoding="utf-8") as f:
                    f.write(json.dumps(line) + "\n")

    return wrapper


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's ended children and their children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _workers(variable: str, default: str) -> str:
    """A worker count from the environment (a number or ``auto``), else `default`."""
    value = os.environ.get(variable, default)
    if value != "auto" and not value.isdigit():
        raise ValueError(f"{variable} must be a number of workers or 'auto'; got {value!r}")
    return value


def test_workers() -> str:
    """pytest-xdist workers: one per core, at least 2 (see the module docstring)."""
    return _workers("TOWERKIT_TEST_WORKERS", str(max(2, os.cpu_count() or 1)))


def junit_failures(path: Path) -> int:
    """The failed and erroneous test cases of a JUnit report (0 when there is none)."""
    from xml.etree import ElementTree

    if not path.exists():
        return 0
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)


def run_tests(session: nox.Session, name: str, *args: str, env: dict[str, str]) -> None:
    """One parallel pytest run of `args`, both tiers (see the module docstring), reported.

    A run that selects no test (pytest's status 5) is not a failure: ``-m procs`` may
    select none in a lib. A run with failing tests fails the session, naming how many.
    The arguments after ``--`` are added.
    """
    junit = CI_REPORTS / "junit" / f"{name}.xml"
    junit.unlink(missing_ok=True)
    share_bytecode(session)
    session.run(
        "pytest",
        "-p",
        "towerkit_tiers",
        *args,
        "-n",
        test_workers(),
        "--dist",
        "loadgroup",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit2",
        "--durations=5",
        *session.posargs,
        env={**env, "PYTHONPATH": str(PLUGINS)},
        success_codes=[0, 1, 5],  # 1: tests failed; the report says which (below)
    )
    count = junit_failures(junit)
    if count:
        session.error(f"{name}: {count} tests failed; see the summary above")


HOROVOD_WHEELS = Path(
    os.environ.get("TOWERKIT_HOROVOD_WHEEL_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "towerkit"
    / "horovod-wheels"
)
"""Horovod wheels built here, keyed by TensorFlow version: each venv that needs horovod
installs from this cache, so a machine compiles horovod once."""


LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}
"""The environment of the sessions that run horovod: ``tf.keras`` is tf-keras, not Keras 3."""


def install_horovod(session: nox.Session) -> None:
    """Build (or take from the wheel cache) horovod with gloo into the session's venv."""
    session.run(
        "python",
        "-m",
        "towerkit.tools.install_horovod",
        "--python",
        str(Path(session.bin) / "python"),
        "--wheel-cache",
        str(HOROVOD_WHEELS),
        "--skip-verify",
        env=LEGACY_KERAS,
    )


def install_horovod_lean(session: nox.Session) -> None:
    """horovod, with tf-keras as ``tf.keras`` and without Keras 3 (run with `LEGACY_KERAS`).

    horovod's TensorFlow module imports ``tf.keras`` (where none can be imported, horovodrun
    reports that gloo was not built). With Keras 3 that import costs 8.5 s of CPU per
    process in these venvs (Keras 3 also imports scikit-learn and matplotlib when they are
    installed), with tf-keras 6 s: every rank, cluster task and pytest worker pays it.
    """
    install_layers_alone(session)
    install_horovod(session)
    without_keras3(session)


HOROVOD_TEST_PATHS = ("tools/tests", "libs/trainers/tests", "tests")
"""The test folders that hold ``horovod``-marked tests (`horovod` runs them in one pytest run)."""


@nox.session(tags=["ci"])
@timed
def horovod(session: nox.Session) -> None:
    """Build horovod (gloo) against the installed TensorFlow and run the 2-process tests.

    The graph-mode layers (tf-keras) and the demo group are installed too: the layers
    example's model is trained by horovod ranks in ``tests/test_layers_example.py``.
    """
    install_local(
        session, "towerkit-tools", "towerkit-conformance", *[f"towerkit-{lib}" for lib in LIBS]
    )
    install_groups(session, "test", "demo")
    install_horovod_lean(session)
    # One pytest run over the three folders that have horovod tests. Every horovod test
    # starts ranks, so all of them are the process tier.
    env = {**pytest_env(), **LEGACY_KERAS, "TOWERKIT_HOROVOD_WHEEL_CACHE": str(HOROVOD_WHEELS)}
    share_bytecode(session)
    session.run(
        "pytest",
        "-m",
        "horovod and not flake_gate",  # the flake gate's matrix runs there alone
        *HOROVOD_TEST_PATHS,
        "--ignore=tests/hosts",
        "--ignore=tests/slurm",  # the slurm session runs it (a real SLURM, as root)
        "-n",
        test_workers(),
        "--dist",
        "loadgroup",
        f"--junitxml={CI_REPORTS / 'junit' / 'horovod.xml'}",
        "--durations=5",
        *session.posargs,
        env=env,
    )


@nox.session(tags=["ci"])
@timed
def slurm(session: nox.Session) -> None:
    """Jobs under a real SLURM: munged, slurmctld and a slurmd on each of two simulated hosts.

    Needs root, like `hosts` (network namespaces, and the daemons run as root), and installs
    ``slurm-wlm``, ``munge``, openssh-server and iproute2 with apt-get when missing.
    ``tests/slurm`` reads srun's environment in every task of a 2-node step, runs the
    documented sbatch script (``examples/cluster/slurm.sbatch``) as a parameter server and
    chief and as 2 horovod ranks, preempts each mid-run (``scancel --signal=USR1``), checks
    that the job requeued itself and ended bit for bit as an unbroken run did, and that a
    failing job is not requeued; then every daemon and namespace is removed, whatever happened.
    """
    if os.geteuid() != 0:
        why = (
            "nox -s slurm needs root: it makes network namespaces, runs SLURM's daemons as"
            " root and installs slurm-wlm and munge; run it as root (CI does) or leave it out"
            " with nox -t ci -- and nox -s NAME for the others"
        )
        if os.environ.get("CI"):
            session.error(why)
        session.skip(why)
    needed = {
        "slurmctld": "slurm-wlm",
        "munged": "munge",
        "sshd": "openssh-server",
        "ip": "iproute2",
    }
    missing = sorted(
        {
            pkg
            for tool, pkg in needed.items()
            if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()
        }
    )
    if missing:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.run("apt-get", "update", "-q", external=True, env=env)
        session.run("apt-get", "install", "-y", "-q", *missing, external=True, env=env)
    install_local(session, "towerkit-tools", *[f"towerkit-{lib}" for lib in LIBS])
    install_groups(session, "test")
    install_horovod_lean(session)
    env = {**pytest_env(), **LEGACY_KERAS, "TOWERKIT_REQUIRE_SLURM": "1"}
    junit = f"--junitxml={CI_REPORTS / 'junit' / 'slurm.xml'}"
    share_bytecode(session)
    try:
        session.run("pytest", "tests/slurm", junit, "--durations=5", *session.posargs, env=env)
    finally:
        code = "import simhosts; print('removed:', simhosts.remove_stale())"
        session.run("python", "-c", code, env={"PYTHONPATH": str(ROOT / "tests" / "hosts")})


@nox.session(tags=["ci"])
@timed
def crosslib(session: nox.Session) -> None:
    """Tests that need several libs together (tools, examples, integration, README blocks)."""
    install_local(
        session, "towerkit-tools", "towerkit-conformance", *[f"towerkit-{lib}" for lib in LIBS]
    )
    install_groups(session, "test", "demo", "noxfile")
    install_layers_alone(session)
    without_keras3(session)
    paths = [p for p in ("tests", "tools/tests") if (ROOT / p).is_dir()]
    # The wheels are tested by `build`, the simulated hosts by `hosts`, SLURM by `slurm`.
    # The experiment trackers' tests run in `trackers`, where their packages are.
    ignore = [
        "--ignore=tests/test_wheels.py",
        "--ignore=tests/hosts",
        "--ignore=tests/slurm",
        *TRACKER_IGNORES,
    ]
    run_tests(session, "crosslib", *paths, *ignore, env=pytest_env())
    # The tools' doctests, apart: --doctest-modules over the test folders would import
    # the tensorpack programs they keep as test data.
    doctests = ("--doctest-modules", "--pyargs", "towerkit.tools")
    run_tests(session, "crosslib-doctests", *doctests, env=pytest_env())
    # The callbacks lib's tests that drive callbacks through a training loop run again,
    # the loop now being the real trainer (the others are the same test twice).
    env = {**pytest_env(), "TOWERKIT_CALLBACKS_DRIVER": "trainer", "TOWERKIT_ONLY_DRIVEN": "1"}
    run_tests(session, "crosslib-callbacks", "libs/callbacks/tests", env=env)


TRACKER_TESTS = (
    "tests/test_trackers_mlflow.py",
    "tests/test_trackers_wandb.py",
    "tests/test_trackers_hparams.py",
)
"""The tests of the experiment trackers' monitors against real trackers (`trackers` runs them)."""

TRACKER_IGNORES = [f"--ignore={path}" for path in TRACKER_TESTS]


@nox.session(tags=["ci"])
@timed
def trackers(session: nox.Session) -> None:
    """The experiment trackers' monitors against real trackers: MLflow, W&B offline, HParams.

    The callbacks lib's ``mlflow`` and ``wandb`` extras (never dependencies of a lib) and
    TensorBoard (to decode the HParams summaries with its own messages) are installed
    here only. A real MLflow tracking server (its own process, SQLite in a temporary
    folder) is started by the tests; W&B runs offline (``WANDB_MODE=offline``), so
    nothing leaves the machine. Under ``CI=true`` a missing package fails these tests
    rather than skipping them.
    """
    install_local(session, "towerkit-trainers")
    session.install(f"{DISTS['towerkit-callbacks']}[mlflow,wandb]", "tensorboard")
    install_groups(session, "test")
    without_keras3(session)
    env = {**pytest_env(), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    run_tests(session, "trackers", *TRACKER_TESTS, env=env)


def conformance_args(posargs: Sequence[str]) -> tuple[bool, list[str]]:
    """Whether ``nox -s conformance -- ARGS`` builds horovod, and the arguments for pytest.

    Horovod is built (minutes, the first time) for the built-in rows: with no
    ``--trainer``, or a ``--trainer`` naming a built-in row or ``builtin``. Rows of your
    own (``--trainer MODULE:ATTR``) run without it, unless ``--horovod`` asks for it (a
    trainer of yours that runs as a horovod job).

    Examples:
        >>> conformance_args(["--trainer", "pkg.mod:make", "-x"])
        (False, ['--trainer', 'pkg.mod:make', '-x'])
        >>> conformance_args(["--horovod", "--trainer=pkg.mod:make"])
        (True, ['--trainer=pkg.mod:make'])
        >>> conformance_args(["--trainer", "builtin", "--trainer", "pkg.mod:make"])[0]
        True
        >>> conformance_args([])
        (True, [])
    """
    args = [a for a in posargs if a != "--horovod"]
    targets = [
        b if a == "--trainer" else a.partition("=")[2]
        for a, b in zip(args, [*args[1:], ""])
        if a == "--trainer" or a.startswith("--trainer=")
    ]
    builtin = not targets or any(":" not in t for t in targets)
    return "--horovod" in posargs or builtin, args


@nox.session(tags=["ci"])
@timed
def conformance(session: nox.Session) -> None:
    """The documented semantics, run against every shipped trainer (or yours: -- --trainer mod:fn).

    Without --trainer, the suite's own tests and doctests run in the same pytest run. The
    JUnit report goes to reports/ci/junit/conformance.xml unless --conformance-report or --junitxml
    is given.
    """
    install_local(session, "towerkit-conformance", "towerkit-tools")
    install_groups(session, "test")
    with_horovod, args = conformance_args(session.posargs)
    if with_horovod:
        install_horovod_lean(session)
    if not any(a.startswith(("--conformance-report", "--junitxml")) for a in args):
        args += ["--conformance-report", str(CI_REPORTS / "junit" / "conformance.xml")]
    if any(a == "--trainer" or a.startswith("--trainer=") for a in args):
        targets = ["--pyargs", "towerkit.conformance.checks"]
    else:
        targets = ["conformance/tests", "--doctest-modules", "--pyargs", "towerkit.conformance"]
    # One run (the report is one file), in parallel: most trainers run in the worker's
    # process, the multi-process ones in jobs whose waits overlap with the others' work.
    workers = ("-n", test_workers(), "--dist", "loadgroup")
    share_bytecode(session)
    env = {**pytest_env(), **LEGACY_KERAS}
    session.run("pytest", *targets, *workers, "--durations=5", *args, env=env)


@nox.session(tags=["ci"])
@timed
def hosts(session: nox.Session) -> None:
    """Training across hosts, simulated: network namespaces on a bridge, sshd in each.

    Needs root (namespaces) and installs openssh-server and iproute2 with apt-get when
    ``sshd`` or ``ip`` is missing. ``tests/hosts`` makes three namespaces (``10.213.0.1-3``, an ssh server
    each, the file system shared as the hosts' disk), runs horovod jobs and TF-cluster
    jobs across them, kills ranks and cuts links, and removes every namespace, the
    bridge and the ssh servers whatever happens (and leftovers of an earlier run
    whose process is gone).
    """
    if os.geteuid() != 0:
        why = (
            "nox -s hosts needs root: it makes network namespaces and a bridge, and installs"
            " openssh-server and iproute2; run it as root (CI does) or leave it out with"
            " nox -t ci -- and nox -s NAME for the others"
        )
        if os.environ.get("CI"):
            session.error(why)
        session.skip(why)
    if not Path("/usr/sbin/sshd").exists() or shutil.which("ip") is None:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.run("apt-get", "update", "-q", external=True, env=env)
        session.run(
            "apt-get", "install", "-y", "-q", "openssh-server", "iproute2", external=True, env=env
        )
    install_local(session, "towerkit-tools", *[f"towerkit-{lib}" for lib in LIBS])
    install_groups(session, "test")
    install_horovod_lean(session)
    env = {**pytest_env(), **LEGACY_KERAS, "TOWERKIT_REQUIRE_HOSTS": "1"}
    junit = f"--junitxml={CI_REPORTS / 'junit' / 'hosts.xml'}"
    share_bytecode(session)
    try:
        # One at a time: the simulated hosts have fixed addresses on one bridge.
        session.run("pytest", "tests/hosts", junit, "--durations=5", *session.posargs, env=env)
    finally:
        code = "import simhosts; print('removed:', simhosts.remove_stale())"
        session.run("python", "-c", code, env={"PYTHONPATH": str(ROOT / "tests" / "hosts")})


@nox.session(tags=["ci"])
@nox.parametrize("lib", [nox.param(lib, id=lib) for lib in TESTS_ORDER])
@timed
def tests(session: nox.Session, lib: str) -> None:
    """One lib's tests and doctests, in a venv with only that lib and its declared dependencies."""
    install_local(session, f"towerkit-{lib}")
    install_groups(session, "test")
    if lib == "towers":
        install_layers(session)
    else:
        without_keras3(session)
    # Callbacks are driven by the lib's small test loop here (the trainers lib is not in
    # this venv); crosslib runs the same tests with the real trainer.
    env = (
        {**pytest_env(), "TOWERKIT_CALLBACKS_DRIVER": "loop"}
        if lib == "callbacks"
        else pytest_env()
    )
    targets = (f"libs/{lib}/tests", "--doctest-modules", "--pyargs", f"towerkit.{lib}")
    run_tests(session, f"tests-{lib}", *targets, env=env)


@nox.session(tags=["ci"])
@timed
def layers_parity(session: nox.Session) -> None:
    """towerkit.layers against tensorpack 0.11, layer by layer, and a tensorpack checkpoint.

    tensorpack 0.11 is the behavioural oracle of the layers lib, installed here only
    (never a dependency of a lib), with tf-keras pinned to the venv's TensorFlow for
    its ``tf.layers``. ``libs/layers/parity`` builds every layer with both libraries
    and compares variables, collections, outputs, gradients and updates, and restores
    a checkpoint written by tensorpack's trainer into the same model built with
    towerkit.layers.
    """
    install_local(session, "towerkit-layers", "towerkit-sessinit")
    install_groups(session, "test")
    install_layers_alone(session)
    session.install("tensorpack==0.11")
    without_keras3(session)
    env = {**pytest_env(), "TF_USE_LEGACY_KERAS": "1"}
    run_tests(session, "layers_parity", "libs/layers/parity", env=env)


@nox.session(tags=["ci"])
@timed
def tensorpack_dataflows(session: nox.Session) -> None:
    """tensorpack 0.11's own DataFlows under ``ParallelIterable``, beside its own runner.

    ``tests/test_parallel_dataflows.py`` (skipped where tensorpack is missing, as in
    `crosslib`): ``MapData`` over ``DataFromList`` and an ``RNGDataFlow`` get a copy per
    worker, and ``MultiProcessRunnerZMQ`` over the same flow gives passes of the same
    size. tensorpack is installed here only, never as a dependency of a lib.
    """
    install_local(session, "towerkit-callbacks")
    install_groups(session, "test")
    install_layers_alone(session)  # tf-keras: tensorpack's import reads tf.layers
    session.install("tensorpack==0.11")
    without_keras3(session)
    env = {**pytest_env(), "TF_USE_LEGACY_KERAS": "1"}
    run_tests(session, "tensorpack_dataflows", "tests/test_parallel_dataflows.py", env=env)


DIST = ROOT / "dist"
"""Where `build` writes the sdists and wheels."""


@nox.session(tags=["ci"])
@timed
def build(session: nox.Session) -> None:
    """An sdist and a wheel of every lib, conformance and tools into dist/, then checked.

    twine checks the metadata (the README renders as the long description); the
    wheels' tests check contents (``py.typed``), metadata against each pyproject, and
    that each wheel installs alone into a fresh venv from dist/ plus the index, imports,
    and (for the tools) answers --help, and fails in one line without TensorFlow.
    """
    install_groups(session, "test", "build")
    for old in DIST.glob("towerkit_*"):
        old.unlink()
    for path in DISTS.values():
        session.run("uv", "build", "-q", "--sdist", "--wheel", "--out-dir", str(DIST), str(path))
    built = sorted(str(p) for p in DIST.glob("towerkit_*"))
    session.run("twine", "check", "--strict", *built)
    env = {**pytest_env(), "TOWERKIT_DIST": str(DIST)}
    run_tests(session, "build", "tests/test_wheels.py", env=env)


TYPED = [*LIBS, "conformance", "tools"]
"""What `typecheck` runs mypy on (``strict``, from the root pyproject)."""


@nox.session(tags=["lint", "ci"])
@timed
def typecheck(session: nox.Session) -> None:
    """mypy --strict on every lib, conformance and the tools, as installed, in one venv.

    Each distribution is installed (not editable) and checked as a package of the venv,
    so a lib is checked against the installed code of the libs it imports, as users get it.
    """
    install_local(session, *[f"towerkit-{lib}" for lib in TYPED])
    install_groups(session, "typecheck")
    packages = [arg for lib in TYPED for arg in ("-p", f"towerkit.{lib}")]
    session.run("mypy", *packages, *session.posargs)


CORE_MODULES = [
    "_loop",
    "_triggers",
    "_schedules",
    "_stats",
    "_console",
    "_timeline",
    "_inference_stats",
    "_inference_partials",
    "_pruning",
    "_best_k",
    "_timer",
    "_stats_file",
    "_paths",
    "_lazy",
    "_tracking_core",
]
"""The callbacks lib's functional core: its doctests run in the `core` session too."""


@nox.session(tags=["ci"])
@timed
def core(session: nox.Session) -> None:
    """The functional core and the timeline tool, in a venv with every lib but no TensorFlow."""
    install_local(session, "towerkit-tools", tensorflow=False)
    install_groups(session, "test")
    session.run(
        "python",
        "-c",
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorflow') and"
        " 'this venv must not hold TensorFlow')",
    )
    modules = [f"towerkit.callbacks.{m}" for m in CORE_MODULES]
    doctests = ("--doctest-modules", "--pyargs", *modules)
    run_tests(session, "core", "tests/test_core_without_tensorflow.py", *doctests, env=pytest_env())


LINT_TARGETS = [
    *[f"libs/{lib}" for lib in LIBS],
    "conformance",
    "tools",
    "examples",
    "benchmarks",
    "tests",
    "noxfile.py",
]
"""What `lint` checks: every lib, conformance, the tools and the rest of the tree."""


@nox.session(tags=["lint", "ci"])
@timed
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check on the whole tree, in one environment."""
    install_groups(session, "lint")
    session.run("ruff", "check", *LINT_TARGETS, *session.posargs)
    session.run("ruff", "format", "--check", *LINT_TARGETS)


DEMO_DEFAULTS = ("--logdir", "train_log/digits", "--overwrite")
"""The demo's arguments; those after `--` are added (a later --logdir wins), never replace them."""


def demo_args(posargs: list[str]) -> list[str]:
    """The demo script's arguments for `nox -s demo -- POSARGS`: the defaults, then POSARGS."""
    return [*DEMO_DEFAULTS, *posargs]


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The main job: train a small convnet on scikit-learn's digits, export it, plot it."""
    install_local(session, "towerkit-tools", *[f"towerkit-{lib}" for lib in LIBS])
    install_groups(session, "demo")
    args = demo_args(session.posargs)  # `nox -s demo -- -v` keeps --overwrite
    session.run("python", "examples/digits/train.py", *args, env={"TF_CPP_MIN_LOG_LEVEL": "2"})


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Every benchmark, one Markdown report (default reports/bench.md; -- --out PATH to choose)."""
    install_local(session, "towerkit-tools", *[f"towerkit-{lib}" for lib in LIBS])
    install_groups(session, "bench")
    install_layers_alone(session)  # tf-keras: the tf.layers and tf.nn.rnn_cell baselines
    # tensorpack's MultiProcessRunnerZMQ, a peer of the parallel-input benchmark (never a
    # dependency of a lib); Keras 3, the other peer, comes with tensorflow-cpu.
    session.install("tensorpack==0.11")
    install_horovod(session)
    args = session.posargs or ["--out", "reports/bench.md"]
    session.run("python", "benchmarks/run_all.py", *args, env={"TF_CPP_MIN_LOG_LEVEL": "2"})


RECIPE = ROOT / "examples" / "mnist1d" / "train.py"
"""MNIST-1D's table: the paper's models in towerkit and in Keras 3 (``recipes``)."""

RECIPE_OUT = ROOT / "examples" / "mnist1d" / "results"
"""Where ``nox -s recipes`` writes the table, the runs and the figures (the README shows them)."""


def install_recipes(session: nox.Session) -> None:
    """The libs the recipes train with, Keras 3 (their reference) and the data's generator."""
    install_local(session, *[f"towerkit-{lib}" for lib in LIBS])
    install_groups(session, "recipes")


@nox.session(default=False)
def recipes(session: nox.Session) -> None:
    """MNIST-1D's published table, towerkit beside Keras 3, 3 seeds (about an hour on 2 loaded cores).

    Arguments after ``--`` go to the script (``-- --seeds 0 1 2 3 4``, ``--models cnn``,
    ``--out DIR``); the defaults rewrite ``examples/mnist1d/results``.
    """
    install_recipes(session)
    args = session.posargs or ["--out", str(RECIPE_OUT)]
    session.run("python", str(RECIPE), *args, env={"TF_CPP_MIN_LOG_LEVEL": "2"})


@nox.session(tags=["ci"])
@timed
def recipes_check(session: nox.Session) -> None:
    """The recipes' pipeline, short: one seed, 80 steps, every model, both frameworks, every file.

    It checks that the table, the runs and the figures are written and complete, not the
    accuracy (that takes ``nox -s recipes``); about 30 s of CPU besides the install.
    """
    install_recipes(session)
    share_bytecode(session)
    out = Path(session.create_tmp()) / "mnist1d"
    session.run("python", str(RECIPE), "--check", "--out", str(out), env=pytest_env())


FLAKE_GATE_TESTS = (
    "libs/trainers/tests/test_cluster_faults.py",
    "libs/trainers/tests/test_elastic.py::test_rank_killed_mid_epoch",
    "libs/trainers/tests/test_horovod.py",
    "libs/trainers/tests/test_phase_faults.py",
)
"""The process fault tests the flake gate repeats: a task or rank killed, frozen or lost.

Tests marked ``flake_gate`` (the phase x task x fault matrix) run here alone: the tier
plugin deselects them unless ``TOWERKIT_FLAKE_GATE=1``, which this session sets.
"""

FLAKE_GATE_HOSTS = ("tests/hosts/test_cluster_hosts.py", "tests/hosts/test_elastic_hosts.py")
"""Its fault tests on simulated hosts (fixed addresses: one at a time, root only)."""

FLAKE_REPORTS = ROOT / "reports" / "flake"
"""Where the flake gate's JUnit reports go, one per run and group."""


def pass_counts(reports: list[Path]) -> dict[str, tuple[int, int]]:
    """``{test: (passed, ran)}`` over JUnit reports: a skipped case is not a run.

    A case ran when its report has it, passed or failed (or erred); one a run did not
    reach at all (its run was stopped) counts as nothing there.
    """
    from xml.etree import ElementTree

    counts: dict[str, tuple[int, int]] = {}
    for path in reports:
        for case in ElementTree.parse(path).getroot().iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            outcomes = {child.tag for child in case}
            if "skipped" in outcomes:
                continue
            passed, ran = counts.get(name, (0, 0))
            ok = not outcomes & {"failure", "error"}
            counts[name] = (passed + int(ok), ran + 1)
    return counts


def flake_gate_args(posargs: list[str]) -> tuple[int, list[str]]:
    """``(runs, tests)`` of ``nox -s flake_gate -- [--runs N] [TEST ...]`` (20 runs, the gate's tests)."""
    args = list(posargs)
    runs = 20
    if "--runs" in args:
        at = args.index("--runs")
        value = args[at + 1] if at + 1 < len(args) else ""
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"--runs takes a number of runs >= 1; got {value!r}")
        runs = int(value)
        del args[at : at + 2]
    return runs, args


@nox.session(default=False)
def flake_gate(session: nox.Session) -> None:
    """The process fault tests N times, two at a time; each test's pass count, all N or fail.

    ``nox -s flake_gate -- --runs 20`` (the default) repeats `FLAKE_GATE_TESTS` (the cluster,
    horovod and elastic fault tests), each run one pytest run over two workers, and then,
    as root, the simulated hosts' fault tests one at a time (`FLAKE_GATE_HOSTS`). Tests
    named after ``--runs N`` replace the lists. A failing run does not stop the gate:
    every run's JUnit report (``reports/flake/``) counts, and the session fails unless
    every test passed every time it ran. Not part of ``nox -t ci``: 20 runs take hours.
    """
    try:
        runs, chosen = flake_gate_args(session.posargs)
    except ValueError as err:
        session.error(str(err))
    install_local(
        session, "towerkit-tools", "towerkit-conformance", *[f"towerkit-{lib}" for lib in LIBS]
    )
    install_groups(session, "test")
    install_horovod_lean(session)
    share_bytecode(session)
    env = {**pytest_env(), **LEGACY_KERAS, "TOWERKIT_HOROVOD_WHEEL_CACHE": str(HOROVOD_WHEELS)}
    env["TOWERKIT_FLAKE_GATE"] = "1"  # the tier plugin, where loaded, keeps them otherwise
    groups = [("procs", list(chosen or FLAKE_GATE_TESTS), ["-n", "2"])]
    if not chosen and os.geteuid() == 0:
        groups.append(("hosts", list(FLAKE_GATE_HOSTS), ["-p", "no:xdist"]))
    shutil.rmtree(FLAKE_REPORTS, ignore_errors=True)
    FLAKE_REPORTS.mkdir(parents=True)
    reports = []
    for run in range(1, runs + 1):
        for name, tests, workers in groups:
            report = FLAKE_REPORTS / f"{name}-{run:03d}.xml"
            session.log(f"flake gate: run {run} of {runs}, {name}")
            session.run(
                "pytest", *tests, *workers, "-p", "no:cacheprovider", "-q",
                f"--junitxml={report}", env=env, success_codes=[0, 1],
            )  # fmt: skip
            if report.exists():
                reports.append(report)
    counts = pass_counts(reports)
    print(f"\neach test's passes over {runs} runs:")
    for test, (passed, ran) in sorted(counts.items()):
        print(f"{passed:4d} of {ran:4d}  {test}")
    short = [t for t, (passed, ran) in counts.items() if passed < runs or ran < runs]
    if short:
        session.error(f"flake gate: {len(short)} tests passed fewer than {runs} of {runs} runs")


@nox.session(tags=["ci"], venv_backend="none", allow_parallel=False)
def ci_summary(session: nox.Session) -> None:
    """The 25 slowest tests of the last run and each session's time (last in ``nox -t ci``).

    Reads the JUnit reports under ``reports/ci/junit/`` and ``reports/ci/sessions.jsonl``;
    needs no virtual environment.
    """
    del session
    from xml.etree import ElementTree

    cases: list[tuple[float, str]] = []
    for xml in sorted((CI_REPORTS / "junit").glob("*.xml")):
        for case in ElementTree.parse(xml).iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            cases.append((float(case.get("time") or 0), f"{xml.stem}: {name}"))
    cases.sort(reverse=True)
    print(f"\n{len(cases)} test cases reported; the 25 slowest:")
    for seconds, name in cases[:25]:
        print(f"{seconds:8.1f} s  {name}")
    latest: dict[str, dict[str, Any]] = {}
    path = CI_REPORTS / "sessions.jsonl"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            latest[entry["session"]] = entry
    print("\neach session's last time (wall; CPU of its processes):")
    for entry in sorted(latest.values(), key=lambda e: e["ended"]):
        cpu = f"{entry['cpu']:8.1f} s CPU" if "cpu" in entry else " " * 14
        print(f"{entry['seconds']:8.1f} s {cpu}  {entry['session']} ({entry['outcome']})")
    total_cpu = sum(e.get("cpu", 0.0) for e in latest.values())
    print(f"{sum(e['seconds'] for e in latest.values()):8.1f} s {total_cpu:8.1f} s CPU  in all")
    if latest:
        first = min(e["ended"] - e["seconds"] for e in latest.values())
        last = max(e["ended"] for e in latest.values())
        print(f"{last - first:8.1f} s from the first session's start to the last one's end")


if __name__ == "__main__":
    nox.main()
