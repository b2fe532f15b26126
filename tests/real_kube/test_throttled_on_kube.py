"""The API server's own 429s: API Priority and Fairness, configured to give the executor's
ServiceAccount a priority level of its own with next to no seats (three) and no queue, rejects
what does not fit at once. Other clients with the same identity keep those seats busy with
LISTs of 1,500 ConfigMaps (APF counts a big LIST as several seats), as a busy cluster would. Runs started all at once must all start and finish: a 429 is retried,
never taken as the run's end."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.real_kube.backend import eventually, exit_pods, run_record, start_backend
from tests.real_kube.cluster import KubeCluster
from tests.real_kube.test_executor_rbac_on_kube import token_kubeconfig

pytestmark = pytest.mark.real_kube

NAMESPACE = "rota-throttled"
ACCOUNT = "executor"
LEVEL = "rota-throttled"
RUNS = 12


def apf_objects() -> list[dict[str, object]]:
    subject = {"kind": "ServiceAccount", "serviceAccount": {"name": ACCOUNT, "namespace": NAMESPACE}}
    return [
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
         "metadata": {"name": LEVEL},
         "spec": {"type": "Limited", "limited": {
             "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
             "limitResponse": {"type": "Reject"}}}},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
         "metadata": {"name": LEVEL},
         "spec": {"priorityLevelConfiguration": {"name": LEVEL}, "matchingPrecedence": 500,
                  "distinguisherMethod": {"type": "ByUser"},
                  "rules": [{"subjects": [subject],
                             "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                "clusterScope": True, "namespaces": ["*"]}],
                             "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": ACCOUNT, "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
         "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"{NAMESPACE}-nodes"},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{NAMESPACE}-nodes"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{NAMESPACE}-nodes"},
         "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]},
    ]


class Load:
    """Threads that keep the priority level's seats busy with LISTs under the same identity."""

    def __init__(self, kubeconfig: Path, threads: int = 6) -> None:
        config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
        self.server = config["clusters"][0]["cluster"]["server"]
        self.token = config["users"][0]["user"]["token"]
        self.statuses: Counter[int] = Counter()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._hammer, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def _hammer(self) -> None:
        with httpx.Client(base_url=self.server, verify=False, timeout=10,  # loopback, a test CA
                          headers={"Authorization": f"Bearer {self.token}"}) as http:
            while not self._stop.is_set():
                try:
                    self.statuses[http.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps").status_code] += 1
                except httpx.HTTPError:
                    self.statuses[0] += 1


async def test_runs_started_at_once_under_apf_rejections_all_start_and_finish(
        kube_cluster: KubeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rota.executor.kubernetes")
    kube_cluster.namespace(NAMESPACE)
    kube_cluster.apply(apf_objects())
    kube_cluster.apply({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": f"ballast-{i}", "namespace": NAMESPACE},
                        "data": {"payload": "x" * 512}} for i in range(1500))
    token = kube_cluster.kubectl("create", "token", ACCOUNT, "-n", NAMESPACE, "--duration=1h").stdout.strip()
    kubeconfig = token_kubeconfig(kube_cluster, token, tmp_path / "throttled.kubeconfig")
    started = await start_backend(kubeconfig, NAMESPACE, start_timeout_s=240)
    try:
        runs = [run_record([(f"h100-{i % 4}", [i // 4])]) for i in range(RUNS)]
        with Load(kubeconfig) as load:  # for the starts and a few seconds of pinning, then quiet
            await asyncio.gather(asyncio.sleep(5), *(started.backend.start(run, "token") for run in runs))
        for run in runs:
            await eventually(lambda r=run: r.run_id in started.backend.runs
                             and started.backend.runs[r.run_id].started, 180, f"run {run.run_id} started")
        for run in runs:
            exit_pods(kube_cluster, NAMESPACE, run.run_id, 0)
        await eventually(lambda: len(started.reporter.ended_runs) == RUNS, 180, "every run ended")
        assert {e.code for e in started.reporter.ended_runs.values()} == {0}, started.reporter.ended_runs
        assert all(left == 0 for left in started.reporter.pods_left_at_end.values())
    finally:
        await started.close()
    # The story is only told if the server really said 429 to the executor along the way.
    assert load.statuses[429] > 0, load.statuses
    retried = [r.getMessage() for r in caplog.records if "429" in r.getMessage() and "trying again" in r.getMessage()]
    assert retried, f"the executor met no 429 (the load met {load.statuses[429]})"
