"""The restore benchmark script runs end to end on a tiny model and reports every case."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_restore.py"


def _load():
    if not SCRIPT.is_file():
        pytest.skip(f"the benchmark script {SCRIPT} is not part of this checkout (sdist)")
    spec = importlib.util.spec_from_file_location("bench_restore", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestBenchRestore:
    """`benchmarks/bench_restore.py`."""

    def test_tiny_run(self, tmp_path, capsys):
        """A 1 MiB run times every case and writes JSON and a Markdown table."""
        bench = _load()
        out = tmp_path / "restore.json"
        code = bench.main(
            [
                "--size-mb",
                "1",
                "--num-vars",
                "30",
                "--repeats",
                "1",
                "--warmup",
                "1",
                "--dir",
                str(tmp_path / "files"),
                "--out",
                str(out),
            ]
        )
        assert code == 0
        record = json.loads(out.read_text())
        cases = [r["case"] for r in record["results"]]
        assert cases == [
            "Saver.restore",
            "SaverRestore",
            "SaverRestoreRelaxed",
            "DictRestore",
            "SmartInit(npz)",
        ]
        assert all(r["median_s"] > 0 and r["mb_per_s"] > 0 for r in record["results"])
        table = capsys.readouterr().out
        assert "| SaverRestore |" in table
        assert "x Saver.restore" in table

    def test_shapes(self):
        """Variable shapes add up to the requested size."""
        bench = _load()
        shapes = bench.variable_shapes(4, 100)
        total = sum(int(__import__("numpy").prod(s)) for s in shapes) * 4
        assert len(shapes) == 100
        assert abs(total - 4 * 2**20) < 4 * 100 * 64

    def test_fail(self, capsys):
        """Non-positive sizes are rejected by the command line."""
        bench = _load()
        with pytest.raises(SystemExit):
            bench.main(["--size-mb", "0"])
        assert "--size-mb, --num-vars and --repeats must be > 0" in capsys.readouterr().err
