"""Session creators: new and initialized, reused, adapted."""

import numpy as np
import pytest
import tensorflow as tf

from towerkit.towers.compat import tf1
from towerkit.trainers import (
    NewSessionCreator,
    ReuseSessionCreator,
    SessionCreatorAdapter,
    get_default_sess_config,
)


class TestNewSessionCreator:
    """`NewSessionCreator` makes a session on the default graph with everything initialized."""

    def test_initializes_everything(self, graph):
        """Global and local variables and tables have their initial values."""
        w = tf1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        local = tf1.Variable(7, trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES])
        table = tf1.lookup.StaticHashTable(
            tf1.lookup.KeyValueTensorInitializer([1, 2], [10, 20]), -1
        )
        looked = table.lookup(tf.constant([2, 3]))
        sess = NewSessionCreator().create_session()
        try:
            assert sess.graph is graph
            np.testing.assert_array_equal(sess.run(w), [1.0, 2.0])
            assert sess.run(local) == 7
            np.testing.assert_array_equal(sess.run(looked), [20, -1])
        finally:
            sess.close()

    def test_finalized_graph(self, graph):
        """It needs no new op, so it works on a finalized graph."""
        w = tf1.get_variable("w", initializer=tf.constant(3.0))
        graph.finalize()
        sess = NewSessionCreator().create_session()
        try:
            assert sess.run(w) == 3.0
        finally:
            sess.close()

    def test_empty_graph(self, graph):
        """A graph without variables gives a working session."""
        x = tf.constant(1.0) + 1
        sess = NewSessionCreator().create_session()
        try:
            assert sess.run(x) == 2.0
        finally:
            sess.close()

    def test_default_config(self):
        """Without a config it uses get_default_sess_config()."""
        assert NewSessionCreator().config == get_default_sess_config()
        assert NewSessionCreator().target == ""

    def test_config_used(self, graph):
        """The given config reaches the session (here: two CPU devices)."""
        config = tf1.ConfigProto(device_count={"CPU": 2})
        with tf.device("/cpu:1"):
            x = tf.constant(2.0) * 3
        sess = NewSessionCreator(config=config).create_session()
        try:
            cpus = [d.name for d in sess.list_devices() if d.device_type == "CPU"]
            assert len(cpus) == 2
            assert sess.run(x) == 6.0
        finally:
            sess.close()

    def test_is_session_creator(self):
        """It is a tf.compat.v1.train.SessionCreator."""
        assert isinstance(NewSessionCreator(), tf1.train.SessionCreator)

    def test_repr(self):
        """The repr names the target."""
        assert repr(NewSessionCreator()) == "NewSessionCreator(target='')"

    def test_fail(self):
        """Wrong kinds of target or config are TypeErrors naming the argument."""
        with pytest.raises(TypeError, match=r"'target' must be a str .* got int"):
            NewSessionCreator(target=1)
        with pytest.raises(
            TypeError, match=r"'config' must be a tf\.compat\.v1\.ConfigProto or None; got dict"
        ):
            NewSessionCreator(config={"allow_soft_placement": True})


class TestReuseSessionCreator:
    """`ReuseSessionCreator` returns the session it was given, untouched."""

    def test_same_session(self, graph, sess):
        """The very session comes back, with its variables as they were."""
        v = tf1.get_variable("v", initializer=tf.constant(1.0))
        sess.run(v.initializer)
        sess.run(tf1.assign(v, 5.0))
        got = ReuseSessionCreator(sess).create_session()
        assert got is sess
        assert got.run(v) == 5.0

    def test_repr(self, sess):
        """The repr shows the session."""
        assert repr(ReuseSessionCreator(sess)).startswith("ReuseSessionCreator(<tensorflow")

    def test_fail(self):
        """Anything but a session is a TypeError."""
        with pytest.raises(TypeError, match=r"'sess' must be a tf\.compat\.v1\.Session; got str"):
            ReuseSessionCreator("sess")


class TestSessionCreatorAdapter:
    """`SessionCreatorAdapter` applies a function to another creator's session."""

    def test_applies(self, graph, sess):
        """The function sees the inner creator's session, and its result is returned."""
        seen = []

        class Wrapped:
            def __init__(self, inner):
                self.inner = inner

        def func(s):
            seen.append(s)
            return Wrapped(s)

        out = SessionCreatorAdapter(ReuseSessionCreator(sess), func).create_session()
        assert seen == [sess]
        assert isinstance(out, Wrapped)
        assert out.inner is sess

    def test_over_new_session(self, graph):
        """Over a NewSessionCreator the function gets an initialized session."""
        w = tf1.get_variable("w", initializer=tf.constant(4.0))
        values = []
        sess = SessionCreatorAdapter(
            NewSessionCreator(), lambda s: values.append(s.run(w)) or s
        ).create_session()
        sess.close()
        assert values == [4.0]

    def test_fail(self, sess):
        """A creator without create_session, or a non-callable func, is a TypeError."""
        with pytest.raises(TypeError, match="'session_creator' must have a create_session"):
            SessionCreatorAdapter(sess, lambda s: s)
        with pytest.raises(TypeError, match="'func' must be callable"):
            SessionCreatorAdapter(ReuseSessionCreator(sess), 3)
