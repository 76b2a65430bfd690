"""The documented Kubernetes TFJob, run by contract: each replica started as the operator starts it.

The operator is not here; this test does what it does. From ``examples/cluster/tfjob.yaml``
it takes each replica's container (command, working directory, ``env``) and writes the
``TF_CONFIG`` the training operator writes (cluster keys the replica types in lower
case, addresses ``<job>-<type>-<i>.<namespace>.svc:<tfjob-port>``, the task, and
``"environment": "cloud"``). Three things differ, each said where it is done: every
address is ``127.0.0.1`` with a port of its own (no cluster DNS, one machine), ``/app``
is this repository and the ``/logs`` volume a temporary directory. The operator's
restart rule is applied to the exit codes: ``ExitCode`` retries 128 and above
(`exit_is_retryable`), ``Always`` retries any.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from example_modules import ROOT

from towerkit.trainers import exit_is_retryable

MANIFEST = ROOT / "examples" / "cluster" / "tfjob.yaml"
STEPS = 400
"""Steps per epoch (3 epochs): after the chief's first epoch, the rest lasts seconds."""

LIMIT = 400.0
"""Seconds a round of the job may take (TensorFlow starts slowly on a loaded machine)."""

pytestmark = [pytest.mark.procs, pytest.mark.slow, pytest.mark.timeout(1200)]


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


class OperatorRun:
    """The replicas of a TFJob manifest, as the operator starts them, on this machine."""

    def __init__(self, manifest: dict, logs: Path, extra_args: list[str]) -> None:
        self.name = manifest["metadata"]["name"]
        self.specs = manifest["spec"]["tfReplicaSpecs"]
        self.logs, self.extra = logs, extra_args
        self.replicas = [
            (t.lower(), i) for t, spec in self.specs.items() for i in range(spec["replicas"])
        ]
        ports = iter(free_ports(len(self.replicas)))
        # what the operator writes, and where it really is here
        self.written = {
            (t, i): f"{self.name}-{t}-{i}.default.svc:{self._port(t)}" for t, i in self.replicas
        }
        self.local = {key: f"127.0.0.1:{next(ports)}" for key in self.replicas}
        self.procs: dict[tuple[str, int], subprocess.Popen[str]] = {}
        self.outs: dict[tuple[str, int], Path] = {}

    def _port(self, kind: str) -> int:
        spec = next(s for t, s in self.specs.items() if t.lower() == kind)
        ports = spec["template"]["spec"]["containers"][0]["ports"]
        return next(p["containerPort"] for p in ports if p["name"] == "tfjob-port")

    def tf_config(self, kind: str, index: int) -> str:
        """TF_CONFIG of one replica: the operator's, its addresses made local."""
        cluster: dict[str, list[str]] = {}
        for t, i in self.replicas:
            cluster.setdefault(t, []).append(self.local[(t, i)])
        return json.dumps(
            {"cluster": cluster, "task": {"type": kind, "index": index}, "environment": "cloud"}
        )

    def start(self, key: tuple[str, int], round_: int) -> None:
        kind, index = key
        spec = next(s for t, s in self.specs.items() if t.lower() == kind)
        container = spec["template"]["spec"]["containers"][0]
        env = {**os.environ, **{e["name"]: e["value"] for e in container.get("env", [])}}
        env["TF_CONFIG"] = self.tf_config(kind, index)
        argv = [
            a.replace("/logs", str(self.logs), 1) if a.startswith("/logs") else a
            for a in container["command"]
        ]
        assert argv[0] == "python"
        assert container["workingDir"] == "/app"
        argv = [sys.executable, *argv[1:], *self.extra]
        self.outs[key] = self.logs.parent / f"{kind}{index}-{round_}.out"
        with open(self.outs[key], "w") as out:
            self.procs[key] = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )

    def output(self, key: tuple[str, int]) -> str:
        return self.outs[key].read_text(errors="replace")

    def wait(self) -> dict[tuple[str, int], int]:
        """Every replica's exit code; all killed past LIMIT (the test then fails)."""
        end = time.monotonic() + LIMIT
        while any(p.poll() is None for p in self.procs.values()):
            if time.monotonic() > end:
                self.kill()
                pytest.fail(
                    f"the job did not end within {LIMIT:g} s: {[self.output(k) for k in self.procs]}"
                )
            time.sleep(0.3)
        return {k: p.returncode for k, p in self.procs.items()}

    def kill(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def restart_wanted(policy: str, code: int) -> bool:
    """The training operator's decision for a replica that exited with `code`."""
    if policy == "Always":
        return True
    if policy == "ExitCode":
        return exit_is_retryable(code)
    return policy == "OnFailure" and code != 0


@pytest.fixture
def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def test_docs_show_the_files_as_they_are():
    """docs/cluster.md shows the sbatch script and the manifest the tests run, verbatim."""
    doc = (ROOT / "docs" / "cluster.md").read_text()
    blocks = dict(re.findall(r"```(bash|yaml)\n(.*?)```", doc, flags=re.DOTALL))
    assert blocks["bash"] == (ROOT / "examples" / "cluster" / "slurm.sbatch").read_text()
    assert blocks["yaml"] == MANIFEST.read_text()


def test_manifest_is_what_the_operator_reads(manifest):
    """A TFJob of PS, Chief and Worker, ExitCode for the trainers, the port named tfjob-port."""
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "TFJob")
    specs = manifest["spec"]["tfReplicaSpecs"]
    assert sorted(specs) == ["Chief", "PS", "Worker"]
    assert {t: s["restartPolicy"] for t, s in specs.items()} == {
        "PS": "Always",
        "Chief": "ExitCode",
        "Worker": "ExitCode",
    }
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow"  # the container the operator gives TF_CONFIG


