"""What the layers tests do on a session besides running layers."""

from __future__ import annotations

from towerkit.towers.compat import tf1


def initialize(sess):
    """Run the initializers of every global variable of the session's graph."""
    sess.run(tf1.global_variables_initializer())
