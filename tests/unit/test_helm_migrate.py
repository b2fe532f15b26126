"""The chart's migrate Job (`deploy/helm/rota/templates/migrate-job.yaml`): `rota migrate` as a
Helm hook, the one pod with the admin's NATS credentials, rendered and linted by real Helm v4
(`tests/helm.py`). `helm template` renders hooks too, so the Job is among its manifests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from rota.auth.keys import AuthDir
from rota.bus.options import connect_options
from rota.endpoints import resolve
from rota.settings import Settings

from tests.helm import HelmFailed, lint, template, workloads
from tests.network_policy import PodAt, admits

pytestmark = pytest.mark.real_kube  # every test here runs the helm binary
SERVICES = {"submission", "ledger", "scheduler", "preemption", "notifier", "executor"}
BUNDLED = {"nats": {"enabled": True}}
NATS = PodAt("rota", {"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "nats"})
BUNDLED_NATS = PodAt("rota", {"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "rota"})
POSTGRES = PodAt("rota", {"app.kubernetes.io/name": "postgresql"})


def migrate_job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [d for d in docs if d["kind"] == "Job"]
    assert job["metadata"]["name"] == "rota-migrate"
    return job


def pod_templates(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod the manifests would make, by `<kind>/<name>`: whatever kind carries a pod
    template (Deployments, StatefulSets, Jobs, the bundled NATS's StatefulSet alike)."""
    for doc in docs:
        template_spec = doc.get("spec", {}).get("template", {}).get("spec")
        if template_spec is not None:
            yield f"{doc['kind']}/{doc['metadata']['name']}", template_spec


def secrets_read(pod: dict[str, Any]) -> set[tuple[str, str]]:
    """(Secret, key) of everything a pod gets from a Secret, as a file or in its environment;
    a Secret given whole (no `items`, `envFrom`) as (Secret, "*")."""
    read: set[tuple[str, str]] = set()
    sources = [v["secret"] for v in pod.get("volumes", []) if "secret" in v]
    sources += [s["secret"] for v in pod.get("volumes", []) if "projected" in v
                for s in v["projected"]["sources"] if "secret" in s]
    for source in sources:
        name = source.get("secretName") or source.get("name")
        read |= {(name, item["key"]) for item in source.get("items", [])} or {(name, "*")}
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        for env in container.get("env", []):
            if ref := env.get("valueFrom", {}).get("secretKeyRef"):
                read.add((ref["name"], ref["key"]))
        read |= {(e["secretRef"]["name"], "*") for e in container.get("envFrom", []) if "secretRef" in e}
    return read


def env_of(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in pod["containers"][0]["env"]}