def test_tfjob_preempted_restarted_resumes(manifest, tmp_path):
    """The chief evicted (SIGTERM) mid-run: trainers exit 143, the operator restarts, the run resumes and ends."""
    run = OperatorRun(
        manifest, tmp_path / "logs", ["--max-epoch", "3", "--steps-per-epoch", str(STEPS)]
    )
    assert run.written[("chief", 0)] == "towerkit-cluster-chief-0.default.svc:2222"
    for key in run.replicas:
        run.start(key, 0)
    chief = ("chief", 0)
    end = time.monotonic() + LIMIT
    while "epoch 1/3" not in run.output(chief):
        if run.procs[chief].poll() is not None or time.monotonic() > end:
            run.kill()
            pytest.fail(f"the chief never finished epoch 1: {run.output(chief)}")
        time.sleep(0.2)
    run.procs[chief].send_signal(signal.SIGTERM)  # the kubelet evicting the chief's pod
    codes = run.wait()
    assert codes == {("ps", 0): 0, ("chief", 0): 143, ("worker", 0): 143}, [
        run.output(k) for k in codes
    ]
    assert "preempted: saved at global step" in run.output(chief)
    policies = {
        t.lower(): s["restartPolicy"] for t, s in manifest["spec"]["tfReplicaSpecs"].items()
    }
    again = [k for k, code in codes.items() if restart_wanted(policies[k[0]], code)]
    assert sorted(again) == sorted(run.replicas)  # the ps comes back with the trainers
    for key in again:
        run.start(key, 1)
    codes = run.wait()
    assert codes == {k: 0 for k in run.replicas}, [run.output(k) for k in codes]
    assert "resuming from the newest checkpoint" in run.output(chief)
    assert f"finished at global step {3 * STEPS}" in run.output(chief)
    stats = json.loads((tmp_path / "logs" / "cluster" / "stats.json").read_text())
    assert [s["global_step"] for s in stats] == [STEPS, 2 * STEPS, 3 * STEPS]


def test_user_error_is_permanent(manifest, tmp_path):
    """A bad argument: every replica exits 2, which the ExitCode policy does not retry."""
    run = OperatorRun(manifest, tmp_path / "logs", ["--trainer", "bogus"])
    for key in run.replicas:
        run.start(key, 0)
    codes = run.wait()
    assert set(codes.values()) == {2}
    assert not restart_wanted("ExitCode", 2)


def test_evaluator_replica_refused(manifest, tmp_path):
    """An Evaluator replica exits 1 (permanent) saying why; the others' cluster leaves it out."""
    manifest["spec"]["tfReplicaSpecs"]["Evaluator"] = manifest["spec"]["tfReplicaSpecs"]["Worker"]
    run = OperatorRun(manifest, tmp_path / "logs", [])
    run.start(("evaluator", 0), 0)
    assert run.wait() == {("evaluator", 0): 1}
    assert "towerkit's cluster trainers run no evaluator task" in run.output(("evaluator", 0))
    assert not exit_is_retryable(1)
