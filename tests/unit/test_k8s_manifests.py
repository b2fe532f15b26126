"""What a run becomes on Kubernetes: checked against the real OpenAPI schema, and for what the
gang needs (pinning, torchrun's variables, ownership, the notice file)."""

from __future__ import annotations

from typing import Any

import pytest
from rota.contracts.job import JobSpec, WorkerPlacement
from rota.k8s import manifests as k

from tests.builders import spec_doc
from tests.fake_kube_rules import pod_security_restricted

RUN_ID = "0190a7b2-0000-7000-8000-00000000abcd"


def spec(**kubernetes: Any) -> JobSpec:
    return JobSpec.model_validate(spec_doc(workers=4, gpus_per_worker=8,
                                           kubernetes={"image": "train:1", **kubernetes}))


def objects(job_spec: JobSpec) -> k.RunObjects:
    placement = [WorkerPlacement(worker=i, node=f"gpu-{i}", gpus=list(range(8))) for i in range(4)]
    return k.run_objects(run_id=RUN_ID, job_id="job-1", attempt=2, spec=job_spec,
                         placement=placement, namespace="rota", nats_url="nats://nats:4222",
                         run_token="secret-token")


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_every_object_passes_the_kubernetes_schema() -> None:
    run = objects(spec(command=["torchrun", "train.py"], volumes=[{"name": "data", "emptyDir": {}}],
                       volume_mounts=[{"name": "data", "mountPath": "/data"}]))
    for obj in (run.job, k.owned_by(run.service, "j", "uid-1"), k.owned_by(run.secret, "j", "uid-1"),
                k.owned_by(run.disruption_budget, "j", "uid-1")):
        k.check(obj)


def test_an_indexed_gang_of_pinned_gated_pods_with_gpu_limits() -> None:
    job = objects(spec()).job
    assert job["metadata"]["name"] == k.object_name(RUN_ID)
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (4, 4)
    assert job["spec"]["completionMode"] == "Indexed"
    pod = job["spec"]["template"]["spec"]
    assert pod["schedulingGates"] == [{"name": k.PLACEMENT_GATE}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    # By node name (one value per field requirement), never by the hostname label.
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [f"gpu-{i}"]}]}
                     for i in range(4)]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert job["metadata"]["annotations"][k.ANNOTATION_PLACEMENT] == "0=gpu-0,1=gpu-1,2=gpu-2,3=gpu-3"


def test_torchrun_and_job_protocol_variables() -> None:
    env = env_of(objects(spec(env={"ROTA_RUN_ID": "spoofed", "LR": "0.1"})).job)
    assert env["MASTER_ADDR"] == f"{k.object_name(RUN_ID)}-0.{k.object_name(RUN_ID)}"
    assert env["WORLD_SIZE"] == "4"
    assert env["RANK"]["fieldRef"]["fieldPath"] == f"metadata.annotations['{k.INDEX_ANNOTATION}']"
    assert env["ROTA_RUN_ID"] == RUN_ID  # the template cannot spoof another run
    assert env["LR"] == "0.1"
    assert env["ROTA_RUN_TOKEN"]["secretKeyRef"] == {"name": k.secret_name(RUN_ID), "key": "run-token"}


def test_the_template_cannot_override_what_rota_sets() -> None:
    job = objects(spec(pod_template={"spec": {"restartPolicy": "Always", "priorityClassName": "hi"},
                                     "metadata": {"labels": {k.LABEL_RUN: "other", "x": "y"}}})).job
    template = job["spec"]["template"]
    assert template["spec"]["restartPolicy"] == "Never"
    assert template["spec"]["priorityClassName"] == "hi"
    assert template["metadata"]["labels"][k.LABEL_RUN] == RUN_ID
    assert template["metadata"]["labels"]["x"] == "y"


