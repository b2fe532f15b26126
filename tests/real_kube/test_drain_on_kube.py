"""A node drained under a gang, on the real control plane: `rota up --executor kubernetes`
against the KWOK cluster, the job side played by `LocalKubelet` (the example training script
as a local process per Running pod).

`kubectl drain` of the node holding one worker of a 4-node gang: the cordon starts Rota's drain
(`ROTA_KUBE_DRAIN_DEADLINE_S`), the eviction API refuses every eviction of the gang's pods
(their PodDisruptionBudget) until Rota has its checkpoint: the gang is noticed, acknowledges,
stops `drained` (its Job deleted, never evicted), resumes on four other nodes from the
acknowledged checkpoint, and the drain completes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rota.k8s import manifests as k

from tests.e2e.rota_cli import (
    REPO,
    isolated_env,
    moved_by_drain,
    rota,
    rota_up,
    training_job,
    wait_for,
)
from tests.real_kube.cluster import KubeCluster
from tests.real_kube.kubelet import LocalKubelet, running_kubelet

pytestmark = [pytest.mark.real_kube, pytest.mark.e2e]

NAMESPACE = "rota-drain"
GRACE_S = 3
CONFIG = Path(__file__).with_name("drain.rota.yaml")


@pytest.fixture(scope="module")
def kubelet(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKubelet]:
    with running_kubelet(kube_cluster, NAMESPACE, tmp_path_factory.mktemp("kubelet"), REPO) as kubelet:
        yield kubelet


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return isolated_env(tmp_path_factory.mktemp("rota-kwok-drain"), ROTA_KUBE_NAMESPACE=NAMESPACE,
                        ROTA_KILL_GRACE_S=str(GRACE_S), ROTA_EXECUTOR_POLL_INTERVAL_S="0.2",
                        ROTA_KUBE_DRAIN_DEADLINE_S="600")


@pytest.fixture(scope="module")
def stack(env: dict[str, str], kube_cluster: KubeCluster, kubelet: LocalKubelet) -> Iterator[None]:
    with rota_up(env, "kubernetes", "--kubeconfig", str(kube_cluster.kubeconfig), "--config", str(CONFIG)):
        yield


def gang_file(tmp: Path, name: str) -> Path:
    backend = {"kubernetes": {"image": "rota:dev", "command": ["python", "examples/train_plain.py"],
                              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}
    path = training_job(tmp, name, "nlp", "training", 2400, backend=backend, declared_s=7200)
    path.write_text(path.read_text().replace("workers: 1", "workers: 4"))
    return path


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def nodes_of_run(env: dict[str, str], job_id: str) -> set[str]:
    return {n["node"] for n in rota(env, "cluster", "nodes") if any(r["job_id"] == job_id for r in n["runs"])}


def test_kubectl_drain_of_one_gang_node_checkpoints_moves_the_gang_and_completes(
        stack: None, env: dict[str, str], kube_cluster: KubeCluster, kubelet: LocalKubelet,
        tmp_path: Path) -> None:
    gang = rota(env, "submit", "-f", str(gang_file(tmp_path, "gang")))
    wait_for(env, gang["job_id"], {"running"}, 120)
    first_nodes = nodes_of_run(env, gang["job_id"])
    assert len(first_nodes) == 4
    drained = sorted(first_nodes)[0]
    time.sleep(3)  # a few checkpoints behind it

    drain = subprocess.Popen(
        [str(kube_cluster.bin / "kubectl"), "drain", drained, "--ignore-daemonsets",
         "--delete-emptydir-data", "--timeout=300s"],
        env=kube_cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = drain.communicate(timeout=330)
    finally:
        if drain.poll() is None:
            drain.kill()
    # The eviction API asked, and was refused until Rota had stopped the gang after its ack.
    assert drain.returncode == 0, out
    assert "disruption budget" in out, out

    story = moved_by_drain(env, gang["job_id"], 180)
    assert story.requested["data"]["node"] == drained
    ack, starts = story.ack, story.starts
    assert rota(env, "job", gang["job_id"])["state"] == "running"
    second_nodes = nodes_of_run(env, gang["job_id"])
    assert len(second_nodes) == 4 and drained not in second_nodes

    # No pod of the first run was evicted: each was deleted with its Job, after the ack.
    first_run = starts[0]["data"]["run_id"]
    pods: list[dict[str, Any]] = [p for p in kubelet.pods_seen.values()
                                  if p["metadata"]["labels"][k.LABEL_RUN] == first_run]
    assert len(pods) == 4
    for pod in pods:
        assert not any(c.get("type") == "DisruptionTarget" and c.get("reason") == "EvictionByEvictionAPI"
                       for c in (pod.get("status") or {}).get("conditions") or []), pod["status"]
        deleted = pod["metadata"].get("deletionTimestamp")
        assert deleted and _at(deleted) >= int(_at(ack["at"])), (deleted, ack["at"])

    # The cordoned node is Rota's drain: drained, then ready again once uncordoned.
    [node] = rota(env, "cluster", "nodes", drained)
    assert node["state"] == "drained" and node["reason"] == "cordoned", node
    kube_cluster.kubectl("uncordon", drained)
    deadline = time.monotonic() + 30
    while rota(env, "cluster", "nodes", drained)[0]["state"] != "ready":
        assert time.monotonic() < deadline, "the uncordon did not end the drain"
        time.sleep(0.5)
    rota(env, "cancel", gang["job_id"])


def test_an_eviction_request_for_a_gang_pod_checkpoints_and_moves_the_gang(
        stack: None, env: dict[str, str], kube_cluster: KubeCluster, kubelet: LocalKubelet,
        tmp_path: Path) -> None:
    """The same through an EvictionRequest (lifecycle.k8s.io/v1alpha1, the alpha gate on): Rota
    is its pods' eviction responder, reads the request, and stops the gang after its checkpoint;
    the target pod goes with its Job, never evicted."""
    gang = rota(env, "submit", "-f", str(gang_file(tmp_path, "evicted")))
    wait_for(env, gang["job_id"], {"running"}, 120)
    time.sleep(3)
    timeline = rota(env, "trace", gang["job_id"])["timeline"]
    first_run = next(e["data"]["run_id"] for e in timeline if e["type"] == "RunStarted")
    pods = kube_cluster.get("pods", "-n", NAMESPACE, "-l", f"{k.LABEL_RUN}={first_run}")["items"]
    assert len(pods) == 4
    target = pods[0]
    assert target["spec"]["evictionResponders"] == [{"name": "rota.dev/executor", "priority": 10000}]
    kube_cluster.apply([{
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "evict-gang-pod", "namespace": NAMESPACE},
        "spec": {"target": {"pod": {"name": target["metadata"]["name"],
                                    "uid": target["metadata"]["uid"]}},
                 "requester": "maintenance.example.com/drainer", "intent": "Eviction"}}])

    story = moved_by_drain(env, gang["job_id"], 180)
    assert "maintenance.example.com/drainer" in story.requested["data"]["message"]
    ack = story.ack
    # The target went with its Job, after the ack, and was not evicted.
    seen = kubelet.pods_seen[target["metadata"]["uid"]]
    assert _at(seen["metadata"]["deletionTimestamp"]) >= int(_at(ack["at"]))
    assert not any(c.get("type") == "DisruptionTarget"
                   for c in (seen.get("status") or {}).get("conditions") or [])
    gone = kube_cluster.get("pods", "-n", NAMESPACE, "-l", f"{k.LABEL_RUN}={first_run}")["items"]
    assert gone == []
    kube_cluster.kubectl("delete", "evictionrequest", "evict-gang-pod", "-n", NAMESPACE)
    rota(env, "cancel", gang["job_id"])
