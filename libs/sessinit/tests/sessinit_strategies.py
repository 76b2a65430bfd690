"""Hypothesis strategies shared by the sessinit tests."""

from __future__ import annotations

from hypothesis import strategies as st

from towerkit.sessinit import VarInfo

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool")

names = st.lists(
    st.sampled_from(["a", "b", "conv0", "fc", "W", "b1", "bn/gamma"]), min_size=1, max_size=3
).map("/".join)
"""Variable names such as ``"conv0/W"``."""

shapes = st.lists(st.integers(0, 4), max_size=3).map(tuple)
"""Fully known shapes of rank 0 to 3."""

dtypes = st.sampled_from(DTYPES)


@st.composite
def var_info(draw, name=names):
    """A VarInfo with a drawn name, shape and dtype."""
    return VarInfo(name=draw(name), shape=draw(shapes), dtype=draw(dtypes))


def var_sets(max_size: int = 8):
    """Lists of VarInfo with distinct names."""
    return st.lists(var_info(), max_size=max_size, unique_by=lambda v: v.name)


@st.composite
def restore_cases(draw):
    """``(source_vars, graph_vars, prefix, ignore)`` where the graph shares some names.

    Shared variables sometimes differ in shape or dtype, or carry a ``:0`` suffix.
    """
    source = draw(var_sets())
    prefix = draw(st.sampled_from([None, "", "tower", "net/sub"]))
    graph = []
    for var in source:
        if not draw(st.booleans()):
            continue
        name = f"{prefix}/{var.name}" if prefix else var.name
        shape = draw(st.sampled_from([var.shape, draw(shapes)]))
        dtype = draw(st.sampled_from([var.dtype, draw(dtypes)]))
        graph.append(
            VarInfo(name=name + draw(st.sampled_from(["", ":0"])), shape=shape, dtype=dtype)
        )
    taken = {v.name for v in graph}
    graph += [v for v in draw(var_sets(4)) if v.name not in taken]
    pool = [v.name for v in source] + [v.name for v in graph] + ["nothing/here"]
    ignore = draw(st.lists(st.sampled_from(pool), max_size=3))
    graph = draw(st.permutations(graph))
    return source, graph, prefix, ignore
