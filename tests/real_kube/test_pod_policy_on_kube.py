"""Run pods on the real control plane under Pod Security Admission `restricted`, as the Helm
chart's runs namespace enforces it: an ordinary run is admitted and runs to its end, and for
each way into the node a template might ask for, Rota's submission refuses it first, naming the
field, while the same pod, built by Rota with the policy bypassed, is refused by the API
server too."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from rota.config import load_config
from rota.contracts.job import WorkerPlacement
from rota.k8s import manifests as k
from rota_submission.domain import check_submission

from tests.builders import submit_job
from tests.real_kube.backend import eventually, exit_pods, pods_of, run_record, start_backend
from tests.real_kube.cluster import KubeCluster, KubectlError

pytestmark = pytest.mark.real_kube

_names = itertools.count(1)
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
IMAGE = "registry.example/train:1"


@pytest.fixture
def restricted(kube_cluster: KubeCluster) -> Iterator[str]:
    name = kube_cluster.namespace(f"rota-restricted-{next(_names)}", labels=RESTRICTED)
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


async def test_an_ordinary_run_starts_and_ends_in_a_restricted_namespace(
        kube_cluster: KubeCluster, restricted: str) -> None:
    started = await start_backend(kube_cluster.kubeconfig, restricted)
    try:
        run = run_record([("h100-0", [0, 1]), ("h100-1", [0, 1])])
        await started.backend.start(run, "token")

        def all_running() -> list[dict[str, Any]] | None:
            pods = pods_of(kube_cluster, restricted, run.run_id)
            phases = [(p.get("status") or {}).get("phase") for p in pods]
            return pods if phases == ["Running", "Running"] else None

        pods = await eventually(all_running, 60, "both pods Running")
        for pod in pods:  # no service-account token was mounted
            assert not [v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access")]
        exit_pods(kube_cluster, restricted, run.run_id, 0)
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 60, "the run ended")
        assert started.reporter.ended_runs[run.run_id].code == 0
    finally:
        await started.close()


def _worker(**security: Any) -> dict[str, Any]:
    return {"pod_template": {"spec": {"containers": [{"name": k.CONTAINER,
                                                      "securityContext": security}]}}}


# name, the job's kubernetes section beyond its image, the field Rota names, the API server's words
ATTACKS: list[tuple[str, dict[str, Any], str, str]] = [
    ("the node's root filesystem",
     {"volumes": [{"name": "root", "hostPath": {"path": "/"}}],
      "volume_mounts": [{"name": "root", "mountPath": "/host"}]},
     "kubernetes.volumes.0.hostPath",
     'violates PodSecurity "restricted:latest": restricted volume types (volume "root" uses'
     ' restricted volume type "hostPath")'),
    ("the node's network", {"pod_template": {"spec": {"hostNetwork": True}}},
     "kubernetes.pod_template.spec.hostNetwork", "host namespaces (hostNetwork=true)"),
    ("the node's processes", {"pod_template": {"spec": {"hostPID": True}}},
     "kubernetes.pod_template.spec.hostPID", "host namespaces (hostPID=true)"),
    ("CAP_SYS_ADMIN", _worker(capabilities={"add": ["SYS_ADMIN"]}),
     "kubernetes.pod_template.spec.containers.0.securityContext.capabilities.add.0",
     'violates PodSecurity "restricted:latest": unrestricted capabilities'),
    ("root", _worker(runAsUser=0),
     "kubernetes.pod_template.spec.containers.0.securityContext.runAsUser",
     'violates PodSecurity "restricted:latest": runAsUser=0'),
    # Rota's own `allowPrivilegeEscalation: false` contradicts it, so the API server's
    # validation refuses the pod before admission is asked.
    ("a privileged container", _worker(privileged=True),
     "kubernetes.pod_template.spec.containers.0.securityContext.privileged",
     "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"),
]


def bypassing_pod(kubernetes: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The pod Rota would run for a job with this template, had submission not refused it."""
    spec = submit_job(gpus_per_worker=1, kubernetes={"image": IMAGE, **kubernetes})
    assert spec.kubernetes is not None
    template = k.pod_template(
        run_id="0190a7b2-0000-7000-8000-00000000beef", job_id="attack", attempt=1, spec=spec,
        template=spec.kubernetes,
        placement=[WorkerPlacement(worker=0, node="h100-0", gpus=[0])],
        nats_url="nats://unused:4222", resume_from=None, checkpoint_dir="/checkpoints",
        gpu_resource="nvidia.com/gpu")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**template["metadata"], "name": "attack", "namespace": namespace},
            "spec": template["spec"]}


@pytest.mark.parametrize(("name", "kubernetes", "field", "server_says"), ATTACKS,
                         ids=[a[0] for a in ATTACKS])
def test_rota_refuses_first_and_admission_refuses_what_rota_missed(
        kube_cluster: KubeCluster, restricted: str, name: str, kubernetes: dict[str, Any],
        field: str, server_says: str) -> None:
    rejection = check_submission(submit_job(gpus_per_worker=1, kubernetes={
        "image": IMAGE, **kubernetes}), "nlp", load_config())
    assert rejection is not None, f"{name}: accepted at submission"
    assert (rejection.code, rejection.field) == ("FORBIDDEN_TEMPLATE", field)

    with pytest.raises(KubectlError) as refused:
        kube_cluster.apply([bypassing_pod(kubernetes, restricted)], "--dry-run=server")
    assert server_says in str(refused.value), refused.value
