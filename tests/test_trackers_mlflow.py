"""`MLflowMonitor` against a real MLflow tracking server, from real training processes.

The server is its own process (SQLite in a temporary folder); the runs are read back
through MLflow's client. A run's parameters, metric history per epoch, ``stats.json``
artifact and end status; a run preempted with SIGTERM and resumed continues the same
MLflow run; a server killed in the middle of a run costs one warning, not the run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from trackers_support import mlflow_server, need, run_id_of, train

pytestmark = [
    pytest.mark.procs,
    pytest.mark.xdist_group("trackers_mlflow"),
    pytest.mark.timeout(900),
]

STEPS = [4, 8, 12]  # the global step at each epoch's end (4 steps per epoch, 3 epochs)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    need("mlflow")
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as (uri, _):
        yield uri


def client_for(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def history(client, run_id, key):
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def test_run_params_metrics_artifacts_and_status(server, tmp_path):
    """Parameters from the trainer, the model and the user; every epoch's statistics at their steps."""
    logdir = tmp_path / "run"
    proc = train(logdir, "mlflow", "--run-name", "plain", env={"MLFLOW_TRACKING_URI": server})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MLflowMonitor" not in proc.stdout + proc.stderr.replace("View run", "")
    run_id = run_id_of(proc)
    recorded = json.loads((logdir / "tracker_runs.json").read_text())
    assert recorded["mlflow"] == {"run_id": run_id, "tracking_uri": server}

    client = client_for(server)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "plain"
    assert run.data.tags["suite"] == "trackers"
    assert client.get_experiment(run.info.experiment_id).name == "towerkit-tests"
    params = run.data.params
    assert params["trainer"] == "SimpleTrainer"
    assert params["model"] == "Model"
    assert params["optimizer"] == "MomentumOptimizer"
    assert (params["steps_per_epoch"], params["max_epoch"], params["starting_epoch"]) == (
        "4",
        "3",
        "1",
    )
    assert params["precision"] == "float32"
    assert params["steps_per_execution"] == "1"
    assert (params["batch"], params["optimizer_args/momentum"]) == ("8", "0.9")

    assert history(client, run_id, "lr") == [(4, 0.1), (8, 0.05), (12, pytest.approx(0.1 / 3))]
    assert history(client, run_id, "epoch") == [(4, 1.0), (8, 2.0), (12, 3.0)]
    stats = json.loads((logdir / "stats.json").read_text())
    costs = history(client, run_id, "cost")
    assert [s for s, _ in costs] == STEPS
    assert [v for _, v in costs] == pytest.approx([r["cost"] for r in stats])

    assert [a.path for a in client.list_artifacts(run_id)] == ["stats.json"]
    local = client.download_artifacts(run_id, "stats.json", str(tmp_path))
    assert json.loads(Path(local).read_text()) == stats


def test_preempted_run_continues_the_same_mlflow_run(server, tmp_path):
    """SIGTERM in epoch 2: the run is KILLED with epoch 1; the rerun resumes it and FINISHES it."""
    logdir = tmp_path / "run"
    env = {"MLFLOW_TRACKING_URI": server}
    # the URI as the monitor's argument first, then from the environment
    no_uri = {"MLFLOW_TRACKING_URI": ""}
    first = train(logdir, "mlflow", "--term-at", "6", "--tracking-uri", server, env=no_uri)
    assert first.returncode == 143, first.stdout + first.stderr
    run_id = run_id_of(first)
    client = client_for(server)
    assert client.get_run(run_id).info.status == "KILLED"
    assert history(client, run_id, "epoch") == [(4, 1.0)]

    second = train(logdir, "mlflow", env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert run_id_of(second) == run_id
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert history(client, run_id, "epoch") == [(4, 1.0), (8, 2.0), (12, 3.0)]
    assert history(client, run_id, "lr") == [(4, 0.1), (8, 0.05), (12, pytest.approx(0.1 / 3))]
    assert run.data.params["starting_epoch"] == "1"  # the first process's, kept
    runs = client.search_runs([run.info.experiment_id])
    assert [r.info.run_id for r in runs].count(run_id) == 1
    assert json.loads((logdir / "tracker_runs.json").read_text())["mlflow"]["run_id"] == run_id

    # a fresh run in a new logdir is a new MLflow run
    other = train(tmp_path / "other", "mlflow", "--max-epoch", "1", env=env)
    assert other.returncode == 0, other.stdout + other.stderr
    assert run_id_of(other) != run_id


def test_server_killed_mid_run_costs_one_warning(tmp_path):
    """The tracking server is killed after step 6: training completes, with one warning line."""
    need("mlflow")
    folder = tmp_path / "server"
    folder.mkdir()
    with mlflow_server(folder) as (uri, server):
        logdir = tmp_path / "run"
        env = {
            "MLFLOW_TRACKING_URI": uri,
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
        }
        proc = train(logdir, "mlflow", "--kill-group-at", "6", "--group", str(server.pid), env=env)
        server.wait(timeout=30)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"KILLED GROUP {server.pid}" in out
    assert "DONE 12" in out
    warnings = [line for line in out.splitlines() if "training goes on without it" in line]
    assert len(warnings) == 1, out
    assert warnings[0].startswith(f"towerkit.callbacks: MLflowMonitor({uri}): the tracker failed: ")
    assert [r["epoch_num"] for r in json.loads((logdir / "stats.json").read_text())] == [1, 2, 3]
    assert os.path.exists(logdir / "checkpoint")


def test_tracker_down_from_the_start(tmp_path):
    """No server at all: training runs to its end, with one warning naming the tracker."""
    need("mlflow")
    from trackers_support import free_port

    uri = f"http://127.0.0.1:{free_port()}"
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    proc = train(tmp_path / "run", "mlflow", "--max-epoch", "2", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "DONE 8" in out
    warnings = [line for line in out.splitlines() if "training goes on without it" in line]
    assert len(warnings) == 1, out
    assert f"MLflowMonitor({uri})" in warnings[0]
    assert not (tmp_path / "run" / "tracker_runs.json").exists()
