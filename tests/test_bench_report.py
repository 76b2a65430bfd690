"""The benchmark report: run_all.py runs a benchmark and writes the Markdown report."""

from __future__ import annotations

import doctest
import importlib.util
import json
import subprocess
import sys

import pytest
from example_modules import ROOT

pytestmark = [
    pytest.mark.procs,
    pytest.mark.timeout(600),
]  # timeout: runs the benchmarks' smallest configuration

RUN_ALL = ROOT / "benchmarks" / "run_all.py"


def load_script(path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_run_all():
    return load_script(RUN_ALL)


@pytest.mark.parametrize(
    "script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")), ids=str
)
def test_doctests(script):
    """The examples in each benchmark script's docstrings hold."""
    module = load_script(ROOT / "benchmarks" / script)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 1, f"{script} has no examples"
    assert result.failed == 0


def test_every_area_has_a_readme_row():
    """benchmarks/README.md's table lists every area run_all.py runs, with its script."""
    readme = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    missing = [
        area
        for area, bench in load_run_all().BENCHES.items()
        if f"| {area} | `{bench['script']}` |" not in readme
    ]
    assert not missing, f"areas without a row in benchmarks/README.md: {missing}"


def test_missing_script_is_reported(tmp_path):
    """An area whose script is absent is listed as not run, in the summary and its section."""
    run_all = load_run_all()
    machine = run_all.machine_info()
    text = run_all.render_report(
        machine,
        {"scaling": {"status": "missing", "reason": "benchmarks/x.py does not exist"}},
        1.0,
        False,
    )
    assert "| scaling | benchmarks/x.py does not exist |" in text
    assert "not run: benchmarks/x.py does not exist." in text
    assert f"| CPU | {machine['cpu']} |" in text


def test_bad_arguments(tmp_path, capsys):
    """Unknown areas and a missing output directory are refused."""
    run_all = load_run_all()
    with pytest.raises(SystemExit):
        run_all.main(["--out", str(tmp_path / "r.md"), "--only", "speed"])
    assert "unknown areas ['speed']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_all.main(["--out", str(tmp_path / "no" / "r.md")])
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_restore_report(tmp_path):
    """A quick run of one area writes the report with the machine, the summary and its table."""
    out, raw = tmp_path / "report.md", tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            str(RUN_ALL),
            "--out",
            str(out),
            "--json",
            str(raw),
            "--only",
            "restore",
            "--quick",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    for heading in ("## Machine", "## Method", "## Summary", "## Restore"):
        assert heading in text
    assert "| TensorFlow | " in text
    assert "| restore | SaverRestore restore time |" in text
    assert "| SaverRestore |" in text
    doc = json.loads(raw.read_text())
    assert doc["results"]["restore"]["status"] == "ok"
    cases = [r["case"] for r in doc["results"]["restore"]["data"]["results"]]
    assert cases[0] == "Saver.restore"


@pytest.mark.slow
def test_rnn_floor(tmp_path):
    """bench_rnn --floor times the matrix products alone; the report gives the baseline's share."""
    raw = tmp_path / "rnn.json"
    script = ROOT / "benchmarks" / "bench_rnn.py"
    args = ["--model", "gru", "--repeats", "1", "--steps", "2", "--warmup", "1", "--floor"]
    done = subprocess.run(
        [sys.executable, str(script), *args, "--out", str(raw)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| matrix products (floor) | " in done.stdout
    assert "tf.nn.rnn_cell reaches " in done.stdout
    data = json.loads(raw.read_text())
    assert len(data["runs"]["matrix products"]) == 1
    shares = data["floor_shares"]
    assert shares["steps/s"] > 0
    assert shares["cpu"] > 0
    rows = load_run_all().headlines("rnn-gru", data)
    (row,) = [r for r in rows if "floor" in r[0]]
    assert row[1] == f"{shares['cpu']:.2f}"
    assert row[2] == f"at most {1 / shares['cpu']:.2f}x"
