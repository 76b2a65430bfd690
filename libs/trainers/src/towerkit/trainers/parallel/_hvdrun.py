"""Launching a horovod job, on this machine or across hosts, with a bounded wall time.

A horovod rank that is alive but never joins a collective makes the others wait
forever; ``horovodrun`` itself has no overall deadline. `launch_horovod_job` runs the
launcher in its own process group and stops the whole group past a timeout, so a
script, a test or a CI job that starts horovod training always ends. Across hosts
(``hosts=``), the host list is checked before anything starts (`parse_hosts`,
`rank_hosts`), and a failed job says which rank failed first and on which host
(`first_failure`, read from the launcher's output). A rank of this machine whose
process is stopped (SIGSTOP) is named as the one that stopped answering, not the rank
whose collective then timed out waiting for it (`_hvd_watch`), and the launcher kills it
once it has stayed stopped for the gloo timeout.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

import attrs

from towerkit.callbacks.plumbing import stop_process_group
from towerkit.trainers.parallel._hvd_watch import (
    RankWatchState,
    advance_rank_watch,
    local_rank_states,
    mark_killed,
    overdue_ranks,
    stopped_ranks,
)

SSH_FAILURE = 255
"""The status ``ssh`` exits with when the remote process was killed by a signal or the
connection failed (it does not pass the signal on)."""


@attrs.frozen
class RankFailure:
    """The rank at fault: the one that stopped answering, or else the first to end with an error.

    Attributes:
        rank: the rank.
        host: its host (``localhost`` for a job on this machine).
        status: its exit status as the launcher saw it (128 + N or -N: killed by signal
            N; 255 for a rank on another host: ssh saw it killed by a signal, or lost
            the connection); -1 for a stopped rank the launcher reported no status of.
        stopped: whether the rank's process was stopped (SIGSTOP: alive, answering
            nothing) while the others waited on it; the others' errors followed from
            it. Seen only for ranks on the launcher's machine.

    .. versionchanged:: 0.2
        ``stopped``.
    """

    rank: int
    host: str
    status: int
    stopped: bool = False

    def line(self) -> str:
        """One line saying which rank failed first, where, and how.

        >>> RankFailure(1, "10.0.0.2", 255).line()
        '[horovod job failed: rank 1 on host 10.0.0.2 ended first (exit status 255: over ssh, a process killed by a signal or a lost connection)]'
        >>> RankFailure(0, "localhost", -9).line()
        '[horovod job failed: rank 0 on host localhost ended first (exit status -9, killed by SIGKILL)]'
        >>> RankFailure(1, "localhost", 137, stopped=True).line()
        '[horovod job failed: rank 1 on host localhost stopped answering (its process was stopped, as by SIGSTOP, while the other ranks waited on it; their errors follow from it)]'
        """
        if self.stopped:
            return (
                f"[horovod job failed: rank {self.rank} on host {self.host} stopped answering "
                "(its process was stopped, as by SIGSTOP, while the other ranks waited on it; "
                "their errors follow from it)]"
            )
        how = f"exit status {self.status}"
        if self.status == SSH_FAILURE:
            how += ": over ssh, a process killed by a signal or a lost connection"
        elif self.status < 0 or self.status > 128:
            signum = self.status - 128 if self.status > 128 else -self.status
            with contextlib.suppress(ValueError):
                how += f", killed by {signal.Signals(signum).name}"
        return f"[horovod job failed: rank {self.rank} on host {self.host} ended first ({how})]"


@attrs.frozen
class HorovodJob:
    """What a finished (or stopped) horovod job left.

    Attributes:
        returncode: the launcher's exit status; -1 when the job was stopped at the timeout.
        output: the launcher's standard output and error (every rank's lines, prefixed
            with the rank by horovod), plus a last line saying so when it was stopped.
        seconds: the wall time of the job.
        timed_out: whether the job was stopped at the timeout.
        failure: the first rank that failed and its host, when the launcher said so.
    """

    returncode: int
    output: str
    seconds: float
    timed_out: bool
    failure: RankFailure | None = None

    @property
    def ok(self) -> bool:
        """Whether every rank exited with status 0."""
        return self.returncode == 0 and not self.timed_out


HOST_RE = re.compile(r"^(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\])(?::(?P<slots>\d+))?$")


def parse_hosts(hosts: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``(host, slots)`` for each entry of a ``horovodrun -H`` list (slots default to 1).

    Entries are ``host`` or ``host:slots``; a single string may hold several, joined by
    commas, as ``-H`` takes them.

    >>> parse_hosts(["10.0.0.1:2", "node2"])
    (('10.0.0.1', 2), ('node2', 1))
    >>> parse_hosts(["a:1,b:3"])
    (('a', 1), ('b', 3))

    Raises:
        ValueError: an entry is not ``host[:slots]`` with slots >= 1, a host is listed
            twice, or the list is empty.
    """
    if isinstance(hosts, str):
        hosts = [hosts]
    entries = [e.strip() for item in hosts for e in str(item).split(",")]
    if not entries or entries == [""]:
        msg = "'hosts' must list at least one host ('host:slots'); got none"
        raise ValueError(msg)
    parsed: list[tuple[str, int]] = []
    for entry in entries:
        match = HOST_RE.match(entry)
        slots = int(match.group("slots") or 1) if match else 0
        if not match or slots < 1:
            msg = f"'hosts' entry {entry!r} is not 'host' or 'host:slots' with slots >= 1"
            raise ValueError(msg)
        if any(match.group("host") == h for h, _ in parsed):
            msg = f"'hosts' lists host {match.group('host')!r} twice; give its slots once"
            raise ValueError(msg)
        parsed.append((match.group("host"), slots))
    return tuple(parsed)


