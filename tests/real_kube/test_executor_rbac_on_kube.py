"""The executor acting under the chart's own Role and ClusterRole, as its ServiceAccount (a
token the real API server issued), so that RBAC is enforced by the server, not assumed: a run
goes through its whole life (an executor restart that finds the run's Secret and Service gone
included), and what the chart does not grant is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from rota.k8s import manifests as k

from tests.helm import template
from tests.real_kube.backend import eventually, exit_pods, run_record, start_backend
from tests.real_kube.cluster import KubeCluster

pytestmark = pytest.mark.real_kube

RELEASE_NS = "rota-rbac"
RUNS_NS = "rota-rbac-runs"
RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def token_kubeconfig(cluster: KubeCluster, token: str, path: Path) -> Path:
    """The cluster's kubeconfig with its admin user swapped for a bearer token."""
    config: dict[str, Any] = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    config["users"] = [{"name": "executor", "user": {"token": token}}]
    context["context"] = {"cluster": context["context"]["cluster"], "user": "executor"}
    config["contexts"] = [context]
    path.write_text(yaml.safe_dump(config))
    return path


async def test_the_executor_runs_a_job_with_only_the_charts_rbac(
        kube_cluster: KubeCluster, tmp_path: Path) -> None:
    kube_cluster.namespace(RELEASE_NS)
    kube_cluster.namespace(RUNS_NS)
    docs = template(sets=[f"runsNamespace={RUNS_NS}"], namespace=RELEASE_NS)
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    kube_cluster.apply(rbac)
    [account] = [d["metadata"]["name"] for d in rbac
                 if d["kind"] == "ServiceAccount" and d["metadata"]["name"].endswith("executor")]
    user = f"system:serviceaccount:{RELEASE_NS}:{account}"
    token = kube_cluster.kubectl("create", "token", account, "-n", RELEASE_NS, "--duration=1h").stdout.strip()
    kubeconfig = token_kubeconfig(kube_cluster, token, tmp_path / "executor.kubeconfig")

    def can(verb: str, resource: str, namespace: str | None = None) -> bool:
        args = ["auth", "can-i", verb, resource, f"--as={user}"]
        args += ["-n", namespace] if namespace else []
        return kube_cluster.kubectl(*args, check=False).stdout.strip() == "yes"

    # What it may not do, as the server decides it.
    assert not can("get", "secrets", RELEASE_NS) and not can("list", "secrets", RUNS_NS)
    assert not can("create", "jobs", RELEASE_NS) and not can("create", "jobs", "default")
    assert not can("delete", "nodes") and can("watch", "nodes")

    first = await start_backend(kubeconfig, RUNS_NS)
    run = run_record([("h100-1", [6, 7])])
    try:
        await first.backend.start(run, "token")
        await eventually(lambda: first.backend.runs.get(run.run_id) is not None
                         and first.backend.runs[run.run_id].started, 60, "the gang started")
    finally:
        await first.close()
    # While no executor runs, the run's Secret and Service go (as a crash between the creates
    # would leave them): the next executor makes them again, with no right to read a Secret.
    name = k.object_name(run.run_id)
    kube_cluster.kubectl("delete", "secret", k.secret_name(run.run_id), "-n", RUNS_NS)
    kube_cluster.kubectl("delete", "service", name, "-n", RUNS_NS)
    second = await start_backend(kubeconfig, RUNS_NS)
    try:
        await second.backend.adopt(run)
        kube_cluster.kubectl("get", f"secret/{k.secret_name(run.run_id)}", f"service/{name}", "-n", RUNS_NS)
        exit_pods(kube_cluster, RUNS_NS, run.run_id, 0)
        await eventually(lambda: run.run_id in second.reporter.ended_runs, 60, "the run ended")
        assert second.reporter.ended_runs[run.run_id].code == 0, second.reporter.ended_runs[run.run_id]
        assert second.reporter.pods_left_at_end[run.run_id] == 0
    finally:
        await second.close()
