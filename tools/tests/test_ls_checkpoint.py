"""Tests of ls-checkpoint and the variable helpers behind it, on real checkpoints and npz files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from forged_npz import header, npy_bytes, write_bomb, write_npz
from hypothesis import given
from hypothesis import strategies as st

from towerkit.tools._files import ToolError
from towerkit.tools._vars import (
    compile_patterns,
    format_bytes,
    is_npz,
    itemsize,
    select_names,
    var_bytes,
)
from towerkit.tools.ls_checkpoint import main, render_listing, rows_of, verified_line

NAMES = st.lists(st.from_regex(r"[a-z]{1,3}(/[a-zA-Z0-9_]{1,4}){0,2}", fullmatch=True), max_size=8)


class TestSelectNames:
    """Selection by include and exclude regexes."""

    @given(NAMES)
    def test_no_patterns_keeps_all(self, names):
        """Without patterns every name is kept, in order."""
        assert select_names(names) == names

    @given(NAMES, st.sampled_from(["W", "^a", "b$", "/"]))
    def test_include_exclude_partition(self, names, pattern):
        """Including and excluding the same regex split the names in two."""
        pat = [re.compile(pattern)]
        kept, dropped = select_names(names, include=pat), select_names(names, exclude=pat)
        assert sorted(kept + dropped) == sorted(names)
        assert not set(kept) & set(dropped)

    def test_invalid_patterns_all_named(self):
        """Every invalid regex is named."""
        with pytest.raises(
            ToolError,
            match=r"--exclude has invalid regular expressions: '\(' \(missing \).*, '\[' \(unterminated",
        ):
            compile_patterns(["(", "ok", "["], "--exclude")


class TestSizes:
    """Bytes per dtype and per variable."""

    @given(
        st.lists(st.integers(0, 50), max_size=4),
        st.sampled_from(["float32", "int64", "uint8", "float16"]),
    )
    def test_var_bytes_matches_numpy(self, shape, dtype):
        """var_bytes equals the nbytes of a NumPy array of that shape and dtype."""
        assert var_bytes(tuple(shape), dtype) == np.zeros(shape, dtype=dtype).nbytes

    def test_unknown_sizes(self):
        """Strings and unknown dimensions have no size."""
        assert (itemsize("string"), var_bytes((None, 3), "float32")) == (None, None)

    @given(st.integers(0, 2**50))
    def test_format_bytes_units(self, n):
        """format_bytes keeps the number below 1024 of its unit."""
        text = format_bytes(n)
        number, unit = text.split(" ")
        assert unit in ("B", "KiB", "MiB", "GiB", "TiB")
        assert float(number) < 1024 or unit == "TiB"

    def test_is_npz_by_content(self, npz_file, tmp_path):
        """An npz file renamed without its suffix is still recognised."""
        renamed = tmp_path / "params.bin"
        renamed.write_bytes(npz_file.read_bytes())
        assert (is_npz(str(renamed)), is_npz(str(tmp_path))) == (True, False)


class TestRender:
    """The listing's rows and text."""

    def test_rows_of_and_totals(self):
        """Rows carry elements and bytes; the last line totals them."""
        from towerkit.sessinit import VarInfo

        rows = rows_of(
            [
                VarInfo(name="a", shape=(2, 3), dtype="float64"),
                VarInfo(name="s", shape=(2,), dtype="string"),
            ]
        )
        text = render_listing(rows)
        assert (rows[0]["bytes"], rows[1]["bytes"]) == (48, None)
        assert text.splitlines()[-1] == "2 variables, 8 elements, 48 B (+ 1 of unknown size)"


