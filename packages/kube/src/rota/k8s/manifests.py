"""What one run becomes on Kubernetes, with no I/O: an Indexed Job, a headless Service and a
Secret, all labelled with the job, run and team, and checked against the Kubernetes schema.

One Job has one pod template, but each gang worker must land on the node its grant names.
Pods are therefore created behind a scheduling gate: the executor adds the worker's own node
to each term of the pod's required node affinity (narrowing it, which the API allows on a
gated pod) and only then lifts the gate. The template's own affinity already keeps every pod
on the run's granted nodes, so a pod is never placed outside the grant.

Every pod tolerates the GPU resource's NoSchedule taint (`nvidia.com/gpu` by default), as a
GPU share requests no GPU and so never gets it from the cluster; other taints are the job's
to tolerate (`kubernetes.tolerations`, or the pod template's).

Nodes are matched by name (`matchFields` on `metadata.name`), never by their
`kubernetes.io/hostname` label, which need not equal the name. A field requirement takes one
value, so the template has one term per granted node.

Every run pod is hardened to Pod Security Admission's `restricted` level, whatever its template
says: no service-account token, non-root, the RuntimeDefault seccomp profile (or the template's
Localhost one), and in every container no privilege escalation and every capability dropped.
The uid is the image's (or the template's), as `restricted` asks for a non-root user, not a
given one. What the template may not ask for at all is refused at submission
(`rota.k8s.pod_policy`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes_validate

from rota.contracts.job import JobSpec, KubernetesRun, WorkerPlacement

KUBERNETES_VERSION = "1.30"
"""The API version manifests are checked against: scheduling gates are GA from 1.30."""

DOMAIN = "rota.dev"
LABEL_MANAGED = f"{DOMAIN}/managed-by"
MANAGED_BY = "rota-executor"
LABEL_RUN = f"{DOMAIN}/run-id"
LABEL_JOB = f"{DOMAIN}/job-id"
LABEL_TEAM = f"{DOMAIN}/team"
LABEL_ATTEMPT = f"{DOMAIN}/attempt"
ANNOTATION_NOTICE = f"{DOMAIN}/notice"
ANNOTATION_PLACEMENT = f"{DOMAIN}/placement"
ANNOTATION_JOB_NAME = f"{DOMAIN}/job-name"
PLACEMENT_GATE = f"{DOMAIN}/placement"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
NODE_NAME_FIELD = "metadata.name"  # the one node field the scheduler matches on


def node_name_term(node: str) -> dict[str, Any]:
    """A requirement that the node be `node`, by its name."""
    return {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}

MASTER_PORT = 29500
NOTICE_DIR = "/etc/rota/notice"
RUN_SECRET_DIR = "/etc/rota/run"  # the run's NATS credentials, a file from its Secret
CONTAINER = "worker"
POD_SECURITY: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"}}


class TemplateError(ValueError):
    """A job template Kubernetes would refuse; `field` is the path in the job spec."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def object_name(run_id: str) -> str:
    """Deterministic, so a retried create meets its first copy (409) instead of a twin."""
    return f"rota-{run_id.lower()}"


def secret_name(run_id: str) -> str:
    return f"{object_name(run_id)}-run"


@dataclass(frozen=True)
class RunObjects:
    job: dict[str, Any]
    service: dict[str, Any]
    secret: dict[str, Any]
    disruption_budget: dict[str, Any]
    """No voluntary disruption of any of the run's pods (DECISIONS 100): an eviction
    (`kubectl drain`, the autoscaler, a descheduler) is refused until Rota has stopped the run
    after its checkpoint, which deletes the pods instead."""


def run_labels(run_id: str, job_id: str, team: str, attempt: int) -> dict[str, str]:
    return {LABEL_MANAGED: MANAGED_BY, LABEL_RUN: run_id, LABEL_JOB: job_id,
            LABEL_TEAM: team, LABEL_ATTEMPT: str(attempt)}


