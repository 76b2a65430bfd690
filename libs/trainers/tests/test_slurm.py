"""A SLURM step read from srun's variables: host lists, tasks per node, the layout of tasks."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from towerkit.trainers import (
    SlurmStep,
    expand_hostlist,
    expand_tasks_per_node,
    slurm_placement,
    slurm_step,
)
from towerkit.trainers.parallel._hvd_slurm import _all_started, join_slurm_step
from towerkit.trainers.parallel._slurm import horovod_environment


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on 127.0.0.1 now."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def as_rank(step: SlurmStep, rank: int) -> SlurmStep:
    """`step` seen from task `rank`."""
    return attrs.evolve(step, procid=rank, localid=step.task_slots()[rank][1])


def _ranges(numbers: list[int], width: int) -> str:
    """SLURM's bracket body for sorted distinct `numbers`, zero-padded to `width`."""
    pieces, start = [], 0
    for i in range(1, len(numbers) + 1):
        if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
            first, last = numbers[start], numbers[i - 1]
            a, b = str(first).zfill(width), str(last).zfill(width)
            pieces.append(a if first == last else f"{a}-{b}")
            start = i
    return ",".join(pieces)


@st.composite
def host_groups(draw):
    """[(prefix, sorted numbers, width)]: a host list as SLURM compresses it, and its hosts."""
    groups = []
    for k in range(draw(st.integers(1, 3))):
        numbers = sorted(draw(st.sets(st.integers(0, 120), min_size=1, max_size=12)))
        width = draw(st.sampled_from([0, 3]))
        groups.append((f"{draw(st.sampled_from(['node', 'gpu', 'cn-']))}{k}x", numbers, width))
    return groups


class TestExpandHostlist:
    """`expand_hostlist`: SLURM's compressed host lists, expanded in order."""

    @given(host_groups())
    def test_round_trip(self, groups):
        """A list compressed as SLURM prints it expands to its hosts, padding kept."""
        text = ",".join(f"{prefix}[{_ranges(numbers, width)}]" for prefix, numbers, width in groups)
        hosts = [
            f"{prefix}{str(n).zfill(width)}" for prefix, numbers, width in groups for n in numbers
        ]
        assert expand_hostlist(text) == tuple(hosts)

    def test_plain_and_products(self):
        """Plain names pass through; two brackets make every combination."""
        assert expand_hostlist("h1,h2") == ("h1", "h2")
        assert expand_hostlist("r[1-2]n[1,3]") == ("r1n1", "r1n3", "r2n1", "r2n3")

    @pytest.mark.parametrize(
        ("text", "match"),
        [
            ("node[1-3", r"host list 'node\[1-3': unbalanced brackets"),
            ("node[3-1]", r"host list 'node\[3-1\]': range '3-1' ends before it starts"),
            ("node[a]", r"host list 'node\[a\]': 'a' in brackets is not N or N-M"),
            ("a,,b", r"host list 'a,,b': an empty name"),
            ("n]1[", r"unbalanced brackets in 'n\]1\['"),
        ],
    )
    def test_fail(self, text, match):
        """Malformed lists: named."""
        with pytest.raises(ValueError, match=match):
            expand_hostlist(text)


class TestExpandTasksPerNode:
    """`expand_tasks_per_node`: ``2(x3),1``."""

    @given(st.lists(st.tuples(st.integers(1, 64), st.integers(1, 5)), min_size=1, max_size=6))
    def test_round_trip(self, runs):
        """Runs written ``N(xK)`` (or ``N`` once) expand to K copies of N each."""
        text = ",".join(f"{n}(x{k})" if k > 1 else str(n) for n, k in runs)
        assert expand_tasks_per_node(text) == tuple(n for n, k in runs for _ in range(k))

    def test_fail(self):
        """A piece that is not N or N(xK)."""
        with pytest.raises(
            ValueError, match=r"tasks per node '2\(3\)': '2\(3\)' is not N or N\(xK\)"
        ):
            expand_tasks_per_node("2(3)")