class TestMain:
    """The command line on real files."""

    def test_checkpoint_listing(self, checkpoint, values, capsys):
        """Every variable of a TF checkpoint is listed with dtype, shape and size, then the total."""
        assert main([str(checkpoint)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith(f"checkpoint {checkpoint} (")
        body = {ln.split()[0]: ln.split() for ln in lines[2:-1]}
        assert sorted(body) == sorted(values)
        assert body["fc/W"][1:3] == ["float32", "(36,"]
        total = sum(v.nbytes for v in values.values())
        assert (
            lines[-1]
            == f"5 variables, {sum(v.size for v in values.values())} elements, {format_bytes(total)}"
        )

    @pytest.mark.parametrize("suffix", ["", ".index", ".data-00000-of-00001"])
    def test_checkpoint_paths(self, checkpoint, capsys, suffix):
        """A prefix, any of its files, or its directory name the same checkpoint."""
        assert main([str(checkpoint) + suffix, "--json"]) == 0
        by_file = json.loads(capsys.readouterr().out)
        assert main([str(checkpoint.parent), "--json"]) == 0
        by_dir = json.loads(capsys.readouterr().out)
        assert by_file == by_dir

    def test_npz_json(self, npz_file, values, capsys):
        """An npz file lists like a checkpoint; --json gives bytes per variable and on disk."""
        assert main([str(npz_file), "--json", "--exclude", "^global_step$"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["kind"] == "npz"
        assert {v["name"]: v["bytes"] for v in doc["variables"]} == {
            k: v.nbytes for k, v in values.items() if k != "global_step"
        }
        assert doc["bytes_on_disk"] == npz_file.stat().st_size

    def test_sort_by_size(self, npz_file, capsys):
        """--sort size puts the largest first."""
        assert main([str(npz_file), "--sort", "size", "--include", "/"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [ln.split()[0] for ln in lines[2:-1]] == ["fc/W", "conv0/W", "fc/b", "conv0/b"]

    def test_missing_path(self, tmp_path, capsys):
        """A missing path is one error line naming it, status 2."""
        assert main([str(tmp_path / "nope" / "model-3")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ls-checkpoint: error: checkpoint ")
        assert "model-3" in err

    @pytest.mark.procs
    def test_missing_path_before_tensorflow(self, tmp_path):
        """In a fresh process, a missing path is refused before TensorFlow is imported."""
        code = (
            "import sys\n"
            "from towerkit.tools.ls_checkpoint import main\n"
            f"status = main([{str(tmp_path / 'nope' / 'model-3')!r}, '--verify'])\n"
            "print(status, 'tensorflow' in sys.modules)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.stdout.split() == ["2", "False"], done.stderr[-2000:]
        assert done.stderr.startswith("ls-checkpoint: error: checkpoint ")
        assert done.stderr.count("\n") == 1

    def test_verify_says_so(self, checkpoint, values, capsys):
        """--verify ends with one line saying every value matched; --json counts them."""
        assert main([str(checkpoint), "--verify"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[-1] == f"verified: all {len(values)} values match their checksums"
        assert main([str(checkpoint), "--verify", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["verified"] == len(values)

    @given(st.integers(0, 10**6))
    def test_verified_line(self, count):
        """The line names the count, in the right number."""
        line = verified_line(count)
        assert line.startswith("verified: ")
        assert (str(count) in line) == (count != 1)

    def test_not_a_checkpoint(self, tmp_path, capsys):
        """A file that is neither a checkpoint nor an npz file is refused."""
        path = tmp_path / "notes.txt"
        path.write_text("hello")
        assert main([str(path)]) == 2
        assert "is not a TensorFlow checkpoint" in capsys.readouterr().err

    def test_broken_npz(self, tmp_path, capsys):
        """A truncated npz file is refused with its name."""
        path = tmp_path / "broken.npz"
        path.write_bytes(b"PK\x03\x04garbage")
        assert main([str(path)]) == 2
        assert "broken.npz" in capsys.readouterr().err

    def test_empty_directory(self, tmp_path, capsys):
        """A directory without checkpoints is refused."""
        assert main([str(tmp_path)]) == 2
        assert "holds no checkpoint" in capsys.readouterr().err


def _damage(path, old: bytes, new: bytes) -> None:
    blob = path.read_bytes()
    assert blob.count(old) == 1
    path.write_bytes(blob.replace(old, new))


class TestCorruptNpz:
    """An npz whose bytes no longer match their CRC-32: one line naming file and entry, status 2."""

    def test_ls_checkpoint(self, tmp_path, capsys):
        """ls-checkpoint lists from the headers alone; --verify reads the values and fails."""
        path = tmp_path / "p.npz"
        np.savez(path, w=np.full(3, 7, np.int64))
        _damage(path, np.full(3, 7, np.int64).tobytes(), np.array([0, 7, 7]).tobytes())
        assert main([str(path)]) == 0, "the header is intact, no value is read"
        assert capsys.readouterr().out.splitlines()[-1] == "1 variable, 3 elements, 24 B"
        assert main([str(path), "--verify"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "p.npz' is corrupt" in err
        assert "entry 'w'" in err

    def test_verify_only_listed(self, tmp_path, capsys):
        """--verify checks the entries that --include/--exclude keep."""
        path = tmp_path / "p.npz"
        np.savez(path, w=np.full(3, 7, np.int64), b=np.zeros(2))
        _damage(path, np.full(3, 7, np.int64).tobytes(), np.array([0, 7, 7]).tobytes())
        assert main([str(path), "--verify", "--exclude", "^w$"]) == 0
        assert main([str(path), "--verify", "--include", "^w$"]) == 2
        assert "entry 'w'" in capsys.readouterr().err

    def test_load_params(self, tmp_path, capsys):
        """load-params refuses the file before writing anything."""
        from towerkit.tools import load_params

        path = tmp_path / "p.npz"
        np.savez(path, w=np.full(3, 7, np.int64))
        _damage(path, np.full(3, 7, np.int64).tobytes(), np.array([0, 7, 7]).tobytes())
        assert load_params.main([str(path), str(tmp_path / "out" / "model-0")]) == 2
        assert "entry 'w'" in capsys.readouterr().err
        assert not (tmp_path / "out").exists()


def _bytes_read() -> int | None:
    """Bytes this process has read through system calls so far (Linux), else None."""
    try:
        with open("/proc/self/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
    except OSError:
        return None
    return int(fields["rchar"])


FORGED = [
    (
        "huge",
        {"w.npy": npy_bytes(header("(1000000000000,)"), b"1234")},
        r"member 'w\.npy' declares shape \(1000000000000,\)",
    ),
    (
        "negative",
        {"w.npy": npy_bytes(header("(-3,)"))},
        r"member 'w\.npy' declares shape \(-3,\): negative sizes",
    ),
    (
        "empty-name",
        {".npy": npy_bytes(header("(1,)"), b"1234")},
        r"member '\.npy' has an empty name",
    ),
    ("foreign", {"w.txt": b"hello"}, r"members \['w\.txt'\] are not '\.npy' arrays"),
    (
        "pickled",
        {"w.npy": npy_bytes(header("(1,)", "|O"), b"\x80\x04N.")},
        r"entry 'w' holds Python objects",
    ),
]


class TestForgedNpz:
    """Forged headers and zip bombs: one error line and status 2, or a listing in little memory."""

    @pytest.mark.parametrize("tool", ["ls_checkpoint", "dump_params", "load_params"])
    @pytest.mark.parametrize(
        ("members", "match"), [f[1:] for f in FORGED], ids=[f[0] for f in FORGED]
    )
    def test_refused(self, tmp_path, capsys, tool, members, match):
        """Each tool that reads npz files refuses the forged file in one line naming file and member."""
        import importlib

        path = tmp_path / "forged.npz"
        write_npz(path, members)
        out = tmp_path / ("out.npz" if tool == "dump_params" else "out/model-0")
        tool_main = importlib.import_module(f"towerkit.tools.{tool}").main
        args = [str(path)] if tool == "ls_checkpoint" else [str(path), str(out)]
        assert tool_main(args) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(f"{tool.replace('_', '-')}: error: '{path}' is not an npz file")
        assert re.search(match, err[0]), err[0]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["forged.npz"]

    def test_zip_bomb_listed(self, tmp_path, capsys):
        """A 1 MiB file declaring 1 GiB lists from its header: no value read, little memory."""
        path = tmp_path / "bomb.npz"
        write_bomb(path, mib=1024)
        before = _bytes_read()
        tracemalloc.start()
        try:
            status = main([str(path), "--json"])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert status == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["variables"] == [
            {"name": "w", "dtype": "float32", "shape": [2**28], "elements": 2**28, "bytes": 2**30}
        ]
        assert peak < 8 * 2**20, peak
        if before is not None:
            assert _bytes_read() - before < 2**20

    def test_zip_bomb_verified_in_little_memory(self, tmp_path, capsys):
        """--verify inflates the GiB through a small buffer and finds it intact."""
        path = tmp_path / "bomb.npz"
        write_bomb(path, mib=256)
        tracemalloc.start()
        try:
            status = main([str(path), "--verify"])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert status == 0, capsys.readouterr().err
        assert peak < 32 * 2**20, peak

    def test_listing_reads_no_value(self, tmp_path, capsys):
        """Listing a 64 MiB npz file reads its headers, not its values."""
        path = tmp_path / "big.npz"
        np.savez(path, a=np.ones(2**23, np.float32), b=np.ones(2**23, np.float32))
        before = _bytes_read()
        if before is None:
            pytest.skip("no /proc/self/io on this system")
        assert main([str(path)]) == 0
        assert _bytes_read() - before < 2**20
        assert (
            capsys.readouterr().out.splitlines()[-1] == "2 variables, 16777216 elements, 64.0 MiB"
        )
