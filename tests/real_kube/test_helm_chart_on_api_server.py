"""The chart's `helm template` output on a real kube-apiserver (the session's `kube_cluster`):
every manifest accepted by a server-side dry run (schema, defaulting, admission), Rota's pods
(the migrate Job's among them) admitted by Pod Security Admission at the `restricted` level,
and the executor's RBAC as the API server's authorizer answers for it. The first two also with
the bundled NATS (`nats.enabled`), whose StatefulSet's pods must meet `restricted` as well."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.helm import template, workloads
from tests.real_kube.cluster import KubeCluster

pytestmark = pytest.mark.real_kube

RELEASE = "chartcheck"
NAMESPACE = "chartcheck"
RUNS = "chartcheck-runs"
EXECUTOR = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-executor"


@pytest.fixture(scope="module")
def chart(kube_cluster: KubeCluster) -> Iterator[list[dict[str, Any]]]:
    """The chart's manifests, with the two namespaces they need made for real: the release's
    (labelled `restricted` too, so that Rota's own pods meet Pod Security Admission) and the
    chart's runs namespace, applied as the chart renders it."""
    docs = template(values={"runsNamespace": RUNS}, release=RELEASE, namespace=NAMESPACE)
    kube_cluster.namespace(NAMESPACE, labels={"pod-security.kubernetes.io/enforce": "restricted",
                                              "pod-security.kubernetes.io/warn": "restricted"})
    kube_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        [d for d in docs if d["kind"] == "Namespace"]))
    try:
        yield docs
    finally:
        for kind in ("ClusterRoleBinding", "ClusterRole"):
            kube_cluster.kubectl("delete", kind, f"{RELEASE}-executor-nodes", "--ignore-not-found",
                                 check=False)
        kube_cluster.kubectl("delete", "namespace", NAMESPACE, RUNS, "--wait=false",
                             "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def chart_with_bundled_nats(chart: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart with `nats.enabled`, in the namespaces `chart` made."""
    return template(values={"runsNamespace": RUNS, "nats": {"enabled": True}}, release=RELEASE,
                    namespace=NAMESPACE)


RENDERINGS = pytest.mark.parametrize("rendering", ["chart", "chart_with_bundled_nats"],
                                     ids=["defaults", "bundled-nats"])


@RENDERINGS
def test_every_manifest_is_accepted_by_a_server_side_dry_run(kube_cluster: KubeCluster,
                                                            request: pytest.FixtureRequest,
                                                            rendering: str) -> None:
    docs: list[dict[str, Any]] = request.getfixturevalue(rendering)
    # `helm template` renders the hooks too: the migrate Job is among them.
    manifests = [d for d in docs if d["kind"] != "Namespace"]
    assert [d["metadata"]["name"] for d in manifests if d["kind"] == "Job"] == [f"{RELEASE}-migrate"]
    done = kube_cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                                input=yaml.safe_dump_all(manifests), check=False)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr  # PSA `warn` on the Deployments' pods
    accepted = [line for line in done.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(manifests), done.stdout
    namespace = kube_cluster.get("namespace", RUNS)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def _pod(name: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec})


def _pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod a workload makes; a StatefulSet's with the volumes of its claim templates, as
    its controller adds them."""
    spec = copy.deepcopy(workload["spec"]["template"]["spec"])
    for claim in workload["spec"].get("volumeClaimTemplates", []):
        name = claim["metadata"]["name"]
        spec.setdefault("volumes", []).append(
            {"name": name, "persistentVolumeClaim": {"claimName": f"{name}-{workload['metadata']['name']}-0"}})
    return spec


@RENDERINGS
def test_rotas_pods_are_admitted_at_the_restricted_pod_security_level(kube_cluster: KubeCluster,
                                                                      request: pytest.FixtureRequest,
                                                                      rendering: str) -> None:
    docs: list[dict[str, Any]] = request.getfixturevalue(rendering)
    # The ServiceAccount admission plugin wants the executor's account to exist.
    kube_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        [d for d in docs if d["kind"] == "ServiceAccount"]))
    # The migrate Job's pod too: Helm makes hooks in the same namespace.
    pods = {**workloads(docs), **{d["metadata"]["labels"]["app.kubernetes.io/component"]: d
                                  for d in docs if d["kind"] == "Job"}}
    assert "migrate" in pods
    for component, workload in pods.items():
        spec = _pod_spec(workload)
        done = kube_cluster.kubectl("create", "--dry-run=server", "-f", "-",
                                    input=_pod(f"psa-{component}", spec), check=False)
        assert done.returncode == 0, f"{component}: {done.stderr}"
        # The same pod without its security contexts is refused: the admission is on.
        loose = copy.deepcopy(spec)
        loose.pop("securityContext")
        for container in loose["containers"]:
            container.pop("securityContext")
        refused = kube_cluster.kubectl("create", "--dry-run=server", "-f", "-",
                                       input=_pod(f"psa-{component}-loose", loose), check=False)
        assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr


@pytest.mark.parametrize(("allowed", "verb", "resource", "namespace"), [
    (True, "create", "secrets", RUNS),
    (True, "delete", "secrets", RUNS),
    (False, "get", "secrets", RUNS),
    (False, "list", "secrets", RUNS),
    (False, "get", "secrets", NAMESPACE),
    (False, "create", "secrets", NAMESPACE),
    (True, "create", "jobs.batch", RUNS),
    (False, "create", "jobs.batch", NAMESPACE),
    (True, "patch", "pods", RUNS),
    (False, "list", "pods", NAMESPACE),
    (True, "watch", "events", RUNS),
    (True, "create", "poddisruptionbudgets.policy", RUNS),
    (True, "watch", "evictionrequests.lifecycle.k8s.io", RUNS),
    (False, "update", "evictionrequests.lifecycle.k8s.io", RUNS),
    (True, "watch", "evictions.lifecycle.k8s.io", RUNS),
    (False, "delete", "evictions.lifecycle.k8s.io", RUNS),
    (True, "list", "nodes", None),
    (False, "delete", "nodes", None),
])
def test_the_executors_rbac_as_the_api_server_enforces_it(
        kube_cluster: KubeCluster, chart: list[dict[str, Any]], allowed: bool, verb: str,
        resource: str, namespace: str | None) -> None:
    rbac = [d for d in chart if d["kind"] in {"ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                              "ClusterRoleBinding"}]
    kube_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    where = ["-n", namespace] if namespace else []
    done = kube_cluster.kubectl("auth", "can-i", verb, resource, *where, as_user=EXECUTOR, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stderr
