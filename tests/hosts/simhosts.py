"""Simulated hosts: Linux network namespaces on one bridge, an ssh server in each.

`SimulatedHosts` makes N "hosts" on this machine, each a network namespace with its
own interface (the same name, ``tknet``, in each, as identical machines have) and its
own address in ``10.213.0.0/24``, joined by a bridge that has no address: traffic goes
from namespace to namespace only. Each runs ``sshd`` on its own configuration, with a
throwaway host key and a throwaway client key made in a temporary directory, and its own ``/etc/hosts`` (``/etc/netns/<name>/hosts``)
where this machine's name resolves to the host's address; an ``ssh``
wrapper on ``PATH`` (first in `env`) uses that key and known-hosts file, so nothing in
the user's ``~/.ssh`` is read or written. The file system is shared, as a shared disk.

Names carry this process's id and a letter (namespaces ``tkh<pid><a>-<i>``, bridge
``tkb<pid><a>``), so two
runs never clash, and leftovers of a run whose process is gone are removed at the next
start. `close` (and leaving the ``with`` block, whatever happened) kills every process
left in the namespaces, deletes them and the bridge, and removes the directory.

It needs root (``CAP_NET_ADMIN``), ``ip`` and ``sshd``; `missing_requirements` says what
is absent.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

SUBNET = "10.213.0"
"""The first three octets of the hosts' addresses (host i is ``SUBNET.(i + 1)``)."""

IFACE = "tknet"
"""The network interface of every simulated host (``--network-interface`` for horovod)."""

SSHD = "/usr/sbin/sshd"
NAME_RE = re.compile(r"^tk[hb](\d+)[a-z](-\d+)?$")
_made_here = [0]
"""How many sets of hosts this process made: a letter of their names."""


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command, output captured; a failure raises with the command's output."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        msg = f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}"
        raise RuntimeError(msg)
    return done


