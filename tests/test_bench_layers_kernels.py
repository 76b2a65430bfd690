"""The layers benchmark's nets: towerkit.layers runs the kernels tf.layers runs.

The benchmark's goal is wall-clock speed; this test holds what makes it reachable
without timing anything: after TensorFlow's graph optimizations, one training step
of the towerkit.layers net executes exactly the kernels of the tf.compat.v1.layers
net (and of the raw-ops net, but for how the last bias is added), so any speed
difference between them is noise.
"""

from __future__ import annotations

import importlib.util

import pytest
from example_modules import ROOT

pytestmark = pytest.mark.procs


def _bench():
    path = ROOT / "benchmarks" / "bench_layers.py"
    spec = importlib.util.spec_from_file_location("bench_layers_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_towerkit_layers_execute_the_tf_layers_kernels():
    bench = _bench()
    ours = bench.executed_kernels("towerkit.layers")
    theirs = bench.executed_kernels("tf.layers")
    assert bench.kernel_difference(ours, theirs) == "same kernels", (ours, theirs)
    assert sum(ours.values()) > 20, ours


def test_towerkit_layers_against_raw_differ_only_in_the_bias_add():
    bench = _bench()
    diff = bench.kernel_difference(
        bench.executed_kernels("towerkit.layers"), bench.executed_kernels("raw")
    )
    # The raw net adds its last bias with `+` (a Sum in the gradient) where the layer
    # uses bias_add (BiasAddGrad), and reshapes once more; nothing else differs.
    assert set(diff.split(", ")) <= {"+1 BiasAddGrad", "-1 Sum", "-1 Reshape"}, diff