@st.composite
def steps(draw):
    """A SlurmStep of 1-4 nodes, 1-4 tasks each, seen from any of its tasks."""
    counts = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    nodes = tuple(f"n{i}" for i in range(len(counts)))
    slots = [(node, k) for node, c in zip(nodes, counts) for k in range(c)]
    procid = draw(st.integers(0, len(slots) - 1))
    return SlurmStep(
        job_id=draw(st.integers(1, 10**6)),
        procid=procid,
        localid=slots[procid][1],
        nodes=nodes,
        tasks_per_node=counts,
    )


class TestSlurmStep:
    """`SlurmStep` and `slurm_step`: one task of a step."""

    def test_from_srun(self):
        """The variables srun set in task 3 of a 2-node step (SLURM 22.05.8, captured in tests/slurm)."""
        env = {
            "SLURMD_NODENAME": "tkn2",
            "SLURM_JOB_ID": "1",
            "SLURM_JOB_NODELIST": "tkn[1-2]",
            "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1",
            "SLURM_NTASKS": "4",
            "SLURM_PROCID": "3",
            "SLURM_STEP_ID": "0",
            "SLURM_STEP_NODELIST": "tkn[1-2]",
            "SLURM_STEP_NUM_TASKS": "4",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
            "SLURM_TASKS_PER_NODE": "2(x2)",
        }
        step = slurm_step(env)
        assert step == SlurmStep(
            job_id=1, procid=3, localid=1, nodes=("tkn1", "tkn2"), tasks_per_node=(2, 2)
        )
        assert step.task_slots()[3] == ("tkn2", 1)
        assert slurm_step({**env, "SLURM_RESTART_COUNT": "1"}).restart_count == 1
        assert slurm_step({"SLURM_JOB_ID": "41"}) is None

    def test_repr(self):
        """Its repr shows every field."""
        step = SlurmStep(job_id=1, procid=0, localid=0, nodes=["a"], tasks_per_node=["1"])
        assert repr(step) == (
            "SlurmStep(job_id=1, procid=0, localid=0, nodes=('a',), tasks_per_node=(1,), restart_count=0)"
        )

    def test_fail(self):
        """Counts that do not pair with nodes, a rank out of range, a cyclic layout."""
        with pytest.raises(
            ValueError,
            match=r"'nodes' and 'tasks_per_node' must pair up, one count per node; got 2 node",
        ):
            SlurmStep(job_id=1, procid=0, localid=0, nodes=("a", "b"), tasks_per_node=(1,))
        with pytest.raises(ValueError, match=r"'procid' must be in \[0, 2\); got 2"):
            SlurmStep(job_id=1, procid=2, localid=0, nodes=("a",), tasks_per_node=(2,))
        with pytest.raises(
            ValueError,
            match=r"task 1 has local id 0, but the step's block layout puts it at 1 on a: towerkit needs SLURM's block distribution",
        ):
            SlurmStep(job_id=1, procid=1, localid=0, nodes=("a", "b"), tasks_per_node=(2, 2))
        with pytest.raises(ValueError, match=r"SLURM_LOCALID must be an integer >= 0; got 'x'"):
            slurm_step({"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "x"})
        with pytest.raises(
            ValueError, match=r"has SLURM_PROCID but none of \['SLURM_STEP_NODELIST'"
        ):
            slurm_step({"SLURM_JOB_ID": "1", "SLURM_PROCID": "0"})

    @given(steps(), st.integers(1, 3))
    def test_placement_is_a_bijection(self, step, num_ps):
        """Ranks below num_ps are ps, the rest workers in rank order; addresses distinct, on the task's node."""
        if num_ps >= step.ntasks:
            with pytest.raises(ValueError, match=r"'num_ps' must be >= 1 and leave a worker"):
                slurm_placement(step, num_ps)
            return
        placement = slurm_placement(step, num_ps)
        expected = ("ps", step.procid) if step.procid < num_ps else ("worker", step.procid - num_ps)
        assert (placement.job, placement.task) == expected
        addresses = placement.addresses("ps") + placement.addresses("worker")
        assert len(set(addresses)) == step.ntasks
        node, local = step.task_slots()[step.procid]
        host, port = placement.addresses(placement.job)[placement.task].split(":")
        assert host == node
        assert int(port) == 30000 + (step.job_id % 1000) * 32 + local

    def test_port_range(self):
        """Ports past 65535: refused."""
        step = SlurmStep(job_id=1, procid=0, localid=0, nodes=("a",), tasks_per_node=(2,))
        with pytest.raises(
            ValueError, match=r"'port' must leave ports 65535..65536 in 1..65535; got 65535"
        ):
            slurm_placement(step, 1, port=65535)


class TestHorovodEnvironment:
    """`horovod_environment`: what horovodrun would give each task, from the step."""

    @given(steps(), st.integers(1000, 60000))
    def test_slots_as_horovod_numbers_them(self, step, port):
        """Ranks are SLURM's; local ranks per node; cross ranks number the nodes holding a local rank."""
        slots = [dict(horovod_environment(as_rank(step, r), port)) for r in range(step.ntasks)]
        assert [int(s["HOROVOD_RANK"]) for s in slots] == list(range(step.ntasks))
        assert {s["HOROVOD_SIZE"] for s in slots} == {str(step.ntasks)}
        for node, count in zip(step.nodes, step.tasks_per_node):
            mine = [s for s in slots if s["HOROVOD_HOSTNAME"] == node]
            assert sorted(int(s["HOROVOD_LOCAL_RANK"]) for s in mine) == list(range(count))
            assert {s["HOROVOD_LOCAL_SIZE"] for s in mine} == {str(count)}
        for local in {s["HOROVOD_LOCAL_RANK"] for s in slots}:
            peers = [s for s in slots if s["HOROVOD_LOCAL_RANK"] == local]
            assert sorted(int(s["HOROVOD_CROSS_RANK"]) for s in peers) == list(range(len(peers)))
            assert {s["HOROVOD_CROSS_SIZE"] for s in peers} == {str(len(peers))}
        rendezvous = {
            (s["HOROVOD_GLOO_RENDEZVOUS_ADDR"], s["HOROVOD_GLOO_RENDEZVOUS_PORT"]) for s in slots
        }
        assert rendezvous == {(step.nodes[0], str(port + max(step.tasks_per_node)))}

    def test_join_slurm_step_leaves_launchers_alone(self):
        """Under a launcher (mpirun's, horovodrun's variables) or outside SLURM, nothing changes."""
        launched = {"SLURM_JOB_ID": "41", "SLURM_PROCID": "1", "OMPI_COMM_WORLD_RANK": "1"}
        assert not join_slurm_step(launched)
        assert "HOROVOD_RANK" not in launched
        assert not join_slurm_step({"PATH": "/bin"})

    def test_start_wait_is_bounded(self):
        """No rendezvous server answering: the wait ends at its bound, naming the rendezvous."""
        (port,) = free_ports(1)
        with pytest.raises(
            TimeoutError,
            match=rf"rank 1 of 2, rendezvous 127.0.0.1:{port}\): the rendezvous server never answered within 1 s",
        ):
            _all_started(f"127.0.0.1:{port}", 1, 2, 1.0)

    @pytest.mark.horovod
    @pytest.mark.skipif(
        importlib.util.find_spec("horovod") is None,
        reason="horovod not installed: run nox -s horovod",
    )
    def test_ranks_wait_for_each_other(self):
        """Through horovod's own rendezvous server: each rank returns once both said they started."""
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

        (port,) = free_ports(1)
        server = RendezvousHTTPServer(("127.0.0.1", port), RendezvousHandler, 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            done = []
            late = threading.Thread(
                target=lambda: (
                    time.sleep(2),
                    _all_started(f"127.0.0.1:{port}", 1, 2, 30),
                    done.append(1),
                )
            )
            late.start()
            start = time.monotonic()
            _all_started(f"127.0.0.1:{port}", 0, 2, 30)
            assert time.monotonic() - start >= 1.5  # rank 0 waited for rank 1
            late.join(30)
            assert done == [1]
        finally:
            server.shutdown()
