"""Statistic names as tensorpack's monitors wrote them: no tower scope, no ``-summary``."""

import json

import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st
from loop import LoopTrainer

from towerkit.callbacks import Callback, JSONWriter, MonitorBase, Monitors
from towerkit.callbacks._monitor_hub import stat_name
from towerkit.towers.compat import tf1

COMPONENT = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda c: not c.startswith("tower")
)


@given(st.lists(COMPONENT, min_size=1, max_size=4), st.data())
def test_stat_name(components, data):
    """Tower scopes anywhere and one trailing -summary go; every other component stays."""
    towered = []
    for c in components:
        if data.draw(st.booleans()):
            towered.append(f"tower{data.draw(st.integers(0, 12))}")
        towered.append(c)
    suffix = data.draw(st.sampled_from(["", "-summary"]))
    tag = "/".join(towered) + suffix
    assert stat_name(tag) == "/".join(components)
    assert stat_name(stat_name(tag)) == stat_name(tag)


class Names(MonitorBase):
    def __init__(self):
        self.names, self.tags = [], []

    def process_scalar(self, name, val):
        self.names.append(name)

    def process_summary(self, summary):
        self.tags += [v.tag for v in summary.value]


def test_stats_file_and_monitors(tmp_path):
    """A summary of a data-parallel tower's moving average reaches stats.json as tensorpack wrote it."""
    graph = tf.Graph()
    with graph.as_default():
        w = tf1.get_variable("w", initializer=0.0)
        train_op = tf1.assign_add(w, 1.0)
        with tf1.name_scope("tower0"):
            cost = tf.identity(w * 2.0, name="cost")
        summary_op = tf1.summary.merge(
            [tf1.summary.scalar("tower0/cost-summary", cost), tf1.summary.scalar("lr", w)]
        )
        seen = []

        class PutSummary(Callback):
            def _trigger(self):
                summary = tf1.Summary.FromString(self.trainer.sess.run(summary_op))
                self.trainer.monitors.put_summary(summary)
                seen.append([v.tag for v in summary.value])

        names = Names()
        LoopTrainer(
            graph,
            train_op,
            [PutSummary()],
            Monitors([JSONWriter(), names]),
            logdir=tmp_path,
            steps_per_epoch=2,
            max_epoch=2,
        ).train()
    records = json.loads((tmp_path / "stats.json").read_text())
    assert [sorted(set(r) - {"epoch_num", "global_step"}) for r in records] == [["cost", "lr"]] * 2
    assert [r["cost"] for r in records] == [4.0, 8.0]
    assert names.names == ["cost", "lr"] * 2
    assert names.tags == ["cost", "lr"] * 2
    assert seen == [["tower0/cost-summary", "lr"]] * 2, "the caller's summary is unchanged"
