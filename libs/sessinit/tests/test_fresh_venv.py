"""towerkit-sessinit installed alone in a fresh virtual environment restores a plain-TF checkpoint."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.procs

LIB = Path(__file__).resolve().parents[1]

RESTORE = """
import importlib.metadata, json, pkgutil, sys
import numpy as np
import tensorflow as tf
import towerkit
from towerkit.sessinit import SmartInit

tf1 = tf.compat.v1
g = tf.Graph()
with g.as_default():
    with tf1.variable_scope("net"):
        w = tf1.get_variable("W", shape=(2, 3))
    step = tf1.get_variable("step", shape=(), dtype=tf.int64)
    with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        SmartInit(sys.argv[1]).init(sess)
        w_value, step_value = sess.run([w, step])
print(json.dumps({
    "W": w_value.tolist(),
    "step": int(step_value),
    "towerkit_modules": sorted(m.name for m in pkgutil.iter_modules(towerkit.__path__)),
    "towerkit_dists": sorted(
        d.metadata["Name"] for d in importlib.metadata.distributions()
        if d.metadata["Name"].startswith("towerkit")
    ),
}))
"""


def _requirements() -> list[str]:
    """The lib (with its TensorFlow extra) and this environment's TensorFlow, to reuse its wheel."""
    for dist, extra in (("tensorflow-cpu", "[cpu]"), ("tensorflow", "[tf]")):
        try:
            return [f"{LIB}{extra}", f"{dist}=={importlib.metadata.version(dist)}"]
        except importlib.metadata.PackageNotFoundError:
            continue
    msg = "no TensorFlow distribution is installed in the test environment"
    raise RuntimeError(msg)


@pytest.mark.slow
def test_restores_plain_tf_checkpoint_alone(tmp_path, write_checkpoint):
    """A fresh venv holding only towerkit-sessinit and its dependencies restores a Saver checkpoint."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs 'uv' on PATH to build the fresh virtual environment")
    values = {"net/W": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.array(17, np.int64)}
    write_checkpoint(values, "model-17")
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env)
    python = venv / "bin" / "python"
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), *_requirements()],
        check=True,
        env=env,
    )
    out = subprocess.run(
        [str(python), "-c", textwrap.dedent(RESTORE), str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"},
        cwd=tmp_path,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["W"] == values["net/W"].tolist()
    assert result["step"] == 17
    assert result["towerkit_modules"] == ["sessinit"]
    assert result["towerkit_dists"] == ["towerkit-sessinit"]