def missing_requirements() -> list[str]:
    """What this machine lacks to simulate hosts (empty when nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces need CAP_NET_ADMIN)")
    for tool in ("ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if not os.path.exists(SSHD):
        missing.append(f"{SSHD} (openssh-server)")
    return missing


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove namespaces and bridges of earlier runs whose process is gone; their names."""
    removed = []
    for name in run("ip", "netns", "list").stdout.split():
        match = NAME_RE.match(name)
        if match and match.group(2) and not _pid_alive(int(match.group(1))):
            _kill_namespace(name)
            removed.append(name)
    for line in run("ip", "-o", "link", "show", "type", "bridge").stdout.splitlines():
        name = line.split(":")[1].strip()
        match = NAME_RE.match(name)
        if match and not match.group(2) and not _pid_alive(int(match.group(1))):
            run("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed


def _kill_namespace(name: str) -> None:
    """SIGKILL every process in namespace `name`, then delete it."""
    for _ in range(5):
        pids = run("ip", "netns", "pids", name, check=False).stdout.split()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
    run("ip", "netns", "del", name, check=False)
    shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


SSHD_CONFIG = """\
Port 22
ListenAddress {address}
HostKey {tmp}/host_key
PidFile {tmp}/sshd-{index}.pid
AuthorizedKeysFile {tmp}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
AcceptEnv *
"""

SSH_CONFIG = """\
Host {subnet}.*
    User root
    IdentityFile {tmp}/user_key
    IdentitiesOnly yes
    UserKnownHostsFile {tmp}/known_hosts
    StrictHostKeyChecking no
    BatchMode yes
    LogLevel ERROR
    ConnectTimeout 10
"""


class SimulatedHosts:
    """`count` namespaces on a bridge, each with an address and an ssh server.

    Attributes:
        names: the namespaces, one per host.
        addresses: their addresses, in the same order.
        tmp: the temporary directory (keys, configurations, the ``ssh`` wrapper).
        identity_file: the client key every host accepts.
    """

    def __init__(self, count: int) -> None:
        if count < 1 or count > 8:
            msg = f"'count' must be 1 to 8 hosts; got {count!r}"
            raise ValueError(msg)
        missing = missing_requirements()
        if missing:
            msg = f"cannot simulate hosts: missing {', '.join(missing)}"
            raise RuntimeError(msg)
        tag = f"{os.getpid()}{'abcdefghijklmnopqrstuvwxyz'[_made_here[0] % 26]}"
        _made_here[0] += 1
        self.bridge = f"tkb{tag}"
        self.names = [f"tkh{tag}-{i}" for i in range(count)]
        self.veths = [f"tkv{tag}-{i}" for i in range(count)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(count)]
        self.tmp = Path(tempfile.mkdtemp(prefix="tk-hosts-"))
        self.identity_file = str(self.tmp / "user_key")
        self.sshd: list[subprocess.Popen[bytes]] = []
        self._made: list[str] = []
        try:
            remove_stale()
            self._network()
            self._ssh()
        except BaseException:
            self.close()
            raise

    def _network(self) -> None:
        run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made.append(self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for name, veth, address in zip(self.names, self.veths, self.addresses):
            run("ip", "netns", "add", name)
            self._made.append(name)
            peer = f"{veth}p"
            run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer, "netns", name)
            run("ip", "link", "set", veth, "master", self.bridge, "up")
            run("ip", "-n", name, "link", "set", peer, "name", IFACE)
            run("ip", "-n", name, "addr", "add", f"{address}/24", "dev", IFACE)
            run("ip", "-n", name, "link", "set", IFACE, "up")
            run("ip", "-n", name, "link", "set", "lo", "up")
            self._hosts_file(name, address)

    def _hosts_file(self, name: str, address: str) -> None:
        """This machine's name resolves to the host's own address inside its namespace.

        ``ip netns exec`` mounts ``/etc/netns/<name>/hosts`` over ``/etc/hosts``; horovod
        0.28's gloo contexts of process sets bind to the address the machine's name
        resolves to (not to the network interface asked for), as on a real host whose
        name resolves to its address on the network.
        """
        folder = Path("/etc/netns") / name
        folder.mkdir(parents=True, exist_ok=True)
        me = socket.gethostname()
        try:
            lines = Path("/etc/hosts").read_text().splitlines()
        except OSError:
            lines = []
        kept = [ln for ln in lines if me not in ln.split()[1:]]
        (folder / "hosts").write_text("\n".join([f"{address} {me}", *kept]) + "\n")

    def _ssh(self) -> None:
        tmp = self.tmp
        for key in ("host_key", "user_key"):
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / key))
        shutil.copy(tmp / "user_key.pub", tmp / "authorized_keys")
        (tmp / "ssh_config").write_text(SSH_CONFIG.format(subnet=SUBNET, tmp=tmp))
        bindir = tmp / "bin"
        bindir.mkdir()
        wrapper = bindir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {tmp}/ssh_config "$@"\n')
        wrapper.chmod(0o755)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
        for index, (name, address) in enumerate(zip(self.names, self.addresses)):
            config = tmp / f"sshd-{index}.conf"
            config.write_text(SSHD_CONFIG.format(address=address, tmp=tmp, index=index))
            log = open(tmp / f"sshd-{index}.log", "wb")  # noqa: SIM115 (closed with the process)
            self.sshd.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", name, SSHD, "-D", "-e", "-f", str(config)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
        for index in range(len(self.names)):
            self._wait_for_ssh(index)

    def _wait_for_ssh(self, index: int, limit: float = 30.0) -> None:
        end = time.monotonic() + limit
        while True:
            if self.sshd[index].poll() is not None:
                log = (self.tmp / f"sshd-{index}.log").read_text(errors="replace")
                msg = f"sshd of {self.names[index]} exited: {log}"
                raise RuntimeError(msg)
            done = subprocess.run(
                [*self.exec_argv(0), str(self.tmp / "bin" / "ssh"), self.addresses[index], "true"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if done.returncode == 0:
                return
            if time.monotonic() > end:
                msg = f"no ssh to {self.addresses[index]} within {limit:g} s: {done.stderr}"
                raise RuntimeError(msg)
            time.sleep(0.3)

    def exec_argv(self, index: int) -> list[str]:
        """The command prefix that runs a program on host `index`."""
        return ["ip", "netns", "exec", self.names[index]]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) with the ``ssh`` wrapper first on PATH."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.tmp / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def pids(self, index: int) -> list[int]:
        """The processes running in host `index`'s namespace."""
        out = run("ip", "netns", "pids", self.names[index], check=False).stdout
        return [int(p) for p in out.split()]

    def cut(self, index: int) -> None:
        """Pull host `index`'s cable: its link to the bridge goes down, nothing is closed."""
        run("ip", "link", "set", self.veths[index], "down")

    def reconnect(self, index: int) -> None:
        """Plug host `index`'s cable back in."""
        run("ip", "link", "set", self.veths[index], "master", self.bridge, "up")

    def reachable(self, source: int, target: int, port: int = 22) -> bool:
        """Whether host `source` can open a TCP connection to host `target`'s `port`."""
        code = (
            "import socket,sys\n"
            f"s=socket.create_connection(('{self.addresses[target]}',{port}),timeout=3)\n"
        )
        done = subprocess.run(
            [*self.exec_argv(source), "python3", "-c", code], capture_output=True, timeout=30
        )
        return done.returncode == 0

    def close(self) -> None:
        """Kill everything in the namespaces, delete them and the bridge, remove the directory."""
        for proc in self.sshd:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for name in [n for n in self._made if n in self.names]:
            _kill_namespace(name)
        for proc in self.sshd:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if self.bridge in self._made:
            run("ip", "link", "del", self.bridge, check=False)
        self._made = []
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> SimulatedHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def existing_names(pid: int) -> list[str]:
    """The namespaces and bridges of process `pid` that exist now (for teardown checks)."""
    names = [
        n
        for n in run("ip", "netns", "list").stdout.split()
        if (m := NAME_RE.match(n)) and int(m.group(1)) == pid
    ]
    links = run("ip", "-o", "link", "show").stdout
    names += re.findall(rf"^\d+: (tkb{pid}[a-z])[:@]", links, re.MULTILINE)
    return names


def free_port() -> int:
    """A TCP port free on this machine now (namespaces have every port free)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def host_list(addresses: Sequence[str], slots: int = 1) -> list[str]:
    """``["addr:slots", ...]`` for horovod's ``-H``."""
    return [f"{a}:{slots}" for a in addresses]
