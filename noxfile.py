# /// script
# dependencies = ["nox>=2025.2.9"]
# ///
"""Every way to run towerkit: tests, conformance, lint, typecheck, build, demo, bench, horovod.

Each lib's tests run in a virtual environment holding only that lib, the
towerkit libs it declares, and their dependencies: a missing declaration fails
here. `nox -t ci` is what CI runs.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")

LIBS = ["sessinit", "towers", "callbacks", "trainers", "export", "layers"]
"""The libs in dependency order: each depends only on libs before it."""

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
    """Quiet TensorFlow's C++ logging in test runs."""
    return {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0"}


@nox.session(tags=["ci"])
@nox.parametrize("lib", [nox.param(lib, id=lib) for lib in LIBS])
def tests(session: nox.Session, lib: str) -> None:
    """One lib's tests and doctests, in a venv with only that lib and its declared dependencies."""
    install_local(session, f"towerkit-{lib}")
    install_groups(session, "test")
    if lib == "towers":
        install_layers(session)
    # Callbacks are driven by the lib's small test loop here (the trainers lib is not in
    # this venv); crosslib runs the same tests with the real trainer.
    env = (
        {**pytest_env(), "TOWERKIT_CALLBACKS_DRIVER": "loop"}
        if lib == "callbacks"
        else pytest_env()
    )
    session.run(
        "pytest",
        f"libs/{lib}/tests",
        "--doctest-modules",
        "--pyargs",
        f"towerkit.{lib}",
        *session.posargs,
        env=env,
    )


@nox.session(tags=["ci"])
def crosslib(session: nox.Session) -> None:
    """Tests that need several libs together (tools, examples, integration, README blocks)."""
    install_local(
        session, "towerkit-tools", "towerkit-conformance", *[f"towerkit-{lib}" for lib in LIBS]
    )
    install_groups(session, "test", "demo", "noxfile")
    install_layers(session)
    paths = [p for p in ("tests", "tools/tests") if (ROOT / p).is_dir()]
    # The wheels are tested by `build`, the simulated hosts by `hosts`.
    ignore = ["--ignore=tests/test_wheels.py", "--ignore=tests/hosts"]
    session.run("pytest", *paths, *ignore, *session.posargs, env=pytest_env())
    session.run("pytest", "--doctest-modules", "--pyargs", "towerkit.tools", env=pytest_env())
    # The callbacks lib's tests again, each callback now driven by the real trainer.
    env = {**pytest_env(), "TOWERKIT_CALLBACKS_DRIVER": "trainer"}
    session.run("pytest", "libs/callbacks/tests", *session.posargs, env=env)


CORE_MODULES = [
    "_loop",
    "_triggers",
    "_schedules",
    "_stats",
    "_console",
    "_timeline",
    "_inference_stats",
    "_pruning",
    "_stats_file",
    "_paths",
]
"""The callbacks lib's functional core: its doctests run in the `core` session too."""


@nox.session(tags=["ci"])
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
    session.run("pytest", "tests/test_core_without_tensorflow.py", *session.posargs)
    session.run("pytest", "--doctest-modules", "--pyargs", *modules, env=pytest_env())


DIST = ROOT / "dist"
"""Where `build` writes the sdists and wheels."""


@nox.session(tags=["ci"])
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
    session.run("pytest", "tests/test_wheels.py", *session.posargs, env=env)


LINT_TARGETS = {
    **{lib: [f"libs/{lib}"] for lib in LIBS},
    "conformance": ["conformance"],
    "tools": ["tools"],
    "rest": ["examples", "benchmarks", "tests", "noxfile.py"],
}


@nox.session(tags=["lint", "ci"])
@nox.parametrize("target", [nox.param(t, id=t) for t in LINT_TARGETS])
def lint(session: nox.Session, target: str) -> None:
    """ruff check and ruff format --check on one lib (or the tools, conformance, the rest)."""
    install_groups(session, "lint")
    session.run("ruff", "check", *LINT_TARGETS[target])
    session.run("ruff", "format", "--check", *LINT_TARGETS[target])


TYPED = [*LIBS, "conformance", "tools"]
"""What `typecheck` runs mypy on (``strict``, from the root pyproject)."""


@nox.session(tags=["lint", "ci"])
@nox.parametrize("lib", [nox.param(lib, id=lib) for lib in TYPED])
def typecheck(session: nox.Session, lib: str) -> None:
    """mypy on one lib (or conformance, tools), against the installed distribution."""
    install_local(session, f"towerkit-{lib}")
    install_groups(session, "typecheck")
    session.run("mypy", "-p", f"towerkit.{lib}")


HOROVOD_WHEELS = Path(
    os.environ.get("TOWERKIT_HOROVOD_WHEEL_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "towerkit"
    / "horovod-wheels"
)
"""Horovod wheels built here, keyed by TensorFlow version: each venv that needs horovod
installs from this cache, so a machine compiles horovod once."""


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
    )


@nox.session(tags=["ci"])
def conformance(session: nox.Session) -> None:
    """The documented semantics, run against every shipped trainer (or yours: -- --trainer mod:fn).

    Without --trainer, the suite's own tests and doctests run in the same pytest run. The
    JUnit report goes to reports/conformance.xml unless --conformance-report or --junitxml
    is given.
    """
    install_local(session, "towerkit-conformance", "towerkit-tools")
    install_groups(session, "test")
    install_horovod(session)
    args = list(session.posargs)
    if not any(a.startswith(("--conformance-report", "--junitxml")) for a in args):
        args += ["--conformance-report", str(ROOT / "reports" / "conformance.xml")]
    if any(a == "--trainer" or a.startswith("--trainer=") for a in args):
        targets = ["--pyargs", "towerkit.conformance.checks"]
    else:
        targets = ["conformance/tests", "--doctest-modules", "--pyargs", "towerkit.conformance"]
    session.run("pytest", *targets, *args, env=pytest_env())


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
    install_horovod(session)
    args = session.posargs or ["--out", "reports/bench.md"]
    session.run("python", "benchmarks/run_all.py", *args, env={"TF_CPP_MIN_LOG_LEVEL": "2"})


@nox.session(tags=["ci"])
def horovod(session: nox.Session) -> None:
    """Build horovod (gloo) against the installed TensorFlow and run the 2-process tests.

    The graph-mode layers (tf-keras) and the demo group are installed too: the layers
    example's model is trained by horovod ranks in ``tests/test_layers_example.py``.
    """
    install_local(
        session, "towerkit-tools", "towerkit-conformance", *[f"towerkit-{lib}" for lib in LIBS]
    )
    install_groups(session, "test", "demo")
    install_layers_alone(session)
    install_horovod(session)
    # One pytest run per folder: each test folder imports its own helpers by bare name.
    env = {**pytest_env(), "TOWERKIT_HOROVOD_WHEEL_CACHE": str(HOROVOD_WHEELS)}
    for path in ("tools/tests", "libs/trainers/tests", "tests"):
        session.run(
            "pytest", "-m", "horovod", path, "--ignore=tests/hosts", *session.posargs, env=env
        )


@nox.session(tags=["ci"])
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
        session.error("nox -s hosts needs root: it makes network namespaces and a bridge")
    if not Path("/usr/sbin/sshd").exists() or shutil.which("ip") is None:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.run("apt-get", "update", "-q", external=True, env=env)
        session.run(
            "apt-get", "install", "-y", "-q", "openssh-server", "iproute2", external=True, env=env
        )
    install_local(session, "towerkit-tools", *[f"towerkit-{lib}" for lib in LIBS])
    install_groups(session, "test")
    install_horovod(session)
    env = {**pytest_env(), "TOWERKIT_REQUIRE_HOSTS": "1"}
    try:
        session.run("pytest", "tests/hosts", *session.posargs, env=env)
    finally:
        code = "import simhosts; print('removed:', simhosts.remove_stale())"
        session.run("python", "-c", code, env={"PYTHONPATH": str(ROOT / "tests" / "hosts")})


@nox.session(tags=["ci"])
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
    env = {**pytest_env(), "TF_USE_LEGACY_KERAS": "1"}
    session.run("pytest", "libs/layers/parity", *session.posargs, env=env)


if __name__ == "__main__":
    nox.main()