def _env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _merge(base: dict[str, Any], fragment: Mapping[str, Any]) -> dict[str, Any]:
    """The fragment fills in what Rota leaves open; on a conflict Rota's value wins, so a
    template cannot move a pod off its granted node or spoof another run's identity."""
    out = copy.deepcopy(dict(fragment))
    for key, value in base.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(value, out[key])
        elif isinstance(value, list) and isinstance(out.get(key), list) and key != "containers":
            out[key] = [*out[key], *value]
        else:
            out[key] = value
    return out


def pod_template(
    *, run_id: str, job_id: str, attempt: int, spec: JobSpec, template: KubernetesRun,
    placement: list[WorkerPlacement], nats_url: str, resume_from: str | None,
    checkpoint_dir: str, gpu_resource: str, with_creds: bool = False,
    termination_grace_s: int = 30,
) -> dict[str, Any]:
    name = object_name(run_id)
    labels = run_labels(run_id, job_id, spec.team, attempt)
    workers = len(placement)
    env = [_env(k, v) for k, v in template.env.items()]
    env += [
        _env("ROTA_JOB_ID", job_id), _env("ROTA_RUN_ID", run_id),
        _env("ROTA_ATTEMPT", str(attempt)), _env("ROTA_NATS_URL", nats_url),
        _env("ROTA_CONTROL_SUBJECT", f"rota.ctl.run.{run_id}"),
        _env("ROTA_ACK_SUBJECT", f"rota.run.checkpoint.{run_id}"),
        _env("ROTA_RESUME_FROM", resume_from or ""),
        _env("ROTA_CHECKPOINT_DIR", checkpoint_dir),
        _env("ROTA_WORKERS", str(workers)),
        _env("ROTA_NOTICE_FILE", f"{NOTICE_DIR}/notice"),
        _field_env("ROTA_WORKER_INDEX", f"metadata.annotations['{INDEX_ANNOTATION}']"),
        _secret_env("ROTA_RUN_TOKEN", secret_name(run_id), "run-token"),
        # torchrun's rendezvous: rank 0 is `<job>-0.<service>` (the Indexed Job's hostnames).
        _env("MASTER_ADDR", f"{name}-0.{name}"), _env("MASTER_PORT", str(MASTER_PORT)),
        _env("WORLD_SIZE", str(workers)),
        _field_env("RANK", f"metadata.annotations['{INDEX_ANNOTATION}']"),
    ]
    if with_creds:
        env.append(_env("ROTA_NATS_CREDS", f"{RUN_SECRET_DIR}/nats.creds"))
    share = placement[0].gpu_share if len(placement) == 1 else None
    if share is not None:
        env += _share_env(share, placement[0].gpus[0])
    resources = copy.deepcopy(template.resources)
    limits = dict(resources.get("limits") or {})
    if share is None:
        limits[gpu_resource] = str(spec.gpus_per_worker)
    else:
        # A share requests no whole GPU: the device plugin would hand the pod one to itself.
        limits.pop(gpu_resource, None)
    resources["limits"] = limits
    container: dict[str, Any] = {
        "name": CONTAINER, "image": template.image, "env": env, "resources": resources,
        "volumeMounts": [*template.volume_mounts,
                         {"name": "rota-notice", "mountPath": NOTICE_DIR, "readOnly": True},
                         *([{"name": "rota-run", "mountPath": RUN_SECRET_DIR, "readOnly": True}]
                           if with_creds else [])],
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT}],
    }
    if template.command:
        container["command"] = list(template.command)
    if template.args:
        container["args"] = list(template.args)
    nodes = sorted({w.node for w in placement})
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # A stop deletes the Job; the garbage collector then deletes its pods with no grace
        # period of its own, so this is the only place the executor's grace can reach them.
        "terminationGracePeriodSeconds": termination_grace_s,
        "subdomain": name,
        "containers": [container],
        "schedulingGates": [{"name": PLACEMENT_GATE}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [node_name_term(node)]} for node in nodes]}}},
        # The notice annotation, readable by jobs that do not use the SDK.
        "volumes": [*template.volumes, {"name": "rota-notice", "downwardAPI": {"items": [
            {"path": "notice", "fieldRef": {
                "fieldPath": f"metadata.annotations['{ANNOTATION_NOTICE}']"}}]}},
            *([{"name": "rota-run", "secret": {"secretName": secret_name(run_id), "items": [
                {"key": "nats-creds", "path": "nats.creds", "mode": 0o400}]}}] if with_creds else [])],
    }
    # GPU pools are commonly tainted `<gpu resource>:NoSchedule` (GKE, AKS, the GPU operator's
    # guides). Only the ExtendedResourceToleration admission plugin, off by default, adds the
    # toleration, and only to pods that request the resource: never to a GPU share's. Every
    # pod is pinned to a granted GPU node anyway, so every pod tolerates it.
    pod_spec["tolerations"] = [{"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"},
                               *template.tolerations]
    if template.service_account:
        pod_spec["serviceAccountName"] = template.service_account
    ours = {"metadata": {"labels": labels, "annotations": {ANNOTATION_JOB_NAME: spec.name[:253]}},
            "spec": pod_spec}
    merged = _merge(ours, template.pod_template)
    # A fragment's containers are merged by position into ours, not appended.
    extra = (template.pod_template.get("spec") or {}).get("containers") or []
    if extra and isinstance(extra, list) and isinstance(extra[0], dict):
        merged["spec"]["containers"][0] = _merge(container, extra[0])
        merged["spec"]["containers"] += copy.deepcopy(extra[1:])
    _harden(merged["spec"])
    return merged


