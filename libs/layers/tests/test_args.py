"""The pure argument rules: data formats, 2-D shapes, paddings, output sizes and aliases."""

from __future__ import annotations

from typing import ClassVar

import hypothesis.strategies as st
import pytest
from hypothesis import given

from towerkit.layers._args import (
    channel_axis,
    conv_output_size,
    given_twice,
    keras_data_format,
    rename_aliases,
    shape2d,
    shape4d,
    tf_data_format,
    tf_padding,
    transpose_output_size,
)

FORMATS = st.sampled_from(["NHWC", "NCHW", "channels_last", "channels_first"])
SIZES = st.integers(1, 64)


class TestDataFormat:
    """Both spellings of a data format normalize to each other."""

    @given(FORMATS)
    def test_round_trip(self, fmt):
        """keras -> tf -> keras is the identity, and the channel axis follows."""
        k = keras_data_format(fmt)
        assert keras_data_format(tf_data_format(k)) == k
        assert channel_axis(fmt) == (3 if k == "channels_last" else 1)

    @given(
        st.text(max_size=8).filter(
            lambda s: s not in {"NHWC", "NCHW", "channels_last", "channels_first"}
        )
    )
    def test_fail(self, fmt):
        """Any other value is refused with the accepted ones listed."""
        with pytest.raises(ValueError, match="'data_format' must be one of 'channels_last'"):
            tf_data_format(fmt)


class TestShapes:
    """shape2d and shape4d."""

    @given(SIZES, SIZES, FORMATS)
    def test_pairs(self, a, b, fmt):
        """A pair stays a pair; 4-D puts it where the data format says."""
        assert shape2d((a, b)) == [a, b]
        assert shape2d(a) == [a, a]
        s4 = shape4d((a, b), fmt)
        assert s4 == ([1, a, b, 1] if tf_data_format(fmt) == "NHWC" else [1, 1, a, b])

    @pytest.mark.parametrize("bad", [0, -1, (1, 2, 3), (0, 1), True, "3", 2.0, None])
    def test_fail(self, bad):
        """Zero, negative, bools, floats and wrong lengths are refused, naming the argument."""
        with pytest.raises(ValueError, match="'kernel_size' must be a positive int or a pair"):
            shape2d(bad, "kernel_size")


class TestPadding:
    """Paddings and the output sizes they give."""

    @given(st.sampled_from(["same", "SAME", "Same", "valid", "VALID"]))
    def test_case(self, p):
        """Any case is accepted."""
        assert tf_padding(p) in ("SAME", "VALID")

    def test_fail(self):
        """Other paddings are refused."""
        with pytest.raises(ValueError, match="'padding' must be 'same' or 'valid'"):
            tf_padding("full")

    @given(SIZES, st.integers(1, 7), st.integers(1, 4))
    def test_conv_sizes(self, size, kernel, stride):
        """SAME gives ceil(size / stride); VALID counts the windows that fit."""
        assert conv_output_size(size, kernel, stride, "same") == -(-size // stride)
        windows = len(range(0, size - kernel + 1, stride)) if size >= kernel else 0
        assert conv_output_size(size, kernel, stride, "valid") == windows
        assert conv_output_size(None, kernel, stride, "same") is None

    @given(SIZES, st.integers(1, 7), st.integers(1, 4))
    def test_transpose_sizes(self, size, kernel, stride):
        """A transposed convolution of SAME undoes the stride; VALID adds what the kernel overhangs."""
        assert transpose_output_size(size, kernel, stride, "same") == size * stride
        valid = transpose_output_size(size, kernel, stride, "valid")
        assert valid == size * stride + max(kernel - stride, 0)
        assert conv_output_size(valid, kernel, stride, "valid") == size


class TestAliases:
    """tensorpack's old argument names."""

    ALIASES: ClassVar[dict[str, str]] = {
        "out_channel": "filters",
        "kernel_shape": "kernel_size",
        "stride": "strides",
    }

    @given(
        st.dictionaries(
            st.sampled_from(["out_channel", "kernel_shape", "stride", "padding"]), st.integers()
        )
    )
    def test_renamed(self, kwargs):
        """Every alias becomes its target and keeps its value; other names stay."""
        out = rename_aliases("Conv2D", kwargs, self.ALIASES)
        assert sorted(out.values()) == sorted(kwargs.values())
        assert not set(out) & set(self.ALIASES)

    def test_common_names_win(self):
        """``nl``, ``W_init`` and ``b_init`` win over the new names, as in tensorpack."""
        out = rename_aliases(
            "Conv2D", {"W_init": 1, "kernel_initializer": 2, "b_init": 3, "nl": 4}, {}
        )
        assert out == {"kernel_initializer": 1, "bias_initializer": 3, "activation": 4}

    def test_fail(self):
        """An alias given with its target is refused, naming both."""
        with pytest.raises(
            TypeError, match="Conv2D: arguments 'out_channel' and 'filters' name the same thing"
        ):
            rename_aliases("Conv2D", {"out_channel": 3, "filters": 4}, self.ALIASES)


NAMES = st.sampled_from(["units", "filters", "kernel_size", "strides", "out_dim", "nl", "a", "b"])


class TestGivenTwice:
    """`given_twice`: a value given by position and keyword, or under two names."""

    ALIASES: ClassVar[dict[str, str]] = {"out_dim": "units", "nl": "activation"}

    @given(st.lists(NAMES, unique=True, max_size=3), st.integers(0, 3), st.sets(NAMES))
    def test_matches_counting(self, positional, given_n, keywords):
        """An entry for exactly each target reached more than once, by position or keyword."""
        got = given_twice(positional, given_n, keywords, self.ALIASES)
        targets = list(positional[:given_n]) + [self.ALIASES.get(k, k) for k in keywords]
        assert len(got) == len({t for t in targets if targets.count(t) > 1})

    @given(st.sets(st.sampled_from(["padding", "use_bias", "activation"])))
    def test_distinct_names_pass(self, keywords):
        """Keywords that are neither aliases of each other nor positional pass."""
        assert given_twice(["units"], 1, keywords, self.ALIASES) == []

    def test_examples(self):
        """Positional and alias; alias and target; an old common name and its new one."""
        assert given_twice(["units"], 1, ["out_dim"], self.ALIASES) == [
            "positional 'units' and 'out_dim'"
        ]
        assert given_twice(["units"], 0, ["units", "out_dim"], self.ALIASES) == [
            "'units' and 'out_dim'"
        ]
        assert given_twice([], 0, ["activation", "nl"], self.ALIASES) == ["'activation' and 'nl'"]
