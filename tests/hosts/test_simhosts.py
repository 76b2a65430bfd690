"""The simulated hosts themselves: addresses, ssh between them, a cut link, a clean teardown."""

from __future__ import annotations

import os
import subprocess

import pytest
from simhosts import IFACE, SimulatedHosts, existing_names, missing_requirements

pytestmark = pytest.mark.procs


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_ssh_between_hosts(hosts):
    """From host 0, ssh reaches every host, each answering from its own namespace."""
    for index, address in enumerate(hosts.addresses):
        done = subprocess.run(
            [*hosts.exec_argv(0), "ssh", address, "readlink /proc/self/ns/net; hostname -I"],
            env=hosts.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        netns, addresses = done.stdout.split("\n")[:2]
        sshd_ns = os.readlink(f"/proc/{hosts.sshd[index].pid}/ns/net")
        assert netns == sshd_ns
        assert addresses.split() == [address]
    assert len({os.readlink(f"/proc/{p.pid}/ns/net") for p in hosts.sshd}) == len(hosts.names)


def test_interface_and_isolation(hosts):
    """Each host has lo and the shared interface name only; the outside is not reachable."""
    for name in hosts.names:
        links = subprocess.run(
            ["ip", "-n", name, "-o", "link", "show"], capture_output=True, text=True, check=True
        ).stdout
        names = sorted(ln.split(":")[1].strip().split("@")[0] for ln in links.splitlines())
        assert names == sorted([IFACE, "lo"])
        routes = subprocess.run(
            ["ip", "-n", name, "route"], capture_output=True, text=True, check=True
        ).stdout
        assert "default" not in routes


def test_cut_and_reconnect(hosts):
    """A cut host is unreachable from the others (and they from it) until reconnected."""
    assert hosts.reachable(0, 1)
    assert hosts.reachable(1, 0)
    hosts.cut(1)
    assert not hosts.reachable(0, 1)
    assert not hosts.reachable(1, 2)
    assert hosts.reachable(0, 2)
    hosts.reconnect(1)
    assert hosts.reachable(0, 1)


def test_teardown_leaves_nothing():
    """Namespaces, bridge, sshd processes, /etc/netns entries and keys are gone after close."""
    if missing_requirements():
        pytest.skip(f"needs {missing_requirements()}")
    with SimulatedHosts(2) as made:
        pids = [p.pid for p in made.sshd]
        tmp = made.tmp
        before = set(existing_names(os.getpid()))
        assert {*made.names, made.bridge} <= before
    assert not {*made.names, made.bridge} & set(existing_names(os.getpid()))
    assert not tmp.exists()
    for name in made.names:
        assert not os.path.exists(f"/etc/netns/{name}")
    for pid in pids:
        assert not _alive(pid)


def test_failed_setup_cleans_up(monkeypatch):
    """A setup that fails half way (sshd refuses its configuration) leaves nothing behind."""
    if missing_requirements():
        pytest.skip(f"needs {missing_requirements()}")
    import simhosts

    before = set(existing_names(os.getpid()))
    monkeypatch.setattr(simhosts, "SSHD_CONFIG", simhosts.SSHD_CONFIG + "NoSuchOption yes\n")
    with pytest.raises(RuntimeError, match=r"sshd of tkh.* exited"):
        SimulatedHosts(2)
    assert set(existing_names(os.getpid())) == before