def test_the_job_is_a_hook_after_install_and_upgrade_that_runs_rota_migrate_from_the_services_image() -> None:
    docs = template()
    job = migrate_job(docs)
    kubernetes_validate.validate(job, "1.30", strict=True)
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    assert job["spec"]["backoffLimit"] == 5 and job["spec"]["ttlSecondsAfterFinished"] == 86400
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"] == ["rota", "migrate"]
    scheduler = workloads(docs)["scheduler"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == scheduler["image"] == "ghcr.io/rota/rota:0.1.0"
    tuned = migrate_job(template(values={"migrate": {"backoffLimit": 2, "ttlSecondsAfterFinished": 600}}))
    assert (tuned["spec"]["backoffLimit"], tuned["spec"]["ttlSecondsAfterFinished"]) == (2, 600)


@pytest.mark.parametrize("values", [{}, {"natsUrl": "nats://nats.messaging:4222"}, BUNDLED,
                                    {"nats": {"enabled": True, "replicas": 7}},
                                    {"database": {"urlSecret": {"name": "pg", "key": "dsn"}}}],
                         ids=["defaults", "own-nats", "bundled-nats", "bundled-7-servers", "own-db-secret"])
def test_the_job_finds_nats_postgres_and_the_stream_replicas_as_every_service_does(values: dict[str, Any]) -> None:
    docs = template(values=values)
    wanted = {"ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_STREAM_REPLICAS"}
    job_env = {k: v for k, v in env_of(migrate_job(docs)["spec"]["template"]["spec"]).items() if k in wanted}
    assert {"ROTA_NATS_URL", "ROTA_DATABASE_URL"} <= job_env.keys()
    services = {name: w for name, w in workloads(docs).items() if name in SERVICES}
    assert services.keys() == SERVICES
    for name, workload in services.items():
        service_env = env_of(workload["spec"]["template"]["spec"])
        assert {k: v for k, v in service_env.items() if k in wanted} == job_env, name
    if values.get("nats", {}).get("enabled"):
        assert job_env["ROTA_NATS_URL"]["value"] == "nats://rota-nats.rota.svc:4222"
        assert job_env["ROTA_STREAM_REPLICAS"]["value"] == str(min(values["nats"].get("replicas", 3), 5))
    else:
        assert "ROTA_STREAM_REPLICAS" not in job_env


def test_rota_migrate_in_the_job_connects_as_the_admin_with_the_one_file_mounted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = migrate_job(template(values=BUNDLED))["spec"]["template"]["spec"]
    (admin,) = [v for v in pod["volumes"] if "secret" in v]
    assert admin["secret"]["secretName"] == "rota-nats-admin"
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == admin["name"]]
    assert mount["readOnly"] is True
    # The Secret as the README's `kubectl create secret` makes it (the key is the file's name
    # in a `rota auth init` directory), laid out in the container as the kubelet would.
    made = AuthDir(tmp_path / "made").ensure()
    root = tmp_path / "container"
    for item in admin["secret"]["items"]:
        (root / mount["mountPath"].lstrip("/") / item["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(made.root / "creds" / item["key"], root / mount["mountPath"].lstrip("/") / item["path"])
    # `rota migrate`'s settings from the Job's environment alone (the paths under `root`).
    for name in [n for n in os.environ if n.startswith("ROTA_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no `rota up` runtime file to fall back on
    for name, env in env_of(pod).items():
        value = env.get("value") or "postgresql+asyncpg://rota@postgres/rota"  # the Secret's
        monkeypatch.setenv(name, str(root / value.lstrip("/")) if value.startswith("/auth/") else value)
    settings = Settings()
    assert resolve(settings).nats_url == "nats://rota-nats.rota.svc:4222"
    assert settings.stream_replicas == 3
    assert connect_options(settings)["user_credentials"] == str(root / "auth" / "creds" / "admin.creds")
    assert (root / "auth" / "creds" / "admin.creds").read_text() == made.creds_path("admin").read_text()


@pytest.mark.parametrize("values", [{}, BUNDLED, {"services": {"executor": {"replicas": 2}, "ledger": {"replicas": 2}}}],
                         ids=["defaults", "bundled-nats", "statefulsets"])
def test_only_the_job_reads_the_admin_secret_and_it_reads_nothing_else_of_the_auth_secret(values: dict[str, Any]) -> None:
    docs = template(values=values)
    pods = dict(pod_templates(docs))
    assert "Job/rota-migrate" in pods and len(pods) >= 8
    readers = {name for name, pod in pods.items() if any(secret == "rota-nats-admin" or key == "admin.creds"
                                                         for secret, key in secrets_read(pod))}
    assert readers == {"Job/rota-migrate"}
    assert secrets_read(pods["Job/rota-migrate"]) == {("rota-nats-admin", "admin.creds"), ("rota-database", "url")}


def test_without_auth_the_job_has_no_credentials_and_auth_needs_the_admin_secret() -> None:
    pod = migrate_job(template(values={"auth": {"enabled": False}}))["spec"]["template"]["spec"]
    assert secrets_read(pod) == {("rota-database", "url")}
    assert "ROTA_NATS_CREDS" not in env_of(pod)
    renamed = migrate_job(template(values={"auth": {"adminSecretName": "platform-nats-admin"}}))
    assert ("platform-nats-admin", "admin.creds") in secrets_read(renamed["spec"]["template"]["spec"])
    with pytest.raises(HelmFailed, match=r"auth\.adminSecretName: the Secret holding admin\.creds"):
        template(values={"auth": {"adminSecretName": ""}})


def test_the_jobs_pod_is_restricted_non_root_on_a_read_only_root_without_a_token() -> None:
    pod = migrate_job(template())["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == 65534
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                                            "seccompProfile": {"type": "RuntimeDefault"}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in volumes[tmp["name"]]


def test_the_jobs_pod_reaches_nats_and_postgres_through_the_network_policies() -> None:
    for values, nats in (({}, NATS), (BUNDLED, BUNDLED_NATS)):
        docs = template(values=values)
        policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
        job = PodAt("rota", migrate_job(docs)["spec"]["template"]["metadata"]["labels"])
        assert admits(policies, nats, job, 4222)
        assert admits(policies, POSTGRES, job, 5432)
        assert not admits(policies, nats, job, 6222)  # NATS's cluster routes are its own
    # Its labels from another namespace pass neither.
    elsewhere = PodAt("elsewhere", job.labels)
    assert not admits(policies, POSTGRES, elsewhere, 5432) and not admits(policies, BUNDLED_NATS, elsewhere, 4222)


def test_with_migrate_off_no_job_and_postgres_admits_only_the_services() -> None:
    on = template()
    off = template(values={"migrate": {"enabled": False}})
    assert not [d for d in off if d["kind"] == "Job"]
    assert not any(key == "admin.creds" for _, pod in pod_templates(off) for _, key in secrets_read(pod))
    job = PodAt("rota", migrate_job(on)["spec"]["template"]["metadata"]["labels"])
    assert not admits([d for d in off if d["kind"] == "NetworkPolicy"], POSTGRES, job, 5432)


@pytest.mark.parametrize("values", [{}, BUNDLED, {"auth": {"enabled": False}, "natsUrl": "nats://x:4222"},
                                    {"migrate": {"enabled": False}}],
                         ids=["defaults", "bundled-nats", "no-auth", "migrate-off"])
def test_helm_lint_passes_strict_with_the_job(values: dict[str, Any]) -> None:
    lint(values=values)
