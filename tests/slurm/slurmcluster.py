"""A real SLURM cluster on simulated hosts: munged, one slurmctld, one slurmd per host.

`SlurmCluster` takes `SimulatedHosts` (network namespaces on a bridge, ``tests/hosts``)
and starts Debian's ``slurm-wlm`` daemons on them: one ``munged`` with a throwaway key
(its socket on the shared file system, so every namespace reaches it), ``slurmctld``
in host 0's namespace, and a ``slurmd`` in each host's namespace as node ``tkn<i+1>``
(``NodeAddr`` the host's address). So srun's steps cross real network links, each node
its own slurmd, as on a cluster; the file system is shared, as a cluster's is.
Everything runs as root (``SlurmUser=root``), processes are tracked by process
group (``proctrack/pgid``; no cgroups here), state and spool live in a temporary
directory, and jobs may be requeued (``JobRequeue=1``). `close` kills every daemon and
removes the directory, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo")

SLURM_CONF = """\
ClusterName=towerkit
SlurmctldHost={controller}({controller_address})
MailProg=/bin/true
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={tmp}/munge.socket
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=5
SchedulerParameters=defer_batch
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool-%n
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd-%n.pid
SlurmctldLogFile={tmp}/slurmctld.log
SlurmdLogFile={tmp}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
{nodes}
PartitionName=tk Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def missing_requirements() -> list[str]:
    """What this machine lacks for a SLURM cluster (empty when nothing)."""
    return [name for name in DAEMONS if shutil.which(name) is None]


class SlurmCluster:
    """SLURM on `hosts`: a controller on host 0, a node ``tkn<i+1>`` on every host.

    Attributes:
        nodes: the node names, host by host.
        tmp: the temporary directory (key, configuration, state, spool, logs).
        conf: the configuration file (``SLURM_CONF`` in `env`).
    """

    CPUS = 4
    """CPUs each node says it has (``config_overrides``: more than this machine's, on purpose)."""

    def __init__(self, hosts: object, start_within: float = 60.0) -> None:
        self.hosts = hosts
        self.nodes = [f"tkn{i + 1}" for i in range(len(hosts.names))]
        self.tmp = Path(tempfile.mkdtemp(prefix="tk-slurm-"))
        self.conf = self.tmp / "slurm.conf"
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            self._names()
            self._munge()
            self._configure()
            self._start(start_within)
        except BaseException:
            self.close()
            raise

    def _names(self) -> None:
        """Every node name resolves to its host's address in every namespace."""
        for name in self.hosts.names:
            hosts_file = Path("/etc/netns") / name / "hosts"
            lines = [f"{a} {n}" for a, n in zip(self.hosts.addresses, self.nodes)]
            hosts_file.write_text(hosts_file.read_text() + "\n".join(lines) + "\n")

    def _munge(self) -> None:
        key = self.tmp / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        argv = [
            "munged",
            "--foreground",
            "--force",
            f"--socket={self.tmp}/munge.socket",
            f"--key-file={key}",
            f"--pid-file={self.tmp}/munged.pid",
            f"--log-file={self.tmp}/munged.log",
            f"--seed-file={self.tmp}/munged.seed",
        ]
        self._spawn(argv, "munged")
        self._wait(lambda: (self.tmp / "munge.socket").exists(), 20, "munged's socket")

    def _configure(self) -> None:
        (self.tmp / "state").mkdir()
        for node in self.nodes:
            (self.tmp / f"spool-{node}").mkdir()
        # slurmd initializes a cgroup plugin whatever the tracking; autodetection fails on
        # a hybrid hierarchy (a tmpfs of v1 controllers), so name v1 (used for nothing)
        (self.tmp / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={a} CPUs={self.CPUS} State=UNKNOWN"
            for n, a in zip(self.nodes, self.hosts.addresses)
        )
        self.conf.write_text(
            SLURM_CONF.format(
                controller=socket.gethostname(),
                controller_address=self.hosts.addresses[0],
                tmp=self.tmp,
                nodes=nodes,
            )
        )

    def _spawn(self, argv: list[str], log: str, host: int | None = None) -> None:
        prefix = [] if host is None else self.hosts.exec_argv(host)
        with open(self.tmp / f"{log}.out", "wb") as out:
            self.procs.append(
                subprocess.Popen(
                    [*prefix, *argv], stdout=out, stderr=subprocess.STDOUT, env=self.env()
                )
            )

    def _start(self, limit: float) -> None:
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld", host=0)
        for index, node in enumerate(self.nodes):
            self._spawn(["slurmd", "-D", "-N", node, "-f", str(self.conf)], f"slurmd-{node}", index)

        def idle() -> bool:
            done = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            return all(states.get(n) == "idle" for n in self.nodes)

        self._wait(idle, limit, "every node idle in sinfo")

    def _wait(self, ready: object, limit: float, what: str) -> None:
        end = time.monotonic() + limit
        while not ready():  # type: ignore[operator]
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > end:
                msg = f"SLURM: no {what} within {limit:g} s (exited: {dead}); logs:\n{self.logs()}"
                raise RuntimeError(msg)
            time.sleep(0.3)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) with ``SLURM_CONF`` set."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(
        self, *argv: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """A SLURM command, run on host 0 (the controller's), output captured."""
        done = subprocess.run(
            [*self.hosts.exec_argv(0), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
        )
        if check and done.returncode != 0:
            msg = f"{' '.join(argv)} failed ({done.returncode}): {done.stdout}{done.stderr}"
            raise RuntimeError(msg)
        return done

    def sbatch(self, script: Path, *options: str, cwd: Path, args: Sequence[str] = ()) -> int:
        """Submit `script` (with `args`) from `cwd`; its job id."""
        done = self.run("sbatch", "--parsable", f"--chdir={cwd}", *options, str(script), *args)
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job``'s fields of `job_id` (JobState, ExitCode, Restarts, ...)."""
        out = self.run("scontrol", "-o", "show", "job", str(job_id)).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_job(self, job_id: int, states: tuple[str, ...], limit: float) -> dict[str, str]:
        """Wait until `job_id` is in one of `states`; its fields."""
        end = time.monotonic() + limit
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            if time.monotonic() > end:
                msg = f"job {job_id} not {states} within {limit:g} s: {fields}\n{self.logs()}"
                raise TimeoutError(msg)
            time.sleep(0.5)

    def logs(self) -> str:
        """The daemons' logs, for a failure's message."""
        parts = []
        for path in sorted(self.tmp.glob("*.log")) + sorted(self.tmp.glob("*.out")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def close(self) -> None:
        """Cancel every job, kill every daemon, remove the directory."""
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "--user=root", check=False, timeout=10)
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        shutil.rmtree(self.tmp, ignore_errors=True)