def _harden(pod_spec: dict[str, Any]) -> None:
    """Rota's security settings over the merged pod's and every container's, sidecars and
    init containers too, so that `restricted` admits the pod and a template cannot undo them."""
    pod_spec["automountServiceAccountToken"] = False
    pod_spec["securityContext"] = _hardened(pod_spec.get("securityContext"), POD_SECURITY)
    for key in ("initContainers", "containers"):
        for container in pod_spec.get(key) or []:
            if isinstance(container, dict):
                container["securityContext"] = _hardened(container.get("securityContext"),
                                                         CONTAINER_SECURITY)


def _hardened(context: object, ours: Mapping[str, Any]) -> dict[str, Any]:
    theirs = dict(context) if isinstance(context, Mapping) else {}
    out = _merge(dict(ours), theirs)
    profile = theirs.get("seccompProfile")
    if isinstance(profile, Mapping) and profile.get("type") == "Localhost":
        # A profile of the node's, which `restricted` admits; ours over it would leave its
        # `localhostProfile` under a RuntimeDefault type, which the API refuses.
        out["seccompProfile"] = copy.deepcopy(dict(profile))
    return out


def _share_env(share: float, gpu: int) -> list[dict[str, Any]]:
    """A GPU share's pod: its fraction, and its GPU's index on the node for the NVIDIA
    container runtime (`NVIDIA_VISIBLE_DEVICES`), since no device plugin allocates it. That
    the GPU is really shared (MPS, MIG or time-slicing) is the cluster's to configure."""
    return [_env("ROTA_GPU_SHARE", f"{share:g}"), _env("ROTA_GPU_INDEX", str(gpu)),
            _env("NVIDIA_VISIBLE_DEVICES", str(gpu))]


