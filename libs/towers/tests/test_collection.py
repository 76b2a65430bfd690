"""Backing up, restoring and freezing graph collections."""

from __future__ import annotations

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.towers import backup_collection, freeze_collection, restore_collection
from towerkit.towers.compat import tf1


class TestCollections:
    """Collections come back as they were."""

    def test_backup_restore(self, graph):
        """Restore puts back the listed keys only."""
        tf1.add_to_collection("a", 1)
        tf1.add_to_collection("b", 2)
        backup = backup_collection(["a"])
        tf1.add_to_collection("a", 3)
        tf1.add_to_collection("b", 4)
        restore_collection(backup)
        assert tf1.get_collection("a") == [1]
        assert tf1.get_collection("b") == [2, 4]
        assert set(backup_collection()) == {"a", "b"}

    def test_freeze(self, graph):
        """Changes inside freeze_collection are undone, even on error."""
        tf.constant(0.0)
        tf1.add_to_collection(tf1.GraphKeys.SUMMARIES, "keep")

        def change_then_fail():
            with freeze_collection([tf1.GraphKeys.SUMMARIES]):
                tf1.summary.scalar("s", tf.constant(1.0))
                tf1.get_collection_ref(tf1.GraphKeys.SUMMARIES).remove("keep")
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            change_then_fail()
        assert tf1.get_collection(tf1.GraphKeys.SUMMARIES) == ["keep"]

    def test_fail(self, graph):
        """A single string is not a list of keys."""
        with pytest.raises(TypeError, match="not the string 'losses'; use \\['losses'\\]"):
            backup_collection("losses")

    @given(st.lists(st.integers(), max_size=5), st.lists(st.integers(), max_size=5))
    def test_roundtrip(self, before, added):
        """Whatever is added after a backup is gone after restoring it."""
        with tf1.Graph().as_default():
            for item in before:
                tf1.add_to_collection("k", item)
            backup = backup_collection(["k"])
            for item in added:
                tf1.add_to_collection("k", item)
            restore_collection(backup)
            assert tf1.get_collection("k") == before
