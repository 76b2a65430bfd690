"""Python datapoints against an input signature: the layout record and the conversion."""

import warnings

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.callbacks._datapoints import (
    INPUT_KINDS,
    DatapointLayout,
    conform_datapoint,
    describe_value,
    input_kind,
)

DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool"]


@st.composite
def layouts_and_datapoints(draw):
    """A layout, and a datapoint that fits it exactly (numpy arrays of its dtypes and shapes)."""
    n = draw(st.integers(1, 4))
    names = [f"in{i}" for i in range(n)]
    dtypes = [draw(st.sampled_from(DTYPES)) for _ in range(n)]
    shapes, values = [], []
    for dtype in dtypes:
        dims = draw(st.lists(st.integers(0, 3), max_size=3))
        known = [d if draw(st.booleans()) else None for d in dims]
        shapes.append(None if draw(st.integers(0, 5)) == 0 else tuple(known))
        values.append(np.zeros(dims, dtype))
    layout = DatapointLayout(names=names, dtypes=dtypes, shapes=shapes)
    return layout, values


class TestDatapointLayout:
    """`DatapointLayout`: names, numpy dtypes and shapes of an input signature."""

    def test_repr(self):
        """The repr shows every field."""
        layout = DatapointLayout(names=["x"], dtypes=["float32"], shapes=[(None, 2)])
        assert repr(layout) == (
            "DatapointLayout(names=('x',), dtypes=(dtype('float32'),), shapes=((None, 2),))"
        )

    def test_from_specs(self):
        """A signature's names, numpy dtypes and shapes; an unknown rank is None."""
        layout = DatapointLayout.from_specs(
            [
                tf.TensorSpec([None, 2], tf.float32, "x"),
                tf.TensorSpec(None, tf.int64, "y"),
                tf.TensorSpec([3], tf.string, "s"),
            ]
        )
        assert layout.names == ("x", "y", "s")
        assert layout.dtypes == (np.dtype("float32"), np.dtype("int64"), np.dtype(object))
        assert layout.shapes == ((None, 2), None, (3,))
        assert str(layout) == "x: float32(None, 2), y: int64<unknown rank>, s: string(3,)"

    def test_fail(self):
        """Fields of different lengths are refused, naming the three lengths."""
        with pytest.raises(ValueError, match="one entry per input; got 2, 1 and 1"):
            DatapointLayout(names=["x", "y"], dtypes=["float32"], shapes=[None])

    @given(layouts_and_datapoints())
    def test_equal_and_hashable(self, case):
        """Two layouts built from the same values are equal and hash alike."""
        layout, _ = case
        again = DatapointLayout(
            names=list(layout.names), dtypes=list(layout.dtypes), shapes=list(layout.shapes)
        )
        assert again == layout
        assert hash(again) == hash(layout)


class TestConformDatapoint:
    """`conform_datapoint` checks a datapoint and returns one array per input."""

    @given(layouts_and_datapoints())
    def test_fitting_datapoint_unchanged(self, case):
        """A datapoint that fits comes back as the same arrays, as a tuple or as a dict."""
        layout, values = case
        got = conform_datapoint(values, layout)
        assert len(got) == len(values)
        for g, v in zip(got, values):
            assert g is v
        as_dict = dict(zip(layout.names, values))
        assert all(a is b for a, b in zip(conform_datapoint(as_dict, layout), got))

    @given(
        st.sampled_from([("float64", "float32"), ("int64", "int32"), ("int32", "float32")]),
        st.lists(st.integers(-100, 100), min_size=1, max_size=5),
    )
    def test_cast_within_kind(self, pair, numbers):
        """float64 to float32, int64 to int32, an integer to a float: cast, values kept."""
        src, dst = pair
        layout = DatapointLayout(names=["v"], dtypes=[dst], shapes=[(None,)])
        (got,) = conform_datapoint([np.asarray(numbers, src)], layout)
        assert got.dtype == np.dtype(dst)
        np.testing.assert_array_equal(got, numbers)

    @given(
        st.sampled_from(["int32", "int64", "uint8"]),
        st.lists(st.integers(0, 255), min_size=1, max_size=5),
        st.sampled_from(["float32", "float64"]),
    )
    def test_exact_values_cast_across_kinds(self, dst, numbers, src):
        """Floats holding whole numbers the integer dtype holds (a 0/1 edge map) are cast."""
        layout = DatapointLayout(names=["v"], dtypes=[dst], shapes=[(None,)])
        (got,) = conform_datapoint([np.asarray(numbers, src)], layout)
        assert got.dtype == np.dtype(dst)
        np.testing.assert_array_equal(got, numbers)

    @given(
        st.sampled_from(["int32", "uint8", "bool"]),
        st.lists(st.integers(0, 1), min_size=0, max_size=4),
        st.sampled_from([0.5, -1.0, 3e9, float("nan"), float("inf"), 2.0]),
    )
    def test_inexact_values_refused(self, dst, numbers, bad):
        """One value that does not survive the cast exactly refuses the component."""
        values = np.asarray([*numbers, bad], "float64")
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            survives = np.array_equal(values.astype(dst).astype("float64"), values)
        layout = DatapointLayout(names=["v"], dtypes=[dst], shapes=[(None,)])
        if survives:  # 2.0 into int32 or uint8
            (got,) = conform_datapoint([values], layout)
            np.testing.assert_array_equal(got, values)
            return
        with pytest.raises(ValueError, match=rf"^#0 'v': expected {dst}\(None,\), got float64"):
            conform_datapoint([values], layout)

    @given(layouts_and_datapoints(), st.data())
    def test_every_fault_listed(self, case, data):
        """Components made to not fit are all listed, by index and name, with both specs."""
        layout, values = case
        bad = data.draw(st.sets(st.integers(0, len(values) - 1), min_size=1))
        broken = list(values)
        for i in bad:
            broken[i] = np.full([2, 2, 2, 2], "text")
        with pytest.raises(ValueError) as info:
            conform_datapoint(broken, layout)
        message = str(info.value)
        for i in range(len(values)):
            listed = f"#{i} {layout.names[i]!r}: expected " in message
            assert listed == (i in bad), message
        assert message.count("got string(2, 2, 2, 2)") == len(bad)

    def test_fail(self):
        """Arity, kind, dtype and shape faults: ValueError with what was expected and came."""
        layout = DatapointLayout(
            names=["x", "y"], dtypes=["float32", "int32"], shapes=[(None, 2), (None,)]
        )
        with pytest.raises(ValueError, match=r"datapoint has 3 component\(s\)"):
            conform_datapoint([1, 2, 3], layout)
        with pytest.raises(ValueError, match=r"datapoint lacks \['y'\]"):
            conform_datapoint({"x": 1}, layout)
        with pytest.raises(ValueError, match=r"a datapoint must be a list/tuple .* got str"):
            conform_datapoint("xy", layout)
        with pytest.raises(
            ValueError, match=r"^#1 'y': expected int32\(None,\), got float64\(3,\)$"
        ):
            conform_datapoint([np.zeros([3, 2]), np.array([0.0, 0.5, 1.0])], layout)
        with pytest.raises(
            ValueError, match=r"^#0 'x': expected float32\(None, 2\), got float32\(3, 2, 1\)$"
        ):
            conform_datapoint([np.zeros([3, 2, 1], np.float32), np.zeros(3, np.int32)], layout)

    def test_strings(self):
        """A string input takes str or bytes arrays (as objects) and refuses numbers."""
        layout = DatapointLayout(names=["s"], dtypes=[object], shapes=[(None,)])
        (got,) = conform_datapoint([["a", "bc"]], layout)
        assert got.dtype == object
        assert list(got) == ["a", "bc"]
        with pytest.raises(ValueError, match=r"expected string\(None,\), got int64\(2,\)"):
            conform_datapoint([[1, 2]], layout)