def rank_hosts(hosts: Sequence[str], processes: int) -> tuple[str, ...]:
    """The host of each rank: horovod fills each host's slots in the order given.

    >>> rank_hosts(["a:2", "b:2"], 3)
    ('a', 'a', 'b')

    Raises:
        ValueError: bad `hosts`, or fewer slots than `processes`.
    """
    parsed = parse_hosts(hosts)
    total = sum(s for _, s in parsed)
    if processes > total:
        msg = f"{processes} processes need {processes} slots; 'hosts' has {total}: {list(hosts)}"
        raise ValueError(msg)
    return tuple(h for h, s in parsed for _ in range(s))[:processes]


@attrs.frozen
class ElasticLaunch:
    """The elastic part of a horovod job's command line.

    Attributes:
        min_processes: the fewest ranks the job goes on with (``--min-np``).
        max_processes: the most ranks it grows to (``--max-np``).
        host_discovery_script: an executable that prints the available hosts, one
            ``host:slots`` a line (``--host-discovery-script``); horovod runs it every
            second, so rewriting it adds or removes hosts.
    """

    min_processes: int
    max_processes: int
    host_discovery_script: str

    def argv(self, processes: int) -> list[str]:
        """The launcher's elastic options for a job starting with `processes` ranks.

        >>> ElasticLaunch(2, 4, "/d.sh").argv(3)
        ['--min-np', '2', '--max-np', '4', '--host-discovery-script', '/d.sh']

        Raises:
            ValueError: not ``1 <= min_processes <= processes <= max_processes``.
        """
        lo, hi = self.min_processes, self.max_processes
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)) or not (
            1 <= lo <= processes <= hi
        ):
            msg = (
                "an elastic job needs 1 <= min_processes <= processes <= max_processes; got "
                f"min_processes={lo!r}, processes={processes}, max_processes={hi!r}"
            )
            raise ValueError(msg)
        return [
            "--min-np",
            str(lo),
            "--max-np",
            str(hi),
            "--host-discovery-script",
            str(self.host_discovery_script),
        ]


