"""Where a cluster process runs, from TF_CONFIG: the mapping, the refusals, the exit codes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers import (
    PREEMPTED_EXIT_STATUS,
    ClusterPlacement,
    cluster_placement,
    exit_is_retryable,
    tf_config_placement,
)


def tf_config(cluster: dict, kind: str, index: int, **extra: object) -> str:
    """TF_CONFIG as the operators write it (extra fields such as ``environment`` too)."""
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}, **extra})


TFJOB = {
    "chief": ["mnist-chief-0.default.svc:2222"],
    "ps": ["mnist-ps-0.default.svc:2222", "mnist-ps-1.default.svc:2222"],
    "worker": ["mnist-worker-0.default.svc:2222", "mnist-worker-1.default.svc:2222"],
}


class TestTfConfigPlacement:
    """`tf_config_placement` maps the operators' jobs onto ps/worker."""

    def test_chief_is_worker_zero(self):
        """The chief is worker 0; worker:i is worker i + 1; ps:i is ps i."""
        got = {
            (kind, i): (p.job, p.task, p.is_chief)
            for kind in ("chief", "worker", "ps")
            for i in range(len(TFJOB[kind]))
            for p in [tf_config_placement(tf_config(TFJOB, kind, i, environment="cloud"))]
        }
        assert got == {
            ("chief", 0): ("worker", 0, True),
            ("worker", 0): ("worker", 1, False),
            ("worker", 1): ("worker", 2, False),
            ("ps", 0): ("ps", 0, False),
            ("ps", 1): ("ps", 1, False),
        }
        placement = tf_config_placement(tf_config(TFJOB, "worker", 1))
        assert placement.cluster_dict() == {
            "ps": TFJOB["ps"],
            "worker": TFJOB["chief"] + TFJOB["worker"],
        }
        assert placement.origin == "TF_CONFIG task worker:1"

    def test_master_and_no_chief(self):
        """``master`` is the chief's older name; without a chief worker:0 is the chief."""
        old = {"master": ["m:1"], "ps": ["p:1"], "worker": ["w:1"]}
        assert tf_config_placement(tf_config(old, "master", 0)).is_chief
        plain = {"ps": ["p:1"], "worker": ["w0:1", "w1:1"]}
        assert tf_config_placement(tf_config(plain, "worker", 0)).is_chief
        assert tf_config_placement(tf_config(plain, "worker", 1)).task == 1

    def test_evaluator_outside_the_cluster(self):
        """Evaluator addresses stay out of the servers' cluster; an evaluator is refused."""
        cluster = {**TFJOB, "evaluator": ["mnist-evaluator-0.default.svc:2222"]}
        placement = tf_config_placement(tf_config(cluster, "chief", 0))
        assert "evaluator" not in placement.cluster_dict()
        with pytest.raises(
            ValueError,
            match=r"task evaluator:0: towerkit's cluster trainers run no evaluator task .*declare no 'Evaluator' replicas",
        ):
            tf_config_placement(tf_config(cluster, "evaluator", 0))

    @pytest.mark.parametrize(
        ("text", "match"),
        [
            ("{not json", r"TF_CONFIG: must be JSON; "),
            ('{"cluster": {}}', r"TF_CONFIG: must be an object with 'cluster' and 'task'"),
            (
                tf_config({"ps": ["p:1"], "worker": ["w:1"], "trainer": ["t:1"]}, "ps", 0),
                r"'cluster' has jobs \['trainer'\]",
            ),
            (
                tf_config({"ps": ["p:1"], "worker": ["w"]}, "ps", 0),
                r"'cluster.worker' has addresses that are not 'host:port': \['w'\]",
            ),
            (
                tf_config({"ps": ["p:1"], "worker": "w:1"}, "ps", 0),
                r"'cluster.worker' must be a list of 'host:port' strings",
            ),
            (
                tf_config({"ps": ["p:1"], "worker": ["w:1"]}, "worker", 1),
                r"'task' is worker:1, but 'cluster.worker' has 1 address",
            ),
            (
                tf_config({"ps": ["p:1"], "worker": ["w:1"]}, "worker", -1),
                r"'task.index' must be an integer >= 0; got -1",
            ),
            (
                tf_config({"ps": ["p:1"], "worker": ["w:1"]}, "boss", 0),
                r"'task.type' must be one of",
            ),
            (
                tf_config({"chief": ["c:1"], "worker": ["w:1"]}, "chief", 0),
                r"'cluster' needs 'ps' tasks for towerkit's parameter-server trainers; it has \['chief', 'worker'\]",
            ),
            (
                tf_config({"chief": ["c:1", "d:1"], "ps": ["p:1"]}, "ps", 0),
                r"'cluster' may hold one chief",
            ),
        ],
    )
    def test_fail(self, text, match):
        """Malformed TF_CONFIG: one ValueError naming the field at fault."""
        with pytest.raises(ValueError, match=match):
            tf_config_placement(text)

    @given(
        chief=st.booleans(),
        workers=st.integers(0, 5),
        ps=st.integers(1, 4),
        data=st.data(),
    )
    def test_every_task_its_own_address(self, chief, workers, ps, data):
        """Each operator task lands on a distinct towerkit task whose address is its own."""
        if not chief and workers == 0:
            workers = 1
        cluster = {"ps": [f"ps-{i}:2222" for i in range(ps)]}
        if workers:
            cluster["worker"] = [f"worker-{i}:2222" for i in range(workers)]
        if chief:
            cluster["chief"] = ["chief-0:2222"]
        tasks = [(kind, i) for kind, addresses in cluster.items() for i in range(len(addresses))]
        extra = data.draw(
            st.dictionaries(st.sampled_from(["environment", "job", "trial"]), st.text())
        )
        seen = set()
        for kind, i in tasks:
            placement = tf_config_placement(tf_config(cluster, kind, i, **extra))
            assert placement.addresses(placement.job)[placement.task] == cluster[kind][i]
            assert placement.is_chief == (
                kind == "chief" or (not chief and kind == "worker" and i == 0)
            )
            seen.add((placement.job, placement.task))
        assert len(seen) == len(tasks)


