"""Hypothesis strategies shared by the towers tests."""

from __future__ import annotations

from hypothesis import strategies as st

scope_segment = st.from_regex(r"[A-Za-z][A-Za-z0-9_.\-]{0,8}", fullmatch=True).filter(
    lambda s: "tower" not in s
)
"""One name-scope segment that TensorFlow accepts (and no 'tower' in it)."""

scope_name = st.lists(scope_segment, min_size=1, max_size=4).map("/".join)
"""A scope path such as ``fc/W``."""

tensor_name = st.tuples(scope_name, st.integers(0, 9)).map(lambda p: f"{p[0]}:{p[1]}")
"""A tensor name with an output index."""

gpu_ids = st.lists(st.integers(0, 15), min_size=1, max_size=8, unique=True)
"""Distinct device ids."""

kwargs_dict = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True),
    st.integers() | st.text(max_size=3),
    max_size=4,
)
"""Keyword arguments for argscope."""