def horovod_launch_argv(
    command: Sequence[str],
    processes: int,
    *,
    python: str | None = None,
    hosts: Sequence[str] | None = None,
    network_interface: str | None = None,
    ssh_port: int | None = None,
    ssh_identity_file: str | None = None,
    elastic: ElasticLaunch | None = None,
) -> list[str]:
    """The ``horovodrun`` command line for `processes` ranks over gloo.

    Without `hosts` every rank runs on this machine (``-H localhost:N``); with them
    (``["host1:4", "host2:4"]``) horovod starts the ranks of other hosts over ssh, and
    binds gloo to `network_interface` on every host.

    >>> print(*horovod_launch_argv(["train.py"], 2, python="py"))
    py -m horovod.runner.launch -np 2 --gloo -H localhost:2 train.py
    >>> print(*horovod_launch_argv(["t.py"], 2, python="py", hosts=["h1:1", "h2"],
    ...                            network_interface="eth0"))
    py -m horovod.runner.launch -np 2 --gloo -H h1:1,h2:1 --disable-cache --network-interface eth0 t.py

    With `elastic` the hosts come from its discovery script (no `hosts`):

    >>> print(*horovod_launch_argv(["t.py"], 2, python="py",
    ...                            elastic=ElasticLaunch(1, 3, "d.sh")))
    py -m horovod.runner.launch -np 2 --gloo --min-np 1 --max-np 3 --host-discovery-script d.sh t.py

    Raises:
        ValueError: `processes` is not a positive int, `command` is empty, `hosts`
            is malformed or has fewer slots than `processes`, or `elastic` is given
            with `hosts` or bounds that do not hold `processes`.
    """
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        msg = f"'processes' must be an int >= 1; got {processes!r}"
        raise ValueError(msg)
    command = [str(c) for c in command]
    if not command:
        msg = "'command' must name the program each rank runs; got an empty command"
        raise ValueError(msg)
    exe = python or sys.executable
    head = [exe, "-m", "horovod.runner.launch", "-np", str(processes), "--gloo"]
    if elastic is not None:
        if hosts is not None:
            msg = "an elastic job takes its hosts from the discovery script; give no 'hosts'"
            raise ValueError(msg)
        head += elastic.argv(processes)
        if network_interface is not None:
            head += ["--network-interface", network_interface]
        if ssh_port is not None:
            head += ["--ssh-port", str(ssh_port)]
        if ssh_identity_file:
            head += ["--ssh-identity-file", str(ssh_identity_file)]
        return [*head, *command]
    if hosts is None:
        if network_interface is not None or ssh_port is not None or ssh_identity_file:
            msg = "'network_interface', 'ssh_port' and 'ssh_identity_file' need 'hosts'"
            raise ValueError(msg)
        return [*head, "-H", f"localhost:{processes}", *command]
    rank_hosts(hosts, processes)
    listed = ",".join(f"{h}:{s}" for h, s in parse_hosts(hosts))
    # horovod's cache of ssh and interface checks would outlive hosts that changed
    head += ["-H", listed, "--disable-cache"]
    if network_interface is not None:
        head += ["--network-interface", network_interface]
    if ssh_port is not None:
        head += ["--ssh-port", str(ssh_port)]
    if ssh_identity_file:
        head += ["--ssh-identity-file", str(ssh_identity_file)]
    return [*head, *command]


FIRST_FAILURE_RE = re.compile(r"Terminating remaining workers after failure of Process (\d+)\.")
EXIT_RE = re.compile(r"Process (\d+) exit with status code (-?\d+)\.")


def first_failure(output: str, hosts: Sequence[str]) -> RankFailure | None:
    """The first rank to fail in a launcher's `output`, on its host of `hosts` (by rank).

    >>> out = ["Process 1 exit with status code 137.",
    ...        "Terminating remaining workers after failure of Process 1."]
    >>> first_failure(" ".join(out), ["a", "b"])
    RankFailure(rank=1, host='b', status=137, stopped=False)
    >>> first_failure("all fine", ["a"]) is None
    True
    """
    statuses: dict[int, int] = {}
    order: list[int] = []
    for match in EXIT_RE.finditer(output):
        seen = int(match.group(1))
        if seen not in statuses:
            statuses[seen] = int(match.group(2))
            order.append(seen)
    named = FIRST_FAILURE_RE.search(output)
    first = int(named.group(1)) if named else (order[0] if order else None)
    if first is None or first not in statuses:
        return None
    host = hosts[first] if first < len(hosts) else "?"
    return RankFailure(first, host, statuses[first])


def blame_failure(
    first: RankFailure | None, stopped: Sequence[int], output: str, hosts: Sequence[str]
) -> RankFailure | None:
    """The rank to name: the lowest of the `stopped` ranks, else the launcher's `first`.

    A stopped rank ends nothing itself: the others fail waiting on it, and the launcher
    reports one of them first. With no rank stopped the launcher's report stands.

    >>> out = "Process 0 exit with status code 1. Process 1 exit with status code 137."
    >>> blame_failure(first_failure(out, ["a", "b"]), [1], out, ["a", "b"])
    RankFailure(rank=1, host='b', status=137, stopped=True)
    >>> blame_failure(None, [], out, ["a", "b"]) is None
    True
    """
    if not stopped:
        return first
    rank = min(stopped)
    statuses = {int(m.group(1)): int(m.group(2)) for m in reversed(list(EXIT_RE.finditer(output)))}
    host = hosts[rank] if 0 <= rank < len(hosts) else "?"
    return RankFailure(rank, host, statuses.get(rank, -1), stopped=True)


