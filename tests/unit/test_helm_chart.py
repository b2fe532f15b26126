"""The Helm chart `deploy/helm/rota`, linted and rendered by real Helm v4 (`tests/helm.py`: the
binary deploy/kube-dev/build.sh builds), each manifest also checked against the Kubernetes
OpenAPI schema with kubernetes-validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from rota.auth.keys import AuthDir, with_identity
from rota.config.loader import parse_config
from rota.k8s.manifests import run_labels
from rota.settings import Settings

from tests.helm import CHART, HelmFailed, lint, template, workloads
from tests.network_policy import PodAt, admits

pytestmark = pytest.mark.real_kube  # every test here runs the helm binary
SERVICES = {"submission", "ledger", "scheduler", "preemption", "notifier", "executor"}


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("values", [{}, {"auth": {"enabled": False}, "natsUrl": "nats://x:4222",
                                         "runsNamespace": "training", "createRunsNamespace": False,
                                         "networkPolicy": {"enabled": False},
                                         "executor": {"podsNatsUrl": "nats://n:4222"}}],
                         ids=["defaults", "no-auth-no-policies-own-nats"])
def test_every_manifest_passes_the_kubernetes_schema(values: dict[str, Any]) -> None:
    docs = template(values=values)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)


def test_six_services_as_deployments_the_scheduler_twice_scraped_by_prometheus() -> None:
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
                   for d in by_kind(template(), "Deployment")}
    deployments.pop("console")
    assert deployments.keys() == SERVICES
    assert deployments["scheduler"]["spec"]["replicas"] == 2
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        (container,) = pod["spec"]["containers"]
        assert container["command"] == ["python", "-m", f"rota_{name}"]
        env = {e["name"]: e for e in container["env"]}
        assert env["ROTA_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "rota-database", "key": "url"}
        assert env["ROTA_NATS_URL"]["value"] == "nats://nats.rota.svc:4222"
    executor = deployments["executor"]["spec"]["template"]["spec"]
    assert executor["serviceAccountName"] == "rota-executor"
    env = {e["name"]: e.get("value") for e in executor["containers"][0]["env"]}
    assert env["ROTA_EXECUTOR"] == "kubernetes" and env["ROTA_KUBE_NAMESPACE"] == "rota-runs"
    assert "serviceAccountName" not in deployments["ledger"]["spec"]["template"]["spec"]


def test_the_executor_may_touch_only_the_runs_namespace_and_read_no_secret() -> None:
    docs = template(values={"runsNamespace": "training"})
    (role,) = by_kind(docs, "Role")
    assert role["metadata"]["namespace"] == "training"
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
    assert rules == {(("batch",), ("jobs",)): {"get", "list", "watch", "create", "delete"},
                     (("batch",), ("jobs/finalizers",)): {"update"},
                     (("",), ("pods",)): {"get", "list", "watch", "patch", "delete"},
                     (("",), ("services",)): {"get", "create", "delete"},
                     (("",), ("secrets",)): {"create", "delete"},
                     (("",), ("events",)): {"get", "list", "watch"},
                     (("policy",), ("poddisruptionbudgets",)): {"create", "delete"},
                     (("lifecycle.k8s.io",), ("evictionrequests", "evictions")): {"get", "list", "watch"},
                     (("lifecycle.k8s.io",), ("evictions/status",)): {"get", "update"}}
    (cluster_role,) = by_kind(docs, "ClusterRole")
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    (binding,) = by_kind(docs, "RoleBinding")
    assert binding["metadata"]["namespace"] == "training"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rota-executor", "namespace": "rota"}]
    (executor,) = [w for name, w in workloads(docs).items() if name == "executor"]
    env = {e["name"]: e.get("value") for e in executor["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ROTA_KUBE_NAMESPACE"] == "training"
    with pytest.raises(HelmFailed, match="runsNamespace: runs need a namespace of their own"):
        template(values={"runsNamespace": "rota"})


def test_rota_yaml_comes_from_a_configmap_and_is_valid() -> None:
    (config,) = [d for d in by_kind(template(), "ConfigMap") if d["metadata"]["name"] == "rota-config"]
    parse_config(yaml.safe_load(config["data"]["rota.yaml"]), source="the chart's rota.yaml")


def test_the_dashboards_ship_as_configmaps() -> None:
    maps = [d for d in by_kind(template(), "ConfigMap") if "grafana_dashboard" in d["metadata"].get("labels", {})]
    shipped = sorted((CHART.parents[1] / "grafana" / "dashboards").glob("*.json"))
    assert sorted(next(iter(m["data"])) for m in maps) == [p.name for p in shipped]
    for m in maps:
        (name, text), = m["data"].items()
        assert text.strip() == (CHART / "dashboards" / name).read_text().strip()


def test_helm_lint_passes_strict_with_the_defaults_and_with_every_option() -> None:
    lint()
    lint(values={"auth": {"enabled": False}, "natsUrl": "nats://x:4222", "runsNamespace": "training",
                 "networkPolicy": {"enabled": False}, "executor": {"podsNatsUrl": "nats://n:4222"},
                 "services": {"executor": {"replicas": 3}}})
    lint(sets=["nats.enabled=true"])


def test_by_default_rota_uses_the_existing_nats_at_nats_url() -> None:
    docs = template(values={"natsUrl": "nats://nats.messaging:4222"})
    urls = {e["value"] for d in by_kind(docs, "Deployment") + by_kind(docs, "StatefulSet")
            for e in d["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "ROTA_NATS_URL"}
    assert urls == {"nats://nats.messaging:4222"}
    # Empty: the official chart's Service when released as `nats` beside Rota, named with its
    # namespace so that run pods in the runs namespace resolve it too.
    docs = template(namespace="ml")
    urls = {e["value"] for d in workloads(docs).values()
            for e in d["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "ROTA_NATS_URL"}
    assert urls == {"nats://nats.ml.svc:4222"}


def test_the_console_is_a_deployment_and_a_service_with_its_own_identity() -> None:
    docs = template(values={"console": {"trustedHeader": "X-Rota-Team"}})
    (console,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "rota-console"]
    (container,) = console["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["command"] == ["python", "-m", "rota_console"]
    assert env["ROTA_NATS_CREDS"] == "/auth/creds/console.creds"
    assert env["ROTA_CONSOLE_TRUSTED_HEADER"] == "X-Rota-Team" and env["ROTA_CONSOLE_BIND"] == "0.0.0.0"
    assert "ROTA_DATABASE_URL" not in env  # it reads only through the NATS API
    (service,) = [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == "rota-console"]
    assert service["spec"]["ports"][0]["port"] == 8089
    assert not [d for d in template(values={"console": {"enabled": False}})
                if d["metadata"]["name"] == "rota-console"]


def test_replicas_of_partitioned_services_are_statefulsets_that_know_their_index() -> None:
    values = {"services": {"submission": {"replicas": 2}, "executor": {"replicas": 3},
                           "ledger": {"replicas": 2}}}
    docs = template(values=values)
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)
    sets = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
            for d in by_kind(docs, "StatefulSet")}
    assert sets.keys() == {"submission", "executor", "ledger"}
    for name, count in (("submission", 2), ("executor", 3), ("ledger", 2)):
        spec = sets[name]["spec"]
        assert spec["replicas"] == count and spec["podManagementPolicy"] == "Parallel"
        env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
        assert env["ROTA_REPLICAS"]["value"] == str(count)
        assert env["ROTA_REPLICA"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['apps.kubernetes.io/pod-index']")
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]
                   for d in by_kind(docs, "Deployment")}
    # One replica, or the scheduler's leader and standby: a Deployment, with no index.
    assert deployments == {"notifier", "preemption", "scheduler", "console"}
    scheduler = next(d for d in by_kind(docs, "Deployment")
                     if d["metadata"]["labels"]["app.kubernetes.io/component"] == "scheduler")
    scheduler_env = {e["name"] for e in scheduler["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "ROTA_REPLICAS" not in scheduler_env and "ROTA_REPLICA" not in scheduler_env


def test_more_than_one_coordinator_is_refused() -> None:
    with pytest.raises(HelmFailed, match="the coordinator runs as one instance"):
        template(values={"services": {"preemption": {"replicas": 2}}})


# ---------------------------------------------------------------- the trust boundary

SEEDS = {"operator.nk", "account.nk", "system.nk"}


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: w["spec"]["template"]["spec"] for name, w in workloads(docs).items()}


def env_of(pod: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


def secret_files(pod: dict[str, Any]) -> dict[str, str]:
    """Every file a pod gets from a Secret volume: its path in the container -> the Secret key."""
    mounts = {m["name"]: m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
    files: dict[str, str] = {}
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            assert "items" in volume["secret"], f"{volume['name']}: a Secret mounted whole gives every key"
            for item in volume["secret"]["items"]:
                files[f"{mounts[volume['name']]}/{item['path']}"] = item["key"]
    return files


def test_auth_is_on_and_each_service_mounts_exactly_the_files_its_identity_reads(tmp_path: Path) -> None:
    pods = pod_specs(template())
    for name in SERVICES:
        files = secret_files(pods[name])
        assert env_of(pods[name])["ROTA_NATS_AUTH_DIR"] == "/auth"
        assert all(key == Path(path).name for path, key in files.items())  # one key per file
        # The files laid out as the kubelet would, then resolved as the service resolves them.
        root = tmp_path / name
        for path in files:
            (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / path.lstrip("/")).write_text("ACCOUNTPUBLICKEY\n")
        # Explicit Nones: an identity set in this process's environment would win over the dir.
        settings = with_identity(Settings(nats_auth_dir=root / "auth", nats_creds=None, nats_roster=None,
                                          nats_run_signing_key=None, nats_account=None), name)
        read = {settings.nats_creds, settings.nats_roster}
        if name == "executor":
            read |= {settings.nats_run_signing_key, AuthDir(root / "auth").account_public_file}
            assert settings.nats_account == "ACCOUNTPUBLICKEY"
        assert {root / path.lstrip("/") for path in files} == read
        assert settings.nats_creds == root / "auth" / "creds" / f"{name}.creds"


def test_the_console_gets_only_its_own_creds_and_no_pod_a_seed() -> None:
    pods = pod_specs(template())
    assert secret_files(pods["console"]) == {"/auth/creds/console.creds": "console.creds"}
    assert env_of(pods["console"])["ROTA_NATS_CREDS"] == "/auth/creds/console.creds"
    keys = {name: set(secret_files(pod).values()) for name, pod in pods.items()}
    assert all(not (k & SEEDS) for k in keys.values())
    assert {name for name, k in keys.items() if "run-signing.nk" in k} == {"executor"}
    unauthenticated = pod_specs(template(values={"auth": {"enabled": False}}))
    assert all(not secret_files(pod) and "ROTA_NATS_AUTH_DIR" not in env_of(pod)
               for pod in unauthenticated.values())


def test_every_pod_is_non_root_restricted_on_a_read_only_root_and_only_the_executor_has_a_token() -> None:
    for name, pod in pod_specs(template(values={"services": {"executor": {"replicas": 2}}})).items():
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert "emptyDir" in volumes[tmp["name"]]
        if name == "executor":
            assert pod["serviceAccountName"] == "rota-executor"
        else:
            assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod


def test_runs_go_to_their_own_namespace_where_pod_security_enforces_restricted() -> None:
    (namespace,) = by_kind(template(), "Namespace")
    assert namespace["metadata"]["name"] == "rota-runs"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert not by_kind(template(values={"createRunsNamespace": False}), "Namespace")


def rota_pod(docs: list[dict[str, Any]], component: str) -> PodAt:
    return PodAt("rota", workloads(docs)[component]["spec"]["template"]["metadata"]["labels"])


RUN_POD = PodAt("rota-runs", run_labels("run-1", "job-1", "nlp", 1))
STRANGER = PodAt("rota", {"app": "debug"})
INGRESS = PodAt("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
# Rota's labels on a pod of another namespace: labels alone do not pass.
IMPOSTOR = PodAt("elsewhere", {"app.kubernetes.io/name": "rota", "app.kubernetes.io/instance": "rota",
                               "app.kubernetes.io/component": "executor"})
NATS = PodAt("rota", {"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "nats"})
POSTGRES = PodAt("rota", {"app.kubernetes.io/name": "postgresql"})


def test_network_policies_nats_from_rota_and_runs_postgres_from_the_services_console_from_ingress() -> None:
    docs = template()
    policies = by_kind(docs, "NetworkPolicy")
    services = [rota_pod(docs, name) for name in sorted(SERVICES)]
    console = rota_pod(docs, "console")
    for source in [*services, console, RUN_POD]:
        assert admits(policies, NATS, source, 4222)
    assert admits(policies, NATS, NATS, 6222)  # NATS's cluster routes
    assert not admits(policies, NATS, RUN_POD, 6222)
    for source in (STRANGER, IMPOSTOR, INGRESS):
        assert not admits(policies, NATS, source, 4222)
    for source in services:
        assert admits(policies, POSTGRES, source, 5432)
    for source in (console, RUN_POD, STRANGER, IMPOSTOR):
        assert not admits(policies, POSTGRES, source, 5432)
    assert admits(policies, console, INGRESS, 8089)
    for source in (*services, RUN_POD, STRANGER):
        assert not admits(policies, console, source, 8089)


def test_network_policies_follow_their_values() -> None:
    proxy = PodAt("rota", {"app": "proxy"})
    docs = template(values={"networkPolicy": {"console": {"from": [{"podSelector": {"matchLabels": {"app": "proxy"}}}]},
                                              "postgres": {"enabled": False}}})
    policies = by_kind(docs, "NetworkPolicy")
    console = rota_pod(docs, "console")
    assert admits(policies, console, proxy, 8089) and not admits(policies, console, INGRESS, 8089)
    assert admits(policies, POSTGRES, STRANGER, 5432)  # a managed database: no policy rendered
    with pytest.raises(HelmFailed, match=r"networkPolicy\.console\.from"):
        template(values={"networkPolicy": {"console": {"from": []}}})
    bundled = by_kind(template(sets=["nats.enabled=true"]), "NetworkPolicy")
    (nats,) = [p for p in bundled if p["metadata"]["name"] == "rota-nats"]
    assert nats["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "nats",
                                                          "app.kubernetes.io/instance": "rota"}
    assert not by_kind(template(values={"networkPolicy": {"enabled": False}}), "NetworkPolicy")