class TestDescribeValue:
    """`describe_value` says what a component is."""

    @given(st.sampled_from(DTYPES), st.lists(st.integers(0, 3), max_size=3))
    def test_arrays(self, dtype, shape):
        """An array is its dtype name and shape."""
        assert describe_value(np.zeros(shape, dtype)) == f"{dtype}{tuple(shape)}"

    def test_others(self):
        """Strings, ragged lists and other objects."""
        assert describe_value(np.asarray([b"a"])) == "string(1,)"
        assert describe_value([[1], [1, 2]]) == "list"
        assert describe_value(object()) == "object"


class Refused(ValueError):
    """A caller's own error class (the trainers pass their ``InputDataError``)."""


def test_error_class_is_the_callers():
    """``error=`` picks the exception raised, for every kind of fault; the message is the same."""
    layout = DatapointLayout(names=["x"], dtypes=["int32"], shapes=[(None,)])
    for broken in ([np.full(2, 0.5)], [1, 2], "x"):
        with pytest.raises(ValueError) as plain:
            conform_datapoint(broken, layout)
        with pytest.raises(Refused) as own:
            conform_datapoint(broken, layout, Refused)
        assert str(own.value) == str(plain.value)


class DuckSource:
    """Follows the input-source protocol without any towerkit base class; also iterable."""

    def setup(self, specs):
        return []

    def get_input_tensors(self):
        return []

    def get_callbacks(self):
        return []

    def size(self):
        return 1

    def __iter__(self):
        return iter(())


class TestInputKind:
    """`input_kind`: one answer to "what is this input?" for training and inference."""

    @given(st.lists(st.tuples(st.floats(allow_nan=False), st.integers()), max_size=5))
    def test_lists_of_datapoints(self, datapoints):
        assert input_kind(datapoints) == "iterable"
        assert input_kind(tuple(datapoints)) == "iterable"

    @given(st.one_of(st.text(), st.binary()))
    def test_strings_are_no_input(self, value):
        assert input_kind(value) is None

    @given(st.one_of(st.integers(), st.floats(), st.none(), st.booleans()))
    def test_scalars_are_no_input(self, value):
        assert input_kind(value) is None
        assert input_kind(np.asarray(value)) is None

    @given(st.lists(st.integers(), min_size=1, max_size=4))
    def test_arrays_are_one_value(self, shape):
        assert input_kind(np.zeros([s % 3 for s in shape])) is None

    def test_the_protocol_wins(self):
        """An object with the protocol's methods is a source, iterable or not."""
        assert input_kind(DuckSource()) == "source"

    def test_functions_build_datasets(self):
        assert input_kind(lambda: None) == "builder"
        assert input_kind(DuckSource.size) == "builder"

    def test_dataset(self):
        assert input_kind(tf.data.Dataset.range(3)) == "dataset"

    def test_kinds_listed(self):
        assert INPUT_KINDS == ("source", "dataset", "builder", "iterable")
