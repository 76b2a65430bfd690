"""Input and output names: checks, suggestions and signature keys."""

from __future__ import annotations

import pytest
from export_strategies import op_names, tensor_names
from hypothesis import given
from hypothesis import strategies as st

from towerkit.export._names import (
    as_names,
    check_input_names,
    check_output_names,
    close_names,
    op_name,
    render_unknown,
    signature_key,
)


class TestOpName:
    """`op_name` drops the port of a tensor name."""

    @given(op_names, st.integers(0, 9))
    def test_drops_port(self, name, port):
        """Any port is dropped; a name without port is kept."""
        assert op_name(f"{name}:{port}") == name
        assert op_name(name) == name


class TestSignatureKey:
    """`signature_key` gives the key of a tensor in a SavedModel signature."""

    def test_examples(self):
        """Port 0 is dropped, other ports become suffixes."""
        assert signature_key("prob:0") == "prob"
        assert signature_key("tower/prob") == "tower/prob"
        assert signature_key("split:2") == "split_2"

    @given(tensor_names)
    def test_no_colon(self, name):
        """No key holds a colon, and the key starts with the op name."""
        key = signature_key(name)
        assert ":" not in key
        assert key.startswith(op_name(name))

    @given(op_names)
    def test_same_tensor_same_key(self, name):
        """``name`` and ``name:0`` name the same tensor and get the same key."""
        assert signature_key(name) == signature_key(f"{name}:0") == name


class TestAsNames:
    """`as_names` turns a sequence of names into a tuple, rejecting other kinds."""

    def test_fail(self):
        """Strings, non-strings and empty names are rejected, each entry at fault listed."""
        with pytest.raises(TypeError, match=r"'tags' must be a sequence of strings; got str"):
            as_names("tags", "serve")
        with pytest.raises(
            TypeError, match=r"'tags' must hold strings; entries at fault: 1: int, 2: NoneType"
        ):
            as_names("tags", ["serve", 1, None])
        with pytest.raises(
            ValueError, match=r"'tags' must hold non-empty names; empty entries at: 0, 2"
        ):
            as_names("tags", ["", "serve", ""])

    @given(st.lists(op_names))
    def test_tuple(self, names):
        """Any list of names comes back as the same tuple."""
        assert as_names("x", names) == tuple(names)


class TestCheckInputNames:
    """`check_input_names` checks the names to feed; the signature gives the default."""

    def test_default_is_all(self):
        """None means every name of the signature, in order."""
        assert check_input_names(None, ["a", "b"]) == ("a", "b")

    def test_fail(self):
        """Repeated and missing names are errors that list every name at fault."""
        with pytest.raises(ValueError, match=r"repeated: 'a'"):
            check_input_names(["a", "b", "a"], ["a", "b"])
        with pytest.raises(ValueError, match=r"'input_names' is empty"):
            check_input_names([], ["a"])
        with pytest.raises(
            TypeError, match=r"'input_names' must be a sequence of strings; got str"
        ):
            check_input_names("a", ["a"])

    @given(st.lists(op_names, min_size=1, max_size=6, unique=True), st.data())
    def test_subsets_accepted(self, signature, data):
        """Every ordered subset of the signature's names is accepted as is."""
        chosen = data.draw(st.lists(st.sampled_from(signature), min_size=1, unique=True))
        assert check_input_names(chosen, signature) == tuple(chosen)

    @given(st.lists(op_names, min_size=1, max_size=6, unique=True), st.data())
    def test_other_tensors_accepted(self, signature, data):
        """Names outside the signature (other tensors of the tower) are kept, in order."""
        chosen = data.draw(st.lists(op_names, min_size=1, max_size=6, unique=True))
        assert check_input_names(chosen, signature) == tuple(chosen)


class TestCheckOutputNames:
    """`check_output_names` wants distinct tensor names."""

    def test_fail(self):
        """None, empty, and names sharing a signature key are rejected; every clash is listed."""
        with pytest.raises(ValueError, match=r"'output_names' is required"):
            check_output_names(None)
        with pytest.raises(ValueError, match=r"'output_names' is empty"):
            check_output_names([])
        with pytest.raises(
            ValueError,
            match=r"share the signature key 'prob': 'prob', 'prob:0'; the signature key 'y': 'y', 'y'",
        ):
            check_output_names(["prob", "prob:0", "y", "y", "z"])

    @given(st.lists(op_names, min_size=1, max_size=6, unique=True))
    def test_distinct_accepted(self, names):
        """Distinct op names are accepted in order."""
        assert check_output_names(names) == tuple(names)


class TestCloseNames:
    """`close_names` suggests names for a typo."""

    def test_suggests(self):
        """A one-letter typo finds the name; an unrelated name finds nothing."""
        assert close_names("porb", ["prob", "logits"]) == ["prob"]
        assert close_names("zzzz", ["prob", "logits"]) == []

    @given(op_names, st.lists(op_names, max_size=10))
    def test_from_candidates(self, name, candidates):
        """Suggestions come from the candidates, at most three, without repeats."""
        found = close_names(name, candidates)
        assert set(found) <= set(candidates)
        assert len(found) == len(set(found)) <= 3

    def test_render(self):
        """The message names every missing name, with suggestions where there are some."""
        text = render_unknown(["probs", "zzz"], ["prob", "logits"])
        assert "'probs' (did you mean 'prob'?)" in text
        assert text.endswith("'zzz'")