def test_run_credentials_are_a_file_from_the_secret_only_when_there_are_some() -> None:
    placement = [WorkerPlacement(worker=0, node="gpu-0", gpus=[0])]
    run = k.run_objects(run_id=RUN_ID, job_id="j", attempt=1, spec=spec(), placement=placement,
                        namespace="rota", nats_url="nats://n", nats_creds="-----BEGIN NATS USER JWT-----")
    k.check(run.job)
    assert env_of(run.job)["ROTA_NATS_CREDS"] == "/etc/rota/run/nats.creds"
    volumes = {v["name"]: v for v in run.job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["rota-run"]["secret"]["secretName"] == k.secret_name(RUN_ID)
    assert run.secret["stringData"]["nats-creds"].startswith("-----BEGIN")
    assert "ROTA_NATS_CREDS" not in env_of(objects(spec()).job)


def test_the_secret_carries_the_token_and_is_owned_by_the_job() -> None:
    run = objects(spec())
    secret = k.owned_by(run.secret, k.object_name(RUN_ID), "uid-9")
    assert secret["stringData"]["run-token"] == "secret-token"
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["blockOwnerDeletion"]) == ("Job", "uid-9", True)


@pytest.mark.parametrize(("template", "field"), [
    ({"resources": {"limits": {"memory": {"a": 1}}}}, "kubernetes.resources"),
    ({"volumes": [{"name": "v", "hostPath": {"path": 7}}]}, "kubernetes.volumes"),
    ({"pod_template": {"spec": {"dnsPolcy": "x"}}}, "kubernetes.pod_template"),
])
def test_a_bad_template_is_refused_naming_its_field(template: dict[str, Any], field: str) -> None:
    with pytest.raises(k.TemplateError) as refused:
        k.check_template(spec(**template))
    assert refused.value.field.startswith(field + " (spec.template.spec")


def test_a_gpu_share_requests_no_whole_gpu_and_carries_its_fraction() -> None:
    job_spec = JobSpec.model_validate(spec_doc(workers=1, gpus_per_worker=1, gpu_share=0.5,
                                               kubernetes={"image": "nb:1",
                                                           "resources": {"limits": {"memory": "8Gi"}}}))
    placement = [WorkerPlacement(worker=0, node="gpu-0", gpus=[3], gpu_share=0.5)]
    run = k.run_objects(run_id=RUN_ID, job_id="job-1", attempt=1, spec=job_spec, placement=placement,
                        namespace="rota", nats_url="nats://nats:4222", run_token="secret-token")
    k.check(run.job)
    limits = run.job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"memory": "8Gi"}  # no nvidia.com/gpu: the device plugin would give a GPU whole
    env = env_of(run.job)
    assert (env["ROTA_GPU_SHARE"], env["ROTA_GPU_INDEX"], env["NVIDIA_VISIBLE_DEVICES"]) == ("0.5", "3", "3")
    assert "ROTA_GPU_SHARE" not in env_of(objects(spec()).job)


def test_run_pods_are_restricted_and_carry_no_token() -> None:
    template = objects(spec()).job["spec"]["template"]
    pod = template["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"}}
    assert "runAsUser" not in pod["securityContext"]  # the image's own non-root user
    assert pod_security_restricted(template) is None


def test_the_template_cannot_undo_the_hardening_of_any_container() -> None:
    sidecar = {"name": "side", "image": "proxy:1"}
    job = objects(spec(pod_template={"spec": {
        "automountServiceAccountToken": True,
        "securityContext": {"runAsNonRoot": False, "runAsUser": 1000, "fsGroup": 1000},
        "initContainers": [{"name": "fetch", "image": "fetch:1"}],
        "containers": [{"name": k.CONTAINER, "securityContext": {
            "allowPrivilegeEscalation": True, "capabilities": {"add": ["NET_BIND_SERVICE"]},
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/train.json"}}},
            sidecar]}})).job
    k.check(job)
    template = job["spec"]["template"]
    pod = template["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["fsGroup"]) == (1000, 1000)
    worker = pod["containers"][0]["securityContext"]
    assert worker["allowPrivilegeEscalation"] is False
    assert worker["capabilities"] == {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}
    assert worker["seccompProfile"] == {"type": "Localhost", "localhostProfile": "profiles/train.json"}
    for other in (pod["containers"][1], pod["initContainers"][0]):
        assert other["securityContext"]["allowPrivilegeEscalation"] is False, other["name"]
        assert other["securityContext"]["capabilities"] == {"drop": ["ALL"]}, other["name"]
    assert pod_security_restricted(template) is None
