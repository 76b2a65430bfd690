"""Name helpers: output indices, tower prefixes, scope joins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from towers_strategies import scope_name, tensor_name

from towerkit.towers import get_op_tensor_name
from towerkit.towers._names import join_scope, scope_segments, strip_port, strip_tower_prefix


class TestGetOpTensorName:
    """`get_op_tensor_name` splits names into op and tensor names."""

    @given(scope_name)
    def test_plain_name_is_output_zero(self, name):
        """A name without index refers to output 0."""
        assert get_op_tensor_name(name) == (name, f"{name}:0")

    @given(tensor_name)
    def test_indexed_name_roundtrips(self, name):
        """A tensor name keeps its index and its op is the part before ':'."""
        op, tensor = get_op_tensor_name(name)
        assert tensor == name
        assert f"{op}:{name.rsplit(':', 1)[1]}" == name

    @pytest.mark.parametrize("bad", ["", "x:", "x:a", ":0"])
    def test_fail(self, bad):
        """Malformed names are rejected with the name in the message."""
        with pytest.raises(ValueError, match="tensor name"):
            get_op_tensor_name(bad)


class TestStripPort:
    """`strip_port` drops output indices."""

    @given(scope_name, st.integers(0, 99))
    def test_strips(self, name, index):
        """The op name comes back whatever the index."""
        assert strip_port(f"{name}:{index}") == name
        assert strip_port(name) == name


class TestStripTowerPrefix:
    """`strip_tower_prefix` removes one tower prefix only."""

    @given(st.integers(0, 99), scope_name)
    def test_default_tower_prefix(self, index, name):
        """``tower<N>/`` is removed by default."""
        assert strip_tower_prefix(f"tower{index}/{name}") == name

    @given(scope_name, scope_name)
    def test_given_prefix(self, prefix, name):
        """A given prefix is removed once, and only on a segment boundary."""
        assert strip_tower_prefix(f"{prefix}/{name}", prefix) == name
        assert strip_tower_prefix(f"{prefix}x/{name}", prefix) == f"{prefix}x/{name}"

    @given(scope_name)
    def test_empty_prefix_keeps(self, name):
        """An empty prefix (a tower without name scope) strips nothing."""
        assert strip_tower_prefix(name, "") == name


class TestJoinScope:
    """`join_scope` and `scope_segments` agree."""

    @given(st.lists(scope_name | st.just(""), max_size=5))
    def test_segments_of_join(self, parts):
        """Segments of a join are the segments of the non-empty parts."""
        expected = tuple(seg for p in parts for seg in p.split("/") if seg)
        assert scope_segments(join_scope(*parts)) == expected