class TestClusterPlacement:
    """The record: checked when built."""

    def test_repr(self):
        """Its repr shows the jobs as pairs."""
        placement = ClusterPlacement(
            jobs={"ps": ["a:1"], "worker": ["b:1"]}, job="worker", task=0, origin="here"
        )
        assert repr(placement) == (
            "ClusterPlacement(jobs=(('ps', ('a:1',)), ('worker', ('b:1',))), job='worker', task=0, origin='here')"
        )

    def test_fail(self):
        """Wrong jobs, an empty job, a task out of range: named."""
        with pytest.raises(
            ValueError, match=r"'jobs' must be 'ps' and 'worker', once each; got \['worker'\]"
        ):
            ClusterPlacement(jobs={"worker": ["b:1"]}, job="worker", task=0, origin="x")
        with pytest.raises(
            ValueError, match=r"'jobs' needs at least one address per job; \['ps'\] have none"
        ):
            ClusterPlacement(jobs={"ps": [], "worker": ["b:1"]}, job="worker", task=0, origin="x")
        with pytest.raises(ValueError, match=r"'task' must be in \[0, 1\) for job 'worker'; got 1"):
            ClusterPlacement(
                jobs={"ps": ["a:1"], "worker": ["b:1"]}, job="worker", task=1, origin="x"
            )


class TestClusterPlacementFromEnvironment:
    """`cluster_placement`: TF_CONFIG first, then SLURM, else a clear refusal."""

    def test_tf_config_first(self):
        """TF_CONFIG wins over a SLURM step in the same environment."""
        env = {"TF_CONFIG": tf_config(TFJOB, "ps", 1), "SLURM_JOB_ID": "5", "SLURM_PROCID": "0"}
        assert cluster_placement(env).origin == "TF_CONFIG task ps:1"

    def test_slurm(self):
        """A SLURM step with TOWERKIT_PS_TASKS and TOWERKIT_CLUSTER_PORT."""
        env = {
            "SLURM_JOB_ID": "5",
            "SLURM_PROCID": "2",
            "SLURM_LOCALID": "0",
            "SLURM_STEP_NODELIST": "n[1-2]",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
            "TOWERKIT_PS_TASKS": "2",
            "TOWERKIT_CLUSTER_PORT": "4000",
        }
        placement = cluster_placement(env)
        assert (placement.job, placement.task) == ("worker", 0)
        assert placement.cluster_dict() == {
            "ps": ["n1:4000", "n1:4001"],
            "worker": ["n2:4000", "n2:4001"],
        }

    def test_fail(self):
        """Neither: the message names both ways and the server argument."""
        with pytest.raises(
            ValueError, match=r"no cluster given and none in the environment: set TF_CONFIG"
        ):
            cluster_placement({"PATH": "/bin"})
        env = {
            "SLURM_JOB_ID": "5",
            "SLURM_PROCID": "0",
            "SLURM_NODELIST": "a",
            "SLURM_TASKS_PER_NODE": "2",
            "TOWERKIT_PS_TASKS": "one",
        }
        with pytest.raises(ValueError, match=r"TOWERKIT_PS_TASKS must be an integer; got 'one'"):
            cluster_placement(env)


class TestExitIsRetryable:
    """The operators' ExitCode rule: 128 and up retried, 1-127 permanent."""

    def test_preempted_is_retried(self):
        """A preempted run's status is retried; an uncaught error's is not."""
        assert exit_is_retryable(PREEMPTED_EXIT_STATUS)
        assert not exit_is_retryable(1)

    @given(st.integers(0, 255))
    def test_rule(self, status):
        """Exactly the statuses of 128 and above."""
        assert exit_is_retryable(status) == (status >= 128)
