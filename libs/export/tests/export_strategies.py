"""Hypothesis strategies shared by the export tests: scope-like names and small graphs."""

from __future__ import annotations

from hypothesis import strategies as st

segments = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
"""One segment of an op name."""

op_names = st.lists(segments, min_size=1, max_size=3).map("/".join)
"""Op names such as ``"fc/W"``."""

tensor_names = st.tuples(op_names, st.none() | st.integers(0, 3)).map(
    lambda pair: pair[0] if pair[1] is None else f"{pair[0]}:{pair[1]}"
)
"""Tensor names with or without a port: ``"prob"``, ``"prob:0"``, ``"split:2"``."""


@st.composite
def dags(draw, max_nodes=8):
    """A random DAG as ``{node: [input strings]}``; inputs only point to earlier nodes."""
    n = draw(st.integers(1, max_nodes))
    names = [f"n{i}" for i in range(n)]
    edges = {}
    for i, name in enumerate(names):
        parents = draw(st.lists(st.sampled_from(names[:i]), max_size=3, unique=True)) if i else []
        decorated = [draw(st.sampled_from([p, f"{p}:0", f"{p}:1", f"^{p}"])) for p in parents]
        edges[name] = decorated
    return edges