def launch_horovod_job(
    command: Sequence[str],
    processes: int = 2,
    *,
    timeout: float,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    gloo_timeout: float = 60.0,
    grace: float = 15.0,
    hosts: Sequence[str] | None = None,
    network_interface: str | None = None,
    ssh_port: int | None = None,
    ssh_identity_file: str | None = None,
    launcher_prefix: Sequence[str] = (),
    min_processes: int | None = None,
    max_processes: int | None = None,
    host_discovery_script: str | os.PathLike[str] | None = None,
    frozen_after: float | None = None,
) -> HorovodJob:
    """Run `command` as `processes` horovod ranks over gloo, within `timeout`.

    Without `hosts` the ranks run on this machine (``-H localhost:N``). With `hosts`
    (any list ``horovodrun -H`` takes: ``["10.0.0.1:4", "10.0.0.2:4"]``) the launcher
    starts the ranks of the other hosts over ssh (``ssh_port``, ``ssh_identity_file``;
    otherwise the ssh client's configuration), in the same working directory and with
    this environment, so the hosts must share `cwd` and the program (a shared disk, or
    the same paths on each). gloo binds to `network_interface` on every host, and the
    launcher must run on a machine that has it (the first host, as a rule).

    The launcher (``python -m horovod.runner.launch``, i.e. ``horovodrun``) runs in a
    new process group. Past `timeout` seconds the group gets SIGTERM, and SIGKILL
    `grace` seconds later; the job then counts as failed (``returncode == -1``). When a
    rank fails, the job's `failure` names the first rank lost and its host, and the
    output ends with that line.

    While the job runs, the launcher watches the state of each rank's process on this
    machine (every `WATCH_SECONDS`, in ``/proc``). A rank stopped (SIGSTOP) when the first
    rank ended, or stopped for `frozen_after` seconds (it is then killed, SIGKILL, which
    a stopped process cannot hold off), is the one `failure` names ("stopped
    answering"), not the rank whose collective timed out waiting on it. Ranks on other
    hosts are not watched: their failures are named as the launcher reports them.

    .. versionadded:: 0.2
        The watch of stopped ranks, and `frozen_after`.

    Args:
        command: the program and arguments each rank runs, e.g. ``[sys.executable,
            "train.py"]``.
        processes: how many ranks.
        timeout: the most seconds the whole job may take.
        cwd: the working directory of the job.
        env: variables added to this process's environment for the job.
        gloo_timeout: ``HOROVOD_GLOO_TIMEOUT_SECONDS`` unless `env` or the environment
            sets it: how long gloo waits for a rank at rendezvous and in collectives
            (and so how long the others wait for a host that fell off the network).
        grace: seconds between SIGTERM and SIGKILL when stopping.
        hosts: the hosts and their slots; None for this machine only.
        network_interface: the interface gloo uses on every host (``--network-interface``).
        ssh_port: the ssh port of the hosts.
        ssh_identity_file: the ssh key the launcher logs in with.
        launcher_prefix: a command the launcher runs under (``["ip", "netns", "exec",
            "h0"]``, ``["nice"]``); empty to run it directly.
        min_processes: with `max_processes` and `host_discovery_script`, an elastic
            job (for ``HorovodTrainer(elastic=True)``): it starts with `processes`
            ranks, goes on while at least `min_processes` are left, and grows to
            `max_processes` on the hosts the script lists (see `ElasticLaunch`).
        max_processes: the most ranks of an elastic job.
        host_discovery_script: the executable listing an elastic job's hosts.
        frozen_after: seconds a rank of this machine may stay stopped before the
            launcher kills it (at least `FROZEN_AFTER_MIN`); None for the gloo timeout
            in effect (the wait after which the other ranks fail anyway), or
            `FROZEN_AFTER_MIN` if that is shorter.

    Returns:
        A `HorovodJob`.

    Raises:
        ValueError: bad `processes`, `timeout`, `command`, `hosts` or `frozen_after`;
            elastic bounds given in part, or not holding `processes`.
        FileNotFoundError: `cwd` does not exist, or the discovery script.
    """
    elastic = _elastic_launch(min_processes, max_processes, host_discovery_script)
    argv = horovod_launch_argv(
        command,
        processes,
        hosts=hosts,
        network_interface=network_interface,
        ssh_port=ssh_port,
        ssh_identity_file=ssh_identity_file,
        elastic=elastic,
    )
    argv = [*map(str, launcher_prefix), *argv]
    if hosts is not None:
        placement = rank_hosts(hosts, processes)
    else:
        placement = ("?" if elastic else "localhost",) * processes
    if not timeout > 0:
        msg = f"'timeout' must be > 0 seconds; got {timeout!r}"
        raise ValueError(msg)
    if cwd is not None and not os.path.isdir(cwd):
        msg = f"'cwd' {os.fspath(cwd)!r} is not a directory"
        raise FileNotFoundError(msg)
    full_env = {
        "HOROVOD_GLOO_TIMEOUT_SECONDS": f"{gloo_timeout:g}",
        **os.environ,
        **(env or {}),
    }
    if frozen_after is None:
        try:
            frozen_after = float(full_env["HOROVOD_GLOO_TIMEOUT_SECONDS"])
        except ValueError:
            frozen_after = gloo_timeout
        frozen_after = max(frozen_after, FROZEN_AFTER_MIN)
    elif not frozen_after >= FROZEN_AFTER_MIN:
        msg = (
            f"'frozen_after' must be >= {FROZEN_AFTER_MIN:g} seconds (horovod's launcher "
            f"itself holds a rank stopped for up to 5 s while it ends a failed job); "
            f"got {frozen_after!r}"
        )
        raise ValueError(msg)
    started = time.monotonic()
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    ) as proc:
        out, watch = _watch_job(proc, started + timeout, frozen_after)
        if out is None:
            stop_process_group(proc, grace)
            out, _ = proc.communicate()
            out += f"\n[horovod job stopped after {timeout:g} s: a rank never finished]"
            failure = first_failure(out, placement)
            failure = blame_failure(failure, stopped_ranks(watch), out, placement)
            if failure is not None:
                out += "\n" + failure.line()
            return HorovodJob(-1, out, time.monotonic() - started, True, failure)
    failure = None
    if proc.returncode != 0:
        failure = first_failure(out, placement)
        failure = blame_failure(failure, stopped_ranks(watch), out, placement)
    if failure is not None:
        out += "\n" + failure.line()
    return HorovodJob(proc.returncode, out, time.monotonic() - started, False, failure)