def run_objects(
    *, run_id: str, job_id: str, attempt: int, spec: JobSpec, placement: list[WorkerPlacement],
    namespace: str, nats_url: str, resume_from: str | None = None,
    checkpoint_dir: str = "/checkpoints", gpu_resource: str = "nvidia.com/gpu",
    run_token: str = "", nats_creds: str | None = None, termination_grace_s: int = 30,
) -> RunObjects:
    """The four objects of one run. The Service, Secret and PodDisruptionBudget get their owner
    reference (the Job's uid) when they are created, after the Job: see `owned_by`."""
    if spec.kubernetes is None:
        raise TemplateError("kubernetes", "the job has no `kubernetes` section")
    name = object_name(run_id)
    labels = run_labels(run_id, job_id, spec.team, attempt)
    annotations = {ANNOTATION_JOB_NAME: spec.name[:253], ANNOTATION_PLACEMENT: ",".join(
        f"{w.worker}={w.node}" for w in sorted(placement, key=lambda w: w.worker))}
    meta = {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations}
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": copy.deepcopy(meta),
        "spec": {
            "completionMode": "Indexed", "completions": len(placement),
            "parallelism": len(placement),
            # A gang cannot lose a member: one failed pod fails the run, and Rota requeues it.
            "backoffLimit": 0,
            "template": pod_template(
                run_id=run_id, job_id=job_id, attempt=attempt, spec=spec,
                template=spec.kubernetes, placement=placement, nats_url=nats_url,
                resume_from=resume_from, checkpoint_dir=checkpoint_dir,
                gpu_resource=gpu_resource, with_creds=nats_creds is not None,
                termination_grace_s=termination_grace_s),
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": copy.deepcopy(meta),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {LABEL_RUN: run_id},
                 "ports": [{"name": "rendezvous", "port": MASTER_PORT}]},
    }
    data = {"run-token": run_token}
    if nats_creds is not None:
        data["nats-creds"] = nats_creds
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {**copy.deepcopy(meta), "name": secret_name(run_id)},
              "stringData": data}
    # `minAvailable` as a count of all the pods: with `maxUnavailable` the disruption
    # controller needs the pods' owner to have a scale subresource, which a Job does not.
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": copy.deepcopy(meta),
              "spec": {"minAvailable": len(placement), "selector": {"matchLabels": {LABEL_RUN: run_id}}}}
    return RunObjects(job, service, secret, budget)


def owned_by(obj: dict[str, Any], job_name: str, job_uid: str) -> dict[str, Any]:
    """`obj` owned by the Job: deleting the Job (foreground) deletes it too."""
    out = copy.deepcopy(obj)
    out["metadata"]["ownerReferences"] = [{
        "apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid,
        "controller": True, "blockOwnerDeletion": True}]
    return out


def check(obj: dict[str, Any], version: str = KUBERNETES_VERSION) -> None:
    """Raises TemplateError naming the path of the first field the Kubernetes OpenAPI schema
    (strict: unknown fields too) refuses."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path) or "(root)"
        raise TemplateError(path, exc.message) from None


# Where the fields of `KubernetesRun` land in a Job, to name them in the spec's own terms.
_TEMPLATE_PATHS = (
    ("spec.template.spec.containers.0.resources", "kubernetes.resources"),
    ("spec.template.spec.containers.0.volumeMounts", "kubernetes.volume_mounts"),
    ("spec.template.spec.containers.0.env", "kubernetes.env"),
    ("spec.template.spec.containers.0.image", "kubernetes.image"),
    ("spec.template.spec.volumes", "kubernetes.volumes"),
    ("spec.template.spec.tolerations", "kubernetes.tolerations"),
    ("spec.template.spec.serviceAccountName", "kubernetes.service_account"),
    ("spec.template", "kubernetes.pod_template"),
)


def check_template(spec: JobSpec) -> None:
    """The job's `kubernetes` template, as the Job the executor would create from it, checked
    against the schema at submission. The error names the field in the job spec, followed by
    the path in the Job, e.g. `kubernetes.resources (spec.template...limits.cpu)`."""
    placement = [WorkerPlacement(worker=i, node="node", gpus=list(range(spec.gpus_per_worker)))
                 for i in range(min(spec.workers, 2))]
    objects = run_objects(run_id="00000000-0000-0000-0000-000000000000", job_id="check",
                          attempt=1, spec=spec, placement=placement, namespace="default",
                          nats_url="nats://nats:4222")
    try:
        check(objects.job)
    except TemplateError as exc:
        for prefix, field in _TEMPLATE_PATHS:
            if exc.field.startswith(prefix):
                raise TemplateError(f"{field} ({exc.field})", exc.message) from None
        raise
