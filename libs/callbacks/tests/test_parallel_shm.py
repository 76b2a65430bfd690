"""Shared memory blocks for a worker's large arrays: what goes out of band, and back."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from towerkit.callbacks._parallel_shm import (
    BLOCK_MARK,
    decode,
    encode,
    offsets,
    remove_blocks,
    unlink_block_of,
)

SHM = "/dev/shm"
LISTED = os.path.isdir(SHM)


def blocks(prefix: str) -> list[str]:
    return sorted(n for n in os.listdir(SHM) if n.startswith(prefix)) if LISTED else []


def namer(prefix: str):
    made: list[str] = []

    def name() -> str:
        made.append(f"{prefix}{len(made)}")
        return made[-1]

    return name, made


def datapoint(i: int, nbytes: int):
    big = np.full(nbytes // 4, i, np.float32)
    side = np.asfortranarray(np.full((16, nbytes // 128), -i, np.float64))
    return [big, np.array([i], np.int64), side]


def same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype
        assert x.shape == y.shape
        assert x.flags.f_contiguous == y.flags.f_contiguous
        np.testing.assert_array_equal(x, y)


def test_large_buffers_go_into_one_block():
    """Arrays at or above the threshold go into one block, the small one stays in the
    pickle; decoding gives equal arrays (Fortran order kept) and unlinks the block."""
    prefix = f"tk{os.getpid()}_one_"
    name, made = namer(prefix)
    dp = datapoint(2, 1 << 20)
    payload = encode(("dp", 0, dp, 0.0), 1 << 18, name)
    assert payload[:1] == BLOCK_MARK
    assert len(payload) < 4096
    assert len(made) == 1
    assert blocks(prefix) == (made if LISTED else [])
    same(decode(payload)[2], dp)
    assert blocks(prefix) == []


def test_small_or_disabled_stays_in_band():
    """Below the threshold, or with None, the pickle carries everything and no block is made."""
    dp = datapoint(1, 1 << 12)
    for threshold in (1 << 18, None):
        payload = encode(dp, threshold, lambda: pytest.fail("no block expected"))
        assert payload[:1] != BLOCK_MARK
        same(decode(payload), dp)


def test_unread_block_is_removed():
    """The block of a message that will not be read is unlinked; a name sweep finds none left."""
    prefix = f"tk{os.getpid()}_unread_"
    name, _ = namer(prefix)
    payload = encode(datapoint(3, 1 << 16), 1, name)
    unlink_block_of(payload)
    unlink_block_of(payload)  # twice: already gone, no error
    assert blocks(prefix) == []
    assert remove_blocks(prefix) == []
    with pytest.raises(FileNotFoundError):
        decode(payload)


@pytest.mark.skipif(not LISTED, reason="no /dev/shm to list blocks")
def test_sweep_removes_left_blocks():
    """`remove_blocks` removes the blocks of a prefix left in /dev/shm, and only those."""
    prefix = f"tk{os.getpid()}_sweep_"
    name, made = namer(prefix)
    other, _ = namer(f"tk{os.getpid()}_other_")
    keep = encode(datapoint(4, 1 << 16), 1, other)
    for i in range(3):
        encode(datapoint(i, 1 << 16), 1, name)
    assert remove_blocks(prefix) == sorted(made)
    assert blocks(prefix) == []
    same(decode(keep), datapoint(4, 1 << 16))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 3000), max_size=6),
    st.one_of(st.none(), st.integers(1, 4000)),
)
def test_any_arrays_any_threshold(lengths, threshold):
    """Arrays of any sizes come back equal whatever the threshold; no block stays."""
    arrays = [np.arange(n, dtype=np.int16) * (k + 1) for k, n in enumerate(lengths)]
    prefix = f"tk{os.getpid()}_prop_"
    name, _ = namer(prefix)
    back = decode(encode(arrays, threshold, name))
    assert [a.tolist() for a in back] == [a.tolist() for a in arrays]
    assert blocks(prefix) == []


@given(st.lists(st.integers(0, 10**6), max_size=20))
def test_offsets(sizes):
    """Each buffer starts where the one before it ends, the first at 0."""
    starts = offsets(sizes)
    assert len(starts) == len(sizes)
    for k in range(1, len(sizes)):
        assert starts[k] == starts[k - 1] + sizes[k - 1]
    assert not starts or starts[0] == 0