FROZEN_AFTER_MIN = 10.0
"""The least `frozen_after`: horovod's launcher, ending a job after a failure, itself
stops (SIGSTOP) each remaining rank's shell for up to its 5 s grace before killing it,
and where the shell has exec'd the rank that is the rank's own process."""

WATCH_SECONDS = 0.5
"""How often the launcher samples the state of the ranks' processes: a rank stopped for a
gloo timeout (tens of seconds) is seen many times over; one sample reads ``/proc/*/stat``
(a few milliseconds)."""


def _watch_job(
    proc: subprocess.Popen[str], deadline: float, frozen_after: float
) -> tuple[str | None, RankWatchState]:
    """Wait for the launcher until `deadline`, watching the ranks of this machine.

    Returns the launcher's output (None at the deadline) and what the watch saw.
    """
    watch = RankWatchState()
    while True:
        # communicate() keeps what it has read across timeouts
        with contextlib.suppress(subprocess.TimeoutExpired):
            out, _ = proc.communicate(
                timeout=max(0.0, min(WATCH_SECONDS, deadline - time.monotonic()))
            )
            return out, watch
        now = time.monotonic()
        if now >= deadline:
            return None, watch
        ranks = local_rank_states(proc.pid)
        watch = advance_rank_watch(watch, {r: st for r, (_, st) in ranks.items()}, now)
        overdue = overdue_ranks(watch, now, frozen_after)
        for rank in overdue:
            with contextlib.suppress(ProcessLookupError):
                os.kill(ranks[rank][0], signal.SIGKILL)
        if overdue:
            watch = mark_killed(watch, overdue)


def _elastic_launch(
    min_processes: int | None,
    max_processes: int | None,
    script: str | os.PathLike[str] | None,
) -> ElasticLaunch | None:
    given = [v is not None for v in (min_processes, max_processes, script)]
    if not any(given):
        return None
    if not all(given):
        msg = (
            "an elastic job needs 'min_processes', 'max_processes' and "
            "'host_discovery_script' together; got "
            f"min_processes={min_processes!r}, max_processes={max_processes!r}, "
            f"host_discovery_script={script!r}"
        )
        raise ValueError(msg)
    path = os.path.abspath(os.fspath(script))  # type: ignore[arg-type]
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        msg = f"'host_discovery_script' {path!r} is not an executable file"
        raise FileNotFoundError(msg)
    return ElasticLaunch(int(min_processes), int(max_processes), path)  # type: ignore[arg-type]
