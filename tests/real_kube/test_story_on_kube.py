"""The whole preemption story on the real control plane: `rota up --executor kubernetes
--kubeconfig K` against the KWOK cluster, with the job side played by `LocalKubelet` (the
example training script as a local process per Running pod, its run token read from the run's
Secret). research's sweep borrows a node; nlp's production release reclaims it: the sweep is
noticed, acknowledges with its run token, its Job is deleted in the foreground and its pods keep
their grace, the GPUs are released only after its last pod is gone, the release starts, and the
sweep resumes from its acknowledged checkpoint in a new Job. Also `rota cluster import`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from rota.k8s import manifests as k

from tests.e2e.rota_cli import REPO, play_preemption, rota, rota_up, training_job
from tests.real_kube.cluster import KubeCluster
from tests.real_kube.kubelet import LocalKubelet

pytestmark = [pytest.mark.real_kube, pytest.mark.e2e]

NAMESPACE = "rota-story"
GRACE_S = 5
CONFIG = Path(__file__).with_name("kwok.rota.yaml")


@pytest.fixture(scope="module")
def kubelet(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKubelet]:
    kube_cluster.namespace(NAMESPACE)
    kubelet = LocalKubelet(kube_cluster, NAMESPACE, tmp_path_factory.mktemp("kubelet"), REPO)
    kubelet.start()
    yield kubelet
    kubelet.stop()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG")}
    env["ROTA_HOME"] = str(tmp_path_factory.mktemp("rota-kwok"))
    env.update(ROTA_KUBE_NAMESPACE=NAMESPACE, ROTA_KILL_GRACE_S=str(GRACE_S),
               ROTA_EXECUTOR_POLL_INTERVAL_S="0.2")
    return env


@pytest.fixture(scope="module")
def stack(env: dict[str, str], kube_cluster: KubeCluster, kubelet: LocalKubelet) -> Iterator[None]:
    with rota_up(env, "kubernetes", "--kubeconfig", str(kube_cluster.kubeconfig), "--config", str(CONFIG)):
        yield


def job_file(tmp: Path, name: str, team: str, queue: str, steps: int, declared_s: int = 120) -> Path:
    backend = {"kubernetes": {"image": "rota:dev", "command": ["python", "examples/train_plain.py"],
                              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}
    return training_job(tmp, name, team, queue, steps, backend=backend, declared_s=declared_s)


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def test_production_preempts_a_kwok_pod_that_acknowledges_and_resumes_in_a_new_job(
        stack: None, env: dict[str, str], kubelet: LocalKubelet, tmp_path: Path) -> None:
    story = play_preemption(env, job_file, tmp_path, settle_s=3)

    pods = list(kubelet.pods_seen.values())
    def runs_of(job_id: str) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            if pod["metadata"]["labels"][k.LABEL_JOB] == job_id:
                out.setdefault(pod["metadata"]["labels"][k.LABEL_RUN], []).append(pod)
        return out

    sweep_runs = runs_of(story.sweep_id)
    assert len(sweep_runs) == 2 and len(runs_of(story.release_id)) == 1  # two Jobs for the victim
    first_run = next(r for r, ps in sweep_runs.items() if ps[0]["metadata"]["labels"][k.LABEL_ATTEMPT] == "1")
    victims = sweep_runs[first_run]
    # Its pods were deleted with the executor's grace, and the GPUs were released only after
    # the last of them was seen gone: the release's run started after that.
    assert {p["metadata"].get("deletionGracePeriodSeconds") for p in victims} == {GRACE_S}
    release_trace = rota(env, "trace", story.release_id)["timeline"]
    release_start = next(e["at"] for e in release_trace if e["type"] == "RunStarted")
    last_seen = max(kubelet.last_seen_at[p["metadata"]["uid"]] for p in victims)
    assert _at(story.stopped["at"]) >= last_seen
    assert _at(release_start) >= _at(story.stopped["at"])
    assert rota(env, "allocations")["allocations"] == []
    logs = kubelet.logs()
    assert any("resum" in log.lower() for log in logs.values()), logs  # the new Job loaded the checkpoint


def test_cluster_import_reads_the_kwok_nodes(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    config = tmp_path / "rota.yaml"
    done = subprocess.run([sys.executable, "-m", "rota.cli.main", "cluster", "import", "--kubeconfig",
                           str(kube_cluster.kubeconfig), "--config", str(config),
                           "--flavor-label", "rota.dev/flavor", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    nodes = {n["name"]: n for n in json.loads(done.stdout)["cluster"]["nodes"]}
    assert nodes["h100-3"] == {"name": "h100-3", "flavor": "h100", "gpus": 8, "rack": "zone-a"}
    assert {n["flavor"] for n in nodes.values()} == {"h100", "a100"}
    assert sum(n["gpus"] for n in nodes.values()) == 56
    assert yaml.safe_load(config.read_text())["cluster"]["nodes"] == list(nodes.values())
