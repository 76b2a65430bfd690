"""The public home of TensorFlow access: one import, version-checked, graph mode."""

from __future__ import annotations

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from towerkit.towers import compat


class TestCompat:
    """`towerkit.towers.compat`: `tf1`, the version check and its parser."""

    def test_tf1_is_graph_mode_tensorflow(self):
        """`tf1` is ``tf.compat.v1`` of the installed TensorFlow.

        Importing tf-keras (the layers extra) loads a second module object for
        ``tf.compat.v1``, so the check is on what the module gives, not its identity.
        """
        assert compat.tf1.__file__ == tf.compat.v1.__file__
        assert compat.tf1.get_variable is tf.compat.v1.get_variable
        assert compat.tf1.Session is tf.compat.v1.Session

    def test_installed_version_is_supported(self):
        """The installed TensorFlow passes the check it was imported under."""
        compat.check_tf_version(tf.__version__)

    def test_fail(self):
        """An unsupported or unreadable version is rejected, naming what was found."""
        with pytest.raises(
            ImportError, match=r"supports TensorFlow >=2.16,<3.0; found TensorFlow 3.1"
        ):
            compat.check_tf_version("3.1.0")
        with pytest.raises(ValueError, match=r"cannot read a TensorFlow version from 'nightly'"):
            compat.parse_tf_version("nightly")

    @given(st.integers(0, 99), st.integers(0, 99), st.integers(0, 99))
    def test_parse_property(self, major, minor, patch):
        """``MAJOR.MINOR.PATCH`` parses to ``(MAJOR, MINOR)``; in range iff the check passes."""
        version = f"{major}.{minor}.{patch}"
        assert compat.parse_tf_version(version) == (major, minor)
        inside = (2, 16) <= (major, minor) < (3, 0)
        if inside:
            compat.check_tf_version(version)
        else:
            with pytest.raises(ImportError):
                compat.check_tf_version(version)

    def test_all(self):
        """Every name in ``__all__`` is importable from the module."""
        for name in compat.__all__:
            assert getattr(compat, name) is not None
